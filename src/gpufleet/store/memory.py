"""`MemoryStore`: an in-memory `Store` with API-server semantics, for the simulator and tests.

Time is injected (`clock`), so a simulated fleet stamps simulated times. Resource versions
come from one counter per store, as etcd's revision does, so they order every change.
"""

from __future__ import annotations

import builtins
import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.store.labels import matches, parse_selector
from gpufleet.store.merge import apply_merge_patch
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
        self._objects: dict[_Key, Obj] = {}
        self._log: list[Change] = []
        self._revision = 0
        self._uid_seed = uid_seed
        self._compacted = 0

    # --- reads ------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        obj = self._objects.get(self._key(kind, name, namespace))
        return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> list[Obj]:
        selector = parse_selector(label_selector)
        found = [
            obj
            for (k, ns, _), obj in self._objects.items()
            if k == kind
            and (namespace is None or ns == namespace)
            and matches(selector, obj["metadata"].get("labels"))
        ]
        found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return copy.deepcopy(found)

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        wanted = set(kinds) if kinds is not None else None
        if cursor < self._compacted:
            raise Expired(f"changes before {self._compacted} were compacted: list again")
        start = self._first_after(cursor)
        picked = [c for c in self._log[start:] if wanted is None or c.kind in wanted]
        return picked, self._revision

    @property
    def revision(self) -> int:
        return self._revision

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
        if key in self._objects:
            raise AlreadyExists(f"{kind.kind} {self._show(key)} already exists")
        stored = copy.deepcopy(obj)
        self._revision += 1
        stored_meta = stored.setdefault("metadata", {})
        stored_meta["uid"] = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"{self._uid_seed}/{self._revision}/{key}")
        )
        stored_meta["resourceVersion"] = str(self._revision)
        stored_meta["creationTimestamp"] = format_time(self._clock())
        stored_meta["generation"] = 1
        stored_meta.pop("deletionTimestamp", None)
        self._objects[key] = stored
        self._log.append(Change(self._revision, ChangeType.ADDED, kind, copy.deepcopy(stored)))
        return copy.deepcopy(stored)

    def update(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        key = self._key(kind, meta.get("name", ""), meta.get("namespace"))
        current = self._require(key)
        self._check_version(key, current, meta.get("resourceVersion"))
        stored = copy.deepcopy(obj)
        stored_meta = stored["metadata"]
        for field in ("uid", "creationTimestamp", "deletionTimestamp"):
            if field in current["metadata"]:
                stored_meta[field] = current["metadata"][field]
        generation = int(current["metadata"].get("generation", 1))
        if stored.get("spec") != current.get("spec"):
            generation += 1
        stored_meta["generation"] = generation
        if "status" in current:
            stored["status"] = copy.deepcopy(current["status"])
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
        stored = copy.deepcopy(current)
        apply_merge_patch(stored.setdefault("status", {}), status)
        return self._commit(key, kind, stored)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        key = self._key(kind, name, namespace)
        current = self._require(key)
        if current["metadata"].get("finalizers"):
            if "deletionTimestamp" not in current["metadata"]:
                stored = copy.deepcopy(current)
                stored["metadata"]["deletionTimestamp"] = format_time(self._clock())
                self._commit(key, kind, stored)
            return
        del self._objects[key]
        self._revision += 1
        self._log.append(Change(self._revision, ChangeType.DELETED, kind, copy.deepcopy(current)))

    # --- helpers ----------------------------------------------------------------------

    def _commit(self, key: _Key, kind: Kind, stored: Obj) -> Obj:
        self._revision += 1
        stored["metadata"]["resourceVersion"] = str(self._revision)
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            # The last finalizer is gone: the object disappears, as on the API server.
            del self._objects[key]
            self._log.append(Change(self._revision, ChangeType.DELETED, kind, stored))
            return copy.deepcopy(stored)
        self._objects[key] = stored
        self._log.append(Change(self._revision, ChangeType.MODIFIED, kind, copy.deepcopy(stored)))
        return copy.deepcopy(stored)

    def _key(self, kind: Kind, name: str, namespace: str | None) -> _Key:
        if kind.namespaced and not namespace:
            raise Invalid(f"{kind.kind} {name!r}: metadata.namespace is required")
        if not kind.namespaced and namespace:
            raise Invalid(f"{kind.kind} {name!r} is cluster-scoped: no namespace allowed")
        return (kind, namespace or "", name)

    def _require(self, key: _Key) -> Obj:
        current = self._objects.get(key)
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
