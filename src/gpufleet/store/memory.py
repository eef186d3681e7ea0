"""`MemoryStore`: an in-memory `Store` with API-server semantics, for the simulator and tests.

Time is injected (`clock`), so a simulated fleet stamps simulated times. Resource versions
come from one counter per store, as etcd's revision does, so they order every change.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.store.labels import matches, parse_selector
from gpufleet.store.merge import apply_merge_patch, copy_json
from gpufleet.store.port import (
    AlreadyExists,
    Change,
    ChangeType,
    Conflict,
    Expired,
    Invalid,
    Kind,
    NotFound,
    Obj,
    kind_of,
)

_Key = tuple[Kind, str, str]


def format_time(at: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as the API server writes timestamps."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryStore:
    """A `Store` held in a dict. Not thread-safe: one event loop drives it."""

    def __init__(
        self, clock: Callable[[], datetime] | None = None, uid_seed: str = "store"
    ) -> None:
        self._clock = clock or (lambda: datetime.now(UTC))
        #: Per kind, (namespace, name) -> the stored object. A stored object is never changed
        #: in place: every write stores a new one, so no-copy reads (`peek`) stay consistent.
        self._objects: dict[Kind, dict[tuple[str, str], Obj]] = {}
        self._log: list[Change] = []
        self._revision = 0
        self._uid_seed = uid_seed
        self._compacted = 0
        #: Per kind, the revision of its last change (0: never changed).
        self._kind_revisions: dict[Kind, int] = {}

    # --- reads ------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        obj = self.peek_one(kind, name, namespace)
        return copy_json(obj) if obj is not None else None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> list[Obj]:
        return [copy_json(obj) for obj in self.peek(kind, namespace, label_selector)]

    def peek(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        """`list` without copies: the stored objects themselves, which the caller must not
        change. For the simulator's emulated components; the agent and the controller read
        through the `Store` port, which copies as an API client's decoding does."""
        selector = parse_selector(label_selector) if label_selector else ()
        by_key = self._objects.get(kind, {})
        keys = (
            sorted(by_key) if namespace is None else sorted(k for k in by_key if k[0] == namespace)
        )
        found = [by_key[k] for k in keys]
        if selector:
            found = [o for o in found if matches(selector, o["metadata"].get("labels"))]
        return found

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        return self.peek(kind, namespace, label_selector)

    def peek_one(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """`get` without a copy (see `peek`)."""
        return self._objects.get(kind, {}).get((namespace or "", name))

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        wanted = set(kinds) if kinds is not None else None
        if cursor < self._compacted:
            raise Expired(f"changes before {self._compacted} were compacted: list again")
        start = self._first_after(cursor)
        picked = [
            Change(c.cursor, c.type, c.kind, copy_json(c.obj))
            for c in self._log[start:]
            if wanted is None or c.kind in wanted
        ]
        return picked, self._revision

    @property
    def revision(self) -> int:
        return self._revision

    def kind_revision(self, kind: Kind) -> int:
        """The revision of the last change to an object of `kind` (0 when none): a cache of
        something computed from one kind stays valid while this stays the same."""
        return self._kind_revisions.get(kind, 0)

    def compact(self, cursor: int) -> None:
        """Forget changes at or before `cursor`; reading from before it raises `Expired`."""
        del self._log[: self._first_after(cursor)]
        self._compacted = max(self._compacted, cursor)

    # --- writes -----------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if not name:
            raise Invalid(f"{kind.kind}: metadata.name is required")
        key = self._key(kind, name, namespace)
        if self._stored(key) is not None:
            raise AlreadyExists(f"{kind.kind} {self._show(key)} already exists")
        stored = copy_json(obj)
        self._revision += 1
        stored_meta = stored.setdefault("metadata", {})
        stored_meta["uid"] = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"{self._uid_seed}/{self._revision}/{key}")
        )
        stored_meta["resourceVersion"] = str(self._revision)
        stored_meta["creationTimestamp"] = format_time(self._clock())
        stored_meta["generation"] = 1
        stored_meta.pop("deletionTimestamp", None)
        self._put(key, stored)
        self._log.append(Change(self._revision, ChangeType.ADDED, kind, stored))
        self._kind_revisions[kind] = self._revision
        return copy_json(stored)

    def update(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        key = self._key(kind, meta.get("name", ""), meta.get("namespace"))
        current = self._require(key)
        self._check_version(key, current, meta.get("resourceVersion"))
        stored = copy_json(obj)
        stored_meta = stored["metadata"]
        for field in ("uid", "creationTimestamp", "deletionTimestamp"):
            if field in current["metadata"]:
                stored_meta[field] = current["metadata"][field]
        generation = int(current["metadata"].get("generation", 1))
        if stored.get("spec") != current.get("spec"):
            generation += 1
        stored_meta["generation"] = generation
        if "status" in current:
            stored["status"] = copy_json(current["status"])
        else:
            stored.pop("status", None)
        return self._commit(key, kind, stored)

    def patch_status(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Obj:
        key = self._key(kind, name, namespace)
        current = self._require(key)
        self._check_version(key, current, resource_version)
        stored = copy_json(current)
        apply_merge_patch(stored.setdefault("status", {}), status)
        return self._commit(key, kind, stored)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        key = self._key(kind, name, namespace)
        current = self._require(key)
        if current["metadata"].get("finalizers"):
            if "deletionTimestamp" not in current["metadata"]:
                stored = copy_json(current)
                stored["metadata"]["deletionTimestamp"] = format_time(self._clock())
                self._commit(key, kind, stored)
            return
        self._pop(key)
        self._revision += 1
        self._log.append(Change(self._revision, ChangeType.DELETED, kind, current))
        self._kind_revisions[kind] = self._revision

    # --- helpers ----------------------------------------------------------------------

    def _commit(self, key: _Key, kind: Kind, stored: Obj) -> Obj:
        self._revision += 1
        stored["metadata"]["resourceVersion"] = str(self._revision)
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            # The last finalizer is gone: the object disappears, as on the API server.
            self._pop(key)
            self._log.append(Change(self._revision, ChangeType.DELETED, kind, stored))
            self._kind_revisions[kind] = self._revision
            return copy_json(stored)
        self._put(key, stored)
        self._log.append(Change(self._revision, ChangeType.MODIFIED, kind, stored))
        self._kind_revisions[kind] = self._revision
        return copy_json(stored)

    def _stored(self, key: _Key) -> Obj | None:
        return self._objects.get(key[0], {}).get((key[1], key[2]))

    def _put(self, key: _Key, obj: Obj) -> None:
        self._objects.setdefault(key[0], {})[(key[1], key[2])] = obj

    def _pop(self, key: _Key) -> None:
        del self._objects[key[0]][(key[1], key[2])]

    def _key(self, kind: Kind, name: str, namespace: str | None) -> _Key:
        if kind.namespaced and not namespace:
            raise Invalid(f"{kind.kind} {name!r}: metadata.namespace is required")
        if not kind.namespaced and namespace:
            raise Invalid(f"{kind.kind} {name!r} is cluster-scoped: no namespace allowed")
        return (kind, namespace or "", name)

    def _require(self, key: _Key) -> Obj:
        current = self._stored(key)
        if current is None:
            raise NotFound(f"{key[0].kind} {self._show(key)} not found")
        return current

    def _check_version(self, key: _Key, current: Obj, expected: str | None) -> None:
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            raise Conflict(
                f"{key[0].kind} {self._show(key)}: resourceVersion {expected} is stale "
                f"(now {current['metadata']['resourceVersion']})"
            )

    def _first_after(self, cursor: int) -> int:
        lo, hi = 0, len(self._log)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._log[mid].cursor <= cursor:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @staticmethod
    def _show(key: _Key) -> str:
        return f"{key[1]}/{key[2]}" if key[1] else key[2]
