"""Charging existing replicas to the ledger (step 3 of `schedule`), and for which pool states a
charge stays what it is (so a memo can keep it across calls).

Model (accounting.py says what a replica still holds).
- A kept replica is charged, per pool it pins before or after re-stamping (by pool name), for
  what the pool's observation does not already hold: whole nodes on a whole-node pool, units
  (see fit.py) on a free-GPU pool's histogram. Pools the cluster no longer publishes take
  nothing. Charges to one histogram are applied in canonical replica order, because where a
  charge lands depends on the ones before it; charges to whole-node pools commute.
- What a replica's charge on a pool is depends, besides the replica, only on the pool's class,
  accounting mode and whether its vectors hold CPU and memory (`charge_view`) and on whether
  its `last_allocation_time` is at or after the replica's own time for the pool
  (`counted_since`). So the charges of a set of replicas
  hold while every pool they pin keeps its charge view and its allocation time stays in a
  window: at or after the latest replica time it had reached, before the earliest it had not.
  In the steady state the window only closes when a replica is re-counted, and most charges
  are empty: the pools' histograms already hold those replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gpufleet.core.accounting import accounted_fn, counted_since, engine_units, node_cost
from gpufleet.core.capacity import PoolLedger
from gpufleet.core.fit import Unit, charge
from gpufleet.core.model import ClusterName, PoolName, Replica, ReplicaEngine
from gpufleet.core.placement import ClusterLedger

#: A replica's canonical order: (name, namespace, deployment, cluster, index).
ReplicaOrder = tuple[str, str, str, str, int]
#: A replica to charge: its (re-stamped) engines, and whether its demand shape is unchanged.
Kept = tuple[Replica, tuple[ReplicaEngine, ...], bool]
PoolKey = tuple[ClusterName, PoolName]
#: A pool as charging sees it on one call: an id for its `charge_view` (0: no such pool; the
#: same id while the view is the same) and its `last_allocation_time` as UTC.
PoolView = tuple[int, datetime | None]
NO_POOL: PoolView = (0, None)


def replica_order(r: Replica) -> ReplicaOrder:
    return (r.name, r.deployment.namespace, r.deployment.name, r.cluster, r.index)


@dataclass(frozen=True, slots=True)
class Charge:
    """What one replica still takes from one pool: `units` of a free-GPU pool's histogram, or
    `nodes` of a whole-node pool."""

    order: ReplicaOrder
    cluster: ClusterName
    pool: PoolName
    owner: str
    units: tuple[Unit, ...] = ()
    nodes: int = 0


def pinned(replica: Replica, engines: tuple[ReplicaEngine, ...]) -> list[PoolName]:
    """The pools a replica pins, before and after re-stamping, by name."""
    return sorted(
        {m.pool for e in replica.engines for m in e.members}
        | {m.pool for e in engines for m in e.members}
    )


def charges_of(
    replica: Replica,
    engines: tuple[ReplicaEngine, ...],
    is_shape_unchanged: bool,
    ledger: ClusterLedger,
) -> list[Charge]:
    """What `replica` (re-stamped to `engines`) still takes from its cluster, by pool name."""
    charges: list[Charge] = []
    order = replica_order(replica)
    cluster = ledger.cluster.name
    for name in pinned(replica, engines):
        pool = ledger.by_name.get(name)
        if pool is None:
            continue
        if not pool.is_free_gpu:
            cost = node_cost(replica.engines, name)
            if cost:
                charges.append(Charge(order, cluster, name, replica.name, nodes=cost))
            continue
        accounted = accounted_fn(replica, pool, is_shape_unchanged)
        units: list[Unit] = []
        for engine in engines:
            units.extend(engine_units(engine, name, pool, accounted))
        if units:
            charges.append(Charge(order, cluster, name, replica.name, tuple(units)))
    return charges


def apply_charges(charges: list[Charge], ledgers: Mapping[ClusterName, ClusterLedger]) -> None:
    """Take every charge from the ledger, in canonical replica order (sorts `charges`; stable,
    so one replica's charges stay in pool-name order)."""
    charges.sort(key=lambda c: c.order)
    for item in charges:
        ledger = ledgers[item.cluster]
        pool = ledger.by_name[item.pool]
        if item.nodes:
            pool.take_nodes(item.nodes)
            continue
        record = pool.log is not None
        free, log = charge(
            pool.free, item.units, pool.choice(ledger.policy), owner=item.owner, record=record
        )
        pool.set_free(free)
        if pool.log is not None:
            pool.log.extend(log)


# --- how long charges hold ----------------------------------------------------------------


def charge_view(pool: PoolLedger, time: datetime | None) -> tuple[object, ...]:
    """What a charge reads of a pool besides its allocation time `time` (`allocation_time`)
    and the replica."""
    return (pool.class_id, pool.accounting, time is None, pool.host)


def allocation_time(pool: PoolLedger) -> datetime | None:
    """The pool observation's `last_allocation_time` as UTC (None: no observation or time)."""
    return pool.allocated_at


#: (pool, charge view id, after, before): charges hold while the pool has that view and an
#: allocation time in [after, before) (None: unbounded). A plain tuple: one is checked per
#: pinned pool of every deployment on every call.
_Window = tuple[PoolKey, int, datetime | None, datetime | None]


@dataclass(frozen=True, slots=True)
class HeldCharges:
    """The charges of some replicas, and the pool states for which they stay the same."""

    windows: tuple[_Window, ...]
    charges: tuple[Charge, ...]
    #: The pools of `windows`: while none of them changes its view, these still hold.
    pools: frozenset[PoolKey] = frozenset()

    def hold(self, views: Mapping[PoolKey, PoolView]) -> bool:
        """Whether these are still the charges with the pools as `views` has them."""
        for pool, view, after, before in self.windows:
            now, time = views.get(pool, NO_POOL)
            if now != view:
                return False
            if time is not None and (
                (after is not None and time < after) or (before is not None and time >= before)
            ):
                return False
        return True


#: Nothing to charge, whatever the pools: shared, so a deployment without replicas allocates
#: nothing that outlives the call.
NO_CHARGES = HeldCharges((), ())


def held_charges(
    kept: Iterable[Kept],
    ledgers: Mapping[ClusterName, ClusterLedger],
    views: Mapping[PoolKey, PoolView],
) -> HeldCharges:
    """The charges of `kept` (each on a cluster of `ledgers`) and for which pool states they
    hold: per pinned pool, the window of allocation times that counts the same replicas."""
    charges: list[Charge] = []
    since: dict[PoolKey, list[datetime]] = {}
    for replica, engines, is_unchanged in kept:
        ledger = ledgers[replica.cluster]
        charges.extend(charges_of(replica, engines, is_unchanged, ledger))
        for name in pinned(replica, engines):
            times = since.setdefault((replica.cluster, name), [])
            pool = ledger.by_name.get(name)
            if pool is not None and pool.is_free_gpu:
                time = counted_since(replica, name, is_unchanged)
                if time is not None:
                    times.append(time)
    windows = tuple(
        _window(key, views.get(key, NO_POOL), times)
        for key, times in sorted(since.items(), key=lambda kv: kv[0])
    )
    if not windows and not charges:
        return NO_CHARGES
    return HeldCharges(windows, tuple(charges), frozenset(w[0] for w in windows))


def _window(key: PoolKey, now: PoolView, since: list[datetime]) -> _Window:
    view, time = now
    if time is None:
        return (key, view, None, None)
    after = max((t for t in since if t <= time), default=None)
    before = min((t for t in since if t > time), default=None)
    return (key, view, after, before)
