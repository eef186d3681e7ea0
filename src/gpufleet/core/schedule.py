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
4. Fill round-robin: each round, each deployment in fair order (`_fair_order`: namespaces
   interleaved, the one holding fewer replicas first; key order within one) places one replica; a deployment
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

Reuse. `derive` (core/derive.py; default `FRESH`, which derives everything plainly and is
the specification) answers what the algorithm may reuse: the deployments' key order, each
pool's ledger as built, each final pool state, and steps 2 and 3 per deployment. A caller
that plans the same fleet again and again (the hub controller, every step) passes one
`ScheduleMemo` (core/reuse/), which keeps those across calls by the signatures the inputs
declare (uid and generation or resourceVersion), never by identity. It changes no result:
only the time a call takes.

Which way it errs: the ledger errs toward full (see accounting.py); round-robin with a stop at
the first failure may leave capacity another order would use (may refuse, never overcommits).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.core import rollout
from gpufleet.core.avoiding import NOT_AVOIDING, REPLACED, avoiding_at
from gpufleet.core.capacity import (
    Freshness,
    PoolLedger,
    Vector,
    cluster_freshness,
    policy_for,
)
from gpufleet.core.charging import apply_charges
from gpufleet.core.decision import (
    Decision,
    DeploymentDecision,
    Diagnosis,
    DroppedReplica,
    Placement,
    Reason,
    ReasonCode,
    replica_name,
)
from gpufleet.core.derive import FRESH, Call, Derive, SnapshotError
from gpufleet.core.fill_order import Filling
from gpufleet.core.fit import Assignment
from gpufleet.core.matching import is_selected
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    DeploymentKey,
    PoolName,
    SchedulingConfig,
    Snapshot,
)
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    can_ever_host,
)
from gpufleet.core.retain import CONDITION_TYPE, REPLICAS_CREATED, Retained, condition
from gpufleet.core.rollout import RolloutStep
from gpufleet.core.verdicts import Diagnosing, gate_profile, gates

__all__ = [
    "CONDITION_TYPE",
    "FRESH",
    "REPLICAS_CREATED",
    "Derive",
    "Plan",
    "PoolTrace",
    "SnapshotError",
    "plan",
    "schedule",
]


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


def schedule(
    snapshot: Snapshot, now: datetime, *, derive: Derive = FRESH, memo: Derive | None = None
) -> Decision:
    """Decide, for every deployment of the snapshot, which replicas to keep, create and drop.

    `derive` (or, by its older name, `memo`; default `FRESH`) may be a `ScheduleMemo` kept
    by a caller that calls again on a later snapshot of the same fleet: it only saves time,
    the decision is the same.
    """
    return plan(snapshot, now, derive=derive if memo is None else memo).decision


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
    order: Filling | None = None
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
        retained: Retained,
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


def _build_ledgers(
    snapshot: Snapshot, now: datetime, call: Call, record: bool
) -> dict[ClusterName, ClusterLedger]:
    ledgers: dict[ClusterName, ClusterLedger] = {}
    config = snapshot.config
    memo = call.placement
    # Equal freshness values are shared (frozen): clusters that reported together have one.
    freshness: dict[Freshness, Freshness] = {}
    for cluster in sorted(snapshot.clusters, key=lambda c: c.name):
        pools: list[PoolLedger] = []
        seen: set[str] = set()
        for pool in cluster.pools:
            if pool.name in seen:
                continue
            seen.add(pool.name)
            pools.append(call.pool_ledger(cluster.name, pool, config, record=record))
        fresh = cluster_freshness(cluster, now, config)
        ledgers[cluster.name] = ClusterLedger(
            cluster,
            tuple(pools),
            freshness.setdefault(fresh, fresh),
            policy_for(cluster, config),
            memo,
        )
    return ledgers


def _find_candidates(
    works: list[_Work],
    ledgers: Mapping[ClusterName, ClusterLedger],
    call: Call,
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
    memo = call.placement
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
        work.order = call.fill_order(*found, work.counts, dealt)
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


def _fill(
    works: list[_Work],
    ledgers: Mapping[ClusterName, ClusterLedger],
    call: Call,
    snapshot: Snapshot,
    diagnoser: Diagnosing,
) -> None:
    """Step 4: round-robin over the deployments with replicas pending."""
    memo = call.placement
    active = [w for w in works if w.deployment.fill and w.pending > 0]
    _find_candidates(active, ledgers, call, snapshot.config, len(snapshot.replicas))
    active = _fair_order(active, snapshot)
    while active:
        for work in active:
            if not _fill_one(work, ledgers, memo):
                work.is_stopped = True
                work.diagnosis = diagnoser.diagnose(work.deployment, work.avoid)
        active = [w for w in active if not w.is_stopped and w.pending > 0]


def _fair_order(active: list[_Work], snapshot: Snapshot) -> list[_Work]:
    """The order each fill round takes the deployments in: namespaces interleaved.

    Each namespace's deployments keep key order among themselves; the i-th of every namespace
    goes before the (i+1)-th of any, and among the i-th, the namespace holding fewer of the
    snapshot's replicas goes first (then namespace name), as Kueue's fair sharing takes the
    lower share first. So one namespace's many deployments cannot take every free GPU before
    another namespace's first one is tried (issue 30.3). With one namespace, key order."""
    namespaces = {w.deployment.key.namespace for w in active}
    if len(namespaces) < 2:
        return active
    held = Counter(
        r.deployment.namespace for r in snapshot.replicas if r.deployment.namespace in namespaces
    )
    rank: Counter[str] = Counter()
    keyed: list[tuple[int, int, str, int]] = []
    for i, work in enumerate(active):
        ns = work.deployment.key.namespace
        keyed.append((rank[ns], held[ns], ns, i))
        rank[ns] += 1
    return [active[k[3]] for k in sorted(keyed)]


def _decide(work: _Work, diagnoser: Diagnosing) -> DeploymentDecision:
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
        condition=condition(desired, placed, diag),
        rollout=progress,
    )


def plan(
    snapshot: Snapshot,
    now: datetime,
    *,
    record: bool = False,
    explain: frozenset[DeploymentKey] = frozenset(),
    derive: Derive = FRESH,
    memo: Derive | None = None,
) -> Plan:
    """`schedule`, plus (with `record`) every pod the ledger took, for tests and explain, and
    (for the deployments in `explain` that got every replica) the verdicts for one more.

    `derive` (or `memo`, its older name; default `FRESH`): see core/derive.py; any
    implementation returns what `FRESH` returns."""
    deployments, call = (derive if memo is None else memo).begin(snapshot)
    ledgers = _build_ledgers(snapshot, now, call, record)
    initial = (
        {(c, p.pool.name): dict(p.free) for c, cl in ledgers.items() for p in cl.pools}
        if record
        else {}
    )

    # Per deployment, its decision when retaining settles it, else its work for the round.
    avoiding = avoiding_at(snapshot, now, ledgers) if snapshot.avoid else {}
    results, charges, _ = call.retain_all(deployments, snapshot.replicas, ledgers, avoiding)
    outcomes: list[DeploymentDecision | _Work] = []
    for d, retained in zip(deployments, results, strict=True):
        if retained.settled is not None:
            outcomes.append(retained.settled)
            continue
        mine = avoiding.get((d.key.namespace, d.key.name), NOT_AVOIDING) if avoiding else None
        outcomes.append(_Work.start(d, retained, mine.pools if mine else {}))
    apply_charges(charges, ledgers)
    diagnoser = call.diagnoser(ledgers, snapshot.config)
    _fill([w for w in outcomes if isinstance(w, _Work)], ledgers, call, snapshot, diagnoser)

    decisions = [_decide(o, diagnoser) if isinstance(o, _Work) else o for o in outcomes]

    pools = []
    traces: dict[tuple[ClusterName, PoolName], PoolTrace] = {}
    for name, ledger in ledgers.items():
        for pool in sorted(ledger.pools, key=lambda p: p.pool.name):
            pools.append(call.pool_state(pool, ledger.freshness.state))
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
