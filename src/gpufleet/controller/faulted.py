"""The controller's side of the fault barrier (barrier.py): run one object's processing at one
point behind the barrier, and say so on the object when it fails (the step's error, the
`Processed=False` condition, a `ProcessingFailed` Warning Event) or when it is processed again
(the condition removed). The half of `Controller` between its report events and its writes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Final, TypeVar

from gpufleet.controller.barrier import Failure, FaultPoint, Quarantine, without_processed
from gpufleet.controller.conditions import Obj, ReadObj, set_condition
from gpufleet.controller.events import Event, EventReason, EventType
from gpufleet.controller.index import HubIndex, Key, key_of, name_of
from gpufleet.controller.inputs import SchedulingInputs
from gpufleet.controller.replicas import OrphanWatch, deployment_of, orphaned
from gpufleet.controller.writes import HubWriter, StepErrors, guard, step_error
from gpufleet.core.decision import Decision
from gpufleet.core.model import Deployment, Snapshot
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.schedule import SnapshotError, schedule
from gpufleet.store import Kind
from gpufleet.store.port import INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA

log = logging.getLogger("gpufleet.controller.loop")

_T = TypeVar("_T")

#: The status key a quarantined object's condition is written in.
_CONDITIONS = ("conditions",)
#: The kinds whose status the controller writes, which carry the `Processed` condition.
_CONDITIONED: Final = (INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA)


#: At most this many deployments are quarantined by one scheduling call (`_decide`).
_MAX_CULPRITS: Final = 8


class FaultBarrier:
    """Processing behind the barrier, and what it writes of a failure (module docstring)."""

    writer: HubWriter
    quarantine: Quarantine
    schedule_memo: ScheduleMemo
    index: HubIndex
    #: The step's tables (inputs.py): deployments valid and not, replicas as read.
    inputs: SchedulingInputs
    #: The replicas `_collect` judges again (their object or deployment moved).
    orphans: OrphanWatch

    def behind_barrier(
        self,
        point: FaultPoint,
        kind: Kind,
        obj: ReadObj,
        now: datetime,
        result: StepErrors,
        process: Callable[[], _T],
    ) -> tuple[_T | None, bool]:
        """`process()` for `obj` at `point` behind the barrier: (its value, True), or
        (None, False) when it raised (`obj` is quarantined) or its backoff stands."""
        key = key_of(obj)
        quarantine = self.quarantine
        if quarantine.held and quarantine.is_held(kind.kind, key, now, point):
            return None, False
        value, failure = quarantine.run(point, kind.kind, key, now, process)
        if failure is not None:
            self._quarantined(failure, kind, obj, now, result)
            return None, False
        if quarantine.held and quarantine.released(point, kind.kind, key) is not None:
            self._released(kind, key, now, result)
        return value, True

    def _quarantined(
        self, failure: Failure, kind: Kind, obj: ReadObj, now: datetime, result: StepErrors
    ) -> None:
        """Say on `obj` that its processing failed: the step's error, its condition, an event."""
        name = name_of(obj)
        message = failure.message(kind.kind, name, now)
        step_error(result, message)
        event = Event(obj, EventType.WARNING, EventReason.PROCESSING_FAILED, message)
        self.writer.record_once(("fault", kind.kind, *key_of(obj)), event, now, result)
        if kind not in _CONDITIONED:
            return  # an observation's status is its agent's
        wanted = failure.condition(kind.kind, name, now)

        def desire(current: ReadObj) -> Obj:
            status = current.get("status") or {}
            return {"conditions": set_condition(status.get("conditions") or [], wanted, now)}

        self.writer.write_status(kind, obj, desire, _CONDITIONS, now, result)

    def _released(self, kind: Kind, key: Key, now: datetime, result: StepErrors) -> None:
        """`key` was processed again: remove its `Processed` condition."""
        self.writer.recorder.forget(("fault", kind.kind, *key))
        record = self.index.records[kind].get(key)
        if record is None or kind not in _CONDITIONED:
            return

        def desire(current: ReadObj) -> Obj:
            status = current.get("status") or {}
            kept = without_processed(status)
            if kept is not None:
                return {"conditions": kept}
            return {"conditions": status["conditions"]} if "conditions" in status else {}

        self.writer.write_status(kind, record.obj, desire, _CONDITIONS, now, result)

    # --- replicas in their clusters' namespaces, behind the barrier -------------------------

    def _collect(self, now: datetime, result: StepErrors) -> bool:
        """Delete the replicas whose deployment is gone and those outside their cluster's hub
        namespace (`replicas.orphaned`), of the replicas whose object or deployment moved
        since they were last judged (`OrphanWatch`). What an owner reference would have the
        garbage collector do, had the replica been allowed one. True when one was deleted (a
        scheduling input changed)."""
        due = [(key, self.inputs.replica_objs[key]) for key in self.orphans.take()]
        existing: dict[Key, ReadObj] = {}
        for deployment in {deployment_of(obj) for _, obj in due}:
            found = self.inputs.deployments.get(deployment) or self.inputs.invalid.get(deployment)
            if found is not None:
                existing[deployment] = found[0]
            elif deployment in self.inputs.unread:  # quarantined: its replicas are kept
                existing[deployment] = self.inputs.unread[deployment]
        is_collected = False
        for key, obj in due:
            collect = functools.partial(self._collect_one, key, obj, existing, now, result)
            is_deleted, _ = self.behind_barrier(
                FaultPoint.COLLECT, MODEL_REPLICA, obj, now, result, collect
            )
            is_collected = is_collected or bool(is_deleted)
        return is_collected

    def _collect_one(
        self,
        key: Key,
        obj: ReadObj,
        existing: Mapping[Key, ReadObj],
        now: datetime,
        result: StepErrors,
    ) -> bool:
        """Delete the replica at `key` when it is an orphan (`_collect`); True when it was."""
        why = orphaned(obj, existing)
        if why is None:
            return False
        delete = functools.partial(self.writer.delete, MODEL_REPLICA, obj, now, result)
        if not guard(result, f"delete ModelReplica {name_of(obj)} ({why})", delete):
            return False
        log.info("deleted ModelReplica %s: %s", name_of(obj), why.value)
        for table in (
            self.inputs.replica_objs,
            self.inputs.replica_cores,
            self.inputs.replica_errors,
        ):
            table.pop(key, None)  # gone for this step's decision too
        self.orphans.replica(key, None)
        return True

    # --- scheduling behind the barrier ------------------------------------------------

    def _decide(self, snapshot: Snapshot, now: datetime, result: StepErrors) -> Decision:
        """`schedule` behind the barrier: a deployment whose scheduling raises is found by
        bisection (`_culprit`), quarantined and left out, and the others are decided. Raises
        `SnapshotError`, and a failure that no one deployment explains (the step's barrier
        takes it)."""
        for _ in range(_MAX_CULPRITS):
            try:
                decision = self._core_schedule(snapshot, now, self.schedule_memo)
            except SnapshotError:
                raise
            except Exception:
                log.exception("scheduling failed")
                self.schedule_memo = ScheduleMemo()  # it may hold half a call
                found = self._culprit(snapshot, now)
                if found is None:
                    raise
                culprit, error = found
                key = (culprit.key.namespace, culprit.key.name)
                kind = MODEL_DEPLOYMENT.kind
                failure = self.quarantine.fail(FaultPoint.SCHEDULE, kind, key, error, now)
                self._quarantined(
                    failure, MODEL_DEPLOYMENT, self.inputs.deployments[key][0], now, result
                )
                kept = tuple(d for d in snapshot.deployments if d is not culprit)
                snapshot = dataclasses.replace(snapshot, deployments=kept)
                continue
            if self.quarantine.held:
                self._release_scheduled(snapshot, now, result)
            return decision
        raise RuntimeError(f"scheduling failed for more than {_MAX_CULPRITS} deployments")

    def _core_schedule(
        self, snapshot: Snapshot, now: datetime, memo: ScheduleMemo | None
    ) -> Decision:
        """The core's `schedule`, with the fault seam's check of each deployment first."""
        faults = self.quarantine.faults
        if faults is not None:
            for d in snapshot.deployments:
                key = (d.key.namespace, d.key.name)
                faults.check(FaultPoint.SCHEDULE, MODEL_DEPLOYMENT.kind, key)
        return schedule(snapshot, now, memo=memo)

    def _culprit(self, snapshot: Snapshot, now: datetime) -> tuple[Deployment, Exception] | None:
        """The one deployment whose scheduling raises (with its error), by bisection over
        the snapshot's deployments, each half scheduled alone with a fresh memo. None when
        the snapshot schedules with a fresh memo, or no one deployment explains the failure
        (then `_decide` raises)."""

        def error_of(deployments: tuple[Deployment, ...]) -> Exception | None:
            try:
                self._core_schedule(
                    dataclasses.replace(snapshot, deployments=deployments), now, None
                )
            except SnapshotError:
                return None
            except Exception as e:
                return e
            return None

        candidates = snapshot.deployments
        error = error_of(candidates)
        while error is not None and len(candidates) > 1:
            half = len(candidates) // 2
            for part in (candidates[:half], candidates[half:]):
                found = error_of(part)
                if found is not None:
                    candidates, error = part, found
                    break
            else:
                return None  # only together: no one deployment explains it
        return (candidates[0], error) if error is not None and candidates else None

    def _release_scheduled(self, snapshot: Snapshot, now: datetime, result: StepErrors) -> None:
        """Release the deployments quarantined at scheduling that were just decided."""
        kind = MODEL_DEPLOYMENT.kind
        decided = {(d.key.namespace, d.key.name) for d in snapshot.deployments}
        for held_kind, key in list(self.quarantine.held):
            failure = self.quarantine.held[(held_kind, key)]
            if held_kind != kind or failure.point is not FaultPoint.SCHEDULE:
                continue
            if key in decided:
                self.quarantine.released(FaultPoint.SCHEDULE, kind, key)
                self._released(MODEL_DEPLOYMENT, key, now, result)
