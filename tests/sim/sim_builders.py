"""Builders for simulator tests: fleets, pools, ModelReplicas, and a test-only hub controller.

`ReplicaWriter` is the stand-in for the real hub controller: it writes (and deletes) the
ModelReplicas a test asks for, directly to the hub store, at the time the test says, and
nothing else. It schedules nothing: tests pin each replica's cluster and pool themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpufleet.api.names import cluster_namespace
from gpufleet.core import labels
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.emulated.fleet import Fleet, FleetSpec
from gpufleet.store.port import MODEL_REPLICA, POOL_OBSERVATION, Obj, Store

Obj_ = dict[str, Any]


def l4(count: int = 4) -> DeviceSpec:
    return DeviceSpec(
        name="gpu",
        driver="gpu.nvidia.com",
        device_class_name="gpu.nvidia.com",
        count=count,
        attributes={"productName": {"string": "NVIDIA L4"}},
        capacity={"memory": "23034Mi"},
    )


def pool(
    name: str = "l4",
    nodes: int = 1,
    gpus: int = 4,
    min_nodes: int = 0,
    max_nodes: int | None = None,
) -> PoolSpec:
    return PoolSpec(
        name=name,
        devices=(l4(gpus),),
        node_count=nodes,
        min_node_count=min_nodes,
        max_node_count=max_nodes,
        class_name=f"{name}-{gpus}x",
    )


FAST = ClusterBehaviour(
    pod_start_delay_s=2.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=5.0,
    node_eviction_delay_s=3.0,
    autoscaler_scan_s=5.0,
    scale_up_delay_s=20.0,
    scale_down_idle_s=60.0,
    report_interval_s=2.0,
)


def cluster(name: str = "a", *pools: PoolSpec, **behaviour: Any) -> ClusterSpec:
    return ClusterSpec(name, pools or (pool(),), replace(FAST, **behaviour))


def fleet(*clusters: ClusterSpec, seed: int = 0) -> tuple[Fleet, ReplicaWriter]:
    writer = ReplicaWriter()
    spec = FleetSpec(clusters or (cluster(),), controller_interval_s=1.0)
    f = Fleet(spec, writer, seed)
    writer.hub = f.hub
    return f, writer


def model_replica(
    name: str = "llama-0",
    cluster: str = "a",
    pool: str = "l4",
    gpus: int = 1,
    copies: int = 1,
    workers: int | None = None,
    namespace: str = "ml",
    deployment: str = "llama",
    selectors: Sequence[str] = (),
) -> Obj:
    """A ModelReplica pinned to (cluster, pool): Standalone, or Leader + Worker with `workers`."""
    request = {
        "name": "gpu",
        "deviceClassName": "gpu.nvidia.com",
        "driver": "gpu.nvidia.com",
        "count": gpus,
        "selectors": [{"cel": s} for s in selectors],
    }
    template = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.23.0"}]}}
    if workers is None:
        members: list[Obj] = [
            {
                "role": "Standalone",
                "nodePoolName": pool,
                "deviceRequests": [request],
                "template": template,
            }
        ]
    else:
        members = [
            {
                "role": "Leader",
                "nodePoolName": pool,
                "deviceRequests": [request],
                "template": template,
            },
            {
                "role": "Worker",
                "worker": {"nodes": workers},
                "nodePoolName": pool,
                "deviceRequests": [request],
                "template": template,
            },
        ]
    return {
        "apiVersion": MODEL_REPLICA.api_version,
        "kind": MODEL_REPLICA.kind,
        # As the controller writes it: in the cluster's hub namespace, named and labelled with
        # its deployment's namespace.
        "metadata": {
            "name": f"{namespace}.{name}",
            "namespace": cluster_namespace(cluster),
            "labels": {
                labels.DEPLOYMENT_NAMESPACE: namespace,
                labels.DEPLOYMENT: deployment,
                labels.CLUSTER: cluster,
                labels.REPLICA_INDEX: "0",
            },
        },
        "spec": {
            "deploymentName": deployment,
            "clusterName": cluster,
            "serving": {"mode": "Unified"},
            "engines": [{"name": "main", "copies": copies, "members": members}],
        },
    }


@dataclass
class ReplicaWriter:
    """A test-only HubController: applies queued ModelReplica writes on its next step."""

    hub: Store | None = None
    queued: list[tuple[str, Obj]] = field(default_factory=list)
    steps: int = 0

    def create(self, replica: Obj) -> None:
        self.queued.append(("create", replica))

    def delete(self, name: str, namespace: str = "ml", cluster: str = "a") -> None:
        hub_name, hub_namespace = f"{namespace}.{name}", cluster_namespace(cluster)
        self.queued.append(("delete", {"metadata": {"name": hub_name, "namespace": hub_namespace}}))

    def step(self, now: datetime) -> None:
        assert self.hub is not None
        self.steps += 1
        for op, obj in self.queued:
            if op == "create":
                self.hub.create(obj)
            else:
                meta = obj["metadata"]
                self.hub.delete(MODEL_REPLICA, meta["name"], meta["namespace"])
        self.queued.clear()


def pool_status(f: Fleet, cluster: str = "a", pool: str = "l4") -> Mapping[str, Any]:
    obj = f.hub.get(POOL_OBSERVATION, pool, f"gpufleet-cluster-{cluster}")
    assert obj is not None, f"no PoolObservation {cluster}/{pool}"
    return dict(obj.get("status") or {})


def histogram(f: Fleet, cluster: str = "a", pool: str = "l4") -> dict[int, int]:
    """{free gpus: nodes} of the pool's published observation."""
    status = pool_status(f, cluster, pool)
    return {
        int(b["free"].get("gpu.nvidia.com", 0)): int(b["nodes"])
        for b in status.get("freeDevices") or []
    }
