"""`ScheduleMemo`: a `Derive` (core/derive.py) that keeps what it derived across `plan` calls,
by declared signatures, for a caller that plans a slowly changing fleet over and over.

Why. The hub controller calls `plan` whenever a scheduling input changed, on a fleet that
mostly does not; it declares each input's signature (uid and generation or resourceVersion:
`Deployment.signature`, `Replica.signature`, `Pool.signature`). What the core derived from an
input alone need not be derived again while its signature is the same.

Model. Above the algorithm: the core (schedule.py) asks its `Call` for the deployments' key
order, each pool's ledger, each final pool state and per deployment its retain result and
charges; `FRESH` derives each plainly, this memo answers from what an earlier call derived
where its signatures say it still holds (see `ScheduleMemo`). Keyed by signatures and values,
never by identity.

Invariant: a call's result equals `FRESH`'s for any sequence of snapshots
(tests/core/test_derive_properties.py); only the time differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpufleet.core.avoiding import NOT_AVOIDING, Avoiding
from gpufleet.core.capacity import PoolLedger
from gpufleet.core.charging import (
    NO_CHARGES,
    Charge,
    HeldCharges,
    PoolKey,
    PoolView,
    allocation_time,
    charge_view,
    charges_of,
    held_charges,
    replica_order,
)
from gpufleet.core.decision import ObservationState, PoolState, Reason
from gpufleet.core.derive import Call, Retaining, check_clusters, check_keys
from gpufleet.core.fill_order import Filling
from gpufleet.core.memo import Generations
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    Pool,
    Replica,
    SchedulingConfig,
    Snapshot,
)
from gpufleet.core.placement import ClusterLedger, PlacementMemo
from gpufleet.core.retain import KEY_OF, SIGNATURE, Retained, by_deployment, retain
from gpufleet.core.reuse.diagnoser import Diagnoser
from gpufleet.core.reuse.fill_index import FillIndex
from gpufleet.core.reuse.grouping import DeploymentRef, Grouping, regroup
from gpufleet.core.verdicts import Diagnosing


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A deployment's memo entry: what its retain result was derived from besides the
    deployment (the fleet's retain view id and its replicas' declared signatures in snapshot
    order; none when one of them declares none, so that it is never reused), that result,
    and its kept replicas' charges with the pool states they hold for."""

    fleet: int
    replicas: tuple[tuple[object, ...], ...]
    retained: Retained
    charges: HeldCharges


#: A deployment's result in `_Table`: its signature, its retain result and its charges.
_Entry = tuple[tuple[object, ...], Retained, HeldCharges]


@dataclass(frozen=True, slots=True)
class _Table:
    """The previous call's replicas grouped by deployment and, per deployment (by key) whose
    result holds for its signature and its replicas' (set of) signatures, that result, for
    the call's retain view `fleet` and pool views (the previous call's: `changed` says which
    moved since)."""

    fleet: int
    grouping: Grouping
    entries: dict[DeploymentRef, _Entry]
    #: The call's deployments' signatures and keys (in key order), and its keys as a set.
    signatures: tuple[tuple[object, ...], ...]
    keys: tuple[DeploymentRef, ...]
    present: frozenset[DeploymentRef]
    #: The replicas whose deployment is not in the call, in canonical order.
    orphans: tuple[Replica, ...]


class ScheduleMemo:
    """What `plan` derived from objects a later call may see again, for a caller that
    schedules a slowly changing fleet over and over (the hub controller, every step).

    It holds, keyed by the signatures the snapshot's inputs declare (`Deployment.signature`,
    `Replica.signature`, `Pool.signature`; never by identity: an input that declares none is
    derived again on every call) and by pool class: each deployment compiled against the
    classes of pool (`compile_deployment`, core/compile.py), each signed pool's ledger as built (copied for a call, see
    `PlacementMemo`), and per deployment its retain result (kept replicas re-stamped, dropped
    ones, its whole decision when nothing is pending) and its kept replicas' charges. A
    retain result is recomputed when the deployment, its replicas' signatures or what
    retaining reads of the clusters (names, labels, taints, gateways, pools by name and
    class) change; charges when a pool they pin changes class or accounting, or its
    allocation time leaves the window they hold for (charging.py). When every replica
    declares a signature of its own, also the previous call's replicas grouped by deployment
    and its result per deployment (`_Table`): a call then regroups, and asks the entries
    above for, only the deployments whose inputs changed. Mutable: only the memo
    itself (and each call's ledgers); every input and every result is frozen.

    Bounded (memo.py): a call keeps only what it or the previous call used, so the memo holds
    about two snapshots' worth of derived values; besides, the previous call's key order of
    its deployments, reused while a call has deployments of the same signatures. A memo made
    `for_one_call` (what `plan` makes when given none) keeps neither that nor ledgers: no
    later call could use them. Reusable across any sequence of snapshots: a call's result is the
    same as with a fresh memo. Not thread-safe: one caller at a time.
    """

    __slots__ = (
        "_fleet",
        "_last_views",
        "_pools",
        "_views",
        "deployments",
        "for_one_call",
        "order",
        "placement",
        "table",
    )

    def __init__(self, *, for_one_call: bool = False) -> None:
        self.placement = PlacementMemo(keeps_ledgers=not for_one_call)
        self.for_one_call = for_one_call
        #: The last checked deployments, as given and in key order.
        self.order: tuple[tuple[tuple[object, ...], ...], tuple[int, ...]] | None = None
        #: Per deployment (by `Matcher.ref`), its latest retain result and charges.
        self.deployments: Generations[tuple[object, ...], _Remembered] = Generations()
        self._fleet: tuple[tuple[object, ...] | None, int] = (None, 0)
        #: The previous call's replicas by deployment and results per deployment (None:
        #: none, or they did not all declare distinct signatures).
        self.table: _Table | None = None
        self._pools: dict[PoolKey, tuple[tuple[object, ...], int]] = {}
        self._views = 0
        #: The previous call's pool views; None when it had none (no replicas to charge).
        self._last_views: dict[PoolKey, PoolView] | None = None

    def begin(self, snapshot: Snapshot) -> tuple[tuple[Deployment, ...], Call]:
        """`Derive.begin`: the deployments in key order (the last call's order while their
        signatures are the same), then a new call starts (see memo.py)."""
        deployments = _ordered(snapshot, self)
        self.advance()
        self.placement.use_config(snapshot.config)
        return deployments, self

    def pool_ledger(
        self, cluster: ClusterName, pool: Pool, config: SchedulingConfig, *, record: bool
    ) -> PoolLedger:
        """`Call.pool_ledger`: a copy of the ledger kept for the pool's signature, if any."""
        return self.placement.pool_ledger(cluster, pool, config, record=record)

    def pool_state(self, ledger: PoolLedger, observation: ObservationState) -> PoolState:
        """`Call.pool_state`: shared with every unchanged copy of one kept ledger."""
        return self.placement.pool_state(ledger, observation)

    def retain_all(
        self,
        deployments: Sequence[Deployment],
        replicas: tuple[Replica, ...],
        ledgers: Mapping[ClusterName, ClusterLedger],
        avoiding: Mapping[tuple[str, str], Avoiding],
    ) -> Retaining:
        """`Call.retain_all`, answered per deployment from what an earlier call derived
        while its inputs are unchanged (`_retain_all`)."""
        fleet, views, changed = self.views(ledgers, pools=bool(replicas))
        on = _Fleetwide(ledgers, self, fleet, views, changed)
        results, charges, orphans = _retain_all(deployments, replicas, on, avoiding)
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
        """`Call.fill_order`: indexed (`FillIndex`), so a placement does not scan the fleet."""
        return FillIndex(names, ranks, counts, offset)

    def diagnoser(
        self, ledgers: Mapping[ClusterName, ClusterLedger], config: SchedulingConfig
    ) -> Diagnosing:
        """`Call.diagnoser`: deployments alike share verdicts (`Diagnoser`)."""
        return Diagnoser(ledgers, self.placement, config)

    def advance(self) -> None:
        """Start a call (see memo.py), before it reads anything."""
        self.placement.advance()
        self.deployments.advance()

    def views(self, ledgers: Mapping[ClusterName, ClusterLedger], *, pools: bool) -> _Views:
        """The id of the fleet's retain view and (when `pools`: only charges read them) each
        pool's `PoolView`, and which pools' views changed since the previous call. A view id
        stays the same while the view does, and is never given to another view."""
        fleet = tuple(_retain_view(ledger) for ledger in ledgers.values())
        if fleet != self._fleet[0]:
            self._fleet = (fleet, self._new_view())
        last, self._last_views = self._last_views, None
        if not pools:
            return self._fleet[1], {}, None
        known: dict[PoolKey, tuple[tuple[object, ...], int]] = {}
        views: dict[PoolKey, PoolView] = {}
        for name, ledger in ledgers.items():
            for pool in ledger.pools:
                key = (name, pool.pool.name)
                time = allocation_time(pool)
                view = charge_view(pool, time)
                before = self._pools.get(key)
                known[key] = before if before and before[0] == view else (view, self._new_view())
                views[key] = (known[key][1], time)
        self._pools = known
        self._last_views = views
        if last is None:
            return self._fleet[1], views, None
        changed = {key for key, view in views.items() if last.get(key) != view}
        changed.update(last.keys() - views.keys())
        return self._fleet[1], views, frozenset(changed)

    def _new_view(self) -> int:
        self._views += 1
        return self._views

    def size(self) -> int:
        """Entries held: about what the last two calls derived, never the history."""
        table = len(self.table.entries) if self.table is not None else 0
        return self.placement.size() + len(self.deployments) + table


#: `ScheduleMemo.views`: the fleet's retain view id, each pool's view, and the pools whose
#: views changed since the previous call (None: unknown, any may have).
_Views = tuple[int, dict[PoolKey, PoolView], frozenset[PoolKey] | None]


def _retain_view(ledger: ClusterLedger) -> tuple[object, ...]:
    """Everything `_retain` reads of a cluster: what decides keeping and re-stamping."""
    cluster = ledger.cluster
    return (
        cluster.name,
        tuple(sorted(cluster.labels.items())),
        cluster.taints,
        cluster.gateway_address,
        tuple((p.pool.name, p.class_id) for p in ledger.pools),
    )


def _ordered(snapshot: Snapshot, memo: ScheduleMemo) -> tuple[Deployment, ...]:
    """Raise for a key two deployments share, then for a name two clusters share; return
    the deployments in key order.

    Deployments of the same declared signatures in the same order as the last call that got
    this far have the same keys: those were unique, and their order is the one remembered."""
    deployments = snapshot.deployments
    known = memo.order
    signatures = tuple(map(SIGNATURE, deployments))
    if known is not None and known[0] == signatures and all(signatures):
        ordered = tuple(map(deployments.__getitem__, known[1]))
    else:
        keys = list(map(KEY_OF, deployments))
        if len(set(keys)) < len(keys):
            check_keys(deployments)
        # Sorted by (namespace, name) tuples made in C: no Python call per comparison key.
        positions = sorted(range(len(keys)), key=keys.__getitem__)
        ordered = tuple(map(deployments.__getitem__, positions))
        if not memo.for_one_call:
            memo.order = (signatures, tuple(positions))
    check_clusters(snapshot)
    return ordered


@dataclass(slots=True)
class _Fleetwide:
    """What retaining and charging read besides one deployment and its replicas, on one
    call: the ledgers, the memo, the fleet's retain view id, the pools' views and which of
    them changed since the previous call (None: unknown)."""

    ledgers: Mapping[ClusterName, ClusterLedger]
    memo: ScheduleMemo
    fleet: int
    views: Mapping[PoolKey, PoolView]
    changed: frozenset[PoolKey] | None


def _retain_all(
    deployments: Sequence[Deployment],
    replicas: tuple[Replica, ...],
    on: _Fleetwide,
    avoiding: Mapping[tuple[str, str], Avoiding],
) -> tuple[list[Retained], list[Charge], list[Replica]]:
    """Steps 2 and 3 for every deployment (in key order, with its replicas): per deployment,
    its decision when retaining settles it, else its work for the round; the charges of every
    kept replica; and the replicas whose deployment is gone, in snapshot order.

    With a kept memo and replicas that all declare distinct signatures, the replicas are
    grouped from the previous call's grouping (grouping.py) and a deployment whose
    signature and replicas' signatures are the previous call's, that drops no replica for
    `Snapshot.avoid`, on a fleet of the same retain view, is answered from the previous
    call's result for it (`_Table`): one lookup, and its charges checked only when a pool
    they pin changed its view. Anything else asks `_retain_and_charge`, as does every
    deployment when there is no grouping."""
    memo = on.memo
    last, memo.table = memo.table, None
    grouping = None
    if not memo.for_one_call:
        grouping = regroup(replicas, last.grouping if last is not None else None)
    if grouping is None:
        groups, orphans = by_deployment(deployments, replicas)
        outcomes: list[Retained] = []
        charges: list[Charge] = []
        for d, group in zip(deployments, groups, strict=True):
            mine = avoiding.get(KEY_OF(d), NOT_AVOIDING) if avoiding else NOT_AVOIDING
            retained, held = _retain_and_charge(d, group, on, mine.doomed)
            charges.extend(held.charges)
            outcomes.append(retained)
        return outcomes, charges, orphans
    # Deployments of the same signatures in the same order have the same keys (`_check`).
    signatures = tuple(map(SIGNATURE, deployments))
    is_same = last is not None and last.signatures == signatures and all(signatures)
    keys = last.keys if last is not None and is_same else tuple(map(KEY_OF, deployments))
    present = last.present if last is not None and is_same else frozenset(keys)
    # The previous call's entries hold for this call's retain view and replicas only where
    # the fleet's retain view is the same and the deployment's replicas are untouched.
    entries = {}
    if last is not None and last.fleet == on.fleet and grouping.touched is not None:
        entries = dict(last.entries)
        for key in grouping.touched:
            entries.pop(key, None)
    outcomes, charges = _retain_grouped(deployments, keys, grouping, entries, on, avoiding)
    for gone in entries.keys() - present:
        del entries[gone]
    if last is not None and is_same and grouping.touched is not None and not grouping.touched:
        left = last.orphans  # the same deployments, and the same replicas of each
    else:
        left = tuple(sorted(grouping.orphans(present), key=replica_order))
    memo.table = _Table(on.fleet, grouping, entries, signatures, keys, present, left)
    return outcomes, charges, list(left)


def _retain_grouped(
    deployments: Sequence[Deployment],
    keys: Sequence[DeploymentRef],
    grouping: Grouping,
    entries: dict[DeploymentRef, _Entry],
    on: _Fleetwide,
    avoiding: Mapping[tuple[str, str], Avoiding],
) -> tuple[list[Retained], list[Charge]]:
    """`_retain_all` with a grouping. `entries` holds the previous call's entries that may
    hold for this call (same retain view, replicas untouched); each deployment's is checked
    (its signature, nothing to drop for `Snapshot.avoid`, its charges when a pool they pin
    changed its view) and replaced by this call's, or dropped when that is not kept."""
    outcomes: list[Retained] = []
    charges: list[Charge] = []
    changed = on.changed
    for d, key in zip(deployments, keys, strict=True):
        mine = avoiding.get(key, NOT_AVOIDING) if avoiding else NOT_AVOIDING
        entry = entries.get(key)
        if entry is not None and entry[0] == d.signature and not mine.doomed:
            retained, held = entry[1], entry[2]
            if (changed is None or not held.pools.isdisjoint(changed)) and not held.hold(on.views):
                held = held_charges(retained.kept, on.ledgers, on.views)
                entries[key] = (entry[0], retained, held)
        else:
            group = grouping.group(key)
            retained, held = _retain_and_charge(d, group, on, mine.doomed)
            if d.signature and not _is_doomed(group, mine.doomed) and _is_unique(group):
                entries[key] = (d.signature, retained, held)
            elif entry is not None:
                del entries[key]
        if held.charges:
            charges.extend(held.charges)
        outcomes.append(retained)
    return outcomes, charges


def _is_unique(replicas: Sequence[Replica]) -> bool:
    """Whether no two of `replicas` share a name: then their canonical order is a function of
    the set (retaining sorts them), and a result for them holds whatever the snapshot order."""
    return len({r.name for r in replicas}) == len(replicas)


def _is_doomed(replicas: Sequence[Replica], doomed: Mapping[str, Reason]) -> bool:
    """Whether one of `replicas` is being re-placed (`Snapshot.avoid`)."""
    return bool(doomed) and any(r.name in doomed for r in replicas)


def _retain_and_charge(
    deployment: Deployment,
    replicas: Sequence[Replica],
    on: _Fleetwide,
    doomed: Mapping[str, Reason],
) -> tuple[Retained, HeldCharges]:
    """Steps 2 and 3 for one deployment: `_retain`, and what its kept replicas take from the
    ledger; answered from the memo while their inputs are unchanged (see `ScheduleMemo`).

    Keyed by the deployment's `Matcher.ref` with its latest result, which holds for replicas
    of the same declared signatures: with a replica that declares none, nothing is reused.

    Every entry a call uses it checks (or replaces by one derived in the call), so an entry
    carried from the previous call held for that call's pool views: its charges still hold
    when none of their pools' views `changed` since (a set operation instead of a walk over
    the windows, which is what most calls see)."""
    ledgers, memo, views = on.ledgers, on.memo, on.views
    if not replicas:
        # Nothing to retain or charge: cheaper to derive than to remember.
        return retain(deployment, (), ledgers, memo.placement.matcher), NO_CHARGES
    if _is_doomed(replicas, doomed):
        # A replica is being re-placed: derived, not remembered (it happens once).
        in_order = tuple(sorted(replicas, key=replica_order))
        retained = retain(deployment, in_order, ledgers, memo.placement.matcher, doomed)
        return retained, held_charges(retained.kept, ledgers, views)
    entries = memo.deployments
    ref = memo.placement.matcher.ref(deployment)
    found = entries.carry(ref)
    is_carried = found is not None
    if found is None:
        found = entries.get(ref)
    signatures = tuple(map(SIGNATURE, replicas))
    is_signed = all(signatures)
    is_same = (
        found is not None and found.fleet == on.fleet and found.replicas == signatures and is_signed
    )
    known = found if is_same else None
    if known is not None and (
        (is_carried and on.changed is not None and known.charges.pools.isdisjoint(on.changed))
        or known.charges.hold(views)
    ):
        return known.retained, known.charges
    if known is not None:
        retained = known.retained
    else:
        in_order = tuple(sorted(replicas, key=replica_order))
        retained = retain(deployment, in_order, ledgers, memo.placement.matcher)
    charges = held_charges(retained.kept, ledgers, views)
    # Stored even when not reusable (it replaces an entry the next call must not trust),
    # with no replicas then: no group of replicas is equal to none.
    remembered = _Remembered(on.fleet, signatures if is_signed else (), retained, charges)
    entries.put(ref, remembered)
    return retained, charges


class Shared:
    """`Derive` that keeps nothing across calls and shares, within each call, what alike
    deployments and pools derive alike (a `ScheduleMemo` made `for_one_call`): for a caller
    that plans once (`gpufleet plan`, B1)."""

    __slots__ = ()

    def begin(self, snapshot: Snapshot) -> tuple[tuple[Deployment, ...], Call]:
        return ScheduleMemo(for_one_call=True).begin(snapshot)


SHARED: Final = Shared()
