"""The node infos of `FreeDeviceTable` (kube-scheduler's cache keeps one `NodeInfo` per node):
each named node's entry and its generation, the pools' members, the cordoned nodes (issue 24
section 3: the first of the table's four collaborators)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.agent.reads import Inventory, NodeInfo, cordoned_nodes


@dataclass(slots=True, eq=False)
class NodeEntry:
    """One node's part of the table (kube-scheduler's `NodeInfo`)."""

    name: str
    #: Moves whenever anything below (or a DRA pool naming the node) changes.
    generation: int = 0
    #: What its Node says; None while no pooled Node of this name exists.
    info: NodeInfo | None = None
    #: driver -> devices allocated claims take.
    taken: dict[str, int] = field(default_factory=dict)
    #: The allocation time of each (claim, device) held on it, with how many.
    times: dict[datetime, int] = field(default_factory=dict)
    #: driver (None: every driver) -> how many bad claims leave it with nothing free of it.
    poison: dict[str | None, int] = field(default_factory=dict)


class NodeInfos:
    """Every node named by anything (a Node, a slice, an allocated claim), by name, with the
    generation that moves with each change, and which pool each pooled node is in."""

    def __init__(self) -> None:
        self.generation = 0
        self.entries: dict[str, NodeEntry] = {}
        #: The entries whose generation moved above the last snapshot's (kube-scheduler walks
        #: its most-recently-updated list down to that generation; this is that list).
        self.moved: set[str] = set()
        #: Named pooled node -> pool, and pool -> its nodes.
        self.node_pool: dict[str, str] = {}
        self.members: dict[str, set[str]] = {}
        self.membership_moved = False
        #: The cordoned nodes (`cordoned_nodes`): a replica's pods on one are draining.
        self.cordoned: frozenset[str] = frozenset()
        #: Pools that lost a node since the last snapshot.
        self.moved_from: set[str] = set()

    def entry(self, name: str) -> NodeEntry:
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = NodeEntry(name)
        return entry

    def touch(self, names: Iterable[str]) -> None:
        """Move the generation of each named node's entry."""
        for name in names:
            self.generation += 1
            self.entry(name).generation = self.generation
            self.moved.add(name)

    def keys(self) -> list[tuple[str, str]]:
        """The keys of the Nodes held."""
        return [("", name) for name, e in self.entries.items() if e.info is not None]

    def take(self, name: str, info: NodeInfo | None) -> bool | None:
        """Take the node's new read (None: gone). None: the same read, nothing changed; else
        whether its cordon changed (every replica is then counted again)."""
        entry = self.entry(name)
        if info == entry.info:
            return None
        self._set_pool(name, info.pool if info is not None else None)
        entry.info = info
        self.touch((name,))
        cordoned = cordoned_nodes({name: info})
        if (name in self.cordoned) == bool(cordoned):
            return False
        self.cordoned = (self.cordoned - {name}) | cordoned
        return True

    def _set_pool(self, name: str, pool: str | None) -> None:
        before = self.node_pool.get(name)
        if before == pool:
            return
        self.membership_moved = True
        if before is not None:
            members = self.members[before]
            members.discard(name)
            if not members:
                del self.members[before]
            self.moved_from.add(before)  # it loses a node: its pool is rebuilt
        if pool is None:
            del self.node_pool[name]
        else:
            self.node_pool[name] = pool
            self.members.setdefault(pool, set()).add(name)

    def settle(self, inv: Inventory) -> None:
        """After a snapshot: drop the entries of the moved nodes nothing names any more (a
        node gone for good), and start the next list of moves."""
        for name in self.moved:
            e = self.entries.get(name)
            if (
                e is not None
                and e.info is None
                and not (e.taken or e.times or e.poison)
                and name not in inv.published
                and name not in inv.poisoned
                and name not in inv.blocked
            ):
                del self.entries[name]
        self.moved.clear()
        self.moved_from.clear()
        self.membership_moved = False
