"""The agent's per-node free-device table: `observe`, kept up to date by the cluster's changes.

kube-scheduler keeps one `NodeInfo` per node in its cache (pkg/scheduler/backend/cache), changes
it as pods and nodes come and go, stamps it with a generation that moves with every change, and
`UpdateSnapshot` copies into the cycle's snapshot only the nodes whose generation moved. This is
the same shape for the agent's observation:

- **Deltas.** `apply(changes)` takes the workload cluster's changes of Nodes, ResourceSlices,
  ResourceClaims and Pods (`Store.changes`), `relist(...)` a full listing (at the start, and when
  the feed says `Expired`). Both only note each object's newest version by its key (name, or
  namespace and name); nothing is computed until `snapshot`.
- **Entries.** Each node named by anything (a Node, a slice, an allocated claim) has a `_NodeEntry`:
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

`free_devices(pool)` answers what issue 14's steering will ask: each node of the pool and its
free devices per driver, as of the last snapshot (read-only).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from gpufleet.agent.device_plugin import Holds, with_device_plugin
from gpufleet.agent.model import (
    AllocationClock,
    Found,
    ObservationResult,
    ObserveConfig,
    ObservedNode,
    ObservedPool,
    ObservedReplica,
    Problem,
    Problems,
    RawObject,
    ns_name,
    versions_of,
)
from gpufleet.agent.observe import pool_extended, read_replicas
from gpufleet.agent.pods import (
    PodInfo,
    Replica,
    count_pods,
    observed_replica,
    read_pod,
    read_replica,
)
from gpufleet.agent.reads import (
    ClaimEffect,
    ClaimInfo,
    DraKey,
    Inventory,
    NodeInfo,
    NodeState,
    NodeView,
    SliceInfo,
    claim_effect,
    claim_pools,
    cordoned_nodes,
    keyless_slice_found,
    observe_node,
    pool_drivers,
    pool_of_nodes,
    read_claim,
    read_dra_pool,
    read_node,
    read_slice,
)
from gpufleet.core.model import DriverName
from gpufleet.store.port import NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE, Change, ChangeType, Kind

#: The kinds whose changes the table takes.
TABLE_KINDS: Final = (NODE, RESOURCE_SLICE, RESOURCE_CLAIM, POD)

_Key = tuple[str, str]
_NO_META: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(slots=True, eq=False)
class _NodeEntry:
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


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """What one `snapshot` gives: the observation, the new clock, and what changed since the
    last snapshot (for a report made from the last one's)."""

    result: ObservationResult
    clock: AllocationClock
    #: The (namespace, name) of each replica whose observation is new or gone since the last
    #: snapshot; None: any may have changed.
    changed_replicas: frozenset[tuple[str, str]] | None
    #: The table's generation at this snapshot: every node entry's is at most this, and the
    #: next snapshot rebuilds what the entries above it touch.
    generation: int = 0


@dataclass(slots=True)
class _Claim:
    """An allocated claim in the table: its read, object, effect and allocation time."""

    info: ClaimInfo
    obj: RawObject
    effect: ClaimEffect
    time: datetime


@dataclass(slots=True, eq=False)
class _NodePart:
    """One node's part of its pool's observation, made at its entry's `generation` (the
    entry moves its generation whenever any input of `NodeState` changes): its state, the
    drivers it adds to the pool's, its extended resources, and its `observe_node` view over
    the pool's drivers, kept while the pool and its drivers stay the same."""

    generation: int
    state: NodeState
    drivers: frozenset[str]
    info: NodeInfo
    _view_key: tuple[str, tuple[str, ...]] | None = None
    _view: NodeView | None = None

    def view_in(self, pool: str, driver_order: tuple[str, ...]) -> NodeView:
        key = (pool, driver_order)
        if self._view is None or self._view_key != key:
            self._view, self._view_key = observe_node(pool, self.state, driver_order), key
        return self._view


class FreeDeviceTable:
    """The incremental observe of one workload cluster (see the module docstring)."""

    def __init__(self, config: ObserveConfig | None = None) -> None:
        self.config = config or ObserveConfig()
        #: Pending versions by kind and key (None: deleted), applied by `snapshot`.
        self._pending: dict[Kind, dict[_Key, RawObject | None]] = {k: {} for k in TABLE_KINDS}
        self._generation = 0
        self._entries: dict[str, _NodeEntry] = {}
        #: The entries whose generation moved above the last snapshot's (kube-scheduler walks
        #: its most-recently-updated list down to that generation; this is that list).
        self._moved: set[str] = set()
        #: Named pooled node -> pool, and pool -> its nodes.
        self._node_pool: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        self._is_membership_moved = False
        #: The cordoned nodes (`cordoned_nodes`): a replica's pods on one are draining.
        self._cordoned: frozenset[str] = frozenset()
        #: Pools that lost a node since the last snapshot.
        self._moved_from: set[str] = set()
        # Slices.
        self._slices: dict[_Key, SliceInfo] = {}
        self._groups: dict[DraKey, dict[_Key, SliceInfo]] = {}
        self._inventory = Inventory()
        # Claims.
        self._claims: dict[_Key, ClaimInfo] = {}
        self._allocated_claims: dict[_Key, _Claim] = {}
        self._by_pool: dict[DraKey, set[_Key]] = {}
        #: Allocated claims whose results cannot be read (their effect may read any DRA pool).
        self._irregular: set[_Key] = set()
        #: Allocated claims without a uid: their time is always `now`.
        self._uidless: set[_Key] = set()
        self._device_claims: dict[tuple[str, str, str], int] = {}
        self._uids: dict[str, int] = {}
        self._clock: dict[str, datetime] = {}
        self._prev_clock: Mapping[str, datetime] = MappingProxyType({})
        #: (namespace, name) -> allocation time, of the allocated claims.
        self._allocated: dict[_Key, datetime] = {}
        #: Claims whose allocation time changed since the last snapshot.
        self._times_moved: set[_Key] = set()
        # Problems each source found.
        self._found: dict[tuple[str, object], tuple[Found, ...]] = {}
        self._is_found_moved = False
        # Pods.
        self._pods: dict[_Key, PodInfo] = {}
        self._replica_pods: dict[_Key, dict[_Key, PodInfo]] = {}
        self._claimed_by: dict[_Key, dict[_Key, int]] = {}
        #: Device-plugin pools: the pods' holds (`device_plugin.Holds`), and the pools.
        self._holds = Holds()
        # Replicas.
        self._replicas: dict[_Key, tuple[object, Replica]] = {}
        self._replica_pools: frozenset[str] = frozenset()
        self._dirty_replicas: set[_Key] = set()
        #: The pools the hub declares for the cluster, as the last snapshot took them.
        self._declared_pools: frozenset[str] = frozenset()
        # What the last snapshot gave.
        self._now: datetime | None = None
        self._problems: dict[str | None, tuple[Problem, ...]] = {}
        self._pools: dict[str, tuple[ObservedPool, tuple[ObservedNode, ...]]] = {}
        self._replica_results: dict[_Key, ObservedReplica] = {}
        self._last: TableSnapshot | None = None
        #: The replicas' keys, sorted (None: to be sorted again).
        self._replica_order: list[_Key] | None = None
        #: Each pooled node's observation, and their names, sorted.
        self._observed_nodes: dict[str, ObservedNode] = {}
        self._node_order: list[str] = []
        #: `free_devices` of each pool asked since the pool was last observed.
        self._free: dict[str, Mapping[str, Mapping[DriverName, int]]] = {}
        #: Each pooled node's part of its pool's observation (`_node_part`).
        self._parts: dict[str, _NodePart] = {}
        #: The replicas' resourceVersions by key, and in order, as last taken.
        self._versions: dict[_Key, object] = {}
        self._version_list: list[object] | None = None
        #: The keys of `_version_list`, in its order (empty while it is None).
        self._key_list: list[_Key] = []

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
            NODE: [k for k in self._entries_keys()],
            RESOURCE_SLICE: list(self._slices),
            RESOURCE_CLAIM: list(self._claims),
            POD: list(self._pods),
        }
        for kind in TABLE_KINDS:
            pending = self._pending[kind]
            pending.clear()
            for key in held[kind]:
                pending[key] = None
            for obj in listed.get(kind, ()):
                pending[_key_of(obj)] = obj

    def _entries_keys(self) -> list[_Key]:
        return [("", name) for name, e in self._entries.items() if e.info is not None]

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
        self._apply_claims(now)
        if self._uidless and now != self._now:
            self._retime(self._uidless, now)
        self._apply_pods()
        self._settle_holds(
            now, device_plugin_pools if device_plugin_pools is not None else self._holds.wanted
        )
        is_replicas_moved = self._apply_replicas(replicas)
        is_declared_moved = declared_pools != self._declared_pools
        self._declared_pools = frozenset(declared_pools)
        self._now = now
        last = self._last
        if (
            last is not None
            and not self._moved
            and not self._is_found_moved
            and not self._is_membership_moved
            and not is_replicas_moved
            and not is_declared_moved
            and not self._dirty_replicas
            and not self._times_moved
        ):
            self._last = TableSnapshot(last.result, last.clock, frozenset(), self._generation)
            return self._last
        self._last = self._update_snapshot()
        return self._last

    def declare_device_plugin_pools(self, pools: Mapping[str, frozenset[str]]) -> None:
        """The device-plugin pools the hub declares (`device_plugin.device_plugin_pools`),
        for the snapshots that are not given them."""
        self._holds.wanted = dict(pools)

    def free_devices(self, pool: str) -> Mapping[str, Mapping[DriverName, int]]:
        """Each node of `pool` and its free devices per driver (excluded nodes: none free),
        as of the last snapshot. Read-only."""
        held = self._free.get(pool)
        if held is not None:
            return held
        found = self._pools.get(pool)
        if found is None:
            return MappingProxyType({})
        free = MappingProxyType({n.name: MappingProxyType(dict(n.free)) for n in found[1]})
        self._free[pool] = free  # until the pool is observed again (`_update_snapshot`)
        return free

    def observed_replica(self, key: tuple[str, str]) -> ObservedReplica | None:
        """The observation of the replica (namespace, name) in the last snapshot."""
        return self._replica_results.get(key)

    # --- nodes ----------------------------------------------------------------------------

    def _entry(self, name: str) -> _NodeEntry:
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = _NodeEntry(name)
        return entry

    def _touch(self, names: Iterable[str]) -> None:
        """Move the generation of each named node's entry."""
        for name in names:
            self._generation += 1
            self._entry(name).generation = self._generation
            self._moved.add(name)

    def _apply_nodes(self) -> None:
        pending = self._pending[NODE]
        if not pending:
            return
        for (_, name), obj in pending.items():
            info = read_node(obj, self.config) if obj is not None else None
            entry = self._entry(name)
            if info == entry.info:
                continue
            self._set_pool(name, info.pool if info is not None else None)
            entry.info = info
            self._set_found(("node", name), info.found if info is not None else ())
            self._touch((name,))
            cordoned = cordoned_nodes({name: info})
            if (name in self._cordoned) != bool(cordoned):
                self._cordoned = (self._cordoned - {name}) | cordoned
                # Rare (a cordon or uncordon): every replica is counted again.
                self._dirty_replicas.update(self._replicas)
        pending.clear()

    def _set_pool(self, name: str, pool: str | None) -> None:
        before = self._node_pool.get(name)
        if before == pool:
            return
        self._is_membership_moved = True
        if before is not None:
            members = self._members[before]
            members.discard(name)
            if not members:
                del self._members[before]
            self._moved_from.add(before)  # it loses a node: rebuilt (`_moved_pools`)
        if pool is None:
            del self._node_pool[name]
        else:
            self._node_pool[name] = pool
            self._members.setdefault(pool, set()).add(name)

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
        if self._found.get(source, ()) != found:
            self._is_found_moved = True
            if found:
                self._found[source] = found
            else:
                self._found.pop(source, None)

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
        if not made:
            return
        dependents = set(self._irregular)
        for key in made:
            dependents |= self._by_pool.get(key, set())
        claims = [self._allocated_claims[k] for k in sorted(dependents)]
        for claim in claims:
            self._remove_effect(claim)
        for key, pool in made.items():
            self._touch(inv.remove(key))
            self._set_found(("pool", key), pool.found if pool is not None else ())
            if pool is not None:
                self._touch(inv.add(pool))
        for claim in claims:
            claim.effect = claim_effect(claim.info, claim.obj, inv)
            self._add_effect(claim)

    # --- claims ---------------------------------------------------------------------------

    def _apply_claims(self, now: datetime) -> None:
        pending = self._pending[RESOURCE_CLAIM]
        if not pending:
            return
        for key, obj in pending.items():
            info = read_claim(obj) if obj is not None else None
            before = self._claims.get(key)
            if info is not None and info == before and (not info[1] or info[3] is not None):
                continue  # the same read (a status write that left the allocation alone)
            held = self._allocated_claims.pop(key, None)
            if held is not None:
                self._forget_claim(key, held)
            if info is None:
                self._claims.pop(key, None)
                continue
            self._claims[key] = info
            if info[1]:
                assert obj is not None
                self._add_claim(key, info, obj, now)
        pending.clear()

    def _add_claim(self, key: _Key, info: ClaimInfo, obj: RawObject, now: datetime) -> None:
        uid = info[2]
        t = now if uid is None else self._prev_clock.get(uid, now)
        claim = _Claim(info, obj, claim_effect(info, obj, self._inventory), t)
        self._allocated_claims[key] = claim
        self._add_effect(claim)
        pools = claim_pools(info)
        if pools is None:
            self._irregular.add(key)
        else:
            for pool in pools:
                self._by_pool.setdefault(pool, set()).add(key)
        if uid is None:
            self._uidless.add(key)
        else:
            self._uids[uid] = self._uids.get(uid, 0) + 1
            self._clock[uid] = t
        if info[4] is None:  # else its pods cannot use it yet: not counted allocated
            self._set_time(key, t)

    def _forget_claim(self, key: _Key, claim: _Claim) -> None:
        self._remove_effect(claim)
        pools = claim_pools(claim.info)
        if pools is None:
            self._irregular.discard(key)
        else:
            for pool in pools:
                holders = self._by_pool[pool]
                holders.discard(key)
                if not holders:
                    del self._by_pool[pool]
        uid = claim.info[2]
        if uid is None:
            self._uidless.discard(key)
        else:
            n = self._uids[uid] - 1
            if n:
                self._uids[uid] = n
            else:
                del self._uids[uid], self._clock[uid]
        self._set_time(key, None)

    def _set_time(self, key: _Key, t: datetime | None) -> None:
        if self._allocated.get(key) == t:
            return
        if t is None:
            del self._allocated[key]
        else:
            self._allocated[key] = t
        self._times_moved.add(key)

    def _retime(self, keys: Iterable[_Key], now: datetime) -> None:
        """Stamp the uidless claims `now` (their time is always the call's)."""
        for key in sorted(keys):
            claim = self._allocated_claims[key]
            self._remove_effect(claim)
            claim.time = now
            self._add_effect(claim)
            if claim.info[4] is None:
                self._set_time(key, now)

    def _add_effect(self, claim: _Claim) -> None:
        self._count_effect(claim, 1)

    def _remove_effect(self, claim: _Claim) -> None:
        self._count_effect(claim, -1)

    def _count_effect(self, claim: _Claim, by: int) -> None:
        effect, t = claim.effect, claim.time
        counts = self._device_claims
        moved: list[str] = []
        for dev, holder in effect.devices:
            n = counts.get(dev, 0) + by
            if n:
                counts[dev] = n
            else:
                del counts[dev]
            if (n == 1 and by > 0) or (n == 0 and by < 0):
                _add(self._entry(holder).taken, dev[0], by)
        for node in effect.touched:
            _add(self._entry(node).times, t, by)
            moved.append(node)
        for node, driver in effect.poison:
            _add(self._entry(node).poison, driver, by)
        self._touch(moved)
        self._touch(n for n, _ in effect.poison)
        if effect.found:
            source = ("claim", claim.info[0])
            self._set_found(source, effect.found if by > 0 else ())

    # --- pods and replicas ----------------------------------------------------------------

    def _apply_pods(self) -> None:
        pending = self._pending[POD]
        if not pending:
            return
        for key, obj in pending.items():
            self._holds.note(key, obj)
            info = read_pod(obj) if obj is not None else None
            before = self._pods.get(key)
            if info == before:
                continue
            if before is not None:
                self._file_pod(key, before, -1)
            if info is None:
                del self._pods[key]
            else:
                self._pods[key] = info
                self._file_pod(key, info, 1)
        pending.clear()

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
            moved |= {n for p in changed for n in self._members.get(p, ())}
            self._holds.pools = dict(pools)
        self._touch(n for n in moved if n in self._entries)
        self._times_moved.update(retimed)

    def _file_pod(self, key: _Key, pod: PodInfo, by: int) -> None:
        if pod[1] is None:
            return
        ns = key[0]
        replica = (ns, pod[1])
        self._dirty_replicas.add(replica)
        pods = self._replica_pods.setdefault(replica, {})
        if by > 0:
            pods[key] = pod
        else:
            del pods[key]
            if not pods:
                del self._replica_pods[replica]
        for c in pod[5]:
            by_replica = self._claimed_by.setdefault((ns, c), {})
            _add(by_replica, replica, by)
            if not by_replica:
                del self._claimed_by[(ns, c)]

    def _apply_replicas(self, objects: Sequence[RawObject]) -> bool:
        """Take the replicas, diffed with the last ones by key and resourceVersion (compared in
        C: a replica whose version is unchanged is not read); whether the set of replicas or
        the pools they name changed."""
        fast = versions_of(objects)
        last, self._version_list = self._version_list, fast
        if fast is not None and fast == last and None not in fast:
            return False  # the same replicas, at the same versions
        try:
            metas = list(map(_META, objects))
            keys = list(zip(map(_NAMESPACE, metas), map(_NAME, metas), strict=True))
        except (AttributeError, TypeError):  # not mappings: never from a store
            return self._read_replicas_whole(objects)
        if fast is not None and last is not None and None not in fast and keys == self._key_list:
            # The same keys in the same order (compared in C), as between most reads: the
            # replicas whose version moved are found pair by pair (in C too).
            moved = list(itertools.compress(range(len(keys)), map(operator.ne, fast, last)))
            by_key = {keys[i]: objects[i] for i in moved}
            self._versions.update((keys[i], fast[i]) for i in moved)
            return self._take_replicas(by_key.keys(), by_key)
        now = dict(zip(keys, map(_VERSION, metas), strict=True))
        if len(now) != len(objects) or any(k[1] in (None, "") or k[0] is None for k in keys):
            return self._read_replicas_whole(objects)  # never from a store either
        self._key_list = keys if fast is not None else []
        if now == self._versions and None not in now.values():
            return False
        changed = {key for key, _ in now.items() ^ self._versions.items()}
        changed.update(key for key, version in now.items() if version is None)
        self._versions = now
        return self._take_replicas(changed, dict(zip(now, objects, strict=True)))

    def _take_replicas(self, changed: Iterable[_Key], by_key: Mapping[_Key, RawObject]) -> bool:
        """Take the changed replicas (`by_key`: the objects read; a key not in it is gone);
        whether the set of replicas or the pools they name changed."""
        is_moved = False
        for key in changed:
            is_moved = self._take_replica(key, by_key.get(key)) or is_moved
        self._set_found(("replicas", ""), ())
        if is_moved:
            reads = self._replicas.values()
            self._replica_pools = frozenset(p for _, rep in reads for p in rep.pools)
        return is_moved

    def _take_replica(self, key: _Key, obj: RawObject | None) -> bool:
        """Take the replica's new version (None: gone); whether the replicas or their pools
        changed. A version whose read is the same (a status write) changes nothing."""
        held = self._replicas.get(key)
        if obj is None:
            if held is not None:
                del self._replicas[key]
                self._dirty_replicas.add(key)
            return held is not None
        rep = read_replica(obj)
        version = _meta_field(obj, "resourceVersion")
        if held is not None and held[1] == rep:
            self._replicas[key] = (version, held[1])
            return False
        self._replicas[key] = (version, rep)
        self._dirty_replicas.add(key)
        return held is None or held[1].pools != rep.pools

    def _read_replicas_whole(self, objects: Sequence[RawObject]) -> bool:
        """Replicas with two of one key or without a name (never from a store): read as
        `observe` reads them, every one looked at again."""
        problems = Problems()
        reads, pools = read_replicas(objects, problems)
        self._version_list, self._key_list = None, []
        self._dirty_replicas.update(self._replicas.keys() | reads.keys())
        self._replicas = {key: (None, rep) for key, rep in reads.items()}
        self._versions = dict.fromkeys(reads)  # no version: every one is read again next time
        self._replica_pools = pools
        self._set_found(("replicas", ""), tuple(problems.records()))
        return True

    # --- UpdateSnapshot -------------------------------------------------------------------

    def _update_snapshot(self) -> TableSnapshot:
        problems = self._collect_problems()
        pools = self._members.keys() | self._replica_pools | self._declared_pools
        rebuilt = self._moved_pools(problems, pools)
        gone = self._pools.keys() - pools
        for pool in gone:
            del self._pools[pool]
            self._free.pop(pool, None)
        for pool in rebuilt:
            self._pools[pool] = self._observe_pool(pool, problems.get(pool, ()))
            self._free.pop(pool, None)
        self._problems = problems
        changed = self._observe_replicas()
        last = self._last.result if self._last is not None else None
        result = ObservationResult(
            pools=tuple(self._pools[p][0] for p in sorted(self._pools)),
            replicas=self._replicas_in_order(changed, last),
            problems=problems.get(None, ()),
            nodes=self._nodes_in_order(rebuilt, last),
        )
        held = self._holds.clock()
        clock = {**held, **self._clock} if held else self._clock
        out = self._last.clock if self._last is not None else AllocationClock()
        if clock != out.first_seen:
            out = AllocationClock(MappingProxyType(dict(sorted(clock.items()))))
        self._forget_empty(self._moved)
        self._moved.clear()
        self._moved_from.clear()
        self._times_moved.clear()
        self._is_found_moved = self._is_membership_moved = False
        return TableSnapshot(result, out, changed, self._generation)

    def _forget_empty(self, names: Iterable[str]) -> None:
        """Drop the entries of nodes nothing names any more (a node gone for good)."""
        inv = self._inventory
        for name in names:
            e = self._entries.get(name)
            if (
                e is not None
                and e.info is None
                and not (e.taken or e.times or e.poison)
                and name not in inv.published
                and name not in inv.poisoned
                and name not in inv.blocked
            ):
                del self._entries[name]
            if e is None or e.info is None:
                self._parts.pop(name, None)

    def _replicas_in_order(
        self, changed: frozenset[_Key], last: ObservationResult | None
    ) -> tuple[ObservedReplica, ...]:
        """Every replica's observation, sorted by key."""
        if last is not None and not changed:
            return last.replicas
        results = self._replica_results
        if self._replica_order is None:
            self._replica_order = sorted(results)
        return tuple(map(results.__getitem__, self._replica_order))

    def _nodes_in_order(
        self, rebuilt: set[str], last: ObservationResult | None
    ) -> tuple[ObservedNode, ...]:
        """Every pooled node's observation, sorted by name."""
        if last is not None and not rebuilt and not self._is_membership_moved:
            return last.nodes
        observed = self._observed_nodes
        if self._is_membership_moved:
            observed.clear()
            for _, nodes in self._pools.values():
                observed.update((n.name, n) for n in nodes)
            self._node_order = sorted(observed)
        else:
            for pool in rebuilt:
                observed.update((n.name, n) for n in self._pools[pool][1])
        return tuple(map(observed.__getitem__, self._node_order))

    def _collect_problems(self) -> dict[str | None, tuple[Problem, ...]]:
        if not self._is_found_moved and not self._is_membership_moved:
            return self._problems
        problems = Problems()
        for found in self._found.values():
            for f in found:
                problems.add_found(f, self._node_pool)
        return {scope: problems.get(scope) for scope in problems.scopes()}

    def _moved_pools(
        self, problems: Mapping[str | None, tuple[Problem, ...]], pools: set[str]
    ) -> set[str]:
        """The pools to rebuild: those of moved nodes, those whose problems changed, new ones."""
        moved = {self._node_pool[n] for n in self._moved if n in self._node_pool}
        moved |= self._moved_from
        moved |= {p for p in pools if problems.get(p, ()) != self._problems.get(p, ())}
        moved |= pools - self._pools.keys()
        return moved & pools

    def _observe_pool(
        self, pool: str, problems: tuple[Problem, ...]
    ) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
        """`observe_pool` of the pool's nodes, each node's part made again only when its
        generation (or the pool's drivers) moved since it was last made (`_node_part`)."""
        names = sorted(self._members.get(pool, ()))
        parts = [self._node_part(n) for n in names]
        driver_order = pool_drivers(p.drivers for p in parts)
        views = [p.view_in(pool, driver_order) for p in parts]
        extended = pool_extended(p.info for p in parts)
        return pool_of_nodes(
            pool,
            views,
            [p.state.last for p in parts],
            driver_order,
            (0, extended, problems, self.config.max_histogram_buckets),
        )

    def _node_part(self, name: str) -> _NodePart:
        """The node's part of its pool's observation, as of its entry's generation."""
        entry = self._entries[name]
        part = self._parts.get(name)
        if part is None or part.generation != entry.generation:
            assert entry.info is not None
            state = self._node_state(name)
            part = self._parts[name] = _NodePart(entry.generation, state, state.drivers, entry.info)
        return part

    def _node_state(self, name: str) -> NodeState:
        entry = self._entries[name]
        assert entry.info is not None
        inv = self._inventory
        poisoned = {d for d in entry.poison if d is not None} | inv.poisoned.get(name, {}).keys()
        state = NodeState(
            name,
            entry.info.excluded,
            dict(inv.published.get(name, {})),
            frozenset(poisoned),
            None in entry.poison,
            dict(entry.taken),
            max(entry.times) if entry.times else None,
            dict(inv.blocked.get(name, {})),
        )
        resources = self._holds.pools.get(entry.info.pool)
        if resources is None:
            return state
        return with_device_plugin(state, entry.info, resources, self._holds.usage(name))

    def _observe_replicas(self) -> frozenset[_Key]:
        """Observe the replicas to look at again; the keys whose observation changed."""
        dirty = self._dirty_replicas
        if self._is_membership_moved:
            dirty.update(self._replicas)  # a pod's pool may come from its node's
        for claim in self._times_moved:
            dirty.update(self._claimed_by.get(claim, ()))
        changed: set[_Key] = set()
        results = self._replica_results
        pseudo = self._holds.allocated  # device-plugin pods' pseudo claims
        allocated = {**self._allocated, **pseudo} if pseudo and dirty else self._allocated
        for key in dirty:
            held = self._replicas.get(key)
            if held is None:
                if results.pop(key, None) is not None:
                    changed.add(key)
                    self._replica_order = None
                continue
            if key not in results:
                self._replica_order = None
            rep = held[1].fresh()
            pods = self._replica_pods.get(key, {}).values()
            count_pods(rep, pods, allocated, self._node_pool, self._cordoned)
            observed = observed_replica(rep)
            if results.get(key) != observed:
                results[key] = observed
                changed.add(key)
        dirty.clear()
        return frozenset(changed)


_META: Final = operator.methodcaller("get", "metadata", _NO_META)
_NAMESPACE: Final = operator.methodcaller("get", "namespace")
_NAME: Final = operator.methodcaller("get", "name")
_VERSION: Final = operator.methodcaller("get", "resourceVersion")


def _key_of(obj: RawObject) -> _Key:
    return ns_name(obj)


def _meta_field(obj: RawObject, field_name: str) -> Any:
    meta = obj.get("metadata")
    return meta.get(field_name) if isinstance(meta, Mapping) else None


def _add(counts: dict[Any, int], key: Any, by: int) -> None:
    n = counts.get(key, 0) + by
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)
