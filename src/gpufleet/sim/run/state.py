"""Reading the simulated fleet at an instant: the ground truth of each pool (nodes, devices
published and taken, the histogram of nodes by free devices), the agent's last reported
histogram, and per deployment what is desired, placed and running (`FleetState`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.agent.device_plugin import pod_requests
from gpufleet.agent.model import parse_count_quantity
from gpufleet.api.names import cluster_namespace, replica_origin_of
from gpufleet.core import labels
from gpufleet.core.decision import Accounting as DecisionAccounting
from gpufleet.core.decision import Decision, PoolState
from gpufleet.sim.emulated.cluster import WorkloadCluster
from gpufleet.sim.emulated.dra import DeviceKey, is_plain, units
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.emulated.objects import is_unschedulable
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    NODE,
    POD,
    POOL_OBSERVATION,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
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


def device_plugin_truth(cluster: WorkloadCluster) -> dict[str, PoolTruth]:
    """Per device-plugin pool (a class device `claim: DevicePlugin`): each node's allocatable
    of the resource and what its bound, non-terminated pods request of it (kube-scheduler's
    NodeResourcesFit view: what a device plugin has handed out)."""
    out: dict[str, PoolTruth] = {}
    by_pool = cluster.store.nodes_by_pool()
    nodes = {n["metadata"]["name"]: n for n in cluster.store.peek(NODE)}
    for name, pool in cluster.pools.items():
        resources = {d.resource_name for d in pool.devices if d.claim == "DevicePlugin"}
        if not resources:
            continue
        per_node: list[tuple[int, int]] = []
        for node in by_pool.get(name, ()):
            allocatable = ((nodes.get(node) or {}).get("status") or {}).get("allocatable") or {}
            total = sum(parse_count_quantity(allocatable.get(r, 0)) or 0 for r in resources)
            used = 0
            for pod in cluster.store.pods_on(node):
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    used += sum(v for k, v in pod_requests(pod).items() if k in resources)
            per_node.append((total, min(used, total)))
        out[name] = PoolTruth(
            nodes=len(per_node),
            total=sum(t for t, _ in per_node),
            allocated=sum(u for _, u in per_node),
            histogram=dict(Counter(t - u for t, u in per_node)),
        )
    return out


def pool_truth(cluster: WorkloadCluster) -> dict[str, PoolTruth]:
    """Per pool, what the cluster really has: nodes, published devices (whole GPUs, where they
    draw on counters: `dra.units`; a device plugin's, `device_plugin_truth`), taken,
    histogram."""
    published = cluster.store.published_keys()
    taken = cluster.store.taken()
    by_pool = cluster.store.nodes_by_pool()
    per_pool: dict[str, list[tuple[int, int]]] = {}
    for pool in cluster.pools:
        per_pool[pool] = nodes = []
        for name in by_pool.get(pool, ()):
            devices = published.get(name, ())
            objects = cluster.store.published().get(name, [])
            if not is_plain(objects):  # partitionable or tainted: in whole GPUs
                nodes.append(units(objects, taken))
                continue
            nodes.append((len(devices), sum(map(taken.__contains__, devices))))
    out: dict[str, PoolTruth] = {}
    for pool, nodes in per_pool.items():
        histogram: Counter[int] = Counter(total - used for total, used in nodes)
        out[pool] = PoolTruth(
            nodes=len(nodes),
            total=sum(t for t, _ in nodes),
            allocated=sum(u for _, u in nodes),
            histogram=dict(histogram),
        )
    out.update(device_plugin_truth(cluster))
    return out


class KeptTruth:
    """`pool_truth(cluster)` kept up to date from one read to the next instead of counted
    again over every node (the run reads it at every instant; claims change far more often
    than nodes and slices do).

    Keyed by declared revisions: while the cluster's pools and the revisions of its Nodes
    and ResourceSlices stay the same (the layout: which node publishes which devices), a new
    revision of the ResourceClaims only moves devices between free and taken, and each device
    that moved (the difference of the two `taken` sets) moves its node one bucket of its
    pool's histogram. A new layout counts everything again, as `pool_truth` does.

    The truths are equal to `pool_truth`'s; a histogram's key order is the order free counts
    were first met in (node order after a count, then as devices moved), which only a
    fresh count (a new `KeptTruth`) has in common with `pool_truth`."""

    __slots__ = (
        "_allocated",
        "_claims",
        "_cluster",
        "_histograms",
        "_holders",
        "_layout",
        "_recount",
        "_taken",
        "_totals",
        "_truth",
        "_used",
    )

    def __init__(self, cluster: WorkloadCluster) -> None:
        self._cluster = cluster
        self._layout: tuple[object, ...] = ()
        self._claims = -1
        self._taken: frozenset[DeviceKey] = frozenset()
        #: Per device, the (pool, node) of each node that publishes it (once per listing).
        self._holders: dict[DeviceKey, list[tuple[str, str]]] = {}
        #: Per node, its published devices and how many of them are taken.
        self._totals: dict[str, int] = {}
        self._used: dict[str, int] = {}
        #: Per pool, {free devices on a node: nodes} (zero counts kept) and devices taken.
        self._histograms: dict[str, Counter[int]] = {}
        self._allocated: dict[str, int] = {}
        self._truth: dict[str, PoolTruth] | None = None
        #: Some node's devices draw on counters or are tainted: count again at every change.
        self._recount = False

    def read(self) -> dict[str, PoolTruth]:
        """What `pool_truth(cluster)` returns now (callers must not change it)."""
        store = self._cluster.store
        layout = (
            tuple(self._cluster.pools),
            store.kind_revision(NODE),
            store.kind_revision(RESOURCE_SLICE),
        )
        claims = store.kind_revision(RESOURCE_CLAIM)
        if layout != self._layout or (claims != self._claims and self._recount):
            self._count(layout)
        elif claims != self._claims:
            taken = store.taken()
            for device in taken - self._taken:
                self._move(device, 1)
            for device in self._taken - taken:
                self._move(device, -1)
            self._taken = taken
        self._claims = claims
        if self._truth is None:
            self._truth = {
                pool: PoolTruth(
                    nodes=sum(histogram.values()),
                    total=sum(free * n for free, n in histogram.items()) + self._allocated[pool],
                    allocated=self._allocated[pool],
                    histogram={free: n for free, n in histogram.items() if n},
                )
                for pool, histogram in self._histograms.items()
            }
        if any(d.claim == "DevicePlugin" for p in self._cluster.pools.values() for d in p.devices):
            return {**self._truth, **device_plugin_truth(self._cluster)}  # pods move it
        return self._truth

    def _count(self, layout: tuple[object, ...]) -> None:
        store = self._cluster.store
        published = store.published_keys()
        taken = store.taken()
        by_pool = store.nodes_by_pool()
        self._layout, self._taken, self._truth = layout, taken, None
        self._holders, self._totals, self._used = {}, {}, {}
        self._histograms, self._allocated = {}, {}
        self._recount = False
        objects = store.published()
        for pool in self._cluster.pools:
            histogram = self._histograms[pool] = Counter()
            allocated = 0
            for name in by_pool.get(pool, ()):
                devices = published.get(name, ())
                if not is_plain(objects.get(name, ())):
                    # Partitionable or tainted devices: counted in whole GPUs (`dra.units`).
                    self._recount = True
                    total, used = units(objects[name], taken)
                    self._totals[name], self._used[name] = total, used
                    histogram[total - used] += 1
                    allocated += used
                    continue
                for device in devices:
                    self._holders.setdefault(device, []).append((pool, name))
                total = self._totals[name] = len(devices)
                used = self._used[name] = sum(map(taken.__contains__, devices))
                histogram[total - used] += 1
                allocated += used
            self._allocated[pool] = allocated

    def _move(self, device: DeviceKey, step: int) -> None:
        """`device` became taken (`step` 1) or free (-1): each node publishing it moves."""
        for pool, name in self._holders.get(device, ()):
            histogram, used = self._histograms[pool], self._used[name]
            histogram[self._totals[name] - used] -= 1
            histogram[self._totals[name] - used - step] += 1
            self._used[name] = used + step
            self._allocated[pool] += step
            self._truth = None


def observed_histogram(hub: Store, cluster: str, pool: str) -> dict[int, int] | None:
    """{free devices: nodes} of the agent's last PoolObservation; None when there is none."""
    obj = hub.get(POOL_OBSERVATION, pool, cluster_namespace(cluster))
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
        ns, _ = replica_origin_of(r["metadata"])
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
        truths: dict[str, KeptTruth] | None = None,
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
        #: Each cluster's truth, kept up to date by the revisions of what it reads
        #: (`KeptTruth`) and shared by the instants of one run: a truth is not counted again
        #: over every node at each instant, only moved by the devices taken or freed since.
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
            kept = self._truths.get(cluster)
            if kept is None:
                kept = self._truths[cluster] = KeptTruth(self.fleet.clusters[cluster])
            self._truth[cluster] = kept.read()
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
        """The pool's state in the controller's last decision (which lists each pool once:
        its ledger is keyed by cluster and pool)."""
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
        for r in self.fleet.hub.view(MODEL_REPLICA):
            meta = r["metadata"]
            origin = replica_origin_of(meta)
            if meta.get("deletionTimestamp") or (origin[0], _replica_deployment(r)) != (
                namespace,
                name,
            ):
                continue
            conditions = (r.get("status") or {}).get("conditions") or []
            match = next((dict(c) for c in conditions if c.get("type") == type_), None)
            found.append((origin[1], match))
        return [c for _, c in sorted(found, key=lambda f: f[0])]

    def ready_replicas(self, key: str) -> int:
        """The deployment's `status.replicas.ready` (0 when absent)."""
        d = self.deployments.get(key)
        return int((((d or {}).get("status") or {}).get("replicas") or {}).get("ready") or 0)

    def updated_replicas(self, key: str) -> int:
        """The deployment's `status.updatedReplicas` (0 when absent)."""
        d = self.deployments.get(key)
        return int(((d or {}).get("status") or {}).get("updatedReplicas") or 0)

    def hub_free(self, cluster: str, pool: str) -> int | None:
        """Free GPUs on the pool's nodes in the controller's accounting after its last
        decision (charges included), or None before any. Growth (nodes the pool may still
        gain) counts as full nodes in that accounting; it is left out here, so that the
        number compares with the ground truth of the nodes that exist."""
        state = self.pool_decision(cluster, pool)
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
