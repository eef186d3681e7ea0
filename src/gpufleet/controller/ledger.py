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

The entries are kept per kind, with a heap of their times: a step reads the entries of one
kind at a time (`overrides`, `missing`) and expires them by popping the heap (`expire`), so a
step with few entries in force costs few, however many writes came before.

Resource versions are compared as integers (what etcd's revision is, and what kube-scheduler's
assume cache does); a non-numeric version is treated as "caught up" only when equal.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
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
        #: Per kind, the entries by (namespace, name).
        self._entries: dict[Kind, dict[tuple[str, str], Entry]] = {}
        #: (assumed_at, key) of every entry recorded, oldest first; a popped one whose entry
        #: was replaced since (another time) or forgotten is skipped.
        self._times: list[tuple[datetime, Key]] = []

    def __len__(self) -> int:
        return sum(map(len, self._entries.values()))

    def _record(self, kind: Kind, obj: ReadObj, entry: Entry) -> None:
        key = object_key(kind, obj)
        self._entries.setdefault(kind, {})[(key[1], key[2])] = entry
        heapq.heappush(self._times, (entry.assumed_at, key))

    def assume_written(self, kind: Kind, obj: ReadObj, now: datetime) -> None:
        """Record an object as a create, update or status patch returned it."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        # Not copied: what a write returns is never changed, by the store (port contract) or
        # by the controller, which only reads it.
        self._record(kind, obj, Entry(obj, version, now))

    def assume_deleted(self, kind: Kind, obj: ReadObj, now: datetime) -> None:
        """Record the delete of `obj` (the last version the controller saw of it)."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        self._record(kind, obj, Entry(None, version, now))

    def expire(self, now: datetime) -> None:
        """Forget entries older than `ttl_s`."""
        times = self._times
        while times and _age(times[0][0], now) > self.ttl_s:
            at, key = heapq.heappop(times)
            table = self._entries.get(key[0])
            entry = table.get((key[1], key[2])) if table is not None else None
            if table is not None and entry is not None and entry.assumed_at == at:
                del table[(key[1], key[2])]

    def next_expiry(self) -> datetime | None:
        """When the oldest entry recorded may expire (`expire` forgets it just after): early
        when that entry was forgotten or written again since."""
        if not self._times or not len(self):
            return None
        return self._times[0][0] + timedelta(seconds=self.ttl_s, microseconds=1)

    def overrides(
        self, kind: Kind, shown: Mapping[tuple[str, str], Mapping[str, Any]]
    ) -> dict[tuple[str, str], ReadObj | None]:
        """What the assumed writes of `kind` change in `shown` (the view's objects by
        (namespace, name)): the object written in place of an older or missing one, or None
        to hide one the controller deleted. Caught-up entries are forgotten."""
        out: dict[tuple[str, str], ReadObj | None] = {}
        table = self._entries.get(kind)
        if not table:
            return out
        kept: dict[tuple[str, str], Entry] = {}
        for at, entry in table.items():
            found = shown.get(at)
            shown_version = (found or {}).get("metadata", {}).get("resourceVersion")
            if entry.obj is None:
                if found is None or not is_newer_or_same(entry.resource_version, shown_version):
                    continue  # gone from the view, or re-created since: the view caught up
                out[at] = None
            elif found is not None and is_newer_or_same(shown_version, entry.resource_version):
                continue
            else:
                out[at] = entry.obj
            kept[at] = entry
        # A new table rather than deletions: a dict keeps the size it once had, and the next
        # step would scan the room of every entry forgotten here.
        self._entries[kind] = kept
        return out

    def missing(
        self, kind: Kind, shown: Mapping[tuple[str, str], Mapping[str, Any]]
    ) -> list[tuple[str, str]]:
        """Assumed-present objects of `kind` that `shown` does not hold at all, sorted.

        Either the view lags the write, or someone deleted the object since: the controller
        asks the store directly (`get`) and calls `forget` when it is gone, so a deployment or
        replica deleted right after the controller wrote it is not brought back until `ttl_s`.
        """
        table = self._entries.get(kind) or {}
        return sorted(at for at, e in table.items() if e.obj is not None and at not in shown)

    def forget(self, key: Key) -> None:
        table = self._entries.get(key[0])
        if table is not None:
            table.pop((key[1], key[2]), None)

    def is_assumed(self, kind: Kind, namespace: str, name: str) -> bool:
        return (namespace, name) in self._entries.get(kind, {})


def _age(at: datetime, now: datetime) -> float:
    return (now - at).total_seconds()
