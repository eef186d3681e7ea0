"""Invariants every run of every scenario is held to; a broken one fails the run like a check.

They are evaluated at every instant the run stops at (each metrics sample, timeline action and
check instant: `sampleInterval` sets the resolution), except the first, which is exact.

1. `DeviceHeldTwice`: no device is ever held by two ResourceClaims. Exact: each cluster's
   store counts the claims holding each device as it reads its change log, and records every
   moment a count reaches two, however briefly.
2. `HubAboveActual`: for a pool the hub observes accurately, the hub's accounting never shows
   more free GPUs than the pool really has (`FleetState.hub_free` against the ground truth) for
   longer than the time a change takes to reach it: the agent's report interval, its report
   delay and the controller interval. "Observes accurately" means: free-gpu accounting for
   the pool in the controller's last decision, the observation published `Fresh`, and the
   cluster's agent running and not partitioned. Reported once per pool and episode.
3. `PendingWithoutCause`: no fleet pod stays Unschedulable on a cluster where the hub placed
   its replica while accounting the pool by its observations, unless the event log has a
   cause. The closest honest version of "the hub showed the pool as free at placement time":
   the controller placed the replica (so its accounting had room then), the pool is free-gpu
   accounted in the last decision, and the pod has been Unschedulable for longer than the
   time a report takes to reach the hub plus one autoscaler scan. A cause is any timeline
   action on the cluster from one report lag before the replica was created on, the agent
   being down or partitioned when it was created, or a cluster-autoscaler event on the pod
   (`TriggeredScaleUp`: growth the hub counted is coming; `NotTriggerScaleUp`: stockout or
   ceiling). Reported once per pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from gpufleet.api.names import replica_origin_of
from gpufleet.api.times import parse_time
from gpufleet.core import labels
from gpufleet.core.decision import Accounting as DecisionAccounting
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.emulated.objects import is_unschedulable
from gpufleet.sim.run.results import CheckFailure
from gpufleet.sim.run.state import FleetState
from gpufleet.sim.scenario.model import Action, ActionKind, Scenario, format_duration
from gpufleet.store.port import MODEL_REPLICA, Obj

DEVICE_HELD_TWICE: Final = "DeviceHeldTwice"
HUB_ABOVE_ACTUAL: Final = "HubAboveActual"
PENDING_WITHOUT_CAUSE: Final = "PendingWithoutCause"
_AUTOSCALER_EVENTS: Final = ("TriggeredScaleUp", "NotTriggerScaleUp")
_AGENT_DOWN: Final = {
    ActionKind.KILL_AGENT: True,
    ActionKind.START_AGENT: False,
    ActionKind.REINSTALL_AGENT: False,
}
_PARTITIONED: Final = {
    ActionKind.PARTITION: True,
    ActionKind.HEAL: False,
}


@dataclass(slots=True)
class InvariantWatch:
    """Checks the invariants of one run as it goes (see the module docstring)."""

    fleet: Fleet
    scenario: Scenario
    #: Whether the controller reads observations at all (free-gpu accounting mode).
    is_observing: bool
    #: The timeline actions performed so far, in order.
    performed: list[Action] = field(default_factory=list)
    _double_seen: dict[str, int] = field(default_factory=dict)
    #: Per pool, since when the hub has shown more free than there is.
    _above_since: dict[tuple[str, str], float] = field(default_factory=dict)
    _above_reported: set[tuple[str, str]] = field(default_factory=set)
    _pods_reported: set[str] = field(default_factory=set)

    def at(self, at_s: float, state: FleetState) -> list[CheckFailure]:
        out = self._devices_held_twice(at_s)
        if self.is_observing and state.decision is not None:
            out += self._hub_above_actual(at_s, state)
            out += self._pending_without_cause(at_s, state)
        return out

    def report_lag_s(self, cluster: str) -> float:
        """How long a change on `cluster` takes at most to reach the hub's accounting."""
        behaviour = self.fleet.clusters[cluster].behaviour
        return (
            behaviour.report_interval_s
            + behaviour.report_delay_s
            + self.scenario.controller.interval_s
        )

    # --- 1 ----------------------------------------------------------------------------------

    def _devices_held_twice(self, at_s: float) -> list[CheckFailure]:
        out: list[CheckFailure] = []
        for name, cluster in sorted(self.fleet.clusters.items()):
            cluster.store.taken()  # reads the change log up to now
            seen = self._double_seen.get(name, 0)
            for device, holders in cluster.store.double_held[seen:]:
                driver, pool, dev = device
                claims = ", ".join(f"{ns}/{n}" for ns, n in holders)
                out.append(
                    _violation(
                        at_s,
                        DEVICE_HELD_TWICE,
                        f"device {driver}/{pool}/{dev} of cluster {name}",
                        "held by at most one claim",
                        f"held by {len(holders)} claims: {claims}",
                    )
                )
            self._double_seen[name] = len(cluster.store.double_held)
        return out

    # --- 2 ----------------------------------------------------------------------------------

    def _hub_above_actual(self, at_s: float, state: FleetState) -> list[CheckFailure]:
        out: list[CheckFailure] = []
        assert state.decision is not None
        for pool_state in state.decision.pools:
            key = (pool_state.cluster, pool_state.pool)
            if key[0] not in self.fleet.clusters or not self._is_accurate(state, *key):
                self._above_since.pop(key, None)
                continue
            hub = state.hub_free(*key)
            truth = state.truth(key[0])[key[1]]
            actual = truth.total - truth.allocated
            if hub is None or hub <= actual:
                self._above_since.pop(key, None)
                continue
            since = self._above_since.setdefault(key, at_s)
            lag = self.report_lag_s(key[0])
            if at_s - since > lag and key not in self._above_reported:
                self._above_reported.add(key)
                out.append(
                    _violation(
                        at_s,
                        HUB_ABOVE_ACTUAL,
                        f"free GPUs in {key[0]}/{key[1]} in the hub's accounting "
                        f"(accurately observed, above the actual for more than "
                        f"{format_duration(lag)} since {format_duration(since)})",
                        f"at most the actual {actual}",
                        hub,
                    )
                )
            elif at_s - since <= lag:
                self._above_reported.discard(key)
        return out

    def _is_accurate(self, state: FleetState, cluster: str, pool: str) -> bool:
        pool_state = state.pool_decision(cluster, pool)
        slot = self.fleet.agents.get(cluster)
        return (
            pool_state is not None
            and pool_state.accounting is DecisionAccounting.FREE_GPU
            and state.pool_state(cluster, pool) == "Fresh"
            and slot is not None
            and slot.agent is not None
            and not slot.link.is_partitioned
        )

    # --- 3 ----------------------------------------------------------------------------------

    def _pending_without_cause(self, at_s: float, state: FleetState) -> list[CheckFailure]:
        assert state.decision is not None
        free_gpu = {
            (p.cluster, p.pool)
            for p in state.decision.pools
            if p.accounting is DecisionAccounting.FREE_GPU
        }
        replicas: dict[tuple[str, str], Obj] | None = None
        out: list[CheckFailure] = []
        for name, cluster in sorted(self.fleet.clusters.items()):
            grace = self.report_lag_s(name) + cluster.behaviour.autoscaler_scan_s
            # Only unschedulable pods can break it (indexed: most pods run).
            for pod in cluster.store.unschedulable_pods():
                if replicas is None:
                    replicas = {
                        replica_origin_of(r["metadata"]): r
                        for r in self.fleet.hub.view(MODEL_REPLICA)
                    }
                meta = pod["metadata"]
                pod_labels = meta.get("labels") or {}
                replica = replicas.get((meta["namespace"], pod_labels.get(labels.REPLICA, "")))
                pool = (pod["spec"].get("nodeSelector") or {}).get(labels.POOL, "")
                if (
                    replica is None
                    or meta["uid"] in self._pods_reported
                    or (name, pool) not in free_gpu
                    or not is_unschedulable(pod)
                ):
                    continue
                since = _unschedulable_since(pod)
                if since is None or at_s - since <= grace:
                    continue
                created = _seconds(replica["metadata"].get("creationTimestamp"))
                if created is None or self._has_cause(name, pod, created):
                    continue
                self._pods_reported.add(meta["uid"])
                out.append(
                    _violation(
                        at_s,
                        PENDING_WITHOUT_CAUSE,
                        f"pod {meta['namespace']}/{meta['name']} of replica "
                        f"{replica['metadata']['name']} on {name}/{pool}, placed at "
                        f"{format_duration(created)} while the hub accounted the pool as free",
                        "scheduled, or a cause in the event log",
                        f"Unschedulable since {format_duration(since)}, no action on {name} "
                        f"since {format_duration(max(0.0, created - self.report_lag_s(name)))}, "
                        "no autoscaler event",
                    )
                )
        return out

    def _has_cause(self, cluster: str, pod: Obj, created_s: float) -> bool:
        since = created_s - self.report_lag_s(cluster)
        on_cluster = [a for a in self.performed if a.cluster == cluster]
        if any(a.at_s >= since for a in on_cluster):
            return True
        if _state_at(on_cluster, created_s, _AGENT_DOWN) or _state_at(
            on_cluster, created_s, _PARTITIONED
        ):
            return True
        meta = pod["metadata"]
        store = self.fleet.clusters[cluster].store
        return any(
            e.get("reason") in _AUTOSCALER_EVENTS
            for e in store.events_of(meta["uid"], meta["namespace"])
        )


def _state_at(actions: Sequence[Action], at_s: float, kinds: dict[ActionKind, bool]) -> bool:
    """The state the last of `kinds` at or before `at_s` left (False if none)."""
    state = False
    for action in actions:
        if action.at_s <= at_s and action.kind in kinds:
            state = kinds[action.kind]
    return state


def _unschedulable_since(pod: Obj) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return _seconds(c.get("lastTransitionTime"))
    return None


def _seconds(text: object) -> float | None:
    moment = parse_time(text)
    return None if moment is None else (moment - EPOCH).total_seconds()


def _violation(at_s: float, name: str, what: str, expected: object, got: object) -> CheckFailure:
    return CheckFailure(at_s, f"invariant {name}", what, expected, got)
