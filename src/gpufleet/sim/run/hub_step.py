"""The hub controller as the simulated fleet calls it, and the whole-node edge.

`HubStep` is what the fleet calls every controller interval: the real controller's whole step
when a change or its `next_due` calls for one (see there), plus refusal bookkeeping. Refusals are taken from the
controller's own decisions (`StepResult.decision`): whenever a deployment's shortfall,
condition reason or top reason changes, one `Refusal` is recorded with the condition's reason
and message and the core's top reason with its numbers.

`ObservationBlindStore` is how whole-node accounting is made at the edge: the controller has no
switch for it, so it reads the hub through a view in which observations do not exist.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gpufleet.controller.loop import Controller, StepResult
from gpufleet.core.decision import Decision
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.run.results import Refusal
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    Change,
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


class HubStep:
    """What the fleet calls: the controller's whole step, when its daemon would run it, plus
    refusal bookkeeping.

    The fleet calls `step` every controller interval; the controller steps when the hub
    changed since the last step began (its own writes included, as a watch sees them: the
    daemon's `change` trigger) or when the time it said its next time-driven change falls due
    has come (`Controller.next_due`: the daemon's `requested` trigger). A step that reported
    errors is followed by another at the next interval (the daemon's retry). Between those,
    a step would read the same hub at a time the controller says changes nothing.
    """

    def __init__(self, hub: MemoryStore) -> None:
        self.hub = hub
        self.controller: Controller | None = None
        self.refusals: list[Refusal] = []
        self.steps = 0
        #: The hub's revision when the last step began (-1: step at the next call), and the
        #: controller's next due time after it.
        self._seen = -1
        self._due: datetime | None = None
        self.errors: list[str] = []
        #: (time, line): what the controller did and the actions of the timeline.
        self.log: list[tuple[float, str]] = []
        self._last: dict[str, tuple[object, ...]] = {}
        #: The last decision `_record` went through (see there).
        self._recorded: object = None
        #: The controller's last decision: its accounting of every pool, for checks.
        self.last_decision: Decision | None = None

    def step(self, now: datetime) -> None:
        controller = self.controller
        if controller is None:
            return
        if self.hub.revision == self._seen and (self._due is None or now < self._due):
            return
        self._seen = self.hub.revision
        result = controller.step(now)
        self.steps += 1
        self._due = controller.next_due(now)
        if result.errors:
            self._seen = -1
            if len(self.errors) < 100:
                self.errors.extend(f"{format_time(now)} {e}" for e in result.errors)
        self._record(result, now)

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
