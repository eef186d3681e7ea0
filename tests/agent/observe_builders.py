"""Builders for the raw Kubernetes objects the observe core reads (plain camelCase dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.agent.observe import ObservedPool, Problem
from gpufleet.core.model import Bucket, DriverName, PoolName

GPU = "gpu.nvidia.com"
NIC = "nic.example.com"
NS = "ml"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

Obj = dict[str, Any]


def node(
    name: str,
    pool: str | None = "h100",
    *,
    ready: bool | None = True,
    cordoned: bool = False,
    deleting: bool = False,
    taints: Sequence[Mapping[str, str]] = (),
    allocatable: Mapping[str, Any] | None = None,
) -> Obj:
    labels = {"kubernetes.io/hostname": name}
    if pool is not None:
        labels["gpufleet.io/pool"] = pool
    meta: Obj = {"name": name, "uid": f"uid-{name}", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T09:00:00Z"
    spec: Obj = {"taints": [dict(t) for t in taints]}
    if cordoned:
        spec["unschedulable"] = True
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    status: Obj = {"conditions": conditions, "allocatable": dict(allocatable or {"cpu": "8"})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def rslice(
    node_name: str | None,
    devices: int | Iterable[str] = 4,
    *,
    driver: str = GPU,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
) -> Obj:
    """A `resource.k8s.io/v1` ResourceSlice; the DRA pool defaults to the node's name."""
    names = [f"gpu-{i}" for i in range(devices)] if isinstance(devices, int) else list(devices)
    dra_pool = pool if pool is not None else (node_name or "shared")
    spec: Obj = {
        "driver": driver,
        "pool": {"name": dra_pool, "generation": generation, "resourceSliceCount": count},
        "devices": [
            {
                "name": d,
                "attributes": {"productName": {"string": "NVIDIA H100"}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for d in names
        ],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    else:
        spec["allNodes"] = True
    slice_name = name or f"{node_name or 'shared'}-{driver}-{dra_pool}-g{generation}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name},
        "spec": spec,
    }


def claim(
    name: str,
    devices: Iterable[tuple[str, str]] = (),
    *,
    ns: str = NS,
    driver: str = GPU,
    allocated: bool = True,
    uid: str | None = None,
    node_selector: str | None = None,
) -> Obj:
    """A `resource.k8s.io/v1` ResourceClaim; `devices` are (DRA pool, device) pairs."""
    status: Obj = {}
    if allocated:
        allocation: Obj = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": driver, "pool": p, "device": d} for p, d in devices
                ]
            }
        }
        if node_selector is not None:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_selector]}
                        ]
                    }
                ]
            }
        status = {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p"}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }


def pod(
    name: str,
    replica: str,
    *,
    engine: str = "main",
    role: str = "Standalone",
    generation: int | None = 1,
    claims: Sequence[str] = (),
    phase: str = "Running",
    deleting: bool = False,
    ns: str = NS,
    node_name: str | None = None,
) -> Obj:
    """A fleet pod whose claims come from templates (resourceClaimStatuses names them)."""
    labels = {
        "gpufleet.io/replica": replica,
        "gpufleet.io/engine": engine,
        "gpufleet.io/member": role,
    }
    if generation is not None:
        labels["gpufleet.io/replica-generation"] = str(generation)
    meta: Obj = {"name": name, "namespace": ns, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T09:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimTemplateName": "gpu"} for i in range(len(claims))
            ],
        },
        "status": {
            "phase": phase,
            "resourceClaimStatuses": [
                {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
        },
    }


def member(
    role: str = "Standalone", pool: str = "h100", *, gpus: int = 1, worker_nodes: int = 1
) -> Obj:
    m: Obj = {"role": role, "nodePoolName": pool, "template": {}}
    if gpus:
        m["deviceRequests"] = [
            {"name": "gpu", "deviceClassName": GPU, "driver": GPU, "count": gpus}
        ]
    if role == "Worker":
        m["worker"] = {"nodes": worker_nodes}
    return m


def replica(
    name: str,
    *members: Obj,
    generation: int = 1,
    copies: int = 1,
    engine: str = "main",
    ns: str = NS,
) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": ns, "generation": generation},
        "spec": {
            "engines": [{"name": engine, "copies": copies, "members": list(members or (member(),))}]
        },
    }


def pool_obs(
    name: str = "h100",
    nodes: int = 1,
    histogram: Sequence[tuple[Mapping[str, int], int]] | None = (),
    *,
    last: datetime | None = None,
    excluded: Mapping[str, int] | None = None,
    extended: Mapping[str, int] | None = None,
    problems: Sequence[Problem] = (),
    bucket_count: int | None = None,
) -> ObservedPool:
    """The expected ObservedPool; `histogram` is [(free per driver, nodes)] in sorted order."""
    buckets = (
        None
        if histogram is None
        else tuple(Bucket({DriverName(d): c for d, c in free.items()}, n) for free, n in histogram)
    )
    return ObservedPool(
        name=PoolName(name),
        observed_nodes=nodes,
        free_devices=buckets,
        last_allocation_time=last,
        excluded_nodes=dict(excluded or {}),
        extended_resources=dict(extended or {}),
        bucket_count=bucket_count if bucket_count is not None else len(buckets or ()),
        problems=tuple(problems),
    )
