"""Accounting: what each existing replica still holds on top of what the pools report.

Model.
- Whole-node pools (Modelplane HEAD, 2.6): a replica member pinned to the pool costs
  `pods_per_copy × copies` nodes when it claims (has resolved requests), at its *stamped*
  shape: a retained replica re-stamped to a new shape is still charged its old cost until it is
  re-created (scenario 18).
- Free-GPU pools (DESIGN.md 3): the histogram already holds the devices of pods whose claims the
  agent saw allocated at or before the pool's `last_allocation_time`. A member's pods are
  charged on top of the histogram except `accounted = min(allocated_pods, expected pods)` from
  the replica's status entry for (pool, engine, role), counted only when all hold:
  `status.observed_generation == generation`; the stamped shape is unchanged by this round's
  re-stamping; the replica's time for the pool and the pool's `last_allocation_time` both
  exist and replica time <= pool time. `pods_scheduled` is not required, so a partly scheduled
  replica is charged only for its unallocated pods (review point 8). A replica whose shape
  changed is charged for its whole new shape (review point 11). A pod's demand is, per driver,
  the sum of its member's resolved request counts.
- Members pinned to a pool the cluster no longer publishes charge nothing (their pods cannot
  schedule); replicas on clusters outside the fleet charge nothing.

Which way it errs: every missing or incomparable time means "charged", and a re-stamped
replica's allocated pods are charged again until the agent re-counts them, so accounting errs
toward full (may refuse a fit, never overcommits an accurately observed pool). Which copy of a
gang the unallocated pods belong to is unknown: they are grouped into the first copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Protocol

from gpufleet.core.capacity import PoolLedger, Vector, as_utc
from gpufleet.core.fit import Unit, make_unit
from gpufleet.core.model import (
    DriverName,
    PoolName,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    ReplicaPoolStatus,
    ResolvedRequest,
    Role,
)

#: (engine name, role, expected pods) -> pods the pool's histogram already accounts for.
AccountedFn = Callable[[str, Role, int], int]


class Drivers(Protocol):
    """A pool's (or a class of pool's) vector layout: its DRA drivers, and where a request's
    devices count (`PoolLedger`; compile.py's class of pool)."""

    drivers: tuple[DriverName, ...]
    #: Whether its vectors end in free CPU and memory (`PoolLedger.host`).
    host: bool

    def driver_index(self, driver: DriverName, device_class_name: str) -> int | None: ...


def pod_vector(requests: Sequence[ResolvedRequest], ledger: Drivers) -> Vector:
    """Devices one pod of a member claims, per driver of the pool."""
    demand = [0] * len(ledger.drivers)
    for request in requests:
        index = ledger.driver_index(request.driver, request.device_class_name)
        if index is not None:
            demand[index] += max(0, request.count)
    return tuple(demand)


def is_gang(members: Iterable[ReplicaMember]) -> bool:
    return any(m.role is not Role.STANDALONE for m in members)


def engine_units(
    engine: ReplicaEngine,
    pool: PoolName,
    ledger: Drivers,
    accounted: AccountedFn | None = None,
) -> list[Unit]:
    """The units (see `fit`) one engine's pods on `pool` still need from the histogram."""
    copies = max(0, engine.copies)
    gang = is_gang(engine.members)
    per_member: list[tuple[Vector, int, int]] = []  # (pod vector, pods per copy, remaining)
    for member in engine.members:
        if member.pool != pool or not member.is_claiming:
            continue
        vector = pod_vector(member.requests, ledger)
        if not any(vector):
            continue
        if ledger.host:
            vector = (*vector, max(0, member.milli_cpu), max(0, member.memory))
        per_copy = max(0, member.pods_per_copy)
        expected = per_copy * copies
        done = accounted(engine.name, member.role, expected) if accounted else 0
        per_member.append((vector, per_copy, expected - done))
    units: list[Unit] = []
    if not gang:
        for vector, _, remaining in per_member:
            units.extend((vector,) for _ in range(remaining))
        return units
    for copy in range(copies):
        pods: list[Vector] = []
        for vector, per_copy, remaining in per_member:
            in_copy = min(per_copy, max(0, remaining - copy * per_copy))
            pods.extend(vector for _ in range(in_copy))
        if pods:
            units.append(make_unit(pods))
    return units


def node_cost(engines: Iterable[ReplicaEngine], pool: PoolName) -> int:
    """Whole-node cost on `pool`: one node per pod of every claiming member pinned there."""
    return sum(
        max(0, m.pods_per_copy) * max(0, e.copies)
        for e in engines
        for m in e.members
        if m.pool == pool and m.is_claiming
    )


def _counted_status(
    replica: Replica, pool: PoolName, is_shape_unchanged: bool
) -> ReplicaPoolStatus | None:
    """The replica's status entry for `pool` when it may count against the pool's histogram
    (generation observed, shape unchanged, a time to compare), else None: charged in full."""
    status = replica.status
    if not is_shape_unchanged or status.observed_generation != replica.generation:
        return None
    pool_status = next((p for p in status.pools if p.pool == pool), None)
    if pool_status is None or pool_status.last_allocation_time is None:
        return None
    return pool_status


def counted_since(replica: Replica, pool: PoolName, is_shape_unchanged: bool) -> datetime | None:
    """From which pool `last_allocation_time` on (UTC) the histogram holds the replica's
    allocated pods; None when it never does (then that time does not matter)."""
    pool_status = _counted_status(replica, pool, is_shape_unchanged)
    if pool_status is None or pool_status.last_allocation_time is None:
        return None
    return as_utc(pool_status.last_allocation_time)


def accounted_fn(replica: Replica, ledger: PoolLedger, is_shape_unchanged: bool) -> AccountedFn:
    """Per (engine, role), the pods of `replica` that `ledger`'s histogram already holds."""

    def nothing(engine: str, role: Role, expected: int) -> int:
        return 0

    observation = ledger.observation
    if observation is None or observation.last_allocation_time is None:
        return nothing
    pool_status = _counted_status(replica, ledger.pool.name, is_shape_unchanged)
    if pool_status is None or pool_status.last_allocation_time is None:
        return nothing
    if as_utc(pool_status.last_allocation_time) > as_utc(observation.last_allocation_time):
        return nothing
    allocated: dict[tuple[str, Role], int] = {}
    for member in pool_status.members:
        key = (member.engine, member.role)
        allocated[key] = allocated.get(key, 0) + max(0, member.allocated_pods)

    def from_status(engine: str, role: Role, expected: int) -> int:
        return min(allocated.get((engine, role), 0), expected)

    return from_status


def demand_shape(engines: Iterable[ReplicaEngine]) -> tuple[tuple[object, ...], ...]:
    """What decides a replica's device demand: compared before and after re-stamping."""
    return tuple(
        sorted(
            (
                e.name,
                max(0, e.copies),
                i,
                m.role.value,
                m.pool,
                m.pods_per_copy,
                tuple(sorted((r.driver, r.device_class_name, r.count) for r in m.requests)),
            )
            for e in engines
            for i, m in enumerate(e.members)
        )
    )
