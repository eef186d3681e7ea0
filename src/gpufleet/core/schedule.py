"""`schedule(snapshot, now) -> Decision`: the whole fleet, one ledger, one pure function.

Model (DESIGN.md "Scheduling semantics" on top of reference section 2).
1. Build one ledger for the fleet: per cluster its freshness and node-choice policy, per pool
   a free-GPU histogram or a whole-node count (capacity.py).
2. Retain and scale down every deployment (2.8, 2.9): its replicas sorted by name; a replica
   goes when its cluster is gone or no longer selected, the cluster carries an untolerated
   NoExecute taint, its (cluster, index) is already kept, or re-resolving it against its pinned
   pools with the current definition fails, or a standing `Snapshot.avoid` entry names it and
   its pods are not all scheduled and none serves (re-placement: `PodsUnschedulable`,
   `PolicyDenied`; a running or serving replica is never moved). Kept replicas are re-stamped. Then drop from the most loaded
   cluster (ties: the later name), highest index first.
3. Charge every surviving replica of every deployment, and every replica whose deployment is
   not in the snapshot (they still hold devices), in canonical order (replica name), per pod
   (accounting.py, charging.py). Dropped and scaled-down replicas are not charged.
4. Fill round-robin: each round, each deployment in key order places one replica; a deployment
   stops at its first failure, and its diagnosis is taken against the ledger at that moment.
   One placement: among clusters that are selected, tolerated (NoSchedule and NoExecute),
   Ready, and not Expired (a gateway is optional), take the first that fits in order of (this
   deployment's replicas there, tie rank) (spread before pack); the index is the lowest
   unused one on that cluster (not one of a replica being re-placed). Ties are dealt like
   cards: the candidates in name order are read from an offset, each deployment starting
   where the previous one's pending replicas end, counting from the snapshot's replicas, so
   equal clusters receive equal shares. A pool the deployment avoids (`Snapshot.avoid`, until
   its time) is not tried: its verdict is `BackingOff`.
   `fill=False` retains only.
5. Every deployment with a shortfall gets a Diagnosis with a verdict per cluster of the fleet,
   and a `ReplicasScheduled` condition as Modelplane HEAD words it (2.13).

Invariants: pure and deterministic (no clock but `now`, no randomness, every input sequence
sorted before use, so permuting any snapshot tuple changes nothing); no two placements are
given the same free device; a deployment with shortfall > 0 has a non-empty diagnosis.

Memo. A caller that schedules the same fleet again and again (the hub controller, every step)
may pass one `ScheduleMemo` to every call and declare each input's signature (uid and
generation or resourceVersion; `Deployment.signature`): matching, the ledger of a pool seen
before, and steps 2 and 3 of a deployment whose signature, replicas and pools did not change,
are then answered from what an earlier call derived. Reuse is keyed by those signatures,
never by identity. The memo is an argument, not a global, and
changes no result: only the time a call takes (most of which, in a steady fleet, was steps 2
and 3 and the matching behind them).

Which way it errs: the ledger errs toward full (see accounting.py); round-robin with a stop at
the first failure may leave capacity another order would use (may refuse, never overcommits).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from gpufleet.core import diagnosis, rollout
from gpufleet.core.accounting import demand_shape
from gpufleet.core.avoiding import NOT_AVOIDING, REPLACED, Avoiding, avoiding_at
from gpufleet.core.capacity import (
    Freshness,
    PoolLedger,
    Vector,
    cluster_freshness,
    policy_for,
)
from gpufleet.core.charging import (
    NO_CHARGES,
    Charge,
    HeldCharges,
    Kept,
    PoolKey,
    PoolView,
    allocation_time,
    apply_charges,
    charge_view,
    charges_of,
    held_charges,
    replica_order,
)
from gpufleet.core.decision import (
    Condition,
    Decision,
    DeploymentDecision,
    Diagnosis,
    DroppedReplica,
    PlacedEngine,
    PlacedMember,
    Placement,
    Reason,
    ReasonCode,
    replica_name,
)
from gpufleet.core.fit import Assignment
from gpufleet.core.grouping import DeploymentRef, Grouping, regroup
from gpufleet.core.matching import DRAINS, Matcher, is_selected, untolerated
from gpufleet.core.memo import Generations
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    DeploymentKey,
    PoolName,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    SchedulingConfig,
    Snapshot,
)
from gpufleet.core.placement import (
    ClusterLedger,
    FillOrder,
    PlacementMemo,
    can_ever_host,
)
from gpufleet.core.rollout import RolloutStep
from gpufleet.core.verdicts import Diagnoser, gate_profile, gates

CONDITION_TYPE = "ReplicasScheduled"
#: The reason of a True condition (Modelplane HEAD: partial shortfall is still True).
REPLICAS_CREATED = "ReplicasCreated"


class SnapshotError(ValueError):
    """The snapshot is invalid; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class PoolTrace:
    """For tests and explain: a free-GPU pool's histogram before charging and every pod taken."""

    drivers: tuple[str, ...]
    initial: Mapping[Vector, int]
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    decision: Decision
    traces: Mapping[tuple[ClusterName, PoolName], PoolTrace] = field(default_factory=dict)
    #: For each deployment asked about with `explain` that has no shortfall: where one more
    #: replica could go, against the final ledger (the verdicts a shortfall would have had).
    one_more: Mapping[DeploymentKey, Diagnosis] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Retained:
    """What retaining decided for one deployment (step 2), before anything is placed.

    A function of the deployment, its replicas (in canonical order) and what retaining reads
    of the clusters (`_retain_view`), so a memo can answer it again while those are unchanged.
    """

    #: Kept replicas as placements, by (cluster, index).
    retained: tuple[Placement, ...]
    dropped: tuple[DroppedReplica, ...]
    #: Kept replicas to charge, in canonical order.
    kept: tuple[Kept, ...]
    #: The deployment's decision when retaining is all it needs (nothing pending), else None.
    settled: DeploymentDecision | None
    #: While a template change rolls: this step of it (core/rollout.py).
    rollout: RolloutStep | None = None


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A deployment's memo entry: what its retain result was derived from besides the
    deployment (the fleet's retain view id and its replicas' declared signatures in snapshot
    order; none when one of them declares none, so that it is never reused), that result,
    and its kept replicas' charges with the pool states they hold for."""

    fleet: int
    replicas: tuple[tuple[object, ...], ...]
    retained: _Retained
    charges: HeldCharges


#: A deployment's result in `_Table`: its signature, its retain result and its charges.
_Entry = tuple[tuple[object, ...], _Retained, HeldCharges]


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


def schedule(snapshot: Snapshot, now: datetime, *, memo: ScheduleMemo | None = None) -> Decision:
    """Decide, for every deployment of the snapshot, which replicas to keep, create and drop.

    `memo` (default: a fresh one) may be kept by a caller that calls again on a later snapshot
    of the same fleet: it only saves time, the decision is the same.
    """
    return plan(snapshot, now, memo=memo).decision


@dataclass(slots=True)
class _Work:
    """One deployment's progress through the round (private, mutable)."""

    deployment: Deployment
    retained: list[Placement]
    dropped: tuple[DroppedReplica, ...]
    created: list[Placement] = field(default_factory=list)
    counts: Counter[ClusterName] = field(default_factory=Counter)
    indices: dict[ClusterName, set[int]] = field(default_factory=dict)
    #: Its candidate clusters in fill order (placement.py), once `_find_candidates` ran.
    order: FillOrder | None = None
    is_stopped: bool = False
    diagnosis: Diagnosis | None = None
    #: Per cluster, the pools its new replicas avoid (re-placement backoff), with the reason.
    avoid: Mapping[ClusterName, Mapping[PoolName, Reason]] = field(default_factory=dict)
    rollout: RolloutStep | None = None

    @property
    def pending(self) -> int:
        if self.rollout is not None:
            return self.rollout.create - len(self.created)
        return max(0, self.deployment.replicas) - len(self.retained) - len(self.created)

    @classmethod
    def start(
        cls,
        deployment: Deployment,
        retained: _Retained,
        avoid: Mapping[ClusterName, Mapping[PoolName, Reason]],
    ) -> _Work:
        work = cls(
            deployment,
            list(retained.retained),
            retained.dropped,
            avoid=avoid,
            rollout=retained.rollout,
        )
        for placement in retained.retained:
            work.counts[placement.cluster] += 1
            work.indices.setdefault(placement.cluster, set()).add(placement.index)
        for gone in retained.dropped:
            if gone.reason.code in REPLACED or gone.reason.code is ReasonCode.SUPERSEDED:
                # Its name is not reused while it is being deleted: the new replica is new.
                work.indices.setdefault(gone.cluster, set()).add(gone.index)
        return work


def _check(snapshot: Snapshot, memo: ScheduleMemo) -> tuple[Deployment, ...]:
    """Raise for a key two deployments share, then for a name two clusters share; return
    the deployments in key order.

    Deployments of the same declared signatures in the same order as the last call that got
    this far have the same keys: those were unique, and their order is the one remembered."""
    deployments = snapshot.deployments
    known = memo.order
    signatures = tuple(map(_SIGNATURE, deployments))
    if known is not None and known[0] == signatures and all(signatures):
        ordered = tuple(map(deployments.__getitem__, known[1]))
    else:
        keys = list(map(_KEY_OF, deployments))
        if len(set(keys)) < len(keys):
            _check_keys(deployments)
        # Sorted by (namespace, name) tuples made in C: no Python call per comparison key.
        positions = sorted(range(len(keys)), key=keys.__getitem__)
        ordered = tuple(map(deployments.__getitem__, positions))
        if not memo.for_one_call:
            memo.order = (signatures, tuple(positions))
    names = Counter(c.name for c in snapshot.clusters)
    for name, n in sorted(names.items()):
        if n > 1:
            raise SnapshotError(f"clusters[{name}]", f"{n} clusters share this name")
    return ordered


_SIGNATURE: Final = operator.attrgetter("signature")
#: A deployment's key, and a replica's deployment's key, as a tuple of strings (which hashes
#: and compares without Python code, unlike a `DeploymentKey`), made in C.
_KEY_OF: Final = operator.attrgetter("key.namespace", "key.name")
_DEPLOYMENT_OF: Final = operator.attrgetter("deployment.namespace", "deployment.name")


def _check_keys(deployments: tuple[Deployment, ...]) -> None:
    """Raise for the first shared key (by key order); found only when there is one."""
    keys = Counter(d.key for d in deployments)
    for key, n in sorted(keys.items(), key=lambda kv: (kv[0].namespace, kv[0].name)):
        if n > 1:
            raise SnapshotError(f"deployments[{key}]", f"{n} deployments share this key")


def _build_ledgers(
    snapshot: Snapshot, now: datetime, memo: PlacementMemo, record: bool
) -> dict[ClusterName, ClusterLedger]:
    ledgers: dict[ClusterName, ClusterLedger] = {}
    config = snapshot.config
    memo.use_config(config)
    # Equal freshness values are shared (frozen): clusters that reported together have one.
    freshness: dict[Freshness, Freshness] = {}
    for cluster in sorted(snapshot.clusters, key=lambda c: c.name):
        pools: list[PoolLedger] = []
        seen: set[str] = set()
        for pool in cluster.pools:
            if pool.name in seen:
                continue
            seen.add(pool.name)
            pools.append(memo.pool_ledger(cluster.name, pool, config, record=record))
        fresh = cluster_freshness(cluster, now, config)
        ledgers[cluster.name] = ClusterLedger(
            cluster,
            tuple(pools),
            freshness.setdefault(fresh, fresh),
            policy_for(cluster, config),
            memo,
        )
    return ledgers


def _restamp(
    replica: Replica, deployment: Deployment, ledger: ClusterLedger, matcher: Matcher
) -> tuple[ReplicaEngine, ...] | Reason:
    """Re-resolve a replica against its pinned pools with the current definition (2.8)."""
    stamped = {e.name: e for e in replica.engines}
    current = [e.name for e in deployment.engines]
    if len(stamped) != len(replica.engines) or set(stamped) != set(current):
        return diagnosis.shape_changed(
            f"engines {sorted(stamped)} no longer match the deployment's {sorted(current)}"
        )
    engines: list[ReplicaEngine] = []
    ref = matcher.ref(deployment)
    for i, engine in enumerate(deployment.engines):
        old = stamped[engine.name]
        if [m.role for m in old.members] != [m.role for m in engine.members]:
            return diagnosis.shape_changed(f"engine {engine.name} members changed roles")
        members: list[ReplicaMember] = []
        for j, (member, pinned) in enumerate(zip(engine.members, old.members, strict=True)):
            pool = ledger.by_name.get(pinned.pool) if pinned.pool else None
            if pool is None:
                return diagnosis.pool_missing(engine.name, member.role.value, pinned.pool)
            match = matcher.match(member, pool.pool.devices, pool.class_id, (ref, i, j))
            if not match.is_match:
                return diagnosis.member_unmatched(
                    pinned.pool, member.role.value, match.unmatched_request, match.is_selector_miss
                )
            members.append(
                ReplicaMember(member.role, pinned.pool, member.worker_nodes, match.resolved)
            )
        if not any(m.is_claiming for m in members):
            return diagnosis.engine_cannot_claim(engine.name, 1)
        engines.append(ReplicaEngine(engine.name, tuple(members), engine.copies, engine.phase))
    return tuple(engines)


def _pinned(replica: Replica, ledger: ClusterLedger) -> tuple[ReplicaEngine, ...] | Reason:
    """A replica of an older revision as it is, while every pool it pins is still there."""
    for engine in replica.engines:
        for member in engine.members:
            if member.pool not in ledger.by_name:
                return diagnosis.pool_missing(engine.name, member.role.value, member.pool)
    return replica.engines


def _placed_engines(engines: tuple[ReplicaEngine, ...]) -> tuple[PlacedEngine, ...]:
    return tuple(
        PlacedEngine(
            e.name,
            e.copies,
            e.phase,
            tuple(PlacedMember(m.role, m.pool, m.worker_nodes, m.requests) for m in e.members),
        )
        for e in engines
    )


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
) -> tuple[list[DeploymentDecision | _Work], list[Charge], list[Replica]]:
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
        groups, orphans = _by_deployment(deployments, replicas)
        outcomes: list[DeploymentDecision | _Work] = []
        charges: list[Charge] = []
        for d, group in zip(deployments, groups, strict=True):
            mine = avoiding.get(_KEY_OF(d), NOT_AVOIDING) if avoiding else NOT_AVOIDING
            retained, held = _retain_and_charge(d, group, on, mine.doomed)
            charges.extend(held.charges)
            outcomes.append(retained.settled or _Work.start(d, retained, mine.pools))
        return outcomes, charges, orphans
    # Deployments of the same signatures in the same order have the same keys (`_check`).
    signatures = tuple(map(_SIGNATURE, deployments))
    is_same = last is not None and last.signatures == signatures and all(signatures)
    keys = last.keys if last is not None and is_same else tuple(map(_KEY_OF, deployments))
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
) -> tuple[list[DeploymentDecision | _Work], list[Charge]]:
    """`_retain_all` with a grouping. `entries` holds the previous call's entries that may
    hold for this call (same retain view, replicas untouched); each deployment's is checked
    (its signature, nothing to drop for `Snapshot.avoid`, its charges when a pool they pin
    changed its view) and replaced by this call's, or dropped when that is not kept."""
    outcomes: list[DeploymentDecision | _Work] = []
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
        outcomes.append(retained.settled or _Work.start(d, retained, mine.pools))
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
) -> tuple[_Retained, HeldCharges]:
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
        return _retain(deployment, (), ledgers, memo.placement.matcher), NO_CHARGES
    if _is_doomed(replicas, doomed):
        # A replica is being re-placed: derived, not remembered (it happens once).
        in_order = tuple(sorted(replicas, key=replica_order))
        retained = _retain(deployment, in_order, ledgers, memo.placement.matcher, doomed)
        return retained, held_charges(retained.kept, ledgers, views)
    entries = memo.deployments
    ref = memo.placement.matcher.ref(deployment)
    found = entries.carry(ref)
    is_carried = found is not None
    if found is None:
        found = entries.get(ref)
    signatures = tuple(map(_SIGNATURE, replicas))
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
        retained = _retain(deployment, in_order, ledgers, memo.placement.matcher)
    charges = held_charges(retained.kept, ledgers, views)
    # Stored even when not reusable (it replaces an entry the next call must not trust),
    # with no replicas then: no group of replicas is equal to none.
    remembered = _Remembered(on.fleet, signatures if is_signed else (), retained, charges)
    entries.put(ref, remembered)
    return retained, charges


def _retain(
    deployment: Deployment,
    replicas: tuple[Replica, ...],
    ledgers: Mapping[ClusterName, ClusterLedger],
    matcher: Matcher,
    doomed: Mapping[str, Reason] | None = None,
) -> _Retained:
    kept: list[tuple[Replica, tuple[ReplicaEngine, ...]]] = []
    dropped: list[DroppedReplica] = []
    holders: dict[tuple[ClusterName, int], str] = {}

    def drop(replica: Replica, reason: Reason) -> None:
        dropped.append(DroppedReplica(replica.name, replica.cluster, replica.index, reason))

    for replica in replicas:
        ledger = ledgers.get(replica.cluster)
        if ledger is None:
            drop(replica, diagnosis.cluster_missing(replica.cluster))
            continue
        stuck = doomed.get(replica.name) if doomed else None
        if stuck is not None and not (replica.status.pods_scheduled or replica.status.is_serving):
            drop(replica, stuck)  # it cannot run there; a serving replica is never moved
            continue
        if not is_selected(ledger.cluster, deployment.cluster_selector):
            drop(replica, diagnosis.not_selected(deployment.cluster_selector))
            continue
        draining = untolerated(ledger.cluster.taints, deployment.tolerations, DRAINS)
        if draining:
            drop(replica, diagnosis.tainted(draining))
            continue
        identity = (replica.cluster, replica.index)
        if identity in holders:
            drop(replica, diagnosis.duplicate(replica.cluster, replica.index, holders[identity]))
            continue
        # An old revision runs as it is until replaced (rollout.py): never re-stamped.
        is_old = not rollout.is_current(replica, deployment)
        restamped = (
            _pinned(replica, ledger) if is_old else _restamp(replica, deployment, ledger, matcher)
        )
        if isinstance(restamped, Reason):
            drop(replica, restamped)
            continue
        holders[identity] = replica.name
        kept.append((replica, restamped))
    desired = max(0, deployment.replicas)
    stepped = rollout.plan(deployment, [r for r, _ in kept])
    if stepped is not None:
        going = {*stepped.superseded, *stepped.scaled_down}
        for position in sorted(going):
            drop(kept[position][0], rollout.why_gone(deployment, kept[position][0], stepped))
        kept = [k for position, k in enumerate(kept) if position not in going]
    while stepped is None and len(kept) > desired:
        load = Counter(r.cluster for r, _ in kept)
        cluster = max(load, key=lambda c: (load[c], c))
        victim = max((k for k in kept if k[0].cluster == cluster), key=lambda k: k[0].index)
        kept.remove(victim)
        drop(victim[0], diagnosis.scaled_down(desired, len(kept)))
    retained = sorted(
        (
            Placement(
                name=replica.name,
                deployment=deployment.key,
                cluster=replica.cluster,
                index=replica.index,
                engines=_placed_engines(restamped),
                gateway_address=ledgers[replica.cluster].cluster.gateway_address,
            )
            for replica, restamped in kept
        ),
        key=lambda p: (p.cluster, p.index),
    )
    gone = tuple(sorted(dropped, key=lambda d: (d.name, d.cluster, d.index)))
    settled = None
    if len(retained) == desired and stepped is None:
        condition = _condition(desired, desired, None)
        settled = DeploymentDecision(
            deployment.key, desired, tuple(retained), (), gone, 0, None, condition
        )
    return _Retained(
        tuple(retained),
        gone,
        tuple(
            (replica, restamped, demand_shape(restamped) == demand_shape(replica.engines))
            for replica, restamped in kept
        ),
        settled,
        stepped,
    )


def _find_candidates(
    works: list[_Work],
    ledgers: Mapping[ClusterName, ClusterLedger],
    memo: PlacementMemo,
    config: SchedulingConfig,
    dealt: int,
) -> None:
    """Set where each deployment to fill may go, in fill order.

    Ties (clusters with as many of its replicas) are dealt like cards: each deployment starts
    where the previous one's pending replicas end, counting from `dealt` (the replicas the
    fleet already has), so equal clusters receive equal shares, call after call.

    Only deployments that still need replicas ask: in the steady state most have all they
    want, and asking costs a match of every engine against every class of pool. Which
    clusters may take a deployment depends only on its selector and tolerations (the gates)
    and on which pool shapes it can match: deployments that share them share the scan, which
    asks one cluster of each profile (`verdicts.gate_profile`) rather than every cluster.
    """
    if not works:
        return
    profiles: dict[int, tuple[ClusterLedger, list[ClusterName]]] = {}
    for name, ledger in ledgers.items():
        profiles.setdefault(gate_profile(ledger, memo), (ledger, []))[1].append(name)
    by_shape = {ledger.shape: ledger for ledger in ledgers.values()}
    eligible: dict[object, tuple[tuple[ClusterName, ...], dict[ClusterName, int]]] = {}
    for work in works:
        d = work.deployment
        gate_key = (tuple(sorted(d.cluster_selector.items())), d.tolerations)
        hostable = frozenset(
            shape for shape, sample in by_shape.items() if can_ever_host(sample, d, memo)
        )
        found = eligible.get((gate_key, hostable))
        if found is None:
            names = tuple(
                sorted(
                    name
                    for sample, members in profiles.values()
                    if sample.shape in hostable
                    and is_selected(sample.cluster, d.cluster_selector)
                    and not gates(sample, d, config.expire_after_s)
                    for name in members
                )
            )
            found = eligible[(gate_key, hostable)] = (names, {n: i for i, n in enumerate(names)})
        work.order = FillOrder(*found, work.counts, dealt)
        dealt += work.pending


def _fill_one(
    work: _Work, ledgers: Mapping[ClusterName, ClusterLedger], memo: PlacementMemo
) -> bool:
    deployment = work.deployment
    order = work.order
    assert order is not None

    def lowest_index(cluster: ClusterName) -> int:
        used = work.indices.get(cluster, ())
        return next(i for i in range(len(used) + 1) if i not in used)

    def owner(cluster: ClusterName) -> str:
        return replica_name(deployment.key.name, cluster, lowest_index(cluster))

    placed = order.place(ledgers, deployment, memo, owner, work.avoid)
    if placed is None:
        return False
    cluster, fitted = placed
    index = lowest_index(cluster)
    work.indices.setdefault(cluster, set()).add(index)
    work.counts[cluster] += 1
    work.created.append(
        Placement(
            name=replica_name(deployment.key.name, cluster, index),
            deployment=deployment.key,
            cluster=cluster,
            index=index,
            engines=fitted.engines or (),
            gateway_address=ledgers[cluster].cluster.gateway_address,
        )
    )
    return True


def _condition(desired: int, placed: int, diag: Diagnosis | None) -> Condition:
    if placed >= desired:
        return Condition(
            CONDITION_TYPE, "True", REPLICAS_CREATED, f"Scheduled {placed} of {desired}"
        )
    counts = diag.blocking_counts() if diag is not None else []
    summary = diag.summary(counts) if diag is not None else ""
    if placed == 0:
        code = diag.dominant_code(counts) if diag is not None else None
        reason = code.value if code is not None else ReasonCode.NO_CLUSTERS.value
        return Condition(
            CONDITION_TYPE, "False", reason, f"0 of {desired} replicas scheduled: {summary}"
        )
    return Condition(
        CONDITION_TYPE, "True", REPLICAS_CREATED, f"Scheduled {placed} of {desired}: {summary}"
    )


def _by_deployment(
    deployments: Sequence[Deployment], replicas: tuple[Replica, ...]
) -> tuple[list[list[Replica]], list[Replica]]:
    """Each deployment's replicas in snapshot order (retaining sorts them; a memo hit need
    not), and in canonical order the replicas whose deployment is gone (their devices are
    not, yet: they are still charged)."""
    # Keyed by (namespace, name): a tuple of strings hashes and compares without Python code.
    groups: dict[tuple[str, str], list[Replica]] = {key: [] for key in map(_KEY_OF, deployments)}
    orphans: list[Replica] = []
    find = groups.get
    for replica, key in zip(replicas, map(_DEPLOYMENT_OF, replicas), strict=True):
        group = find(key)
        if group is None:
            orphans.append(replica)
        else:
            group.append(replica)
    orphans.sort(key=replica_order)
    return list(groups.values()), orphans


def _fill(
    works: list[_Work],
    ledgers: Mapping[ClusterName, ClusterLedger],
    memo: PlacementMemo,
    snapshot: Snapshot,
    diagnoser: Diagnoser,
) -> None:
    """Step 4: round-robin over the deployments with replicas pending."""
    active = [w for w in works if w.deployment.fill and w.pending > 0]
    _find_candidates(active, ledgers, memo, snapshot.config, len(snapshot.replicas))
    while active:
        for work in active:
            if not _fill_one(work, ledgers, memo):
                work.is_stopped = True
                work.diagnosis = diagnoser.diagnose(work.deployment, work.avoid)
        active = [w for w in active if not w.is_stopped and w.pending > 0]


def _decide(work: _Work, diagnoser: Diagnoser) -> DeploymentDecision:
    desired = max(0, work.deployment.replicas)
    placed = len(work.retained) + len(work.created)
    shortfall = max(0, desired - placed)
    diag = work.diagnosis
    progress = None
    if work.rollout is not None:
        progress = rollout.progress(work.deployment, work.rollout, len(work.created), diag)
        placed = min(placed, desired)  # surge replicas are not counted twice
    if shortfall > 0 and diag is None:
        diag = diagnoser.diagnose(work.deployment, work.avoid)
    if shortfall == 0:
        diag = None
    return DeploymentDecision(
        key=work.deployment.key,
        desired=desired,
        retained=tuple(work.retained),
        created=tuple(sorted(work.created, key=lambda p: (p.cluster, p.index))),
        dropped=work.dropped,
        shortfall=shortfall,
        diagnosis=diag,
        condition=_condition(desired, placed, diag),
        rollout=progress,
    )


def plan(
    snapshot: Snapshot,
    now: datetime,
    *,
    record: bool = False,
    explain: frozenset[DeploymentKey] = frozenset(),
    memo: ScheduleMemo | None = None,
) -> Plan:
    """`schedule`, plus (with `record`) every pod the ledger took, for tests and explain, and
    (for the deployments in `explain` that got every replica) the verdicts for one more.

    `memo` (default: a fresh one): see `ScheduleMemo`; it never changes the result."""
    if memo is None:
        memo = ScheduleMemo(for_one_call=True)
    deployments = _check(snapshot, memo)
    memo.advance()
    ledgers = _build_ledgers(snapshot, now, memo.placement, record)
    fleet, pool_views, changed = memo.views(ledgers, pools=bool(snapshot.replicas))
    placing = memo.placement
    initial = (
        {(c, p.pool.name): dict(p.free) for c, cl in ledgers.items() for p in cl.pools}
        if record
        else {}
    )

    # Per deployment, its decision when retaining settles it, else its work for the round.
    avoiding = avoiding_at(snapshot, now, ledgers) if snapshot.avoid else {}
    on = _Fleetwide(ledgers, memo, fleet, pool_views, changed)
    outcomes, charges, orphans = _retain_all(deployments, snapshot.replicas, on, avoiding)
    for replica in orphans:
        ledger = ledgers.get(replica.cluster)
        if ledger is not None:
            charges.extend(charges_of(replica, replica.engines, True, ledger))
    apply_charges(charges, ledgers)
    diagnoser = Diagnoser(ledgers, placing, snapshot.config)
    _fill([w for w in outcomes if isinstance(w, _Work)], ledgers, placing, snapshot, diagnoser)

    decisions = [_decide(o, diagnoser) if isinstance(o, _Work) else o for o in outcomes]

    pools = []
    traces: dict[tuple[ClusterName, PoolName], PoolTrace] = {}
    for name, ledger in ledgers.items():
        for pool in sorted(ledger.pools, key=lambda p: p.pool.name):
            pools.append(placing.pool_state(pool, ledger.freshness.state))
            if record and pool.is_free_gpu and pool.log is not None:
                traces[(name, pool.pool.name)] = PoolTrace(
                    pool.drivers,
                    initial[(name, pool.pool.name)],
                    tuple(a for a in pool.log if isinstance(a, Assignment)),
                )
    one_more: dict[DeploymentKey, Diagnosis] = {}
    if explain:
        satisfied = {d.key for d in decisions if d.shortfall == 0}
        one_more = {
            d.key: diagnoser.diagnose(
                d, avoiding.get((d.key.namespace, d.key.name), NOT_AVOIDING).pools
            )
            for d in deployments
            if d.key in explain and d.key in satisfied
        }
    return Plan(Decision(tuple(decisions), tuple(pools)), traces, one_more)
