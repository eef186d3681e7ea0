"""The controller's writes to the hub: compare first, guarded by resourceVersion, retried on
`Conflict` (at most `max_conflict_retries` times), recorded in the assume ledger, and events.

`HubWriter` is the half of `Controller` that writes (loop.py is the half that decides). A
status patch's result is put in the index (`HubIndex.put_written`), so the rest of the step
works from it and the feed's copy of it is no change; a status write that fails leaves the
object as desired for the rest of the step and marks it unstored, so the next step reads the
store's version again.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from gpufleet.api.names import ClusterNameError
from gpufleet.controller.barrier import FaultPoint
from gpufleet.controller.conditions import Obj, ReadObj, is_owned_equal, owned_patch
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.events import Event, Recorder, event_body, repeated
from gpufleet.controller.index import HubIndex, Key, is_deleting, key_of, name_of
from gpufleet.controller.inputs import SchedulingInputs
from gpufleet.controller.ledger import AssumeLedger
from gpufleet.controller.replicas import (
    OrphanWatch,
    deployment_of,
    orphaned,
    replica_body,
    replica_key,
)
from gpufleet.controller.status import REPLICA_OWNED, replica_status
from gpufleet.core import labels
from gpufleet.core.decision import Placement
from gpufleet.store import AlreadyExists, Conflict, Invalid, Kind, NotFound, Store, StoreError
from gpufleet.store.port import EVENT, MODEL_REPLICA

log = logging.getLogger("gpufleet.controller.loop")

_T = TypeVar("_T")


class StepErrors(Protocol):
    """Where a step's writes are counted (by (kind, verb)) and its errors go (`StepResult`)."""

    writes: Counter[tuple[str, str]]
    errors: list[str]


def _with_status(obj: ReadObj, desired: Mapping[str, Any], owned: Sequence[str]) -> Obj:
    """`obj` as it would read with its `owned` status keys set to `desired` (a shallow copy)."""
    status = dict(obj.get("status") or {})
    for key in owned:
        if key in desired:
            status[key] = desired[key]
        else:
            status.pop(key, None)
    return {**obj, "status": status}


class HubWriter:
    """Writes of one controller step (see the module docstring); a mixin of `Controller`."""

    hub: Store
    config: ControllerConfig
    identity: str
    ledger: AssumeLedger
    recorder: Recorder
    index: HubIndex
    _unstored: set[tuple[Kind, Key]]
    #: The step's tables (inputs.py): deployments valid and not, replicas as read.
    inputs: SchedulingInputs
    #: The replicas `_collect` judges again (their object or deployment moved).
    orphans: OrphanWatch

    def _track(self, kind: Kind, key: Key) -> None:
        """Bring what the step derives from the index's record at `key` up to date."""
        raise NotImplementedError

    def _run(
        self,
        point: FaultPoint,
        kind: Kind,
        obj: ReadObj,
        now: datetime,
        result: StepErrors,
        process: Callable[[], _T],
    ) -> tuple[_T | None, bool]:
        """`process()` behind the fault barrier (faulted.py)."""
        raise NotImplementedError

    def _error(self, result: StepErrors, message: str) -> None:
        log.warning("%s", message)
        result.errors.append(message)

    def _guard(self, result: StepErrors, what: str, write: Callable[[], object]) -> bool:
        """Run one write; a StoreError becomes an error of the step. True when it succeeded."""
        try:
            write()
        except StoreError as e:
            self._error(result, f"{what}: {type(e).__name__}: {e}")
            return False
        return True

    def _retries(self) -> int:
        return max(1, self.config.max_conflict_retries)

    def _reread(self, kind: Kind, obj: ReadObj) -> Obj:
        meta = obj["metadata"]
        fresh = self.hub.get(kind, meta["name"], meta.get("namespace"))
        if fresh is None:
            raise NotFound(f"{kind.kind} {name_of(obj)} not found")
        return fresh

    def _write_status(
        self,
        kind: Kind,
        obj: ReadObj,
        desire: Callable[[ReadObj], Obj],
        owned: Sequence[str],
        now: datetime,
        result: StepErrors,
        normalize: Callable[[Mapping[str, Any]], Obj] = dict,
    ) -> ReadObj:
        """Make the `owned` status keys of `obj` what `desire` computes; returns the object as
        it reads afterwards: `obj` itself when nothing was written, else the written object,
        which the index then holds. On an error the object as desired, which the step works
        from (the next step reads the store again)."""
        current = obj
        try:
            for _ in range(self._retries()):
                desired = desire(current)
                status = current.get("status") or {}
                if is_owned_equal(normalize(status), normalize(desired), owned):
                    return current
                meta = current["metadata"]
                try:
                    written = self.hub.patch_status(
                        kind,
                        meta["name"],
                        meta.get("namespace"),
                        owned_patch(status, desired, owned),
                        meta.get("resourceVersion"),
                    )
                except Conflict:
                    current = self._reread(kind, current)
                    continue
                self.ledger.assume_written(kind, written, now)
                result.writes[(kind.kind, "patch_status")] += 1
                if self.index.put_written(kind, written):
                    self._track(kind, key_of(written))
                return written
            raise Conflict(f"still conflicting after {self._retries()} attempts")
        except StoreError as e:
            self._error(result, f"status of {kind.kind} {name_of(obj)}: {type(e).__name__}: {e}")
            unstored = _with_status(current, desire(current), owned)
            self.index.put(kind, key_of(obj), unstored, force=True)
            self._track(kind, key_of(obj))
            self._unstored.add((kind, key_of(obj)))
            return unstored

    def _update(
        self,
        kind: Kind,
        obj: ReadObj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepErrors,
    ) -> None:
        """Update `obj` to `change(obj)` (None: nothing to change), re-reading on Conflict."""
        current = obj
        for _ in range(self._retries()):
            updated = change(current)
            if updated is None:
                return
            try:
                written = self.hub.update(updated)
            except Conflict:
                current = self._reread(kind, current)
                continue
            self.ledger.assume_written(kind, written, now)
            result.writes[(kind.kind, "update")] += 1
            return
        raise Conflict(f"still conflicting after {self._retries()} attempts")

    def _create(
        self,
        kind: Kind,
        body: Obj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepErrors,
    ) -> None:
        """Create `body`. If it exists already (the view had not shown it), adopt it when it
        is this controller's kind of object for the same deployment, updating it as needed."""
        try:
            written = self.hub.create(body)
        except AlreadyExists:
            existing = self._reread(kind, body)
            wanted = body["metadata"].get("labels", {})
            found = existing["metadata"].get("labels") or {}
            want, have = wanted.get(labels.DEPLOYMENT), found.get(labels.DEPLOYMENT)
            uids = (wanted.get(labels.DEPLOYMENT_UID), found.get(labels.DEPLOYMENT_UID))
            if want != have or is_deleting(existing) or (all(uids) and uids[0] != uids[1]):
                raise
            self.ledger.assume_written(kind, existing, now)
            self._update(kind, existing, change, now, result)
            return
        self.ledger.assume_written(kind, written, now)
        result.writes[(kind.kind, "create")] += 1
        if kind == MODEL_REPLICA:
            # Its first status (NotObserved) now, not one step later: a step leaves nothing
            # for the next one to write when nothing changes.
            def desire(current: ReadObj) -> Obj:
                return replica_status(current, None, False, now)

            self._write_status(kind, written, desire, REPLICA_OWNED, now, result)

    def _create_replica(
        self,
        placement: Placement,
        deployment: ReadObj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepErrors,
        revision: str = "",
    ) -> None:
        """Create the replica of `placement` in its cluster's hub namespace (`_create`). A
        cluster whose name names no namespace is an error of the write, as the API server's
        refusal would be."""
        try:
            body = replica_body(placement, deployment, revision)
        except ClusterNameError as e:
            raise Invalid(str(e)) from None
        self._create(MODEL_REPLICA, body, change, now, result)

    def _delete(self, kind: Kind, obj: ReadObj, now: datetime, result: StepErrors) -> None:
        meta = obj["metadata"]
        try:
            self.hub.delete(kind, meta["name"], meta.get("namespace"))
        except NotFound:
            pass
        else:
            result.writes[(kind.kind, "delete")] += 1
        self.ledger.assume_deleted(kind, obj, now)

    # --- replicas in their clusters' namespaces --------------------------------------------

    def _replica_of(self, cluster: str, namespace: str, name: str) -> ReadObj | None:
        """The replica `name` of a deployment in `namespace` on `cluster`, as the step reads it."""
        key = replica_key(cluster, namespace, name)
        return None if key is None else self.inputs.replica_objs.get(key)

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
            is_deleted, _ = self._run(FaultPoint.COLLECT, MODEL_REPLICA, obj, now, result, collect)
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
        delete = functools.partial(self._delete, MODEL_REPLICA, obj, now, result)
        if not self._guard(result, f"delete ModelReplica {name_of(obj)} ({why})", delete):
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

    # --- events ---------------------------------------------------------------------------

    def _record_once(
        self, subject: tuple[str, ...], event: Event, now: datetime, result: StepErrors
    ) -> None:
        """Record a standing situation's event when its message changed since the last one."""
        if not self.recorder.is_new(subject, event.message):
            return
        if self._record(event, now, result):
            self.recorder.remember(subject, event.message)

    def _record(self, event: Event, now: datetime, result: StepErrors) -> bool:
        body = event_body(event, now, self.config.component, self.identity)
        meta = body["metadata"]
        try:
            try:
                self.hub.create(body)
                result.writes[(EVENT.kind, "create")] += 1
                return True
            except AlreadyExists:
                pass
            for _ in range(self._retries()):
                existing = self.hub.get(EVENT, meta["name"], meta["namespace"])
                if existing is None:
                    self.hub.create(body)
                    result.writes[(EVENT.kind, "create")] += 1
                    return True
                try:
                    self.hub.update(repeated(existing, now))
                except Conflict:
                    continue
                result.writes[(EVENT.kind, "update")] += 1
                return True
            raise Conflict(f"still conflicting after {self._retries()} attempts")
        except StoreError as e:
            self._error(result, f"event {event.reason} for {name_of(event.involved)}: {e}")
            return False
