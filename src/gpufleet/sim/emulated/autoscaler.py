"""Emulated cluster-autoscaler for one workload cluster.

Every `autoscaler_scan_s`: for unschedulable pods that would fit an empty node of their pool,
it adds the nodes they need, as cluster-autoscaler's binpacking estimator does: first-fit
decreasing onto the nodes on their way, then onto new ones, with the claiming pods of one gang
copy (those with a hostname anti-affinity) on distinct nodes and every other pod, a claimless
Leader among them, in the first node it fits; a node holds pods while its devices and its
allocatable CPU and memory (the pool's `node_cpu`, `node_memory`) hold their requests, as the
estimator's simulated NodeResourcesFit does (gated pods are not Unschedulable: ignored). It
adds nodes (after `scale_up_delay_s`) up to `maxNodeCount`, counting nodes on the way; it
removes nodes idle for `scale_down_idle_s` down to `minNodeCount` (only in pools with a
`maxNodeCount`: a fixed-size pool has no autoscaled node group behind it). Under stockout it
adds nothing and records `NotTriggerScaleUp` events. Every verdict on a pod is an Event with
its times (`TriggeredScaleUp` when it adds nodes for the pod, `NotTriggerScaleUp` when it will
not), recorded when the pod's verdict changes, as the agent reads them (agent/scaleup.py).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final, Protocol

from gpufleet.core import labels
from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.cluster_spec import ClusterSpec, PoolSpec
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.kube_scoring import (
    HOSTNAME_KEY,
    anti_affinity_selectors,
    node_allocatable,
    pod_requests,
    required_affinity_matches,
)
from gpufleet.sim.emulated.objects import (
    GPU_TAINT,
    LWS_GROUP_KEY,
    allocation_nodes,
    is_alive,
    untolerated,
)
from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.store import format_time
from gpufleet.store.port import (
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    Obj,
)


class NodeGroups(Protocol):
    """What the autoscaler may do to a cluster's node groups (one per pool), as
    cluster-autoscaler's cloud provider lets it: list a group's nodes, add one, delete one."""

    def peek_nodes(self, pool: str) -> list[Obj]:
        """The pool's nodes (stored objects, not copies)."""
        ...

    def add_node(self, pool_name: str) -> str:
        """Add a node to the pool; its name."""
        ...

    def remove_node(self, name: str) -> None:
        """Delete the node (its pods go with it)."""
        ...


class ClusterAutoscaler:
    """The autoscaler of one cluster, with its own memory: nodes asked for and not yet made,
    when each node went idle, when it last scanned."""

    def __init__(
        self,
        spec: ClusterSpec,
        loop: EventLoop,
        store: SimStore,
        class_drivers: Mapping[str, str],
        node_groups: NodeGroups,
    ) -> None:
        self.cluster = node_groups
        self.name = spec.name
        self.spec = spec
        self.behaviour = spec.behaviour
        self.loop = loop
        self.store = store
        self.pools = {p.name: p for p in spec.pools}
        self.class_drivers = class_drivers
        self._idle_since: dict[str, datetime] = {}
        #: Nodes the autoscaler asked for and not yet created, per pool.
        self._provisioning: dict[str, int] = defaultdict(int)
        self._event_seq = 0
        self._last_scan: datetime | None = None
        self._has_unschedulable = False

    def run(self) -> datetime | None:
        """Scan if a scan is due; return when the cluster must tick again for the next one
        (None: not autoscaling).

        The autoscaler keeps its own cadence, as the real one scans every 10s whatever else
        happens: the next scan is always asked for. Asking only when a scan could act (as
        before) let a quiet cluster skip its ticks past a scan time, so the next scan came at
        whichever tick ran next and every later scan moved with it: when a pod was found
        Unschedulable, when nodes came, which NotTriggerScaleUp Events were written depended
        on how often the cluster was ticked."""
        if not self.behaviour.is_autoscaling:
            return None
        if (
            self._last_scan is None
            or (self.loop.now - self._last_scan).total_seconds() >= self.behaviour.autoscaler_scan_s
        ):
            self._last_scan = self.loop.now
            self._scan()
        return self._last_scan + timedelta(seconds=self.behaviour.autoscaler_scan_s)

    def forget_node(self, name: str) -> None:
        """A node is gone: it is no longer idle."""
        self._idle_since.pop(name, None)

    def _scan(self) -> None:
        self._scale_up()
        self._scale_down()

    def _scale_up(self) -> None:
        pending: dict[str, list[Obj]] = defaultdict(list)
        for pod in self.store.peek(POD):
            if pod["spec"].get("nodeName") or not is_alive(pod):
                continue
            if not any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in pod["status"].get("conditions") or []
            ):
                continue
            pool = (pod["spec"].get("nodeSelector") or {}).get(labels.POOL)
            if pool in self.pools:
                pending[pool].append(pod)
        self._has_unschedulable = bool(pending)
        published = {s["spec"].get("nodeName") for s in self.store.peek(RESOURCE_SLICE)}
        for pool_name, pods in sorted(pending.items()):
            pool = self.pools[pool_name]
            template = self._template_devices(pool)
            full = _full(pool)
            demands: list[tuple[str | None, dict[str, int], Obj]] = []
            for pod in pods:
                demand = self._pod_demand(pod, template, full)
                if demand is None:
                    self._record_event(pod, "NotTriggerScaleUp", "pod does not fit a new node")
                    continue
                demands.append((_distinct_group(pod), demand, pod))
            if not demands:
                continue
            existing = len(self.cluster.peek_nodes(pool_name))
            upcoming = self._provisioning[pool_name] + sum(
                1
                for n in self.cluster.peek_nodes(pool_name)
                if n["metadata"]["name"] not in published
            )
            needed = _nodes_needed(demands, full, upcoming)
            ceiling = pool.max_node_count if pool.max_node_count is not None else existing
            room = max(0, ceiling - existing - self._provisioning[pool_name])
            add = min(needed, room)
            if needed > 0 and (add == 0 or self.behaviour.is_stocked_out):
                reason = "stockout" if self.behaviour.is_stocked_out else "max node count reached"
                for _, _, pod in demands:
                    self._record_event(
                        pod, "NotTriggerScaleUp", f"pod didn't trigger scale-up: {reason}"
                    )
                continue
            for _ in range(add):
                self._provisioning[pool_name] += 1
                self.loop.after(
                    self.behaviour.scale_up_delay_s,
                    functools.partial(self._provisioned, pool_name),
                    f"{self.name}/scale-up/{pool_name}",
                )
            if add:
                for _, _, pod in demands:
                    self._record_event(
                        pod, "TriggeredScaleUp", f"pod triggered scale-up: {pool_name}"
                    )

    def _provisioned(self, pool_name: str) -> None:
        self._provisioning[pool_name] -= 1
        self.cluster.add_node(pool_name)

    def _scale_down(self) -> None:
        now = self.loop.now
        taken_nodes: set[str] = set()
        for claim in self.store.peek(RESOURCE_CLAIM):
            for term in allocation_nodes(claim):
                taken_nodes.add(term)
        busy = {
            p["spec"].get("nodeName")
            for p in self.store.peek(POD)
            if p["status"].get("phase") not in ("Failed", "Succeeded")
        }
        idle_for = timedelta(seconds=self.behaviour.scale_down_idle_s)
        for pool in self.spec.pools:
            if pool.max_node_count is None:
                continue  # a fixed-size pool: no autoscaling node group behind it
            nodes = self.cluster.peek_nodes(pool.name)
            count = len(nodes)
            for node in sorted(nodes, key=lambda n: dra.natural_key(n["metadata"]["name"])):
                name = node["metadata"]["name"]
                if name in busy or name in taken_nodes:
                    self._idle_since.pop(name, None)
                    continue
                since = self._idle_since.setdefault(name, now)
                if now >= since + idle_for and count > pool.min_node_count:
                    self.cluster.remove_node(name)
                    count -= 1

    def _template_devices(self, pool: PoolSpec) -> list[dra.PublishedDevice]:
        out: list[dra.PublishedDevice] = []
        for d in pool.devices:
            if d.claim != "DRA":
                continue
            for i in range(d.count):
                out.append(
                    dra.PublishedDevice(
                        d.driver,
                        "template",
                        f"{d.name}-{i}",
                        "template",
                        {k: dict(v) for k, v in d.attributes.items()},
                        {k: {"value": v} for k, v in d.capacity.items()},
                    )
                )
        return out

    def _pod_demand(
        self, pod: Obj, template: list[dra.PublishedDevice], full: Mapping[str, int]
    ) -> dict[str, int] | None:
        """Devices per driver, CPU and memory the pod needs, or None when an empty node of the
        pool (`full`) can't fit it."""
        node = {"spec": {"taints": [dict(GPU_TAINT)] if self.behaviour.has_gpu_taint else []}}
        if untolerated(node, pod["spec"]):
            return None
        # A new node has a new hostname: a pod required onto existing nodes (the agent's
        # Required steering) does not fit it, as cluster-autoscaler's simulation finds.
        labels_ = {**(pod["spec"].get("nodeSelector") or {}), HOSTNAME_KEY: "<new node>"}
        new_node = {"metadata": {"name": "<new node>", "labels": labels_}, **node}
        if not required_affinity_matches(new_node, pod["spec"]):
            return None
        demand: dict[str, int] = defaultdict(int)
        cpu, memory = pod_requests(pod["spec"], is_non_zero=False)
        if cpu:
            demand[HOST_CPU] = cpu
        if memory:
            demand[HOST_MEMORY] = memory
        if any(v > full.get(k, 0) for k, v in demand.items()):
            return None  # more CPU or memory than a new node has
        taken: set[dra.DeviceKey] = set()
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = self.store.peek_one(
                RESOURCE_CLAIM, entry["resourceClaimName"], pod["metadata"]["namespace"]
            )
            if claim is None:
                continue
            results = dra.allocate(dra.claim_requests(claim, self.class_drivers), template, taken)
            if results is None:
                return None
            for r in results:
                demand[r["driver"]] += 1
                taken.add((r["driver"], r["pool"], r["device"]))
        return dict(demand)

    def _record_event(self, pod: Obj, reason: str, message: str) -> None:
        """Record the verdict on `pod` as cluster-autoscaler does, in an Event with its times:
        nothing when it is the pod's latest verdict already; an earlier Event of the same
        reason is recorded once more (`count`, `lastTimestamp`), so the latest verdict is
        always the Event with the latest time (what the agent reads, agent/scaleup.py)."""
        meta = pod["metadata"]
        stamp = format_time(self.loop.now)
        events = [
            e
            for e in self.store.events_of(meta["uid"], meta["namespace"])
            if e.get("reason") in _VERDICTS
        ]
        latest = max(events, key=_event_order, default=None)
        if latest is not None and latest.get("reason") == reason:
            return
        same = next((e for e in events if e.get("reason") == reason), None)
        if same is not None:
            self.store.update_shared(
                {**same, "count": int(same.get("count") or 1) + 1, "lastTimestamp": stamp}
            )
            return
        self._event_seq += 1
        self.store.create_shared(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{self._event_seq:x}",
                    "namespace": meta["namespace"],
                },
                "involvedObject": {
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "source": {"component": "cluster-autoscaler"},
                "type": "Normal",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )


#: The reasons of the autoscaler's verdicts on a pod.
_VERDICTS: Final = frozenset({"TriggeredScaleUp", "NotTriggerScaleUp"})


def _event_order(event: Obj) -> tuple[str, int]:
    """Latest first by time (RFC 3339 in UTC sorts as text), then by the sequence in its name."""
    name = str(event["metadata"]["name"])
    return (str(event.get("lastTimestamp") or ""), int(name.rsplit(".", 1)[-1], 16))


def _distinct_group(pod: Obj) -> str | None:
    """The LeaderWorkerSet group whose pods `pod` must not share a new node with: its group
    when it carries a required pod anti-affinity on the hostname (a claiming gang pod); None
    for any other pod (a claimless Leader may share a node with a Worker of its group, as
    kube-scheduler and cluster-autoscaler's estimator let it)."""
    if not any(key == HOSTNAME_KEY for key, _ in anti_affinity_selectors(pod)):
        return None
    group = (pod["metadata"].get("labels") or {}).get(LWS_GROUP_KEY)
    return str(group) if group is not None else None


#: The keys of a pod's CPU (millicores) and memory (bytes) requests beside its devices per
#: driver in a demand, and of a new node's allocatable in `_full` (no driver is named so).
HOST_CPU: Final = "<cpu>"
HOST_MEMORY: Final = "<memory>"


def _full(pool: PoolSpec) -> dict[str, int]:
    """A new node of the pool: its devices per driver and its allocatable CPU and memory."""
    full: dict[str, int] = defaultdict(int)
    for d in pool.devices:
        if d.claim == "DRA":
            full[d.driver] += d.count
    cpu, memory = node_allocatable(
        {"status": {"allocatable": {"cpu": pool.node_cpu, "memory": pool.node_memory}}}
    )
    full[HOST_CPU], full[HOST_MEMORY] = cpu, memory
    return dict(full)


def _size(demand: Mapping[str, int]) -> tuple[int, int, int]:
    """First-fit decreasing's order: devices, then CPU, then memory."""
    devices = sum(v for k, v in demand.items() if k not in (HOST_CPU, HOST_MEMORY))
    return (devices, demand.get(HOST_CPU, 0), demand.get(HOST_MEMORY, 0))


def _nodes_needed(
    demands: list[tuple[str | None, dict[str, int], Obj]], full: Mapping[str, int], upcoming: int
) -> int:
    """New nodes for the pending pods, first-fit decreasing onto `upcoming` nodes first."""
    bins: list[tuple[dict[str, int], set[str]]] = [(dict(full), set()) for _ in range(upcoming)]
    order = sorted(
        demands, key=lambda d: (tuple(-x for x in _size(d[1])), d[2]["metadata"]["name"])
    )
    for group, demand, _ in order:
        for free, groups in bins:
            if group is not None and group in groups:
                continue
            if all(free.get(k, 0) >= v for k, v in demand.items()):
                for k, v in demand.items():
                    free[k] -= v
                if group is not None:
                    groups.add(group)
                break
        else:
            free = dict(full)
            for k, v in demand.items():
                free[k] -= v
            bins.append((free, {group} if group is not None else set()))
    return max(0, len(bins) - upcoming)
