"""Hub objects for controller tests: valid manifest bodies, shaped as docs/design/shapes.md."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.controller import ControllerConfig, observation_namespace
from gpufleet.store import MemoryStore, Obj, format_time

API = "gpufleet.io/v1alpha1"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
CEL = 'device.driver == "gpu.nvidia.com"'
TEMPLATE: Obj = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}}

#: The simulator's choices: the controller marks clusters Ready and gives them a gateway.
SIM = ControllerConfig(
    stale_after_s=60, expire_after_s=300, manages_ready=True, default_gateway_address="{cluster}.gw"
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def hub(*objs: Obj) -> MemoryStore:
    store = MemoryStore(clock=lambda: T0, uid_seed="hub")
    for obj in objs:
        store.create(obj)
    return store


def gpu_class(name: str = "l4-4x", gpus: int = 4) -> Obj:
    return {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {
            "devices": [
                {
                    "name": "gpu",
                    "driver": "gpu.nvidia.com",
                    "claim": "DRA",
                    "deviceClassName": "gpu.nvidia.com",
                    "count": gpus,
                }
            ]
        },
    }


def cluster(
    name: str = "a",
    pools: Sequence[Mapping[str, Any]] = ({"name": "l4", "className": "l4-4x", "nodeCount": 1},),
    labels: Mapping[str, str] | None = None,
    status: Obj | None = None,
) -> Obj:
    body: Obj = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": dict(labels or {"gpufleet.io/region": "r1"})},
        "spec": {"nodePools": [dict(p) for p in pools]},
    }
    if status is not None:
        body["status"] = status
    return body


def pool_obs(
    cluster_name: str = "a",
    pool: str = "l4",
    free: Sequence[tuple[int, int]] = ((1, 1),),
    observed_at: datetime = T0,
    epoch: int = 1,
    last_allocation: datetime | None = None,
    observed_nodes: int | None = None,
) -> Obj:
    """`free` is (free GPUs, nodes) per bucket."""
    status: Obj = {
        "agent": {"identity": f"agent-{cluster_name}-{epoch}", "leaseEpoch": epoch},
        "observedAt": format_time(observed_at),
        "observedNodes": observed_nodes if observed_nodes is not None else sum(n for _, n in free),
        "freeDevices": [{"free": {"gpu.nvidia.com": g}, "nodes": n} for g, n in free],
        "excludedNodes": {"Cordoned": 0},
        "extendedResources": {},
        "conditions": [{"type": "HistogramAvailable", "status": "True"}],
    }
    if last_allocation is not None:
        status["lastAllocationTime"] = format_time(last_allocation)
    return {
        "apiVersion": API,
        "kind": "PoolObservation",
        "metadata": {"name": pool, "namespace": observation_namespace(cluster_name)},
        "spec": {"clusterName": cluster_name, "poolName": pool},
        "status": status,
    }


def replica_obs(
    replica: str,
    namespace: str | None = None,
    cluster_name: str = "a",
    generation: int | None = 1,
    pods_scheduled: bool = True,
    epoch: int = 1,
    observed_at: datetime = T0,
    pool: str = "l4",
) -> Obj:
    status: Obj = {
        "agent": {"identity": f"agent-{cluster_name}-{epoch}", "leaseEpoch": epoch},
        "observedAt": format_time(observed_at),
        "podsScheduled": pods_scheduled,
        "pools": [
            {
                "name": pool,
                "lastAllocationTime": format_time(observed_at - timedelta(seconds=5)),
                "members": [
                    {
                        "engine": "engine",
                        "role": "Standalone",
                        "livePods": 1,
                        "allocatedPods": 1 if pods_scheduled else 0,
                    }
                ],
            }
        ],
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return {
        "apiVersion": API,
        "kind": "ReplicaObservation",
        "metadata": {"name": replica, "namespace": observation_namespace(cluster_name)},
        "spec": {
            "clusterName": cluster_name,
            "replicaName": replica,
            # The replica it observes: the hub's object, in the cluster's namespace.
            "replicaNamespace": namespace or observation_namespace(cluster_name),
        },
        "status": status,
    }


def deployment(
    name: str = "llama",
    namespace: str = "ml",
    replicas: int = 1,
    gpus: int = 1,
    cel: str = CEL,
    copies: int = 1,
) -> Obj:
    return {
        "apiVersion": API,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "engines": [
                        {
                            "name": "engine",
                            "copies": copies,
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": {
                                        "devices": [
                                            {
                                                "name": "gpu",
                                                "count": gpus,
                                                "selectors": [{"cel": cel}],
                                            }
                                        ]
                                    },
                                    "template": copy.deepcopy(TEMPLATE),
                                }
                            ],
                        }
                    ]
                }
            },
        },
    }


def condition_of(obj: Obj | None, type_: str) -> Obj | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def brief(c: Obj | None) -> tuple[str, str] | None:
    """(status, reason) of a condition."""
    return None if c is None else (c["status"], c.get("reason", ""))
