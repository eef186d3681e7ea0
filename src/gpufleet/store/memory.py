"""`MemoryStore`: an in-memory `Store` with API-server semantics, for the simulator and tests.

Time is injected (`clock`), so a simulated fleet stamps simulated times. Resource versions
come from one counter per store, as etcd's revision does, so they order every change.
"""

from __future__ import annotations

import bisect
import builtins
import functools
import itertools
import operator
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from gpufleet.store.labels import Op, Selector, matches, parse_selector
from gpufleet.store.merge import copy_json, merged
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
#: An object's key within its kind: (namespace or "", name). Sorting keys sorts as `list` does.
_ObjKey = tuple[str, str]


def format_time(at: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as the API server writes timestamps."""
    return _format_time(at)


@functools.lru_cache(maxsize=64)
def _format_time(at: datetime) -> str:
    # A function of the instant alone (its value: equal datetimes format alike), asked again
    # and again for the same one (a simulated fleet stamps many writes per instant).
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selector_of(label_selector: str | Mapping[str, str]) -> tuple[Hashable, Selector]:
    """The selector parsed, and its signature: the text, or the mapping's pairs in its
    order (a selection is kept by signature, which hashes in C, unlike a parsed selector)."""
    if isinstance(label_selector, str):
        return label_selector, _parsed(label_selector)
    # (An unhashable value raises TypeError here, as it does in `parse_selector`.)
    pairs = tuple(label_selector.items())
    return pairs, _parsed(pairs)


@functools.lru_cache(maxsize=256)
def _parsed(signature: str | tuple[tuple[str, str], ...]) -> Selector:
    """`parse_selector` of a selector's signature (`_selector_of`): a function of it alone,
    asked again and again for the few selectors readers use."""
    return parse_selector(signature if isinstance(signature, str) else dict(signature))


#: Terms the label index answers exactly (it holds every key, and every string value).
_INDEXED_OPS: Final = frozenset({Op.EXISTS, Op.EQUALS, Op.IN})


def _label_items(obj: Obj) -> Iterable[Hashable]:
    """The (key, value) pairs of an object's labels (string values only: a selector matches
    nothing else), and each label key alone as `(key,)`, for existence terms."""
    found = obj["metadata"].get("labels") or {}
    return [(k, v) for k, v in found.items() if type(v) is str] + [(k,) for k in found]


class _Index:
    """The keys of the objects of one kind, by each value `values(obj)` gives (a label pair,
    an owner's uid...), kept as objects are written, so a lookup never scans the kind."""

    def __init__(self, values: Callable[[Obj], Iterable[Hashable]]) -> None:
        self.values = values
        self.buckets: dict[Hashable, set[_ObjKey]] = {}

    def add(self, key: _ObjKey, obj: Obj) -> None:
        for value in self.values(obj):
            self.buckets.setdefault(value, set()).add(key)

    def remove(self, key: _ObjKey, obj: Obj) -> None:
        for value in self.values(obj):
            bucket = self.buckets.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del self.buckets[value]

    def replace(self, key: _ObjKey, old: Obj, new: Obj) -> None:
        before, after = set(self.values(old)), set(self.values(new))
        if before == after:
            return
        for value in before - after:
            bucket = self.buckets[value]
            bucket.discard(key)
            if not bucket:
                del self.buckets[value]
        for value in after - before:
            self.buckets.setdefault(value, set()).add(key)

    def keys(self, value: Hashable) -> set[_ObjKey]:
        return self.buckets.get(value, set())


class _Kept:
    """One listing a table keeps: its objects in key order, and the tuple `view` hands out
    (made again on the first read after a write: writes come in runs between reads, and a
    new version costs its slot, not a new tuple per write)."""

    __slots__ = ("frozen", "objs")

    def __init__(self, objs: builtins.list[Obj]) -> None:
        self.objs = objs
        self.frozen: tuple[Obj, ...] | None = None

    def view(self) -> tuple[Obj, ...]:
        if self.frozen is None:
            self.frozen = tuple(self.objs)
        return self.frozen

    def put_at(self, at: int, obj: Obj) -> None:
        """`obj` at `at` instead of what is there (a tuple handed out stays as it was)."""
        self.objs[at] = obj
        self.frozen = None


class _Table:
    """The objects of one kind, with what makes reading them cheap: their keys in order, a
    label index, any indexes a caller added, and the last full listing (until a write)."""

    def __init__(self) -> None:
        self.objects: dict[_ObjKey, Obj] = {}
        #: Every key, sorted: what `peek` returns, in its order, without sorting per call.
        self.keys: list[_ObjKey] = []
        self.labels = _Index(_label_items)
        self.indexes: dict[str, _Index] = {}
        #: The last full listing, per-namespace listings and selections (by (namespace,
        #: selector): a controller lists the same selection of a kind that changes far less
        #: often than it is listed). `view` hands out each as a tuple, which a write never
        #: changes (`_Kept`). A new version of an object is put in its place
        #: in each (its key's position is found by bisection: every one is in key order); an
        #: object added or deleted drops the listings it may belong to, as does a version
        #: whose labels changed (the selections it belongs to may change).
        self.listing: _Kept | None = None
        self.namespaces: dict[str, _Kept] = {}
        self.selections: dict[tuple[str | None, Hashable], tuple[tuple[_ObjKey, ...], _Kept]] = {}
        #: The kind's changes (oldest first; the store's feed holds every kind's), and the
        #: revision of its last one (0: none): a reader of a few kinds takes their tails
        #: instead of filtering every change since its cursor.
        self.log: list[Change] = []
        self.revision = 0

    def put(self, key: _ObjKey, obj: Obj) -> None:
        old = self.objects.get(key)
        self.objects[key] = obj
        if old is None:
            bisect.insort(self.keys, key)
            self._dropped(key)
            for index in (self.labels, *self.indexes.values()):
                index.add(key, obj)
            return
        self._replaced(key, old, obj)
        if old["metadata"].get("labels") is not obj["metadata"].get("labels"):
            self.labels.replace(key, old, obj)  # (a status write shares the labels)
        for index in self.indexes.values():
            index.replace(key, old, obj)

    def pop(self, key: _ObjKey) -> None:
        old = self.objects.pop(key)
        self._dropped(key)
        del self.keys[bisect.bisect_left(self.keys, key)]
        for index in (self.labels, *self.indexes.values()):
            index.remove(key, old)

    def _dropped(self, key: _ObjKey) -> None:
        """Forget the listings an object added or deleted at `key` may change."""
        self.listing = None
        self.namespaces.pop(key[0], None)
        self.selections.clear()

    def _replaced(self, key: _ObjKey, old: Obj, new: Obj) -> None:
        """Put `new` in the place of `old` (at `key`) in every listing kept."""
        if self.listing is not None:
            self.listing.put_at(bisect.bisect_left(self.keys, key), new)
        in_namespace = self.namespaces.get(key[0])
        if in_namespace is not None:
            lo = bisect.bisect_left(self.keys, (key[0], ""))
            in_namespace.put_at(bisect.bisect_left(self.keys, key, lo) - lo, new)
        if not self.selections:
            return
        old_labels, new_labels = old["metadata"].get("labels"), new["metadata"].get("labels")
        if old_labels is not new_labels and old_labels != new_labels:
            self.selections.clear()
            return
        for keys, kept in self.selections.values():
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                kept.put_at(at, new)

    def all(self) -> tuple[Obj, ...]:
        if self.listing is None:
            self.listing = _Kept(builtins.list(map(self.objects.__getitem__, self.keys)))
        return self.listing.view()

    def in_namespace(self, namespace: str) -> tuple[Obj, ...]:
        found = self.namespaces.get(namespace)
        if found is None:
            objs = builtins.list(map(self.objects.__getitem__, self._keys_in(namespace)))
            found = self.namespaces[namespace] = _Kept(objs)
        return found.view()

    def _keys_in(self, namespace: str) -> builtins.list[_ObjKey]:
        # Keys sort by namespace first, so one namespace's keys are one run: from
        # (namespace, "") to the first key of the next namespace, which sorts at or after
        # namespace + "\0" (the least string greater than every (namespace, name)).
        lo = bisect.bisect_left(self.keys, (namespace, ""))
        hi = bisect.bisect_left(self.keys, (namespace + "\0", ""), lo)
        return self.keys[lo:hi]

    def selected(
        self, namespace: str | None, signature: Hashable, selector: Selector
    ) -> tuple[Obj, ...]:
        """Objects matching `selector` (see `_select`), kept as the objects change, by
        `signature` (the selector as the caller wrote it: `_selector_of`)."""
        found = self.selections.get((namespace, signature))
        if found is None:
            keys = tuple(self._select(namespace, selector))
            objs = builtins.list(map(self.objects.__getitem__, keys))
            found = self.selections[(namespace, signature)] = (keys, _Kept(objs))
        return found[1].view()

    def _select(self, namespace: str | None, selector: Selector) -> builtins.list[_ObjKey]:
        """The keys of the objects matching `selector`, in key order, found through the label
        index when the selector has an equality, `in` or existence term (any match must
        carry one of its pairs, or its key), else by scanning. When every term is one of
        those, the index answers exactly and no object is matched again; when it answers
        for most of the kind, the keys are taken in their order instead of sorted."""
        candidates: set[_ObjKey] | None = None
        for r in selector:
            if r.op is Op.EXISTS:
                keys = set(self.labels.keys((r.key,)))
            elif r.op in (Op.EQUALS, Op.IN):
                keys = set()
                for value in r.values:
                    keys |= self.labels.keys((r.key, value))
            else:
                continue
            candidates = keys if candidates is None else candidates & keys
            if not candidates:
                return []
        objects = self.objects
        if candidates is None:
            scanned = self.keys if namespace is None else self._keys_in(namespace)
            return [k for k in scanned if matches(selector, objects[k]["metadata"].get("labels"))]
        if len(candidates) * 4 > len(self.keys):
            keys_in = [k for k in self.keys if k in candidates]
        else:
            keys_in = sorted(candidates)
        if namespace is not None:
            keys_in = [k for k in keys_in if k[0] == namespace]
        if all(r.op in _INDEXED_OPS for r in selector):
            return keys_in
        return [k for k in keys_in if matches(selector, objects[k]["metadata"].get("labels"))]

    def indexed(self, name: str, value: Hashable, namespace: str | None) -> builtins.list[Obj]:
        keys = self.indexes[name].keys(value)
        in_order = sorted(k for k in keys if namespace is None or k[0] == namespace)
        return [self.objects[k] for k in in_order]


class MemoryStore:
    """A `Store` held in a dict. Not thread-safe: one event loop drives it.

    Stored objects are never changed in place: every write stores a new object, which shares
    the subtrees it did not change with the one it replaces (a status patch copies the
    status it changes, not the spec). So no-copy reads (`peek`) stay consistent, and the
    Store methods copy only at the boundary: what the caller hands in, and what `get`,
    `list`, `create` and `update` give back. `view`, `changes` and `patch_status` hand out
    the stored objects themselves, read-only by the port's contract.
    """

    def __init__(
        self, clock: Callable[[], datetime] | None = None, uid_seed: str = "store"
    ) -> None:
        self._clock = clock or (lambda: datetime.now(UTC))
        #: Per kind, its objects (see `_Table`).
        self._tables: dict[Kind, _Table] = {}
        #: Every change, oldest first (each kind's are its table's too).
        self._log: list[Change] = []
        self._revision = 0
        self._uid_seed = uid_seed
        self._compacted = 0

    # --- reads ------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        obj = self.peek_one(kind, name, namespace)
        return copy_json(obj) if obj is not None else None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
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
        return builtins.list(self.view(kind, namespace, label_selector))

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> tuple[Obj, ...]:
        """`peek` as a tuple the store keeps until the kind's next write: the same tuple
        (no copies at all) for every view of an unchanged selection."""
        table = self._tables.get(kind)
        if not label_selector:
            if table is None:
                return ()
            return table.all() if namespace is None else table.in_namespace(namespace)
        signature, selector = _selector_of(label_selector)
        if table is None:
            return ()
        if selector:
            return table.selected(namespace, signature, selector)
        return table.all() if namespace is None else table.in_namespace(namespace)

    def peek_one(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """`get` without a copy (see `peek`)."""
        table = self._tables.get(kind)
        return None if table is None else table.objects.get((namespace or "", name))

    def add_index(self, kind: Kind, name: str, values: Callable[[Obj], Iterable[Hashable]]) -> None:
        """Index the objects of `kind` by each value `values(obj)` gives (kept as they are
        written), for `peek_indexed`: what a client-go indexer does for a controller that
        asks "which pods does this owner have" on every pass."""
        table = self._table(kind)
        index = _Index(values)
        for key, obj in table.objects.items():
            index.add(key, obj)
        table.indexes[name] = index

    def peek_indexed(
        self, kind: Kind, name: str, value: Hashable, namespace: str | None = None
    ) -> builtins.list[Obj]:
        """The objects (no copies, see `peek`) the index `name` files under `value`, in
        `list` order; `namespace` narrows them as `list`'s does."""
        table = self._tables.get(kind)
        if table is None or name not in table.indexes:
            raise KeyError(f"no index {name!r} of {kind.kind}")
        return table.indexed(name, value, namespace)

    def indexed_values(self, kind: Kind, name: str) -> builtins.list[Hashable]:
        """Every value the index `name` files at least one object under (in no order)."""
        table = self._tables.get(kind)
        if table is None or name not in table.indexes:
            raise KeyError(f"no index {name!r} of {kind.kind}")
        return builtins.list(table.indexes[name].buckets)

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        wanted = set(kinds) if kinds is not None else None
        if cursor < self._compacted:
            raise Expired(f"changes before {self._compacted} were compacted: list again")
        if cursor >= self._revision:
            return [], self._revision  # most reads: nothing changed since
        # The stored objects themselves, as `view` hands them out: a change's object must
        # never be mutated (the port's contract), and a stored object never changes.
        if wanted is None:
            return self._log[_first_after(self._log, cursor) :], self._revision
        tails = []
        for kind in wanted:
            table = self._tables.get(kind)
            if table is not None and table.revision > cursor:
                tails.append(table.log[_first_after(table.log, cursor) :])
        if len(tails) == 1:
            return tails[0], self._revision
        # Several kinds: their changes merged back into the feed's order (cursors are unique).
        return sorted(itertools.chain.from_iterable(tails), key=_CURSOR), self._revision

    def changes_after(self, cursor: int) -> builtins.list[Change]:
        """The changes after `cursor`, oldest first, without copies (their objects are stored
        ones, which the caller must not change): for the simulator's readers of the change
        feed (the emulated components, the fleet's and the hub step's bookkeeping), read so
        often that `changes` would copy every object again and again."""
        if cursor < self._compacted:
            raise Expired(f"changes before {self._compacted} were compacted")
        if cursor >= self._revision:
            return []  # most reads: nothing changed since (no search of the log)
        return self._log[_first_after(self._log, cursor) :]

    @property
    def revision(self) -> int:
        return self._revision

    def kind_revision(self, kind: Kind) -> int:
        """The revision of the last change to an object of `kind` (0 when none): a cache of
        something computed from one kind stays valid while this stays the same."""
        table = self._tables.get(kind)
        return 0 if table is None else table.revision

    def kind_revisions(self, kinds: Sequence[Kind]) -> tuple[int, ...]:
        """`kind_revision` of each of `kinds`, in their order (in one call: a reader asks of
        the same few kinds on every tick)."""
        return tuple([0 if t is None else t.revision for t in map(self._tables.get, kinds)])

    def compact(self, cursor: int) -> None:
        """Forget changes at or before `cursor`; reading from before it raises `Expired`."""
        del self._log[: _first_after(self._log, cursor)]
        for table in self._tables.values():
            del table.log[: _first_after(table.log, cursor)]
        self._compacted = max(self._compacted, cursor)

    # --- writes -----------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        return copy_json(self.create_shared(copy_json(obj)))

    def create_shared(self, obj: Obj) -> Obj:
        """`create` without copies, for the simulator's emulated components: the store takes
        `obj` over (its subtrees may be shared with stored objects; the caller must not change
        it afterwards) and returns the stored object, which the caller must not change."""
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if not name:
            raise Invalid(f"{kind.kind}: metadata.name is required")
        key = self._key(kind, name, namespace)
        table = self._table(kind)
        if (key[1], key[2]) in table.objects:
            raise AlreadyExists(f"{kind.kind} {self._show(key)} already exists")
        stored = dict(obj)
        self._revision += 1
        stored_meta = stored["metadata"] = dict(meta)
        stored_meta["uid"] = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"{self._uid_seed}/{self._revision}/{key}")
        )
        stored_meta["resourceVersion"] = str(self._revision)
        stored_meta["creationTimestamp"] = format_time(self._clock())
        stored_meta["generation"] = 1
        stored_meta.pop("deletionTimestamp", None)
        table.put((key[1], key[2]), stored)
        self._record(Change(self._revision, ChangeType.ADDED, kind, stored), table)
        return stored

    def update(self, obj: Obj) -> Obj:
        return copy_json(self.update_shared(copy_json(obj)))

    def update_shared(self, obj: Obj) -> Obj:
        """`update` without copies (see `create_shared`): `obj` may be built from a peeked
        object by replacing the parts that change, sharing the rest."""
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        key = self._key(kind, meta.get("name", ""), meta.get("namespace"))
        current = self._require(key)
        self._check_version(key, current, meta.get("resourceVersion"))
        stored = dict(obj)
        stored_meta = stored["metadata"] = dict(obj["metadata"])
        for field in ("uid", "creationTimestamp", "deletionTimestamp"):
            if field in current["metadata"]:
                stored_meta[field] = current["metadata"][field]
        generation = int(current["metadata"].get("generation", 1))
        if stored.get("spec") != current.get("spec"):
            generation += 1
        stored_meta["generation"] = generation
        if "status" in current:
            stored["status"] = current["status"]  # shared: stored objects never change
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
    ) -> Mapping[str, Any]:
        # The stored object itself (the port's result is read-only): stored objects are
        # never changed in place, so it stays what was written.
        return self.patch_status_shared(kind, name, namespace, status, resource_version)

    def patch_status_shared(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Obj:
        """`patch_status` returning the stored object (which the caller must not change)
        rather than a copy. The new object shares every subtree the patch leaves alone with
        the one it replaces; what the patch brings is copied."""
        key = self._key(kind, name, namespace)
        current = self._require(key)
        self._check_version(key, current, resource_version)
        stored = dict(current)
        stored["metadata"] = dict(current["metadata"])
        stored["status"] = merged(current.get("status") or {}, status)
        return self._commit(key, kind, stored)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        key = self._key(kind, name, namespace)
        current = self._require(key)
        if current["metadata"].get("finalizers"):
            if "deletionTimestamp" not in current["metadata"]:
                stored = dict(current)
                stored["metadata"] = dict(current["metadata"])
                stored["metadata"]["deletionTimestamp"] = format_time(self._clock())
                self._commit(key, kind, stored)
            return
        self._pop(key)
        self._revision += 1
        self._record(Change(self._revision, ChangeType.DELETED, kind, current), self._tables[kind])

    # --- helpers ----------------------------------------------------------------------

    def _commit(self, key: _Key, kind: Kind, stored: Obj) -> Obj:
        """Store `stored` (a new object: its own top level and metadata, which this stamps)
        as the next revision of `key`, and return it (no copy)."""
        self._revision += 1
        stored["metadata"]["resourceVersion"] = str(self._revision)
        table = self._tables[kind]  # it holds the object this replaces
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            # The last finalizer is gone: the object disappears, as on the API server.
            table.pop((key[1], key[2]))
            self._record(Change(self._revision, ChangeType.DELETED, kind, stored), table)
            return stored
        table.put((key[1], key[2]), stored)
        self._record(Change(self._revision, ChangeType.MODIFIED, kind, stored), table)
        return stored

    def _table(self, kind: Kind) -> _Table:
        table = self._tables.get(kind)
        if table is None:
            table = self._tables[kind] = _Table()
        return table

    def _stored(self, key: _Key) -> Obj | None:
        table = self._tables.get(key[0])
        return None if table is None else table.objects.get((key[1], key[2]))

    def _pop(self, key: _Key) -> None:
        self._tables[key[0]].pop((key[1], key[2]))

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

    def _record(self, change: Change, table: _Table) -> None:
        """Append the change (at the store's revision) to the feed and to its kind's
        (`table`: the kind's)."""
        self._log.append(change)
        table.log.append(change)
        table.revision = change.cursor

    @staticmethod
    def _show(key: _Key) -> str:
        return f"{key[1]}/{key[2]}" if key[1] else key[2]


_CURSOR: Final = operator.attrgetter("cursor")


def _first_after(log: Sequence[Change], cursor: int) -> int:
    """The index of the first change after `cursor` in `log` (oldest first), by bisection."""
    return bisect.bisect_right(log, cursor, key=_CURSOR)
