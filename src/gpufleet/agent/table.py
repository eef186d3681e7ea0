"""The agent's per-node free-device table: `observe`, kept up to date by the cluster's changes.

kube-scheduler keeps one `NodeInfo` per node in its cache (pkg/scheduler/backend/cache), changes
it as pods and nodes come and go, stamps it with a generation that moves with every change, and
`UpdateSnapshot` copies into the cycle's snapshot only the nodes whose generation moved. This is
the same shape for the agent's observation:

- **Deltas.** `apply(changes)` takes the workload cluster's changes of Nodes, ResourceSlices,
  ResourceClaims and Pods (`Store.changes`), `relist(...)` a full listing (at the start, and when
  the feed says `Expired`). Both only note each object's newest version by its key (name, or
  namespace and name); nothing is computed until `snapshot`.
- **Entries.** Each node named by anything (a Node, a slice, an allocated claim) has a `NodeEntry`:
  what its Node says, the devices allocated claims take on it (per driver), their allocation
  times, and the drivers bad claims leave with nothing free; the DRA inventory (`Inventory`,
  one `DraPool` per (driver, DRA pool)) holds what its slices publish. An entry's `generation`
  moves whenever any of that changes (and so whenever a DRA pool naming it changes).
- **Snapshot.** `snapshot(replicas, now, declared_pools)` applies the pending versions in
  dependency order (Nodes, then slices, then the claims a changed DRA pool or their own change
  touches, then pods, then the replicas, diffed by resourceVersion), and rebuilds only what
  moved: the pools of the nodes whose generation moved (or whose problems changed), pools that
  came (a node, a replica or the hub's declaration names them: one with no nodes is observed
  empty), and the replicas whose read, pods or the allocation times of their pods' claims
  changed. Everything else is the last snapshot's.

Each piece is computed by the very functions `observe` uses (`gpufleet.agent.reads`), and
`observe` stays the specification: `tests/agent/test_table_properties.py` checks that after any
sequence of deltas (a restart included) the table gives what `observe` gives on the same
objects. The table takes objects as a store holds them: one per key, each a mapping.

The table is a facade over four collaborators, as kube-scheduler's cache splits (issue 24
section 3): the node infos (`table_nodes.NodeInfos`), the claim index
(`table_claims.ClaimIndex`), the replica index (`table_replicas.ReplicaIndex`) and the
snapshot assembly (`table_snapshot.SnapshotAssembly`); it keeps the pending versions, the
slices and the DRA inventory.

`free_devices(pool)` answers what issue 14's steering will ask: each node of the pool and its
free devices per driver, as of the last snapshot (read-only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Final

from gpufleet.agent.device_plugin import Holds
from gpufleet.agent.model import (
    Found,
    ObserveConfig,
    ObservedReplica,
    RawObject,
    ns_name,
)
from gpufleet.agent.reads import (
    DraKey,
    Inventory,
    SliceInfo,
    keyless_slice_found,
    read_dra_pool,
    read_node,
    read_slice,
)
from gpufleet.agent.table_claims import ClaimIndex
from gpufleet.agent.table_nodes import NodeInfos
from gpufleet.agent.table_replicas import ReplicaIndex
from gpufleet.agent.table_snapshot import Findings, SnapshotAssembly, TableSnapshot
from gpufleet.core.model import DriverName
from gpufleet.store.port import NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE, Change, ChangeType, Kind

#: The kinds whose changes the table takes.
TABLE_KINDS: Final = (NODE, RESOURCE_SLICE, RESOURCE_CLAIM, POD)

_Key = tuple[str, str]


class FreeDeviceTable:
    """The incremental observe of one workload cluster (see the module docstring)."""

    def __init__(self, config: ObserveConfig | None = None) -> None:
        self.config = config or ObserveConfig()
        #: Pending versions by kind and key (None: deleted), applied by `snapshot`.
        self._pending: dict[Kind, dict[_Key, RawObject | None]] = {k: {} for k in TABLE_KINDS}
        #: The node infos (`table_nodes.NodeInfos`).
        self._nodes = NodeInfos()
        # Slices.
        self._slices: dict[_Key, SliceInfo] = {}
        self._groups: dict[DraKey, dict[_Key, SliceInfo]] = {}
        self._inventory = Inventory()
        #: The problems each source found (`table_snapshot.Findings`).
        self._found = Findings()
        #: The claim index (`table_claims.ClaimIndex`).
        self._claims = ClaimIndex(self._nodes, self._inventory, self._found.set)
        #: The clock the last snapshot returned (uid -> allocation time).
        self._prev_clock: Mapping[str, datetime] = MappingProxyType({})
        #: Device-plugin pools: the pods' holds (`device_plugin.Holds`), and the pools.
        self._holds = Holds()
        #: The replica index (`table_replicas.ReplicaIndex`).
        self._replica_index = ReplicaIndex(self._nodes, self._claims, self._holds, self._found.set)
        #: The pools the hub declares for the cluster, as the last snapshot took them.
        self._declared_pools: frozenset[str] = frozenset()
        # What the last snapshot gave.
        self._now: datetime | None = None
        self._last: TableSnapshot | None = None
        #: The snapshot assembly (`table_snapshot.SnapshotAssembly`).
        self._assembly = SnapshotAssembly(
            self.config,
            self._nodes,
            self._inventory,
            self._found,
            self._claims,
            self._holds,
            self._replica_index,
        )

    # --- deltas ---------------------------------------------------------------------------

    def apply(self, changes: Iterable[Change]) -> None:
        """Note the changes (of `TABLE_KINDS`; others are ignored), oldest first."""
        for c in changes:
            pending = self._pending.get(c.kind)
            if pending is not None:
                key = (c.namespace or "", c.name)
                pending[key] = None if c.type is ChangeType.DELETED else c.obj

    def relist(self, listed: Mapping[Kind, Iterable[RawObject]]) -> None:
        """Make the table hold exactly the objects listed (per kind of `TABLE_KINDS`): what a
        restarted change feed (`Expired`) needs. Objects that did not change change nothing."""
        held: dict[Kind, Iterable[_Key]] = {
            NODE: self._nodes.keys(),
            RESOURCE_SLICE: list(self._slices),
            RESOURCE_CLAIM: list(self._claims.claims),
            POD: self._replica_index.pod_keys(),
        }
        for kind in TABLE_KINDS:
            pending = self._pending[kind]
            pending.clear()
            for key in held[kind]:
                pending[key] = None
            for obj in listed.get(kind, ()):
                pending[_key_of(obj)] = obj

    # --- the snapshot ---------------------------------------------------------------------

    def snapshot(
        self,
        replicas: Sequence[RawObject],
        now: datetime,
        declared_pools: frozenset[str] = frozenset(),
        device_plugin_pools: Mapping[str, frozenset[str]] | None = None,
    ) -> TableSnapshot:
        """The observation of the objects the table holds, `replicas` and the pools the hub
        declares at `now` (what `observe` gives for them with the clock the last snapshot
        returned)."""
        self._prev_clock = self._last.clock.first_seen if self._last is not None else {}
        self._apply_nodes()
        self._apply_slices()
        pending = self._pending[RESOURCE_CLAIM]
        if pending:
            self._claims.apply(pending, now, self._prev_clock)
            pending.clear()
        if self._claims.uidless and now != self._now:
            self._claims.retime(now)
        pending = self._pending[POD]
        if pending:
            for key, obj in pending.items():
                self._holds.note(key, obj)
            self._replica_index.apply_pods(pending)
            pending.clear()
        self._settle_holds(
            now, device_plugin_pools if device_plugin_pools is not None else self._holds.wanted
        )
        is_replicas_moved = self._replica_index.apply_replicas(replicas)
        is_declared_moved = declared_pools != self._declared_pools
        self._declared_pools = frozenset(declared_pools)
        self._now = now
        last = self._last
        if (
            last is not None
            and not self._nodes.moved
            and not self._found.moved
            and not self._nodes.membership_moved
            and not is_replicas_moved
            and not is_declared_moved
            and not self._replica_index.dirty
            and not self._claims.times_moved
        ):
            self._last = TableSnapshot(last.result, last.clock, frozenset(), self._nodes.generation)
            return self._last
        self._last = self._assembly.assemble(self._declared_pools, last)
        return self._last

    def declare_device_plugin_pools(self, pools: Mapping[str, frozenset[str]]) -> None:
        """The device-plugin pools the hub declares (`device_plugin.device_plugin_pools`),
        for the snapshots that are not given them."""
        self._holds.wanted = dict(pools)

    def free_devices(self, pool: str) -> Mapping[str, Mapping[DriverName, int]]:
        """Each node of `pool` and its free devices per driver (excluded nodes: none free),
        as of the last snapshot. Read-only."""
        return self._assembly.free_devices(pool)

    def observed_replica(self, key: tuple[str, str]) -> ObservedReplica | None:
        """The observation of the replica (namespace, name) in the last snapshot."""
        return self._replica_index.observed(key)

    # --- nodes ----------------------------------------------------------------------------

    def _apply_nodes(self) -> None:
        pending = self._pending[NODE]
        if not pending:
            return
        for (_, name), obj in pending.items():
            info = read_node(obj, self.config) if obj is not None else None
            cordon_moved = self._nodes.take(name, info)
            if cordon_moved is None:
                continue
            self._set_found(("node", name), info.found if info is not None else ())
            if cordon_moved:  # rare (a cordon or uncordon): every replica is counted again
                self._replica_index.recount_all()
        pending.clear()

    # --- slices ---------------------------------------------------------------------------

    def _apply_slices(self) -> None:
        pending = self._pending[RESOURCE_SLICE]
        if not pending:
            return
        dirty: set[DraKey] = set()
        for key, obj in pending.items():
            before = self._slices.pop(key, None)
            if before is not None:
                self._unfile_slice(key, before, dirty)
            if obj is not None:
                info = read_slice(obj)
                self._slices[key] = info
                self._file_slice(key, info, dirty)
        pending.clear()
        self._recompute_pools(dirty)

    def _unfile_slice(self, key: _Key, info: SliceInfo, dirty: set[DraKey]) -> None:
        if info.key is None:
            self._set_found(("keyless", key), ())
            return
        group = self._groups[info.key]
        del group[key]
        if not group:
            del self._groups[info.key]
        dirty.add(info.key)

    def _file_slice(self, key: _Key, info: SliceInfo, dirty: set[DraKey]) -> None:
        if info.key is None:
            self._set_found(("keyless", key), (keyless_slice_found(info),))
            return
        self._groups.setdefault(info.key, {})[key] = info
        dirty.add(info.key)

    def _set_found(self, source: tuple[str, object], found: tuple[Found, ...]) -> None:
        self._found.set(source, found)

    def _recompute_pools(self, dirty: set[DraKey]) -> None:
        """Read the DRA pools of `dirty` again; the claims that read them, again too."""
        inv = self._inventory
        made = {}
        for key in dirty:
            group = self._groups.get(key)
            tolerations = self.config.device_tolerations
            pool = read_dra_pool(key, group.values(), tolerations) if group else None
            if pool != inv.pools.get(key):
                made[key] = pool
        if made:
            self._claims.reread_pools(made)

    # --- pods and replicas ----------------------------------------------------------------

    def _settle_holds(self, now: datetime, pools: Mapping[str, frozenset[str]]) -> None:
        """The device-plugin pools' part of a snapshot: move the nodes whose holds or pool
        resources changed, and the replicas whose pods' hold times did."""
        moved, retimed = self._holds.settle(now, self._prev_clock)
        if pools != self._holds.pools:
            changed = {
                p
                for p in pools.keys() | self._holds.pools.keys()
                if pools.get(p) != self._holds.pools.get(p)
            }
            moved |= {n for p in changed for n in self._nodes.members.get(p, ())}
            self._holds.pools = dict(pools)
        self._nodes.touch(n for n in moved if n in self._nodes.entries)
        self._claims.times_moved.update(retimed)


def _key_of(obj: RawObject) -> _Key:
    return ns_name(obj)
