"""The assume ledger: the controller's own writes that its view of the store does not show yet.

A controller reads through a view that can lag its own writes (a Kubernetes informer cache
does). If the scheduling loop trusted such a view, a replica it created one step ago would be
missing from the next snapshot: its devices would look free and could be given to another
deployment, and the same replica would be created again. kube-scheduler's assume cache solves
the same problem; this is ours.

Every object the controller creates, updates, patches or deletes is recorded with the
`resourceVersion` the write returned. When the controller lists objects, `overlay` puts the
recorded object in place of a listed one whose resourceVersion is older (or adds it when the
listing lacks it), and hides one the controller deleted. An entry is forgotten as soon as the
view shows the object at the recorded resourceVersion or newer (or, for a delete, no longer
shows it), or after `ttl_s` in case the view never catches up (the object was changed by
someone else in a way the view shows only later). Errs toward charging: while an entry is in
force, its replica is charged.

Resource versions are compared as integers (what etcd's revision is, and what kube-scheduler's
assume cache does); a non-numeric version is treated as "caught up" only when equal.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.controller.conditions import Obj, ReadObj
from gpufleet.store import Kind, copy_json, copy_obj

Key = tuple[Kind, str, str]


def object_key(kind: Kind, obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (kind, meta.get("namespace") or "", meta.get("name", ""))


def is_newer_or_same(version: str | None, than: str | None) -> bool:
    """Whether `version` is at least `than` (a view that shows `version` has caught up)."""
    if version is None or than is None:
        return version == than
    if version.isdecimal() and than.isdecimal():
        return int(version) >= int(than)
    return version == than


@dataclass(slots=True)
class Entry:
    #: The object as the write returned it; None for a delete.
    obj: Obj | None
    #: The resourceVersion the write returned (for a delete: the last one seen before it).
    resource_version: str | None
    assumed_at: datetime


class AssumeLedger:
    """The controller's writes not yet visible in its view, per (kind, namespace, name)."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[Key, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def assume_written(self, kind: Kind, obj: ReadObj, now: datetime) -> None:
        """Record an object as a create, update or status patch returned it."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        self._entries[object_key(kind, obj)] = Entry(copy_obj(obj), version, now)

    def assume_deleted(self, kind: Kind, obj: ReadObj, now: datetime) -> None:
        """Record the delete of `obj` (the last version the controller saw of it)."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        self._entries[object_key(kind, obj)] = Entry(None, version, now)

    def expire(self, now: datetime) -> None:
        """Forget entries older than `ttl_s`."""
        for key in [k for k, e in self._entries.items() if _age_s(e, now) > self.ttl_s]:
            del self._entries[key]

    def overlay(self, kind: Kind, listed: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """`listed` with the assumed writes of `kind` applied; caught-up entries are forgotten.

        `listed` is in (namespace, name) order, as a Store lists; so is the result. Only the
        entries are looked up in it (by bisection), so a fleet's listing is not indexed
        whole on every call for the few writes in force.
        """
        entries = [(key, e) for key, e in self._entries.items() if key[0] == kind]
        if not entries:
            return list(listed)
        at = _Positions(listed)
        out: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        for key, entry in entries:
            shown = at.find(key[1], key[2])
            shown_version = (shown or {}).get("metadata", {}).get("resourceVersion")
            if entry.obj is None:
                if shown is None or not is_newer_or_same(entry.resource_version, shown_version):
                    # Gone from the view, or re-created since: the view has caught up.
                    del self._entries[key]
                    continue
                out[(key[1], key[2])] = None
                continue
            if shown is not None and is_newer_or_same(shown_version, entry.resource_version):
                del self._entries[key]
                continue
            out[(key[1], key[2])] = copy_json(entry.obj)
        if not out:
            return list(listed)
        merged: dict[tuple[str, str], Mapping[str, Any] | None] = {
            at.key(i): o for i, o in enumerate(listed)
        }
        merged.update(out)
        return [o for _, o in sorted(merged.items(), key=lambda item: item[0]) if o is not None]

    def unseen(self, kind: Kind, listed: Sequence[Mapping[str, Any]]) -> list[Key]:
        """Assumed-present objects of `kind` that `listed` does not show at all.

        Either the view lags the write, or someone deleted the object since: the controller
        asks the store directly (`get`) and calls `forget` when it is gone, so a deployment or
        replica deleted right after the controller wrote it is not brought back until `ttl_s`.
        """
        present = [k for k, e in self._entries.items() if k[0] == kind and e.obj is not None]
        if not present:
            return []
        at = _Positions(listed)
        return sorted(key for key in present if at.find(key[1], key[2]) is None)

    def forget(self, key: Key) -> None:
        self._entries.pop(key, None)

    def is_assumed(self, kind: Kind, namespace: str, name: str) -> bool:
        return (kind, namespace, name) in self._entries


def _list_order(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class _Positions:
    """Finds objects by (namespace, name) in a listing in that order, by bisection."""

    def __init__(self, listed: Sequence[Mapping[str, Any]]) -> None:
        self.listed = listed

    def key(self, i: int) -> tuple[str, str]:
        return _list_order(self.listed[i])

    def find(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        want = (namespace, name)
        at = bisect.bisect_left(self.listed, want, key=_list_order)
        if at < len(self.listed) and self.key(at) == want:
            return self.listed[at]
        return None


def _age_s(entry: Entry, now: datetime) -> float:
    return (now - entry.assumed_at).total_seconds()
