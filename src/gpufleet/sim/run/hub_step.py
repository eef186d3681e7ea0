"""The hub controller as the simulated fleet calls it, and the whole-node edge.

`HubStep` is what the fleet calls every controller interval: the real controller's step, with
quiet steps skipped (see there), plus refusal bookkeeping. Refusals are taken from the
controller's own decisions (`StepResult.decision`): whenever a deployment's shortfall,
condition reason or top reason changes, one `Refusal` is recorded with the condition's reason
and message and the core's top reason with its numbers.

`ObservationBlindStore` is how whole-node accounting is made at the edge: the controller has no
switch for it, so it reads the hub through a view in which observations do not exist.
"""

from __future__ import annotations

import bisect
import builtins
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.api.times import parse_time
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.core.decision import Decision
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.run.results import Refusal
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    Change,
    ChangeType,
    Kind,
    Obj,
)

_HIDDEN = (POOL_OBSERVATION, REPLICA_OBSERVATION)

# --- the whole-node edge ------------------------------------------------------------------


class ObservationBlindStore(ForwardingStore):
    """The hub as a controller without observations sees it: no Pool/ReplicaObservations."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        return None if kind in _HIDDEN else self.inner.get(kind, name, namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        return [] if kind in _HIDDEN else self.inner.list(kind, namespace, label_selector)

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> Sequence[Mapping[str, Any]]:
        return [] if kind in _HIDDEN else self.inner.view(kind, namespace, label_selector)

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        found, cursor = self.inner.changes(cursor, kinds)
        return [c for c in found if c.kind not in _HIDDEN], cursor


# --- the controller adapter ---------------------------------------------------------------


class ObservedTimes:
    """The observation times the hub's objects carry (the clusters' published agent and pool
    observations, and the observations' own), kept sorted and brought up to date from the
    hub's change feed: a settled step asks for the next one to age, and most steps change a
    few of the fleet's ~1,000 observations."""

    _KINDS: Final = (INFERENCE_CLUSTER, POOL_OBSERVATION, REPLICA_OBSERVATION)

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, hub: MemoryStore | None) -> None:
        """Start over with `hub` (the hub step is handed its fleet's hub after it is made)."""
        self._hub = hub
        self._cursor = 0
        #: Per object (kind, namespace, name), the times it carries; how many carry each
        #: time, and the distinct times in order.
        self._of: dict[tuple[str, str, str], tuple[datetime, ...]] = {}
        self._count: Counter[datetime] = Counter()
        self._sorted: list[datetime] = []
        self._parsed: dict[str, datetime] = {}

    def first_after(self, hub: MemoryStore, when: datetime) -> datetime | None:
        """The earliest time on `hub` later than `when`."""
        if hub is not self._hub:
            self._reset(hub)
        self._catch_up(hub)
        at = bisect.bisect_right(self._sorted, when)
        return self._sorted[at] if at < len(self._sorted) else None

    def _catch_up(self, hub: MemoryStore) -> None:
        changes = hub.changes_after(self._cursor)
        self._cursor = hub.revision
        for c in changes:
            if c.kind not in self._KINDS:
                continue
            meta = c.obj["metadata"]
            key = (c.kind.kind, meta.get("namespace") or "", meta["name"])
            for at in self._of.pop(key, ()):
                self._count[at] -= 1
                if not self._count[at]:
                    del self._count[at]
                    del self._sorted[bisect.bisect_left(self._sorted, at)]
            if c.type is ChangeType.DELETED:
                continue
            times = self._times_of(c.kind, c.obj)
            self._of[key] = times
            for at in times:
                if not self._count[at]:
                    bisect.insort(self._sorted, at)
                self._count[at] += 1
        if len(self._parsed) > 4 * len(self._count) + 1024:
            self._parsed.clear()

    def _times_of(self, kind: Kind, obj: Mapping[str, Any]) -> tuple[datetime, ...]:
        status = obj.get("status") or {}
        if kind == INFERENCE_CLUSTER:
            texts = [(status.get("agent") or {}).get("observedAt")]
            for pool in status.get("gpuPools") or []:
                texts.append((pool.get("observation") or {}).get("observedAt"))
        else:
            texts = [status.get("observedAt")]
        times: list[datetime] = []
        for text in texts:
            if not text or not isinstance(text, str):
                continue
            at = self._parsed.get(text)
            if at is None:
                at = parse_time(text, offset_required=True)
                if at is None:
                    continue  # not a time: nothing ages (the controller rejects the report)
                self._parsed[text] = at
            times.append(at)
        return tuple(times)


class HubStep:
    """What the fleet calls: the controller's step, plus refusal bookkeeping.

    Quiet steps are skipped: when the controller's last step wrote nothing, had no errors and
    no assumed writes in force, the hub has not changed since, no observation crosses its
    stale or expire age before `now` and no time the controller's re-placement memory waits
    for has come (`Replacer.due`), a step would read the same objects and decide the same
    thing (the controller is a function of the hub and `now`, and `now` matters only through
    those ages).
    """

    def __init__(self, hub: MemoryStore, stale_after_s: float, expire_after_s: float) -> None:
        self.hub = hub
        self.ages_s = (stale_after_s, expire_after_s)
        self.controller: Controller | None = None
        self.refusals: list[Refusal] = []
        self.steps = 0
        self.skipped = 0
        self._settled_revision = -1
        self._due: datetime | None = None
        self.errors: list[str] = []
        #: (time, line): what the controller did and the actions of the timeline.
        self.log: list[tuple[float, str]] = []
        self._last: dict[str, tuple[object, ...]] = {}
        #: The last decision `_record` went through (see there).
        self._recorded: object = None
        #: The controller's last decision: its accounting of every pool, for checks.
        self.last_decision: Decision | None = None
        #: The observation times on the hub, for `_next_age_crossing`.
        self._times = ObservedTimes()

    def step(self, now: datetime) -> None:
        if self.controller is None:
            return
        if self.hub.revision == self._settled_revision and (self._due is None or now < self._due):
            self.skipped += 1
            return
        before = self.hub.revision
        result = self.controller.step(now)
        self.steps += 1
        is_settled = self.hub.revision == before and not result.errors and result.assumed == 0
        self._settled_revision = before if is_settled else -1
        self._due = self._next_due(now) if is_settled else None
        if result.errors and len(self.errors) < 100:
            self.errors.extend(f"{format_time(now)} {e}" for e in result.errors)
        self._record(result, now)

    def _next_due(self, now: datetime) -> datetime | None:
        """The earliest time after `now` a step may decide differently with time alone: an
        age crossing, or a time the controller's re-placement memory waits for (a replica's
        stuckAfter deadline, a backoff's end: `Replacer.due`)."""
        due = self._next_age_crossing(now)
        replacing = self.controller.replacer.due if self.controller is not None else None
        if replacing is not None and replacing > now and (due is None or replacing < due):
            due = replacing
        return due

    def _next_age_crossing(self, now: datetime) -> datetime | None:
        """The earliest time after `now` an observation on the hub turns Stale or Expired:
        for each age, the earliest observation time more than the age (and one second:
        ages are compared with `>`) before `now`, plus that."""
        due: datetime | None = None
        for age_s in self.ages_s:
            after = timedelta(seconds=age_s + 1)
            at = self._times.first_after(self.hub, now - after)
            if at is not None and (due is None or at + after < due):
                due = at + after
        return due

    def _record(self, result: StepResult, now: datetime) -> None:
        # A quiet step hands out the last full step's decision again: it creates and drops
        # nothing (`DecisionApplier.quiet`), and every signature below is the one recorded
        # for it, so going through it again would add nothing.
        if result.decision is not None:
            self.last_decision = result.decision
        if result.decision is None or (result.is_quiet and result.decision is self._recorded):
            return
        self._recorded = result.decision
        at_s = (now - EPOCH).total_seconds()
        for decided in result.decision.deployments:
            key = f"{decided.key.namespace}/{decided.key.name}"
            for placed_replica in decided.created:
                self.log.append((at_s, f"placed {key} on {placed_replica.cluster}"))
            for dropped in decided.dropped:
                self.log.append(
                    (at_s, f"dropped {key} from {dropped.cluster} ({dropped.reason.code.value})")
                )
            if decided.shortfall <= 0:
                self._last.pop(key, None)
                continue
            placed = decided.desired - decided.shortfall
            top = decided.diagnosis.top_reason() if decided.diagnosis else None
            reason = decided.condition.reason
            if decided.condition.status == "True" and top is not None:
                reason = top[0].code.value  # partial shortfall: the condition stays True
            signature = (decided.desired, placed, reason, top[0] if top else None)
            if self._last.get(key) == signature:
                continue
            self._last[key] = signature
            self.log.append(
                (at_s, f"refused {key}: placed {placed} of {decided.desired}, {reason}")
            )
            self.refusals.append(
                Refusal(
                    at_s=at_s,
                    deployment=key,
                    desired=decided.desired,
                    placed=placed,
                    reason=reason,
                    message=decided.condition.message,
                    where=top[1] if top else "",
                    detail_code=top[0].code.value if top else "",
                    detail=top[0].message if top else "",
                    numbers=dict(top[0].details) if top else {},
                )
            )
