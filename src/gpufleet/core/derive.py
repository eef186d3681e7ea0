"""What `plan` may take instead of deriving it, and `FRESH`, which derives everything plainly.

Why. The hub controller plans the same slowly changing fleet over and over; what the core
derives from one input alone (a deployment's key order, a pool's ledger as built, what a
deployment retains of its replicas and what they are charged) need not be derived again
while the input's declared signature is the same. The algorithm (schedule.py) does not know
whether it is: it asks a `Derive` for a `Call`, and the call for each of those values.

Model.
- `Derive.begin(snapshot)` starts one `plan` call: the snapshot's deployments in key order
  (raising `SnapshotError` for a key two deployments share, then a name two clusters share)
  and the `Call` that answers the rest of this call.
- `Call.pool_ledger`: a pool's ledger as built from the pool, its cluster's name, its class
  and the config (capacity.py). `Call.pool_state`: a ledger's `PoolState` at the end.
  `Call.retain_all`: per deployment (in key order) its `Retained` (retain.py), the charges of
  every kept replica and of every replica whose deployment is gone (charging.py), in any
  order (`apply_charges` sorts them). `Call.fill_order`: a deployment's candidates in fill
  order, which places its replicas one by one (fill_order.py). `Call.diagnoser`: what
  diagnoses deployments against the ledgers as they are when asked (verdicts.py).
- `FRESH` computes each of them plainly, on every call: it is the specification. Every other
  implementation (core/reuse/) must return what `FRESH` returns, for any sequence of
  snapshots (tests/core/test_derive_properties.py); it may only take less time.

Invariant: a `Call`'s values are frozen or (ledgers) fresh for the call; a `Call` is used by
one `plan` call only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from gpufleet.core.avoiding import NOT_AVOIDING, Avoiding
from gpufleet.core.capacity import PoolLedger
from gpufleet.core.charging import Charge, charges_of, replica_order
from gpufleet.core.decision import ObservationState, PoolState
from gpufleet.core.fill_order import Filling, PlainFill
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    Pool,
    Replica,
    SchedulingConfig,
    Snapshot,
)
from gpufleet.core.placement import ClusterLedger, PlacementMemo
from gpufleet.core.retain import KEY_OF, Retained, by_deployment, retain
from gpufleet.core.verdicts import Diagnosing, PlainDiagnoser


class SnapshotError(ValueError):
    """The snapshot is invalid; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


#: `Call.retain_all`: per deployment its retain result, the charges, the orphaned replicas.
Retaining = tuple[list[Retained], list[Charge], list[Replica]]


class Call(Protocol):
    """What one `plan` call asks instead of deriving it (see the module docstring)."""

    #: Matching and placing within the call (placement.py).
    placement: PlacementMemo

    def pool_ledger(
        self, cluster: ClusterName, pool: Pool, config: SchedulingConfig, *, record: bool
    ) -> PoolLedger: ...

    def pool_state(self, ledger: PoolLedger, observation: ObservationState) -> PoolState: ...

    def retain_all(
        self,
        deployments: Sequence[Deployment],
        replicas: tuple[Replica, ...],
        ledgers: Mapping[ClusterName, ClusterLedger],
        avoiding: Mapping[tuple[str, str], Avoiding],
    ) -> Retaining: ...

    def fill_order(
        self,
        names: tuple[ClusterName, ...],
        ranks: Mapping[ClusterName, int],
        counts: Mapping[ClusterName, int],
        offset: int,
    ) -> Filling: ...

    def diagnoser(
        self, ledgers: Mapping[ClusterName, ClusterLedger], config: SchedulingConfig
    ) -> Diagnosing: ...


class Derive(Protocol):
    """Where `plan` gets its `Call` (see the module docstring)."""

    def begin(self, snapshot: Snapshot) -> tuple[tuple[Deployment, ...], Call]: ...


def check(snapshot: Snapshot) -> tuple[Deployment, ...]:
    """Raise for a key two deployments share, then for a name two clusters share; return
    the deployments in key order."""
    deployments = snapshot.deployments
    keys = list(map(KEY_OF, deployments))
    if len(set(keys)) < len(keys):
        check_keys(deployments)
    ordered = tuple(map(deployments.__getitem__, sorted(range(len(keys)), key=keys.__getitem__)))
    check_clusters(snapshot)
    return ordered


def check_keys(deployments: tuple[Deployment, ...]) -> None:
    """Raise for the first shared key (by key order); found only when there is one."""
    keys = Counter(d.key for d in deployments)
    for key, n in sorted(keys.items(), key=lambda kv: (kv[0].namespace, kv[0].name)):
        if n > 1:
            raise SnapshotError(f"deployments[{key}]", f"{n} deployments share this key")


def check_clusters(snapshot: Snapshot) -> None:
    """Raise for the first name (in name order) two clusters share."""
    names = Counter(c.name for c in snapshot.clusters)
    for name, n in sorted(names.items()):
        if n > 1:
            raise SnapshotError(f"clusters[{name}]", f"{n} clusters share this name")


class _FreshCall:
    """One call of `FRESH`: everything derived from the call's inputs."""

    __slots__ = ("placement",)

    def __init__(self) -> None:
        self.placement = PlacementMemo(keeps_ledgers=False)

    def pool_ledger(
        self, cluster: ClusterName, pool: Pool, config: SchedulingConfig, *, record: bool
    ) -> PoolLedger:
        return self.placement.pool_ledger(cluster, pool, config, record=record)

    def pool_state(self, ledger: PoolLedger, observation: ObservationState) -> PoolState:
        return ledger.state(observation)

    def retain_all(
        self,
        deployments: Sequence[Deployment],
        replicas: tuple[Replica, ...],
        ledgers: Mapping[ClusterName, ClusterLedger],
        avoiding: Mapping[tuple[str, str], Avoiding],
    ) -> Retaining:
        groups, orphans = by_deployment(deployments, replicas)
        results: list[Retained] = []
        charges: list[Charge] = []
        matcher = self.placement.matcher
        for deployment, group in zip(deployments, groups, strict=True):
            doomed = avoiding.get(KEY_OF(deployment), NOT_AVOIDING).doomed
            in_order = tuple(sorted(group, key=replica_order))
            retained = retain(deployment, in_order, ledgers, matcher, doomed)
            for replica, engines, is_unchanged in retained.kept:
                charges.extend(charges_of(replica, engines, is_unchanged, ledgers[replica.cluster]))
            results.append(retained)
        for replica in orphans:
            ledger = ledgers.get(replica.cluster)
            if ledger is not None:
                charges.extend(charges_of(replica, replica.engines, True, ledger))
        return results, charges, orphans

    def fill_order(
        self,
        names: tuple[ClusterName, ...],
        ranks: Mapping[ClusterName, int],
        counts: Mapping[ClusterName, int],
        offset: int,
    ) -> Filling:
        return PlainFill(names, ranks, counts, offset)

    def diagnoser(
        self, ledgers: Mapping[ClusterName, ClusterLedger], config: SchedulingConfig
    ) -> Diagnosing:
        return PlainDiagnoser(ledgers, self.placement, config)


class Fresh:
    """`Derive` that derives every value plainly, on every call: the specification."""

    __slots__ = ()

    def begin(self, snapshot: Snapshot) -> tuple[tuple[Deployment, ...], Call]:
        return check(snapshot), _FreshCall()


FRESH: Derive = Fresh()
