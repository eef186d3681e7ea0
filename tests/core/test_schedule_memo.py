"""A memo kept across `schedule` calls saves time and changes nothing.

The hub controller keeps one `ScheduleMemo` for its whole life and calls `schedule` on a fleet
that changes a little at a time, declaring each Deployment, Replica and Pool's signature
(uid and generation or resourceVersion): reuse across calls is keyed by those, never by
identity. So the property is checked on histories: a sequence of snapshots, each a small
change of the one before that keeps the objects it does not change (deployments added,
removed, scaled, redefined or rebuilt equal; replicas created, re-stamped, deleted or
re-observed; clusters relabelled, tainted, re-observed, re-classed; time passing), signed as
the controller signs them (a new signature for every new object: `Signer`), and every call
with the kept memo must equal a call with a fresh one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NOW, arch, cluster, deployment, observed, replica_from
from gpufleet.core.decision import Accounting, Decision
from gpufleet.core.model import (
    Bucket,
    Cluster,
    Deployment,
    DriverName,
    PoolObservation,
    Replica,
    ReplicaStatus,
    RolloutStrategy,
    SchedulingConfig,
    Snapshot,
    Taint,
    TaintEffect,
)
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.schedule import SnapshotError, plan, schedule

GPU = DriverName("gpu.nvidia.com")


class Signer:
    """Signs a snapshot as the controller does: each version of an object gets a signature
    of its own (here: a counter per object; the test holds the objects it signed, so an
    object is recognised, which the core itself never does)."""

    def __init__(self) -> None:
        self._signed: dict[int, tuple[object, object]] = {}
        self._next = 0

    def _sign(self, obj: Any) -> Any:
        found = self._signed.get(id(obj))
        if found is not None and found[0] is obj:
            return found[1]
        self._next += 1
        signed = replace(obj, signature=("v", self._next))
        self._signed[id(obj)] = (obj, signed)
        return signed

    def __call__(self, snap: Snapshot) -> Snapshot:
        clusters = tuple(
            replace(c, pools=tuple(self._sign(p) for p in c.pools)) for c in snap.clusters
        )
        return replace(
            snap,
            deployments=tuple(self._sign(d) for d in snap.deployments),
            replicas=tuple(self._sign(r) for r in snap.replicas),
            clusters=clusters,
        )


EXAMPLES = int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: How the controller applied the previous decision before the change: not at all, with the
#: pools reporting what it predicted, or with the replicas written and nothing reported yet.
SETTLES = ("none", "reported", "reported", "unreported")
CHANGES = (
    "add",
    "remove",
    "scale",
    "redefine",
    "rebuild",
    "observe",
    "relabel",
    "taint",
    "untaint",
    "gateway",
    "reclass",
    "delete-replica",
    "unobserve-replica",
    "recount-replica",
    "reallocate",
    "new-revision",
    "serve",
    "cordon-replica",
    "later",
    "nothing",
)


@st.composite
def a_deployment(draw: st.DrawFn, name: str) -> Deployment:
    d = deployment(name).replicas(draw(st.sampled_from([0, 1, 1, 2, 3])))
    shape = draw(st.sampled_from(["one", "pd", "gang", "arch"]))
    if shape == "one":
        d = d.engine(gpus=draw(st.sampled_from([1, 2, 4, 8])), copies=draw(st.integers(1, 2)))
    elif shape == "pd":
        d = d.pd(draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4])))
    elif shape == "gang":
        d = d.gang(leader_gpus=draw(st.sampled_from([0, 4])), worker_gpus=4)
    else:
        d = d.engine(gpus=draw(st.sampled_from([1, 2])), cel=(arch("Hopper"),))
    if draw(st.booleans()):
        d = d.select(zone="x")
    if draw(st.integers(0, 4)) == 0:
        d = d.tolerate("maintenance")
    if draw(st.integers(0, 6)) == 0:
        d = d.no_fill()
    # Rollouts (core/rollout.py): a revision, or none declared.
    strategy = RolloutStrategy(draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    return replace(d.build(), revision=draw(st.sampled_from(["", "r1"])), strategy=strategy)


@st.composite
def a_cluster(draw: st.DrawFn, name: str) -> Cluster:
    b = cluster(name).label("zone", draw(st.sampled_from(["x", "y"])))
    for p in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from([4, 8]))
        # Mostly room to place something: a change then has replicas to retain or drop.
        nodes = draw(st.integers(1, 3))
        obs = observed({gpus: draw(st.integers(1, nodes))}) if draw(st.booleans()) else None
        b = b.pool(
            f"p{p}",
            nodes=nodes,
            gpus=gpus,
            observation=obs,
            arch=draw(st.sampled_from(["Hopper", "Ampere"])),
        )
    return b.build()


def settle(snap: Snapshot, decision: Decision, *, report: bool) -> Snapshot:
    """The fleet after the controller applies `decision`: a replica whose placement did not
    change is the same object (the controller's parse cache), others are new; with `report`,
    pools report the histogram the decision predicted."""
    by_name = {r.name: r for r in snap.replicas}
    revisions = {d.key: d.revision for d in snap.deployments}
    replicas: list[Replica] = []
    for d in decision.deployments:
        for p in d.retained:
            old = by_name.get(p.name)
            is_same = old is not None and replica_from(p).engines == old.engines
            if old is not None and is_same:
                replicas.append(old)
            else:
                made_for = old.revision if old is not None else revisions[d.key]
                replicas.append(replace(replica_from(p), revision=made_for))
        replicas.extend(replace(replica_from(p), revision=revisions[d.key]) for p in d.created)
    kept = {d.key for d in decision.deployments}
    replicas.extend(r for r in snap.replicas if r.deployment not in kept)
    if not report:
        return replace(snap, replicas=tuple(replicas))
    states = {(p.cluster, p.pool): p for p in decision.pools}
    clusters = []
    for c in snap.clusters:
        pools = []
        for pool in c.pools:
            state = states[(c.name, pool.name)]
            if state.accounting is Accounting.FREE_GPU:
                buckets = tuple(Bucket(dict(b.free), b.nodes) for b in state.histogram)
                obs = PoolObservation(
                    observed_nodes=sum(b.nodes for b in buckets),
                    buckets=buckets,
                    observed_at=NOW,
                    last_allocation_time=NOW,
                )
                pool = replace(pool, observation=obs)
            pools.append(pool)
        clusters.append(replace(c, pools=tuple(pools)))
    return replace(snap, clusters=tuple(clusters), replicas=tuple(replicas))


#: Allocation times around NOW: what the pools' and the replicas' times are drawn from.
TIMES = (NOW - timedelta(seconds=60), NOW, NOW + timedelta(seconds=30), None)


def _pick(draw: st.DrawFn, items: tuple[object, ...]) -> int | None:
    return draw(st.integers(0, len(items) - 1)) if items else None


def change(draw: st.DrawFn, kind: str, snap: Snapshot, n: int) -> Snapshot:
    """One step of history: `snap` with one thing changed, every other object reused."""
    deps, clusters, replicas = snap.deployments, snap.clusters, snap.replicas
    d, c, r = _pick(draw, deps), _pick(draw, clusters), _pick(draw, replicas)

    def with_dep(new: Deployment) -> Snapshot:
        assert d is not None
        return replace(snap, deployments=(*deps[:d], new, *deps[d + 1 :]))

    def with_cluster(new: Cluster) -> Snapshot:
        assert c is not None
        return replace(snap, clusters=(*clusters[:c], new, *clusters[c + 1 :]))

    if kind == "add":
        return replace(snap, deployments=(*deps, draw(a_deployment(f"ml/n{n}"))))
    if kind == "remove" and d is not None:
        return replace(snap, deployments=deps[:d] + deps[d + 1 :])
    if kind == "scale" and d is not None:
        return with_dep(replace(deps[d], replicas=draw(st.integers(0, 4))))
    if kind == "redefine" and d is not None:
        return with_dep(replace(draw(a_deployment("ml/x")), key=deps[d].key))
    if kind == "rebuild" and d is not None:
        # Equal by value, a new object: what a status write does to a parsed manifest.
        return with_dep(replace(deps[d]))
    if kind == "observe" and c is not None:
        # A new report: a histogram, or none usable (whole-node), or no report at all.
        pools = tuple(
            replace(
                p,
                observation=draw(
                    st.sampled_from(
                        [
                            observed({p.devices[0].count: draw(st.integers(0, p.nodes))}),
                            observed(None, unusable="TooManyBuckets"),
                            None,
                        ]
                    )
                ),
            )
            for p in clusters[c].pools
        )
        return with_cluster(replace(clusters[c], pools=pools))
    if kind == "relabel" and c is not None:
        zone = "y" if clusters[c].labels.get("zone") == "x" else "x"
        return with_cluster(replace(clusters[c], labels={**clusters[c].labels, "zone": zone}))
    if kind == "taint" and c is not None:
        effect = draw(st.sampled_from([TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE]))
        taint = Taint("maintenance", effect)
        return with_cluster(replace(clusters[c], taints=(*clusters[c].taints, taint)))
    if kind == "untaint" and c is not None:
        return with_cluster(replace(clusters[c], taints=()))
    if kind == "gateway" and c is not None:
        gateway = draw(st.sampled_from(["", "10.0.0.2"]))
        return with_cluster(replace(clusters[c], gateway_address=gateway))
    if kind == "reclass" and c is not None:
        first, *rest = clusters[c].pools
        device = first.devices[0]
        was = device.attributes["architecture"]
        became = replace(was, value="Ampere" if was.value == "Hopper" else "Hopper")
        device = replace(device, attributes={**device.attributes, "architecture": became})
        pool = replace(first, devices=(device,))
        return with_cluster(replace(clusters[c], pools=(pool, *rest)))
    if kind == "new-revision" and d is not None:
        return with_dep(replace(deps[d], revision=draw(st.sampled_from(["", "r1", "r2"]))))
    if kind in ("serve", "cordon-replica") and r is not None:
        # The replica's pods Running and Ready (or on a cordoned node): a rollout reads it.
        was = replicas[r]
        pools = tuple(
            replace(p, ready_pods=8) if kind == "serve" else replace(p, draining_pods=1)
            for p in was.status.pools
        )
        status = replace(was.status, pools=pools, observed_generation=was.generation)
        served = replace(was, status=status)
        return replace(snap, replicas=(*replicas[:r], served, *replicas[r + 1 :]))
    if kind == "delete-replica" and r is not None:
        return replace(snap, replicas=replicas[:r] + replicas[r + 1 :])
    if kind == "recount-replica" and r is not None:
        # The agent re-counted the replica's pods, allocated at another time.
        status = replicas[r].status
        at = draw(st.sampled_from(TIMES))
        pools = tuple(replace(p, last_allocation_time=at) for p in status.pools)
        recounted = replace(replicas[r], status=replace(status, pools=pools))
        return replace(snap, replicas=(*replicas[:r], recounted, *replicas[r + 1 :]))
    if kind == "reallocate" and c is not None:
        # Only the pool's allocation time moves: what it holds of the replicas changes.
        pools = tuple(
            replace(
                p,
                observation=replace(
                    p.observation, last_allocation_time=draw(st.sampled_from(TIMES))
                ),
            )
            if p.observation is not None
            else p
            for p in clusters[c].pools
        )
        return with_cluster(replace(clusters[c], pools=pools))
    if kind == "unobserve-replica" and r is not None:
        unobserved = replace(replicas[r], status=ReplicaStatus())
        return replace(snap, replicas=(*replicas[:r], unobserved, *replicas[r + 1 :]))
    return snap


def a_start(data: st.DataObject, deployments: int) -> Snapshot:
    """A fleet of one to three of clusters a, b and c, and one to `deployments` deployments
    ml/d0, ml/d1, ...: where a history of changes starts."""
    names = data.draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    fleet = tuple(data.draw(a_cluster(n)) for n in sorted(names))
    count = data.draw(st.integers(1, deployments))
    return Snapshot(
        deployments=tuple(data.draw(a_deployment(f"ml/d{i}")) for i in range(count)), clusters=fleet
    )


# Histories are long and a change only matters when it meets replicas it affects: more examples.
@settings(SETTINGS, max_examples=3 * EXAMPLES)
@given(st.data())
def test_a_kept_memo_decides_as_a_fresh_one_over_a_history(data: st.DataObject) -> None:
    snap = a_start(data, deployments=3)
    memo = ScheduleMemo()
    now = NOW
    steps = st.tuples(st.sampled_from(SETTLES), st.sampled_from(CHANGES))
    history = data.draw(st.lists(steps, min_size=1, max_size=10))
    sign = Signer()
    for step, (how, kind) in enumerate([("none", "nothing"), *history]):
        decision = schedule(snap, now)
        signed = sign(snap)
        assert schedule(signed, now, memo=memo) == decision, f"step {step}: after {how}, {kind}"
        if how != "none":
            snap = settle(snap, decision, report=how == "reported")
        if kind == "later":
            now += timedelta(seconds=data.draw(st.sampled_from([30, 120, 600])))
        snap = change(data.draw, kind, snap, step)
    keys = frozenset(d.key for d in snap.deployments)
    fresh = plan(snap, now, record=True, explain=keys)
    assert plan(sign(snap), now, record=True, explain=keys, memo=memo) == fresh


@SETTINGS
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=12))
def test_a_memo_never_answers_for_another_object_with_a_reused_id(sizes: list[int]) -> None:
    # Each call gets a new, different deployment with the same key, and the previous one is
    # freed: CPython hands its memory (its id) to the next. The memo keys by signature (none
    # declared here: nothing is reused across calls), never by id.
    fleet = (cluster("a").pool("p0", nodes=2, gpus=8).pool("p1", nodes=2, gpus=4).build(),)
    memo = ScheduleMemo()
    for gpus in sizes:
        snap = Snapshot(
            deployments=(deployment("ml/x").replicas(2).engine(gpus=gpus).build(),),
            clusters=fleet,
        )
        assert schedule(snap, NOW, memo=memo) == schedule(snap, NOW)
        del snap


def test_a_memo_keeps_only_what_the_last_two_calls_used() -> None:
    fleet = (cluster("a").pool("p0", nodes=4, gpus=8).build(),)
    memo = ScheduleMemo()
    sign = Signer()
    for i in range(30):
        deps = tuple(
            deployment(f"ml/d{i}-{j}").replicas(1).engine(gpus=1 + j % 2).build() for j in range(5)
        )
        schedule(sign(Snapshot(deployments=deps, clusters=fleet)), NOW, memo=memo)
    last = sign(Snapshot(deployments=(deployment("ml/z").engine(gpus=2).build(),), clusters=fleet))
    schedule(last, NOW, memo=memo)
    schedule(last, NOW, memo=memo)
    once = ScheduleMemo()
    schedule(last, NOW, memo=once)
    # Nothing of the thirty earlier fleets is left: at most what one call on `last` derives.
    assert 0 < memo.size() <= once.size()


def test_a_kept_memo_rebuilds_pool_ledgers_when_the_config_changes() -> None:
    # The same pool signatures on every call: the memo copies their ledgers, which read the
    # config (a histogram over the bucket cap falls back to whole-node accounting).
    fleet = Signer()(
        Snapshot(
            clusters=(
                cluster("a")
                .pool("p0", nodes=3, gpus=8, observation=observed({8: 1, 4: 1, 2: 1}))
                .build(),
            )
        )
    ).clusters
    deps = (deployment("ml/x").replicas(2).engine(gpus=2).build(),)
    memo = ScheduleMemo()
    decisions = []
    for cap in (16, 2, 2, 16):
        config = SchedulingConfig(max_histogram_buckets=cap)
        snap = Snapshot(deployments=deps, clusters=fleet, config=config)
        decisions.append(schedule(snap, NOW, memo=memo))
        assert decisions[-1] == schedule(snap, NOW)
    assert decisions[0] != decisions[1]


def test_a_kept_memo_tells_apart_clusters_that_share_a_pool_object() -> None:
    # A ledger is kept per Pool signature; the same pool under two names is two ledgers.
    first = cluster("a").pool("p0", nodes=2, gpus=8, observation=observed({8: 2})).build()
    first = Signer()(Snapshot(clusters=(first,))).clusters[0]
    second = replace(first, name="b")
    deps = (deployment("ml/x").replicas(3).engine(gpus=8).build(),)
    memo = ScheduleMemo()
    for clusters in ((first, second), (second, first), (first,), (second,), (first, second)):
        snap = Snapshot(deployments=deps, clusters=clusters)
        assert schedule(snap, NOW, memo=memo) == schedule(snap, NOW)


def test_a_kept_memo_still_refuses_deployments_that_share_a_key() -> None:
    # The memo reuses the key order of the same deployment signatures; the same deployment
    # twice, or an equal one beside it, still shares a key.
    fleet = (cluster("a").pool("p0", nodes=2, gpus=8).build(),)
    d = replace(deployment("ml/x").replicas(1).engine(gpus=1).build(), signature=("d",))
    e = replace(deployment("ml/y").replicas(1).engine(gpus=1).build(), signature=("e",))
    memo = ScheduleMemo()
    for deployments in ((d, d), (d, replace(d)), (e, replace(d, key=e.key))):
        schedule(Snapshot(deployments=(d, e), clusters=fleet), NOW, memo=memo)
        with pytest.raises(SnapshotError, match="share this key"):
            schedule(Snapshot(deployments=deployments, clusters=fleet), NOW, memo=memo)
    assert schedule(Snapshot(deployments=(d,), clusters=fleet), NOW, memo=memo) == schedule(
        Snapshot(deployments=(d,), clusters=fleet), NOW
    )


@settings(SETTINGS, max_examples=2 * EXAMPLES)
@given(st.data())
def test_a_kept_memo_decides_as_a_fresh_one_when_replicas_come_and_go_unsigned(
    data: st.DataObject,
) -> None:
    # A caller may fail to sign a replica on one call and sign it again (the same signature)
    # on the next: the memo must not trust what it stored on the call the replica was
    # unsigned, nor what it stored before that, as the previous call's checked entry.
    snap = a_start(data, deployments=3)
    memo = ScheduleMemo()
    now = NOW
    steps = st.tuples(st.sampled_from(SETTLES), st.sampled_from(CHANGES))
    history = data.draw(st.lists(steps, min_size=1, max_size=10))
    sign = Signer()
    for step, (how, kind) in enumerate([("none", "nothing"), *history]):
        decision = schedule(snap, now)
        signed = sign(snap)
        unsigned = data.draw(st.sets(st.integers(0, max(0, len(signed.replicas) - 1))))
        replicas = tuple(
            replace(r, signature=()) if i in unsigned else r for i, r in enumerate(signed.replicas)
        )
        partly = replace(signed, replicas=replicas)
        assert schedule(partly, now, memo=memo) == decision, f"step {step}: after {how}, {kind}"
        if how != "none":
            snap = settle(snap, decision, report=how == "reported")
        if kind == "later":
            now += timedelta(seconds=data.draw(st.sampled_from([30, 120, 600])))
        snap = change(data.draw, kind, snap, step)
