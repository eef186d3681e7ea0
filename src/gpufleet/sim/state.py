"""Reading the simulated fleet at an instant: the ground truth of each pool (nodes, devices
published and taken, the histogram of nodes by free devices), the agent's last reported
histogram, and per deployment what is desired, placed and running (`FleetState`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.core import labels
from gpufleet.core.decision import Accounting as DecisionAccounting
from gpufleet.core.decision import Decision, PoolState
from gpufleet.sim.cluster import WorkloadCluster
from gpufleet.sim.fleet import Fleet
from gpufleet.sim.objects import is_unschedulable
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    NODE,
    POD,
    POOL_OBSERVATION,
    Obj,
    Store,
)


@dataclass(frozen=True, slots=True)
class PoolTruth:
    nodes: int
    total: int
    allocated: int
    #: {free devices on a node: nodes}
    histogram: Mapping[int, int]


def pool_truth(cluster: WorkloadCluster) -> dict[str, PoolTruth]:
    """Per pool, what the cluster really has: nodes, published devices, taken, histogram."""
    published = cluster.store.published()
    taken = cluster.store.taken()
    per_pool: dict[str, list[tuple[int, int]]] = {p: [] for p in cluster.pools}
    for node in cluster.store.peek(NODE):
        pool = (node["metadata"].get("labels") or {}).get(labels.POOL, "")
        if pool not in per_pool:
            continue
        devices = published.get(node["metadata"]["name"], [])
        used = sum(1 for d in devices if d.key in taken)
        per_pool[pool].append((len(devices), used))
    out: dict[str, PoolTruth] = {}
    for pool, nodes in per_pool.items():
        histogram: Counter[int] = Counter(total - used for total, used in nodes)
        out[pool] = PoolTruth(
            nodes=len(nodes),
            total=sum(t for t, _ in nodes),
            allocated=sum(u for _, u in nodes),
            histogram=dict(histogram),
        )
    return out


def observed_histogram(hub: Store, cluster: str, pool: str) -> dict[int, int] | None:
    """{free devices: nodes} of the agent's last PoolObservation; None when there is none."""
    obj = hub.get(POOL_OBSERVATION, pool, f"gpufleet-cluster-{cluster}")
    status = (obj or {}).get("status")
    if not status:
        return None
    out: Counter[int] = Counter()
    for bucket in status.get("freeDevices") or []:
        out[sum(int(v) for v in (bucket.get("free") or {}).values())] += int(bucket["nodes"])
    return dict(out)


def _deployment_key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace') or 'default'}/{obj['metadata']['name']}"


def _replicas_by_deployment(hub: Store) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for r in hub.view(MODEL_REPLICA):
        if r["metadata"].get("deletionTimestamp"):
            continue
        ns = r["metadata"].get("namespace") or "default"
        dep = (r.get("spec") or {}).get("deploymentName") or r["metadata"]["labels"].get(
            labels.DEPLOYMENT, ""
        )
        cluster = (r.get("spec") or {}).get("clusterName", "")
        out.setdefault(f"{ns}/{dep}", Counter())[cluster] += 1
    return out


def _running_by_deployment(fleet: Fleet) -> Counter[str]:
    out: Counter[str] = Counter()
    for cluster in fleet.clusters.values():
        for pod in cluster.store.peek(POD):
            meta = pod["metadata"]
            dep = (meta.get("labels") or {}).get(labels.DEPLOYMENT)
            if dep is None or meta.get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") == "Running":
                out[f"{meta['namespace']}/{dep}"] += 1
    return out


class FleetState:
    """One consistent read of the fleet at an instant, computed lazily and cached."""

    def __init__(
        self,
        fleet: Fleet,
        truths: dict[str, tuple[int, dict[str, PoolTruth]]] | None = None,
        decision: Decision | None = None,
    ) -> None:
        self.fleet = fleet
        #: The controller's last decision: its accounting of every pool.
        self.decision = decision
        self._pod_states: dict[str, Counter[str]] | None = None
        self._observations: dict[tuple[str, str], Mapping[str, Any]] | None = None
        self._pool_decisions: dict[tuple[str, str], PoolState] | None = None
        self._deployments: dict[str, Obj] | None = None
        self._replicas: dict[str, Counter[str]] | None = None
        self._running: Counter[str] | None = None
        self._truth: dict[str, dict[str, PoolTruth]] = {}
        #: Each cluster's truth by its store's revision, shared by the instants of one run:
        #: a cluster that did not change since the last sample is not counted again.
        self._truths = truths if truths is not None else {}

    @property
    def deployments(self) -> dict[str, Obj]:
        if self._deployments is None:
            self._deployments = {
                _deployment_key(d): d for d in self.fleet.hub.view(MODEL_DEPLOYMENT)
            }
        return self._deployments

    @property
    def replicas(self) -> dict[str, Counter[str]]:
        if self._replicas is None:
            self._replicas = _replicas_by_deployment(self.fleet.hub)
        return self._replicas

    @property
    def running(self) -> Counter[str]:
        if self._running is None:
            self._running = _running_by_deployment(self.fleet)
        return self._running

    def truth(self, cluster: str) -> dict[str, PoolTruth]:
        if cluster not in self._truth:
            workload = self.fleet.clusters[cluster]
            known = self._truths.get(cluster)
            if known is None or known[0] != workload.store.revision:
                known = (workload.store.revision, pool_truth(workload))
                self._truths[cluster] = known
            self._truth[cluster] = known[1]
        return self._truth[cluster]

    def desired(self, key: str) -> int:
        d = self.deployments.get(key)
        return int(d["spec"].get("replicas", 1)) if d is not None else 0

    def placed(self, key: str) -> int:
        return sum(self.replicas.get(key, Counter()).values())

    def pending(self, key: str) -> int:
        return max(0, self.desired(key) - self.placed(key))

    def pool_state(self, cluster: str, pool: str) -> str:
        observation = self._published_pools().get((cluster, pool))
        return str((observation or {}).get("state") or "None")

    def _published_pools(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        """Each pool's published `status.gpuPools[].observation` on the hub ({} if none)."""
        if self._observations is None:
            self._observations = {}
            for obj in self.fleet.hub.view(INFERENCE_CLUSTER):
                for entry in (obj.get("status") or {}).get("gpuPools") or []:
                    key = (obj["metadata"]["name"], str(entry.get("name")))
                    self._observations[key] = entry.get("observation") or {}
        return self._observations

    def pool_decision(self, cluster: str, pool: str) -> PoolState | None:
        """The pool's state in the controller's last decision."""
        if self._pool_decisions is None:
            pools = self.decision.pools if self.decision is not None else ()
            self._pool_decisions = {(p.cluster, p.pool): p for p in pools}
        return self._pool_decisions.get((cluster, pool))

    def condition(self, key: str, type_: str) -> Obj | None:
        d = self.deployments.get(key)
        for c in ((d or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return dict(c)
        return None

    @property
    def pod_states(self) -> dict[str, Counter[str]]:
        """Per deployment, its pods on the workload clusters by state: `running`, `pending`
        (Pending, bound or not) and `unschedulable` (Pending and marked Unschedulable)."""
        if self._pod_states is None:
            self._pod_states = _pod_states(self.fleet)
        return self._pod_states

    def replica_conditions(self, key: str, type_: str) -> list[Obj | None]:
        """The condition `type_` of each replica of deployment `key` on the hub, by name."""
        namespace, _, name = key.partition("/")
        found: list[tuple[str, Obj | None]] = []
        for r in self.fleet.hub.view(MODEL_REPLICA, namespace):
            meta = r["metadata"]
            if meta.get("deletionTimestamp") or _replica_deployment(r) != name:
                continue
            conditions = (r.get("status") or {}).get("conditions") or []
            match = next((dict(c) for c in conditions if c.get("type") == type_), None)
            found.append((meta["name"], match))
        return [c for _, c in sorted(found, key=lambda f: f[0])]

    def ready_replicas(self, key: str) -> int:
        """The deployment's `status.replicas.ready` (0 when absent)."""
        d = self.deployments.get(key)
        return int((((d or {}).get("status") or {}).get("replicas") or {}).get("ready") or 0)

    def hub_free(self, cluster: str, pool: str) -> int | None:
        """Free GPUs on the pool's nodes in the controller's accounting after its last
        decision (charges included), or None before any. Growth (nodes the pool may still
        gain) counts as full nodes in that accounting; it is left out here, so that the
        number compares with the ground truth of the nodes that exist."""
        state = next(
            (
                p
                for p in (self.decision.pools if self.decision else ())
                if p.cluster == cluster and p.pool == pool
            ),
            None,
        )
        if state is None:
            return None
        full = _devices_per_node(self.fleet, cluster, pool)
        if state.accounting is DecisionAccounting.WHOLE_NODE:
            existing = self.truth(cluster)[pool].nodes
            free_nodes = (state.free_nodes or 0) - max(0, state.nodes - existing)
            return free_nodes * full
        total = sum(sum(b.free.values()) * b.nodes for b in state.histogram)
        # Growth is what the autoscaler can add: a fixed pool has none (core/capacity.py).
        is_autoscaled = self.fleet.clusters[cluster].pools[pool].max_node_count is not None
        growth = max(0, state.nodes - self._observed_nodes(cluster, pool)) if is_autoscaled else 0
        return total - growth * full

    def _observed_nodes(self, cluster: str, pool: str) -> int:
        observation = self._published_pools().get((cluster, pool)) or {}
        return int(observation.get("observedNodes") or 0)


def _replica_deployment(replica: Mapping[str, Any]) -> str:
    return str(
        (replica.get("spec") or {}).get("deploymentName")
        or (replica["metadata"].get("labels") or {}).get(labels.DEPLOYMENT, "")
    )


def _devices_per_node(fleet: Fleet, cluster: str, pool: str) -> int:
    spec = fleet.clusters[cluster].pools[pool]
    return sum(d.count for d in spec.devices if d.claim == "DRA")


def _pod_states(fleet: Fleet) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for cluster in fleet.clusters.values():
        for pod in cluster.store.peek(POD):
            meta = pod["metadata"]
            dep = (meta.get("labels") or {}).get(labels.DEPLOYMENT)
            if dep is None or meta.get("deletionTimestamp"):
                continue
            counts = out.setdefault(f"{meta['namespace']}/{dep}", Counter())
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Running":
                counts["running"] += 1
            elif phase == "Pending":
                counts["pending"] += 1
                counts["unschedulable"] += is_unschedulable(pod)
    return out
