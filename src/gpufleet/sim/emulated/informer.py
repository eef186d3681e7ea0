"""The workload cluster's shared informer: one cursor on its store's change log, handing each
change to the handlers registered for its kind, as client-go's shared informers call each
controller's event handlers, which put keys on that controller's own work queue.

The components own their queues; the feed owns only the cursor. `WorkloadIndex` is the one
lister the components share: each workload's key by uid (the garbage collector asks whether
an owner exists, the workload controllers look up what is dirty), and each pod's owners as
last written, so that a pod re-owned marks the owners before and after (client-go hands an
update handler the old object for the same reason).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from gpufleet.sim.emulated.objects import ObjKey, key_of
from gpufleet.sim.emulated.sim_store import SimStore, owner_uids
from gpufleet.store.port import DEPLOYMENT, LEADER_WORKER_SET, POD, Change, ChangeType, Kind

#: An event handler: called with every change of the kinds it watches, in the log's order.
Handler = Callable[[Change], None]


class ChangeFeed:
    """The change log, read once and fanned out to the handlers of each kind."""

    def __init__(self, store: SimStore) -> None:
        self.store = store
        self._cursor = 0
        self._handlers: dict[Kind, list[Handler]] = defaultdict(list)

    def watch(self, kind: Kind, handler: Handler) -> None:
        """Call `handler` with every later change of `kind` (after those registered before)."""
        self._handlers[kind].append(handler)

    def sync(self) -> None:
        """Bring every handler up to the store's revision. Every component calls this first,
        so it also sees what the components before it wrote in this tick."""
        changes = self.store.changes_after(self._cursor)
        if not changes:
            return
        self._cursor = changes[-1].cursor
        handlers = self._handlers
        for change in changes:
            for handler in handlers.get(change.kind, ()):
                handler(change)


class WorkloadIndex:
    """Per workload kind, each workload's key by uid; per pod, its owners' uids as last
    written. `on_owners` listeners hear the owners of every pod written or deleted, before
    and after the change (a rewrite may change them)."""

    def __init__(self, feed: ChangeFeed) -> None:
        #: Per pod, its owners' uids as last written.
        self._pod_owners: dict[ObjKey, tuple[str, ...]] = {}
        #: Per workload kind, the key of each workload by uid.
        self._workload_keys: dict[Kind, dict[str, ObjKey]] = {DEPLOYMENT: {}, LEADER_WORKER_SET: {}}
        self._listeners: list[Callable[[Iterable[str]], None]] = []
        feed.watch(POD, self._pod_changed)
        feed.watch(DEPLOYMENT, self._workload_changed)
        feed.watch(LEADER_WORKER_SET, self._workload_changed)

    def keys(self, kind: Kind) -> dict[str, ObjKey]:
        """The key of each workload of `kind` by uid (the index itself: do not change it)."""
        return self._workload_keys[kind]

    def on_owners(self, listener: Callable[[Iterable[str]], None]) -> None:
        self._listeners.append(listener)

    def _pod_changed(self, change: Change) -> None:
        meta = change.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        # The owners before and after the change: a pod re-owned changes both workloads.
        before = self._pod_owners.pop(key, ())
        for listener in self._listeners:
            listener(before)
        if change.type is ChangeType.DELETED:
            return
        after = self._pod_owners[key] = tuple(owner_uids(change.obj))
        for listener in self._listeners:
            listener(after)

    def _workload_changed(self, change: Change) -> None:
        uid = change.obj["metadata"]["uid"]
        if change.type is ChangeType.DELETED:
            self._workload_keys[change.kind].pop(uid, None)
        else:
            self._workload_keys[change.kind][uid] = key_of(change.obj)


def enqueue(queue: set[ObjKey], key: ObjKey, is_wanted: bool) -> None:
    """Put `key` on `queue` or take it off, as `is_wanted` says."""
    if is_wanted:
        queue.add(key)
    else:
        queue.discard(key)


def all_keys(store: SimStore, kind: Kind) -> set[ObjKey]:
    """Every object's key, for `visit_all`."""
    return {key_of(o) for o in store.peek(kind)}
