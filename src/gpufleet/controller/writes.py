"""The controller's writes to the hub: compare first, guarded by resourceVersion, retried on
`Conflict` (at most `max_conflict_retries` times), recorded in the assume ledger, and events.

`HubWriter` is the controller's collaborator that writes (loop.py decides); the step's tables
it keeps up to date are the controller's (`WrittenTables`). A status patch's result is put in the index (`HubIndex.put_written`), so the rest of the step
works from it and the feed's copy of it is no change; a status write that fails leaves the
object as desired for the rest of the step and marks it unstored, so the next step reads the
store's version again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from gpufleet.api.names import ClusterNameError
from gpufleet.controller.conditions import Obj, ReadObj, is_owned_equal, owned_patch
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.events import Event, Recorder, event_body, repeated
from gpufleet.controller.index import HubIndex, Key, is_deleting, key_of, name_of
from gpufleet.controller.ledger import AssumeLedger
from gpufleet.controller.replicas import placed_replica, replica_body
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


class WrittenTables(Protocol):
    """What a write brings up to date of the step's view of the hub (the controller's index
    side, loop.py): the index, what is derived from it, and the keys left unstored."""

    index: HubIndex

    def track(self, kind: Kind, key: Key) -> None:
        """Bring what the step derives from the index's record at `key` up to date."""

    def unstore(self, kind: Kind, key: Key) -> None:
        """`key` was not stored as desired: the next step reads the store's version again."""


def step_error(result: StepErrors, message: str) -> None:
    """An error of the step: logged, and in its result."""
    log.warning("%s", message)
    result.errors.append(message)


def guard(result: StepErrors, what: str, write: Callable[[], object]) -> bool:
    """Run one write; a StoreError becomes an error of the step. True when it succeeded."""
    try:
        write()
    except StoreError as e:
        step_error(result, f"{what}: {type(e).__name__}: {e}")
        return False
    return True


class HubWriter:
    """The controller's writes (see the module docstring). It owns what a controller must
    remember of them to be correct: the assume ledger (what it wrote, until the hub's feed
    shows it) and the recorder (which events it already recorded)."""

    def __init__(
        self, hub: Store, config: ControllerConfig, identity: str, tables: WrittenTables
    ) -> None:
        self.hub = hub
        self.config = config
        self.identity = identity
        self.ledger = AssumeLedger(config.assume_ttl_s)
        self.recorder = Recorder()
        self.tables = tables

    def _retries(self) -> int:
        return max(1, self.config.max_conflict_retries)

    def _reread(self, kind: Kind, obj: ReadObj) -> Obj:
        meta = obj["metadata"]
        fresh = self.hub.get(kind, meta["name"], meta.get("namespace"))
        if fresh is None:
            raise NotFound(f"{kind.kind} {name_of(obj)} not found")
        return fresh

    def write_status(
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
                if self.tables.index.put_written(kind, written):
                    self.tables.track(kind, key_of(written))
                return written
            raise Conflict(f"still conflicting after {self._retries()} attempts")
        except StoreError as e:
            step_error(result, f"status of {kind.kind} {name_of(obj)}: {type(e).__name__}: {e}")
            unstored = _with_status(current, desire(current), owned)
            self.tables.index.put(kind, key_of(obj), unstored, force=True)
            self.tables.track(kind, key_of(obj))
            self.tables.unstore(kind, key_of(obj))
            return unstored

    def update(
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

    def create(
        self,
        kind: Kind,
        body: Obj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepErrors,
        read: Callable[[ReadObj], object | None] | None = None,
    ) -> None:
        """Create `body`. If it exists already (the view had not shown it), adopt it when it
        is this controller's kind of object for the same deployment, updating it as needed.
        `read` gives what the index reads of the created object, when it can tell without
        parsing it (None: parse it), for `HubIndex.assume_read`."""
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
            self.update(kind, existing, change, now, result)
            return
        self.ledger.assume_written(kind, written, now)
        result.writes[(kind.kind, "create")] += 1
        parsed = read(written) if read is not None else None
        if parsed is not None:
            self.tables.index.assume_read(kind, written, parsed)
        if kind == MODEL_REPLICA:
            # Its first status (NotObserved) now, not one step later: a step leaves nothing
            # for the next one to write when nothing changes.
            def desire(current: ReadObj) -> Obj:
                return replica_status(current, None, False, now)

            self.write_status(kind, written, desire, REPLICA_OWNED, now, result)

    def create_replica(
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

        def read(written: ReadObj) -> object | None:
            core = placed_replica(placement, body, written)
            return None if core is None else (core, "")

        self.create(MODEL_REPLICA, body, change, now, result, read)

    def delete(self, kind: Kind, obj: ReadObj, now: datetime, result: StepErrors) -> None:
        meta = obj["metadata"]
        try:
            self.hub.delete(kind, meta["name"], meta.get("namespace"))
        except NotFound:
            pass
        else:
            result.writes[(kind.kind, "delete")] += 1
        self.ledger.assume_deleted(kind, obj, now)

    # --- events ---------------------------------------------------------------------------

    def record_once(
        self, subject: tuple[str, ...], event: Event, now: datetime, result: StepErrors
    ) -> None:
        """Record a standing situation's event when its message changed since the last one."""
        if not self.recorder.is_new(subject, event.message):
            return
        if self.record(event, now, result):
            self.recorder.remember(subject, event.message)

    def record(self, event: Event, now: datetime, result: StepErrors) -> bool:
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
            step_error(result, f"event {event.reason} for {name_of(event.involved)}: {e}")
            return False
