"""The snapshot assembly of `FreeDeviceTable` (kube-scheduler's `UpdateSnapshot`): the problems
collected per scope, the pools rebuilt whose nodes moved, each node's part of its pool's
observation, the nodes in order, and the snapshot (issue 24 section 3: the last of the table's
four collaborators)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpufleet.agent.device_plugin import Holds, with_device_plugin
from gpufleet.agent.model import (
    AllocationClock,
    Found,
    ObservationResult,
    ObserveConfig,
    ObservedNode,
    ObservedPool,
    Problem,
    Problems,
)
from gpufleet.agent.observe import pool_extended
from gpufleet.agent.reads import (
    Inventory,
    NodeInfo,
    NodeState,
    NodeView,
    observe_node,
    pool_drivers,
    pool_of_nodes,
)
from gpufleet.agent.table_claims import ClaimIndex
from gpufleet.agent.table_nodes import NodeInfos
from gpufleet.agent.table_replicas import ReplicaIndex
from gpufleet.core.model import DriverName

_Key = tuple[str, str]


class Findings:
    """The problems each source found (a Node, a slice, a DRA pool, a claim, the replicas),
    and whether any changed since the last snapshot (kept for `FreeDeviceTable`'s snapshot)."""

    def __init__(self) -> None:
        self.by_source: dict[tuple[str, object], tuple[Found, ...]] = {}
        self.moved = False

    def set(self, source: tuple[str, object], found: tuple[Found, ...]) -> None:
        if self.by_source.get(source, ()) != found:
            self.moved = True
            if found:
                self.by_source[source] = found
            else:
                self.by_source.pop(source, None)


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


class SnapshotAssembly:
    """What the last snapshot gave, and the rebuilding of what moved since."""

    def __init__(
        self,
        config: ObserveConfig,
        nodes: NodeInfos,
        inventory: Inventory,
        found: Findings,
        claims: ClaimIndex,
        holds: Holds,
        replicas: ReplicaIndex,
    ) -> None:
        self.config = config
        self._nodes = nodes
        self._inventory = inventory
        self._found = found
        self._claims = claims
        self._holds = holds
        self.replicas = replicas
        self.problems: dict[str | None, tuple[Problem, ...]] = {}
        self.pools: dict[str, tuple[ObservedPool, tuple[ObservedNode, ...]]] = {}
        #: Each pooled node's observation, and their names, sorted.
        self._observed_nodes: dict[str, ObservedNode] = {}
        self._node_order: list[str] = []
        #: `free_devices` of each pool asked since the pool was last observed.
        self.free: dict[str, Mapping[str, Mapping[DriverName, int]]] = {}
        #: Each pooled node's part of its pool's observation (`_node_part`).
        self._parts: dict[str, _NodePart] = {}

    def free_devices(self, pool: str) -> Mapping[str, Mapping[DriverName, int]]:
        """Each node of `pool` and its free devices per driver (excluded nodes: none free),
        as of the last snapshot. Read-only."""
        held = self.free.get(pool)
        if held is not None:
            return held
        found = self.pools.get(pool)
        if found is None:
            return MappingProxyType({})
        free = MappingProxyType({n.name: MappingProxyType(dict(n.free)) for n in found[1]})
        self.free[pool] = free  # until the pool is observed again (`_update_snapshot`)
        return free

    def assemble(
        self, declared_pools: frozenset[str], last_snapshot: TableSnapshot | None
    ) -> TableSnapshot:
        """The snapshot: what moved since `last_snapshot` rebuilt, the rest kept."""
        problems = self._collect_problems()
        pools = self._nodes.members.keys() | self.replicas.pools | declared_pools
        rebuilt = self._moved_pools(problems, pools)
        gone = self.pools.keys() - pools
        for pool in gone:
            del self.pools[pool]
            self.free.pop(pool, None)
        for pool in rebuilt:
            self.pools[pool] = self._observe_pool(pool, problems.get(pool, ()))
            self.free.pop(pool, None)
        self.problems = problems
        changed = self.replicas.observe()
        last = last_snapshot.result if last_snapshot is not None else None
        result = ObservationResult(
            pools=tuple(self.pools[p][0] for p in sorted(self.pools)),
            replicas=self.replicas.in_order(changed, last),
            problems=problems.get(None, ()),
            nodes=self._nodes_in_order(rebuilt, last),
        )
        held = self._holds.clock()
        clock = {**held, **self._claims.clock} if held else self._claims.clock
        out = last_snapshot.clock if last_snapshot is not None else AllocationClock()
        if clock != out.first_seen:
            out = AllocationClock(MappingProxyType(dict(sorted(clock.items()))))
        self._nodes.settle(self._inventory)
        self._claims.times_moved.clear()
        self._found.moved = False
        return TableSnapshot(result, out, changed, self._nodes.generation)

    def _nodes_in_order(
        self, rebuilt: set[str], last: ObservationResult | None
    ) -> tuple[ObservedNode, ...]:
        """Every pooled node's observation, sorted by name."""
        if last is not None and not rebuilt and not self._nodes.membership_moved:
            return last.nodes
        observed = self._observed_nodes
        if self._nodes.membership_moved:
            observed.clear()
            for _, nodes in self.pools.values():
                observed.update((n.name, n) for n in nodes)
            self._node_order = sorted(observed)
        else:
            for pool in rebuilt:
                observed.update((n.name, n) for n in self.pools[pool][1])
        return tuple(map(observed.__getitem__, self._node_order))

    def _collect_problems(self) -> dict[str | None, tuple[Problem, ...]]:
        if not self._found.moved and not self._nodes.membership_moved:
            return self.problems
        problems = Problems()
        for found in self._found.by_source.values():
            for f in found:
                problems.add_found(f, self._nodes.node_pool)
        return {scope: problems.get(scope) for scope in problems.scopes()}

    def _moved_pools(
        self, problems: Mapping[str | None, tuple[Problem, ...]], pools: set[str]
    ) -> set[str]:
        """The pools to rebuild: those of moved nodes, those whose problems changed, new ones."""
        moved = {self._nodes.node_pool[n] for n in self._nodes.moved if n in self._nodes.node_pool}
        moved |= self._nodes.moved_from
        moved |= {p for p in pools if problems.get(p, ()) != self.problems.get(p, ())}
        moved |= pools - self.pools.keys()
        return moved & pools

    def _observe_pool(
        self, pool: str, problems: tuple[Problem, ...]
    ) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
        """`observe_pool` of the pool's nodes, each node's part made again only when its
        generation (or the pool's drivers) moved since it was last made (`_node_part`)."""
        names = sorted(self._nodes.members.get(pool, ()))
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
        entry = self._nodes.entries[name]
        part = self._parts.get(name)
        if part is None or part.generation != entry.generation:
            assert entry.info is not None
            state = self._node_state(name)
            part = self._parts[name] = _NodePart(entry.generation, state, state.drivers, entry.info)
        return part

    def _node_state(self, name: str) -> NodeState:
        entry = self._nodes.entries[name]
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
