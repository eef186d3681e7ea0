"""Emulated kube-scheduler for one workload cluster: binds a Pending pod to a node.

A node must carry the pod's nodeSelector labels, be Ready and schedulable, tolerate-check every
NoSchedule/NoExecute taint, and have devices for the pod's claims (`gpufleet.sim.dra`). Node
choice per cluster: Spread (most free devices; kube-scheduler does not pack DRA devices) or
Pack (fewest free that fit), ties by name. Pods of one LeaderWorkerSet group go to distinct
nodes. It writes the claim's `status.allocation` and `reservedFor`, then the pod's
`spec.nodeName`; an unschedulable pod gets `PodScheduled=False, reason Unschedulable`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Mapping, Sequence

from gpufleet.core.model import NodeChoice
from gpufleet.sim import dra
from gpufleet.sim.cluster_spec import ClusterBehaviour
from gpufleet.sim.engine import EventLoop
from gpufleet.sim.objects import LWS_GROUP_KEY, allocation_status, is_alive, node_filter
from gpufleet.sim.sim_store import SimStore
from gpufleet.store import format_time
from gpufleet.store.port import (
    POD,
    RESOURCE_CLAIM,
    Conflict,
    Obj,
)


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

    def schedule_one(self, pod: Obj, nodes: list[Obj]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        claims: list[Obj] = []
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = self.store.peek_one(
                RESOURCE_CLAIM, entry["resourceClaimName"], meta["namespace"]
            )
            if claim is not None:
                claims.append(claim)
        if len(claims) < len(spec.get("resourceClaims") or []):
            return  # its claims are not made yet
        published = self.store.published()
        taken = self.store.taken()
        group = (meta.get("labels") or {}).get(LWS_GROUP_KEY)
        gang_nodes = (
            {
                p["spec"].get("nodeName")
                for p in self.store.peek(POD, meta["namespace"], {LWS_GROUP_KEY: group})
                if is_alive(p)
            }
            if group
            else set()
        )
        claim_requests = [dra.claim_requests(c, self.class_drivers) for c in claims]
        reasons: dict[str, int] = defaultdict(int)
        # The nodes that pass the filters, with their free devices: the node chosen is the
        # first of them in the node choice's order whose devices can hold every claim. So the
        # claims are tried in that order and the first fit ends the search; only when no node
        # fits is every node tried, and every reason counted.
        candidates: list[tuple[str, int]] = []
        for node in nodes:
            name = node["metadata"]["name"]
            reason = node_filter(node, spec)
            if reason is None and name in gang_nodes:
                reason = "node(s) already had a pod of the same group"
            if reason is not None:
                reasons[reason] += 1
                continue
            free = sum(1 for d in published.get(name, []) if d.key not in taken)
            candidates.append((name, free))
        if self.behaviour.node_choice is NodeChoice.PACK:
            candidates.sort(key=lambda f: (f[1], dra.natural_key(f[0])))
        else:
            candidates.sort(key=lambda f: (-f[1], dra.natural_key(f[0])))
        chosen: tuple[str, list[tuple[Obj, list[dict[str, str]]]]] | None = None
        for name, _ in candidates:
            fits = self._allocate_on(published.get(name, []), taken, claims, claim_requests)
            if fits is not None:
                chosen = (name, fits)
                break
            reasons["cannot allocate all claims"] += 1
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

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        conditions = pod["status"].get("conditions") or []
        for c in conditions:
            if c["type"] == "PodScheduled" and c.get("message") == message:
                return
        conditions = [c for c in conditions if c["type"] != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": format_time(self.loop.now),
            }
        )
        self.store.patch_status_shared(
            POD, pod["metadata"]["name"], pod["metadata"]["namespace"], {"conditions": conditions}
        )
