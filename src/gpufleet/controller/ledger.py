"""The assume ledger: the controller's own writes that its view of the store does not show yet.

A controller reads through a view that can lag its own writes (a Kubernetes informer cache
does). If the scheduling loop trusted such a view, a replica it created one step ago would be
missing from the next snapshot: its devices would look free and could be given to another
deployment, and the same replica would be created again. kube-scheduler's assume cache solves
the same problem; this is ours.

Every object the controller creates, updates, patches or deletes is recorded with the
`resourceVersion` the write returned. On every step the controller's index asks for the
`overrides` of what its view shows: the recorded object in place of a shown one whose
resourceVersion is older (or added when the view lacks it), and a hidden one the controller
deleted. An entry is forgotten as soon as the
view shows the object at the recorded resourceVersion or newer (or, for a delete, no longer
shows it), or after `ttl_s` in case the view never catches up (the object was changed by
someone else in a way the view shows only later). Errs toward charging: while an entry is in
force, its replica is charged.

Resource versions are compared as integers (what etcd's revision is, and what kube-scheduler's
assume cache does); a non-numeric version is treated as "caught up" only when equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.controller.conditions import ReadObj
from gpufleet.store import Kind

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
    #: The object as the write returned it (read-only); None for a delete.
    obj: ReadObj | None
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
        # Not copied: what a write returns is never changed, by the store (port contract) or
        # by the controller, which only reads it.
        self._entries[object_key(kind, obj)] = Entry(obj, version, now)

    def assume_deleted(self, kind: Kind, obj: ReadObj, now: datetime) -> None:
        """Record the delete of `obj` (the last version the controller saw of it)."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        self._entries[object_key(kind, obj)] = Entry(None, version, now)

    def expire(self, now: datetime) -> None:
        """Forget entries older than `ttl_s`."""
        for key in [k for k, e in self._entries.items() if _age_s(e, now) > self.ttl_s]:
            del self._entries[key]

    def overrides(
        self, kind: Kind, shown: Mapping[tuple[str, str], Mapping[str, Any]]
    ) -> dict[tuple[str, str], ReadObj | None]:
        """What the assumed writes of `kind` change in `shown` (the view's objects by
        (namespace, name)): the object written in place of an older or missing one, or None
        to hide one the controller deleted. Caught-up entries are forgotten."""
        out: dict[tuple[str, str], ReadObj | None] = {}
        for key, entry in [(k, e) for k, e in self._entries.items() if k[0] == kind]:
            at = (key[1], key[2])
            found = shown.get(at)
            shown_version = (found or {}).get("metadata", {}).get("resourceVersion")
            if entry.obj is None:
                if found is None or not is_newer_or_same(entry.resource_version, shown_version):
                    # Gone from the view, or re-created since: the view has caught up.
                    del self._entries[key]
                    continue
                out[at] = None
                continue
            if found is not None and is_newer_or_same(shown_version, entry.resource_version):
                del self._entries[key]
                continue
            out[at] = entry.obj
        return out

    def missing(
        self, kind: Kind, shown: Mapping[tuple[str, str], Mapping[str, Any]]
    ) -> list[tuple[str, str]]:
        """Assumed-present objects of `kind` that `shown` does not hold at all, sorted.

        Either the view lags the write, or someone deleted the object since: the controller
        asks the store directly (`get`) and calls `forget` when it is gone, so a deployment or
        replica deleted right after the controller wrote it is not brought back until `ttl_s`.
        """
        return sorted(
            (k[1], k[2])
            for k, e in self._entries.items()
            if k[0] == kind and e.obj is not None and (k[1], k[2]) not in shown
        )

    def forget(self, key: Key) -> None:
        self._entries.pop(key, None)

    def is_assumed(self, kind: Kind, namespace: str, name: str) -> bool:
        return (kind, namespace, name) in self._entries


def _age_s(entry: Entry, now: datetime) -> float:
    return (now - entry.assumed_at).total_seconds()
