"""Emulated kube-scheduler for one workload cluster: binds a Pending pod to a node.

A node must carry the pod's nodeSelector labels, match one of its required node affinity terms
(the agent's `Required` steering), be Ready and schedulable, tolerate-check every
NoSchedule/NoExecute taint, hold no pod that the pod's required pod anti-affinity selects in the
same topology domain (the gang rule the agent writes: `kube_scoring.anti_affinity_selectors`),
have room for the pod's CPU and memory requests beside those of its live pods (NodeResourcesFit's
filter against `status.allocatable`: "Insufficient cpu" / "Insufficient memory"; a pod that
requests neither skips it), and have devices for the pod's claims (`gpufleet.sim.emulated.dra`). Node
choice per cluster: Spread, the default profile's scoring of every node that passes
(`gpufleet.sim.emulated.kube_scoring`: taints, preferred node affinity, default topology spread,
LeastAllocated and balanced CPU/memory; no DRA scoring), ties by a hash of the pod's and the
nodes' names; or Pack, a packing scheduler (the fewest free devices that fit, ties by name).
LeaderWorkerSet groups are not spread by themselves: only the pods' own anti-affinity keeps them
apart (so a claimless Leader may share a node with its Worker). A pod with
`spec.schedulingGates` is not tried: it gets `PodScheduled=False, reason SchedulingGated` (pod
scheduling readiness, Kubernetes 1.30), which the autoscaler ignores, until its last gate goes. It writes the claim's
`status.allocation` and `reservedFor`, then the pod's `spec.nodeName`; an unschedulable pod
gets `PodScheduled=False, reason Unschedulable`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from gpufleet.agent.device_plugin import pod_requests
from gpufleet.agent.model import parse_count_quantity
from gpufleet.core.model import NodeChoice
from gpufleet.sim.emulated import dra, kube_scoring
from gpufleet.sim.emulated.cluster_spec import ClusterBehaviour
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.objects import (
    SELECTOR_MISMATCH,
    allocation_status,
    is_alive,
    node_filter,
)
from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.store import format_time
from gpufleet.store.port import (
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    Conflict,
    Obj,
)

#: The node chosen and, per claim, the devices allocated to it there.
_Chosen = tuple[str, list[tuple[Obj, list[dict[str, str]]]]]


class KubeScheduler:
    """The scheduling of one pod at a time; the cluster feeds it its queue of unbound pods."""

    def __init__(
        self,
        store: SimStore,
        behaviour: ClusterBehaviour,
        class_drivers: Mapping[str, str],
        loop: EventLoop,
    ) -> None:
        self.store = store
        self.behaviour = behaviour
        self.class_drivers = class_drivers
        self.loop = loop
        self._node_index: NodeIndex | None = None
        #: `_eligible`'s keys per (node, driver, selectors), at a revision of the slices.
        self._eligible_at = -1
        self._eligible_keys: dict[tuple[str, str, tuple[str, ...]], tuple[dra.DeviceKey, ...]] = {}

    def schedule_one(self, pod: Obj, index: NodeIndex) -> None:
        """Bind `pod` to a node of `index` (`node_index()`), or mark it unschedulable."""
        meta, spec = pod["metadata"], pod["spec"]
        if spec.get("schedulingGates"):
            # Pod scheduling readiness: a gated pod is not tried (nor is it Unschedulable, so
            # the autoscaler does not grow for it) until its last gate is removed.
            self._mark_unschedulable(
                pod, "Scheduling is blocked due to non-empty scheduling gates", "SchedulingGated"
            )
            return
        nodes = index.nodes
        claims: list[Obj] = []
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = self.store.peek_one(
                RESOURCE_CLAIM, entry["resourceClaimName"], meta["namespace"]
            )
            if claim is not None:
                claims.append(claim)
        if len(claims) < len(spec.get("resourceClaims") or []):
            return  # its claims are not made yet
        published = self.store.published_keys()
        taken = self.store.taken()
        avoid = self._anti_affinity(pod, nodes)
        claim_requests = [dra.claim_requests(c, self.class_drivers) for c in claims]
        reasons: dict[str, int] = defaultdict(int)
        # NodeResourcesFit's filter: the pod's actual CPU and memory requests (a pod that
        # requests none, the usual one here, fits any node).
        wants = kube_scoring.pod_requests(spec, is_non_zero=False)
        # The nodes that pass the filters, with their free devices (what Pack orders by).
        candidates: list[tuple[Obj, int]] = []
        selected = index.selected(spec.get("nodeSelector") or {})
        if len(selected) < len(nodes):
            # `node_filter` says this first of every node the nodeSelector does not admit.
            reasons[SELECTOR_MISMATCH] += len(nodes) - len(selected)
        for node, reason in zip(selected, index.node_filter(selected, spec), strict=True):
            name = node["metadata"]["name"]
            if reason is None:
                reason = self._pod_filters(node, spec, avoid, wants)
            if reason is not None:
                reasons[reason] += 1
                continue
            keys = published.get(name, ())
            candidates.append((node, len(keys) - sum(map(taken.__contains__, keys))))
        if self.behaviour.node_choice is NodeChoice.PACK:
            chosen = self._pack(candidates, claims, claim_requests, reasons)
        else:
            chosen = self._score(pod, nodes, candidates, claims, claim_requests, reasons)
        if chosen is None:
            summary = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            message = f"0/{len(nodes)} nodes are available: {summary}."
            self._mark_unschedulable(pod, message)
            return
        node_name, allocations = chosen
        for claim, results in allocations:
            self.store.patch_status_shared(
                RESOURCE_CLAIM,
                claim["metadata"]["name"],
                claim["metadata"]["namespace"],
                {
                    "allocation": allocation_status(results, node_name),
                    "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
                },
            )
        try:
            current = self.store.peek_one(POD, meta["name"], meta["namespace"])
            if current is None:
                return
            self.store.update_shared(
                {**current, "spec": {**current["spec"], "nodeName": node_name}}
            )
        except Conflict:
            return
        conditions = [
            c for c in pod["status"].get("conditions") or [] if c["type"] != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": format_time(self.loop.now),
            }
        )
        self.store.patch_status_shared(
            POD, meta["name"], meta["namespace"], {"conditions": conditions}
        )

    def _pod_filters(
        self,
        node: Obj,
        spec: Mapping[str, Any],
        avoid: Sequence[tuple[str, set[str]]],
        wants: tuple[int, int],
    ) -> str | None:
        """Why the node fails the pod's own filters (required node affinity, pod
        anti-affinity, CPU and memory), or None."""
        if not kube_scoring.required_affinity_matches(node, spec):
            return "node(s) didn't match Pod's node affinity/selector"
        node_labels = node["metadata"].get("labels") or {}
        if any(node_labels.get(key) in values for key, values in avoid):
            return "node(s) didn't match pod anti-affinity rules"
        if wants != (0, 0):
            return self._insufficient(node, wants)
        return insufficient_extended(node, spec, self.store.pods_on(node["metadata"]["name"]))

    def _insufficient(self, node: Obj, wants: tuple[int, int]) -> str | None:
        """NodeResourcesFit's filter: "Insufficient cpu" / "Insufficient memory" when the
        requests of the live pods bound to the node plus the pod's exceed its allocatable."""
        cpu, memory = kube_scoring.node_allocatable(node)
        used_cpu = used_memory = 0
        for other in self.store.pods_on(node["metadata"]["name"]):
            if is_alive(other) and other["status"].get("phase") not in ("Succeeded", "Failed"):
                c, m = kube_scoring.pod_requests(other["spec"], is_non_zero=False)
                used_cpu, used_memory = used_cpu + c, used_memory + m
        if used_cpu + wants[0] > cpu:
            return "Insufficient cpu"
        if used_memory + wants[1] > memory:
            return "Insufficient memory"
        return None

    def node_index(self) -> NodeIndex:
        """The cluster's Nodes as listed now (`peek` order), indexed by label: made again only
        when a Node changed (keyed by the store's revision of the Node kind)."""
        revision = self.store.kind_revision(NODE)
        index = self._node_index
        if index is None or index.revision != revision:
            index = self._node_index = NodeIndex(self.store.peek(NODE), revision)
        return index

    def _anti_affinity(self, pod: Obj, nodes: Sequence[Obj]) -> list[tuple[str, set[str]]]:
        """Per required anti-affinity term of the pod, its topology key and the values of
        that key on the nodes of the live, bound pods it selects (the pod itself aside)."""
        terms = kube_scoring.anti_affinity_selectors(pod)
        if not terms:
            return []
        meta = pod["metadata"]
        by_name = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
        out: list[tuple[str, set[str]]] = []
        for key, selected in terms:
            values: set[str] = set()
            for other in self.store.peek(POD, meta["namespace"], selected):
                bound = other["spec"].get("nodeName")
                if not bound or other["metadata"]["name"] == meta["name"] or not is_alive(other):
                    continue
                value = by_name.get(bound, {}).get(key)
                if value is not None:
                    values.add(value)
            out.append((key, values))
        return out

    def _pack(
        self,
        candidates: list[tuple[Obj, int]],
        claims: Sequence[Obj],
        claim_requests: Sequence[Sequence[dra.Request]],
        reasons: dict[str, int],
    ) -> _Chosen | None:
        """A packing scheduler: the node with the fewest free devices whose devices hold
        every claim, ties by name. Tried in that order, so the first fit ends the search."""
        published, taken = self.store.published(), self.store.taken()
        candidates.sort(key=lambda f: (f[1], dra.natural_key(f[0]["metadata"]["name"])))
        for node, _ in candidates:
            name = node["metadata"]["name"]
            fits = self._allocate_on(published.get(name, []), taken, claims, claim_requests)
            if fits is not None:
                return (name, fits)
            reasons["cannot allocate all claims"] += 1
        return None

    def _score(
        self,
        pod: Obj,
        nodes: Sequence[Obj],
        candidates: list[tuple[Obj, int]],
        claims: Sequence[Obj],
        claim_requests: Sequence[Sequence[dra.Request]],
        reasons: dict[str, int],
    ) -> _Chosen | None:
        """The default profile: every node that passes the filters and can allocate the
        claims is scored (`kube_scoring`), the highest total wins."""
        published, taken = self.store.published(), self.store.taken()
        feasible: list[Obj] = []
        needed = sum(r.count for requests in claim_requests for r in requests)
        for node, free in candidates:
            name = node["metadata"]["name"]
            # Fewer free devices than requested cannot fit.
            if free >= needed and self._can_allocate(
                published.get(name, []),
                taken,
                claims,
                claim_requests,
                partial(self._eligible, name),
            ):
                feasible.append(node)
            else:
                reasons["cannot allocate all claims"] += 1
        if len(feasible) <= 1:  # one feasible node is taken unscored, as kube-scheduler does
            best = feasible[0]["metadata"]["name"] if feasible else None
        else:
            best = self._best(pod, nodes, feasible)
        if best is None:
            return None
        fits = self._allocate_on(published.get(best, []), taken, claims, claim_requests)
        assert fits is not None, "a feasible node allocates"
        return (best, fits)

    def _best(self, pod: Obj, nodes: Sequence[Obj], feasible: Sequence[Obj]) -> str:
        key = kube_scoring.spread_key(pod)
        # Most nodes hold no pod: their load is that of none, made once.
        busy, idle = self.store.nodes_with_pods(), kube_scoring.node_load([], key)
        loads = [
            kube_scoring.node_load(self.store.pods_on(name), key) if name in busy else idle
            for name in (n["metadata"]["name"] for n in feasible)
        ]
        zone_counts = (
            self._zone_counts(pod, nodes, key)
            if any(kube_scoring.ZONE_KEY in (n["metadata"].get("labels") or {}) for n in feasible)
            else {}
        )
        totals = kube_scoring.total_scores(pod, feasible, loads, zone_counts)
        meta = pod["metadata"]
        return kube_scoring.pick_best(
            f"{meta['namespace']}/{meta['name']}", [n["metadata"]["name"] for n in feasible], totals
        )

    @classmethod
    def _can_allocate(
        cls,
        devices: Sequence[dra.PublishedDevice],
        taken: Container[dra.DeviceKey],
        claims: Sequence[Obj],
        claim_requests: Sequence[Sequence[dra.Request]],
        eligible: Callable[[dra.Request], Sequence[dra.DeviceKey]],
    ) -> bool:
        """Whether `_allocate_on` would succeed, without building its results when there is
        one request: first fit then succeeds exactly when enough of the devices `eligible`
        names for it (`eligible_keys` of `devices`) are free."""
        requests = [r for rs in claim_requests for r in rs]
        if len(requests) != 1 or not dra.is_plain(devices):
            return cls._allocate_on(devices, taken, claims, claim_requests) is not None
        (r,) = requests
        keys = eligible(r)
        return len(keys) - sum(map(taken.__contains__, keys)) >= r.count

    def _eligible(self, node: str, request: dra.Request) -> tuple[dra.DeviceKey, ...]:
        """`eligible_keys` of the devices published on `node`, made once per revision of the
        ResourceSlices (the scheduler asks it of the same nodes for pod after pod)."""
        revision = self.store.kind_revision(RESOURCE_SLICE)
        if self._eligible_at != revision:
            self._eligible_at, self._eligible_keys = revision, {}
        key = (node, request.driver, request.selectors)
        found = self._eligible_keys.get(key)
        if found is None:
            devices = self.store.published().get(node, [])
            found = self._eligible_keys[key] = eligible_keys(devices, request)
        return found

    def _zone_counts(
        self, pod: Obj, nodes: Sequence[Obj], key: tuple[str, ...] | None
    ) -> dict[str, int]:
        """Pods `spread_key` groups with `key`, per zone, over every node with a zone label
        that the pod's nodeSelector admits (the plugin's NodeAffinityPolicy Honor; taints are
        ignored, NodeTaintsPolicy Ignore)."""
        counts: dict[str, int] = defaultdict(int)
        if key is None:
            return counts
        selector = pod["spec"].get("nodeSelector") or {}
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            zone = labels.get(kube_scoring.ZONE_KEY)
            if zone is None or any(labels.get(k) != v for k, v in selector.items()):
                continue
            counts[zone] += sum(
                1
                for p in self.store.pods_on(node["metadata"]["name"])
                if kube_scoring.counts_for_spread(p) and kube_scoring.spread_key(p) == key
            )
        return counts

    @staticmethod
    def _allocate_on(
        devices: Sequence[dra.PublishedDevice],
        taken: Container[dra.DeviceKey],
        claims: Sequence[Obj],
        claim_requests: Sequence[Sequence[dra.Request]],
    ) -> list[tuple[Obj, list[dict[str, str]]]] | None:
        """Each claim's devices on a node with `devices` (first fit, one claim after the
        other), or None when one of them does not fit."""
        # Only this node's devices are looked up in `taken`: not a copy of every taken one.
        node_taken = {d.key for d in devices if d.key in taken}
        allocations: list[tuple[Obj, list[dict[str, str]]]] = []
        for claim, requests in zip(claims, claim_requests, strict=True):
            results = dra.allocate(requests, devices, node_taken)
            if results is None:
                return None
            node_taken |= {(r["driver"], r["pool"], r["device"]) for r in results}
            allocations.append((claim, results))
        return allocations

    def _mark_unschedulable(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None:
        conditions = pod["status"].get("conditions") or []
        for c in conditions:
            if c["type"] == "PodScheduled" and c.get("message") == message:
                return
        conditions = [c for c in conditions if c["type"] != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": format_time(self.loop.now),
            }
        )
        self.store.patch_status_shared(
            POD, pod["metadata"]["name"], pod["metadata"]["namespace"], {"conditions": conditions}
        )


def eligible_keys(
    devices: Sequence[dra.PublishedDevice], request: dra.Request
) -> tuple[dra.DeviceKey, ...]:
    """The keys of the `devices` that `request` may take when they are free: its driver's,
    and every one of its selectors accepts them."""
    return tuple(
        d.key
        for d in devices
        if d.driver == request.driver and dra.selectors_match(request.selectors, d)
    )


class NodeIndex:
    """The Nodes of one listing, and by label (key -> value -> the nodes, in the listing's
    order, made per key when first asked) for the nodeSelector filter; `revision` is the
    store's revision of the Node kind the listing was made at."""

    def __init__(self, nodes: list[Obj], revision: int) -> None:
        self.nodes = nodes
        self.revision = revision
        self._by_key: dict[str, dict[object, list[Obj]]] = {}
        #: `node_filter`'s reason per node name, per what it reads of a pod (`_filter_inputs`).
        self._reasons: dict[str, dict[str, str | None]] = {}

    def node_filter(self, nodes: Sequence[Obj], pod_spec: Mapping[str, Any]) -> list[str | None]:
        """`node_filter(node, pod_spec)` of each of `nodes` (nodes of this listing),
        remembered per node and per what the filter reads of the pod: the pods of one
        workload ask it of the same nodes, and the listing changes only with the Nodes."""
        known = self._reasons.setdefault(_filter_inputs(pod_spec), {})
        out: list[str | None] = []
        for node in nodes:
            name = node["metadata"]["name"]
            if name not in known:
                known[name] = node_filter(node, pod_spec)
            out.append(known[name])
        return out

    def selected(self, selector: Mapping[str, Any]) -> Sequence[Obj]:
        """The nodes whose labels hold every (key, value) of `selector`, in order (what
        `node_filter`'s first check admits)."""
        items = list(selector.items())
        if not items:
            return self.nodes
        key, value = items[0]
        if not isinstance(value, str):
            return [n for n in self.nodes if _holds(n, items)]
        by_value = self._by_key.get(key)
        if by_value is None:
            by_value = self._by_key[key] = defaultdict(list)
            for node in self.nodes:
                by_value[(node["metadata"].get("labels") or {}).get(key)].append(node)
        found = by_value.get(value, [])
        return found if len(items) == 1 else [n for n in found if _holds(n, items[1:])]


def insufficient_extended(node: Obj, spec: Mapping[str, Any], others: Iterable[Obj]) -> str | None:
    """NodeResourcesFit's filter for extended resources (a device plugin's `nvidia.com/gpu`):
    "Insufficient <name>" when the pod's request plus those of the pods bound to the node and
    not terminated exceed the node's allocatable (absent: 0)."""
    wants = pod_requests({"spec": spec})
    if not wants:
        return None
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    used: dict[str, int] = {}
    for other in others:
        if other["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for k, v in pod_requests(other).items():
            used[k] = used.get(k, 0) + v
    for name, n in sorted(wants.items()):
        have = parse_count_quantity(allocatable.get(name, 0)) or 0
        if used.get(name, 0) + n > have:
            return f"Insufficient {name}"
    return None


def _filter_inputs(pod_spec: Mapping[str, Any]) -> str:
    """What `node_filter` reads of a pod (its nodeSelector and tolerations), as canonical
    JSON."""
    read = [pod_spec.get("nodeSelector"), pod_spec.get("tolerations")]
    return json.dumps(read, sort_keys=True, separators=(",", ":"))


def _holds(node: Obj, items: Sequence[tuple[str, Any]]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in items)
