"""The workload cluster's change feed into the agent's free-device table (an informer's loop).

`ClusterFeed.sync()` reads the changes of Nodes, ResourceSlices, ResourceClaims and Pods since its
cursor (`Store.changes(cursor, kinds)`) into the `FreeDeviceTable`. The first sync, and any sync
whose cursor the feed no longer holds (`Expired`, 410 Gone: the feed was compacted, or the
store restarted), lists the four kinds instead and has the table hold exactly what was listed.

The cursor of a relist is taken *before* listing: the changes after it that the listing already
shows are applied again on the next sync, which is harmless, since the table keeps each object's
newest version by key and the feed's last change of a key is that key's newest version.

The port has no call for the feed's newest cursor, so a relist asks for the changes after a
cursor no change reaches yet (none come back, and the cursor to pass next time does); a store
that refuses a cursor beyond its newest (`Expired`) is asked for the changes of no kind from
the start instead, which it answers the same way. Either way a relist never reads the feed's
history.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.agent.hostroom import HostRoomTable
from gpufleet.agent.table import TABLE_KINDS, FreeDeviceTable
from gpufleet.store.port import LATEST, RESOURCE_CLAIM, Change, ChangeType, Expired, Store


class ClusterFeed:
    """Keeps a `FreeDeviceTable` up to date with one store's changes."""

    def __init__(self, store: Store, table: FreeDeviceTable) -> None:
        self.store = store
        self.table = table
        #: Each node's free CPU and memory, fed the same changes (`agent/hostroom.py`).
        self.host_room = HostRoomTable()
        #: The cursor to read the changes after; None: list first.
        self._cursor: int | None = None
        #: How many times the feed was listed (the first sync included); for tests.
        self.relists = 0
        #: Moves whenever a sync takes in a change or a listing: the table's inputs are the
        #: same while it stays (a version key of what the table holds, for the agent's
        #: quiet step).
        self.revision = 0
        #: The ResourceClaims seen without a uid (the table stamps them with every
        #: snapshot's time, so while there are any the table's output moves with time).
        self._uidless: set[tuple[str, str]] = set()

    @property
    def is_timed(self) -> bool:
        """Whether the table's output may move with time alone (a claim without a uid)."""
        return bool(self._uidless)

    def _note(self, changes: Iterable[Change]) -> None:
        for c in changes:
            if c.kind == RESOURCE_CLAIM:
                key = (c.namespace or "", c.name)
                if c.type is ChangeType.DELETED or (c.obj.get("metadata") or {}).get("uid"):
                    self._uidless.discard(key)
                else:
                    self._uidless.add(key)

    def sync(self) -> None:
        """Bring the table up to the store's changes (raises what the store raises)."""
        if self._cursor is not None:
            try:
                changes, cursor = self.store.changes(self._cursor, TABLE_KINDS)
            except Expired:
                self._cursor = None
            else:
                self.table.apply(changes)
                self.host_room.apply(changes)
                self._cursor = cursor
                if changes:
                    self._note(changes)
                    self.revision += 1
                return
        self._relist()

    def _relist(self) -> None:
        cursor = self._newest_cursor()
        # Read-only: the table reads each object once and keeps only what it read.
        listed = {kind: self.store.view(kind) for kind in TABLE_KINDS}
        self.table.relist(listed)
        self.host_room.relist(listed)
        self._cursor = cursor
        self.relists += 1
        self.revision += 1
        self._uidless = set()
        for o in listed[RESOURCE_CLAIM]:
            meta = o.get("metadata") or {}
            if not meta.get("uid"):
                self._uidless.add((str(meta.get("namespace") or ""), str(meta.get("name"))))

    def _newest_cursor(self) -> int:
        return self.store.changes(LATEST, TABLE_KINDS)[1]
