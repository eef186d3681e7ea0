"""Charging existing replicas to the ledger (step 3 of `schedule`).

Model (accounting.py says what a replica still holds).
- A kept replica is charged, per pool it pins before or after re-stamping (by pool name), for
  what the pool's observation does not already hold: whole nodes on a whole-node pool, units
  (see fit.py) on a free-GPU pool's histogram. Pools the cluster no longer publishes take
  nothing. Charges to one histogram are applied in canonical replica order, because where a
  charge lands depends on the ones before it; charges to whole-node pools commute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.core.accounting import accounted_fn, engine_units, node_cost
from gpufleet.core.fit import Unit, charge
from gpufleet.core.model import ClusterName, PoolName, Replica, ReplicaEngine
from gpufleet.core.placement import ClusterLedger

#: A replica's canonical order: (name, namespace, deployment, cluster, index).
ReplicaOrder = tuple[str, str, str, str, int]
#: A replica to charge: its (re-stamped) engines, and whether its demand shape is unchanged.
Kept = tuple[Replica, tuple[ReplicaEngine, ...], bool]


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
        free, log = charge(pool.free, item.units, ledger.policy, owner=item.owner, record=record)
        pool.set_free(free)
        if pool.log is not None:
            pool.log.extend(log)
