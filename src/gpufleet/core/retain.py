"""Step 2 of `schedule` for one deployment: which of its replicas it keeps, re-stamped, and
which go (reference 2.8, 2.9), as a plain function of the deployment, its replicas and the
fleet's ledgers; and the `ReplicasScheduled` condition a decision carries.

Model (schedule.py step 2): a replica goes when its cluster is gone or no longer selected,
the cluster carries an untolerated NoExecute taint, its (cluster, index) is already kept,
re-resolving it against its pinned pools with the current definition fails, or it is being
re-placed (`doomed`) and none of its pods is scheduled or serving. Then drop from the most
loaded cluster (ties: the later name), highest index first.

Invariant: a function of its arguments only; reuse (core/reuse/) may answer it again for
inputs of the same declared signatures.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpufleet.core import diagnosis, rollout
from gpufleet.core.accounting import demand_shape
from gpufleet.core.charging import Kept, replica_order
from gpufleet.core.decision import (
    Condition,
    DeploymentDecision,
    Diagnosis,
    DroppedReplica,
    PlacedEngine,
    PlacedMember,
    Placement,
    Reason,
    ReasonCode,
)
from gpufleet.core.matching import DRAINS, Matcher, is_selected, untolerated
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    Replica,
    ReplicaEngine,
    ReplicaMember,
)
from gpufleet.core.placement import ClusterLedger
from gpufleet.core.rollout import RolloutStep

CONDITION_TYPE = "ReplicasScheduled"
#: The reason of a True condition (Modelplane HEAD: partial shortfall is still True).
REPLICAS_CREATED = "ReplicasCreated"

SIGNATURE: Final = operator.attrgetter("signature")
#: A deployment's key, and a replica's deployment's key, as a tuple of strings (which hashes
#: and compares without Python code, unlike a `DeploymentKey`), made in C.
KEY_OF: Final = operator.attrgetter("key.namespace", "key.name")
DEPLOYMENT_OF: Final = operator.attrgetter("deployment.namespace", "deployment.name")


@dataclass(frozen=True, slots=True)
class Retained:
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


def restamp(
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
            # A member sized in proportion keeps the figures its replica was sized with.
            sized = member.proportional and pinned.proportional
            members.append(
                ReplicaMember(
                    member.role,
                    pinned.pool,
                    member.worker_nodes,
                    match.resolved,
                    pinned.milli_cpu if sized else member.milli_cpu,
                    pinned.memory if sized else member.memory,
                    sized,
                )
            )
        if not any(m.is_claiming for m in members):
            return diagnosis.engine_cannot_claim(engine.name, 1)
        engines.append(ReplicaEngine(engine.name, tuple(members), engine.copies, engine.phase))
    return tuple(engines)


def pinned(replica: Replica, ledger: ClusterLedger) -> tuple[ReplicaEngine, ...] | Reason:
    """A replica of an older revision as it is, while every pool it pins is still there."""
    for engine in replica.engines:
        for member in engine.members:
            if member.pool not in ledger.by_name:
                return diagnosis.pool_missing(engine.name, member.role.value, member.pool)
    return replica.engines


def placed_engines(engines: tuple[ReplicaEngine, ...]) -> tuple[PlacedEngine, ...]:
    return tuple(
        PlacedEngine(
            e.name,
            e.copies,
            e.phase,
            tuple(
                PlacedMember(
                    m.role,
                    m.pool,
                    m.worker_nodes,
                    m.requests,
                    (m.milli_cpu, m.memory) if m.proportional else None,
                )
                for m in e.members
            ),
        )
        for e in engines
    )


def retain(
    deployment: Deployment,
    replicas: tuple[Replica, ...],
    ledgers: Mapping[ClusterName, ClusterLedger],
    matcher: Matcher,
    doomed: Mapping[str, Reason] | None = None,
) -> Retained:
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
            pinned(replica, ledger) if is_old else restamp(replica, deployment, ledger, matcher)
        )
        if isinstance(restamped, Reason):
            drop(replica, restamped)
            continue
        holders[identity] = replica.name
        kept.append((replica, restamped))
    desired = max(0, deployment.replicas)
    kept, trimmed, stepped = _trim(deployment, kept)
    for replica, reason in trimmed:
        drop(replica, reason)
    retained = sorted(
        (
            Placement(
                name=replica.name,
                deployment=deployment.key,
                cluster=replica.cluster,
                index=replica.index,
                engines=placed_engines(restamped),
                gateway_address=ledgers[replica.cluster].cluster.gateway_address,
            )
            for replica, restamped in kept
        ),
        key=lambda p: (p.cluster, p.index),
    )
    gone = tuple(sorted(dropped, key=lambda d: (d.name, d.cluster, d.index)))
    settled = None
    if len(retained) == desired and stepped is None:
        settled = DeploymentDecision(
            deployment.key,
            desired,
            tuple(retained),
            (),
            gone,
            0,
            None,
            condition(desired, desired, None),
        )
    return Retained(
        tuple(retained),
        gone,
        tuple(
            (replica, restamped, demand_shape(restamped) == demand_shape(replica.engines))
            for replica, restamped in kept
        ),
        settled,
        stepped,
    )


def _trim(
    deployment: Deployment, kept: list[tuple[Replica, tuple[ReplicaEngine, ...]]]
) -> tuple[
    list[tuple[Replica, tuple[ReplicaEngine, ...]]],
    list[tuple[Replica, Reason]],
    RolloutStep | None,
]:
    """The kept replicas down to what the deployment wants, and those that go with why: while
    a template change rolls, by this step of it (rollout.py); else, past `replicas`, from the
    most loaded cluster, highest index first."""
    gone: list[tuple[Replica, Reason]] = []
    stepped = rollout.plan(deployment, [r for r, _ in kept])
    if stepped is not None:
        going = {*stepped.superseded, *stepped.scaled_down}
        for position in sorted(going):
            gone.append(
                (kept[position][0], rollout.why_gone(deployment, kept[position][0], stepped))
            )
        return [k for p, k in enumerate(kept) if p not in going], gone, stepped
    desired = max(0, deployment.replicas)
    kept = list(kept)
    while len(kept) > desired:
        load = Counter(r.cluster for r, _ in kept)
        cluster = max(load, key=lambda c: (load[c], c))
        victim = max((k for k in kept if k[0].cluster == cluster), key=lambda k: k[0].index)
        kept.remove(victim)
        gone.append((victim[0], diagnosis.scaled_down(desired, len(kept))))
    return kept, gone, None


def condition(desired: int, placed: int, diag: Diagnosis | None) -> Condition:
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


def by_deployment(
    deployments: Sequence[Deployment], replicas: tuple[Replica, ...]
) -> tuple[list[list[Replica]], list[Replica]]:
    """Each deployment's replicas in snapshot order (retaining sorts them; a memo hit need
    not), and in canonical order the replicas whose deployment is gone (their devices are
    not, yet: they are still charged)."""
    # Keyed by (namespace, name): a tuple of strings hashes and compares without Python code.
    groups: dict[tuple[str, str], list[Replica]] = {key: [] for key in map(KEY_OF, deployments)}
    orphans: list[Replica] = []
    find = groups.get
    for replica, key in zip(replicas, map(DEPLOYMENT_OF, replicas), strict=True):
        group = find(key)
        if group is None:
            orphans.append(replica)
        else:
            group.append(replica)
    orphans.sort(key=replica_order)
    return list(groups.values()), orphans
