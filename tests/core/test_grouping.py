"""Grouping replicas by deployment from the previous call's grouping (core/reuse/grouping.py), and
`schedule` answering an unchanged deployment from the previous call's entry (`_Table`), decide
as `FRESH` does.

Oracles: a grouping made from the previous one gives each deployment exactly the replicas
(in snapshot order) that `FRESH` groups (`retain.by_deployment`); and a kept memo decides as a
fresh one over histories that also permute the snapshot's replicas, re-sign equal replicas,
add replicas that share a name, and avoid (re-place) replicas.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from test_schedule_memo import (
    CHANGES,
    EXAMPLES,
    SETTINGS,
    SETTLES,
    Signer,
    a_start,
    change,
    settle,
)

from builders import NOW, cluster, deployment, key, observed, replica_from
from gpufleet.core.model import Avoid, Replica, ReplicaStatus, Snapshot
from gpufleet.core.retain import by_deployment
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.reuse.grouping import Grouping, regroup
from gpufleet.core.schedule import plan, schedule


def _replica(deployment: str, cluster: str, index: int, signature: tuple[object, ...]) -> Replica:
    return Replica(
        name=f"{deployment.split('/')[1]}-{cluster}{index}",
        deployment=key(deployment),
        cluster=cluster,
        index=index,
        engines=(),
        signature=signature,
    )


def _fresh(replicas: tuple[Replica, ...], ref: tuple[str, str]) -> list[Replica]:
    """The deployment's replicas as `FRESH` groups them (`retain.by_deployment`)."""
    groups, _ = by_deployment([deployment("/".join(ref)).build()], replicas)
    return groups[0]


def _by_signature(replica: Replica) -> tuple[object, ...]:
    return replica.signature


def _check(grouping: Grouping, replicas: tuple[Replica, ...]) -> None:
    refs = {(r.deployment.namespace, r.deployment.name) for r in replicas}
    for ref in refs | {("ml", "nobody")}:
        # Equal signatures are equal replicas: compared by value and by signature; in
        # snapshot order when two share a name (retaining keeps the first of one identity).
        got = grouping.group(ref)
        want = _fresh(replicas, ref)
        if len({r.name for r in want}) == len(want):
            got.sort(key=_by_signature)
            want.sort(key=_by_signature)
        assert got == want
        assert [r.signature for r in got] == [r.signature for r in want]
    for kept in ({("ml", "a")}, refs, set()):
        assert grouping.orphans(kept) == [
            r for r in replicas if (r.deployment.namespace, r.deployment.name) not in kept
        ]


REPLICAS = st.lists(
    st.tuples(st.sampled_from(["ml/a", "ml/b", "ml/c", "ml/d"]), st.sampled_from("xy")),
    max_size=8,
)


@SETTINGS
@given(st.data())
def test_a_grouping_from_the_previous_one_groups_as_afresh(data: st.DataObject) -> None:
    made = 0

    def fresh(deployment: str, cluster: str) -> Replica:
        nonlocal made
        made += 1
        return _replica(deployment, cluster, made, ("v", made))

    replicas = tuple(fresh(*spec) for spec in data.draw(REPLICAS))
    last = regroup(replicas, None)
    assert last is not None and last.touched is None
    _check(last, replicas)
    for _ in range(data.draw(st.integers(1, 6))):
        step = data.draw(st.sampled_from(["permute", "add", "remove", "re-sign", "twin", "same"]))
        before = replicas
        if step == "permute":
            replicas = tuple(data.draw(st.permutations(replicas)))
        elif step == "add":
            at = data.draw(st.integers(0, len(replicas)))
            new = tuple(fresh(*spec) for spec in data.draw(REPLICAS))
            replicas = (*replicas[:at], *new, *replicas[at:])
        elif step == "remove" and replicas:
            drop = data.draw(st.sets(st.integers(0, len(replicas) - 1)))
            replicas = tuple(r for i, r in enumerate(replicas) if i not in drop)
        elif step == "re-sign" and replicas:
            # An equal replica under a new signature: a write the content did not change.
            at = data.draw(st.integers(0, len(replicas) - 1))
            made += 1
            resigned = replace(replicas[at], signature=("v", made))
            replicas = (*replicas[:at], resigned, *replicas[at + 1 :])
        elif step == "twin" and replicas:
            # Another replica of the same name, under a signature of its own.
            at = data.draw(st.integers(0, len(replicas) - 1))
            made += 1
            twin = replace(replicas[at], signature=("v", made))
            replicas = (*replicas[:at], twin, *replicas[at:])
        grouping = regroup(replicas, last)
        assert grouping is not None and grouping.touched is not None
        _check(grouping, replicas)
        # Every deployment whose signatures changed is touched (others may be too).
        for ref in {(r.deployment.namespace, r.deployment.name) for r in (*before, *replicas)}:
            was = {r.signature for r in _fresh(before, ref)}
            if was != {r.signature for r in _fresh(replicas, ref)}:
                assert ref in grouping.touched
        last = grouping


def test_no_grouping_without_a_distinct_signature_per_replica() -> None:
    a = _replica("ml/a", "x", 0, ("v", 1))
    b = _replica("ml/a", "x", 1, ("v", 2))
    assert regroup((a, b), None) is not None
    assert regroup((a, replace(b, signature=())), None) is None
    assert regroup((a, replace(b, signature=("v", 1))), None) is None
    last = regroup((a, b), None)
    assert regroup((a, replace(b, signature=())), last) is None
    assert regroup((), last) is not None


#: What the history adds to test_schedule_memo's changes: what a kept grouping must see.
MORE = ("permute", "re-sign", "twin", "stall", "avoid", "unavoid")


def _more(data: st.DataObject, kind: str, snap: Snapshot) -> Snapshot:
    replicas = snap.replicas
    r = data.draw(st.integers(0, len(replicas) - 1)) if replicas else None
    if kind == "permute":
        return replace(snap, replicas=tuple(data.draw(st.permutations(replicas))))
    if kind == "re-sign" and r is not None:
        # Equal by value, a new object: signed anew by `Signer`.
        return replace(snap, replicas=(*replicas[:r], replace(replicas[r]), *replicas[r + 1 :]))
    if kind == "twin" and r is not None:
        # Another replica of the same identity, observed otherwise: retaining keeps the one
        # first in snapshot order (their canonical order ties), and charges what it holds.
        twin = replace(replicas[r], status=ReplicaStatus())
        at = data.draw(st.integers(0, len(replicas)))
        return replace(snap, replicas=(*replicas[:at], twin, *replicas[at:]))
    if kind == "stall" and r is not None:
        # Its pods are no longer all scheduled: a later `avoid` naming it drops it.
        status = replace(replicas[r].status, pods_scheduled=False)
        return replace(
            snap, replicas=(*replicas[:r], replace(replicas[r], status=status), *replicas[r + 1 :])
        )
    if kind == "avoid" and r is not None:
        stalled = [i for i, one in enumerate(replicas) if not one.status.pods_scheduled]
        stuck = replicas[data.draw(st.sampled_from(stalled))] if stalled else replicas[r]
        until = NOW + timedelta(seconds=data.draw(st.sampled_from([60, 600])))
        entry = Avoid(stuck.deployment, stuck.cluster, None, until, "PodsUnschedulable", "stuck")
        return replace(snap, avoid=(*snap.avoid, replace(entry, replica=stuck.name)))
    if kind == "unavoid":
        return replace(snap, avoid=())
    return snap


@settings(SETTINGS, max_examples=3 * EXAMPLES)
@given(st.data())
def test_a_kept_memo_decides_as_a_fresh_one_with_replicas_permuted_re_signed_and_avoided(
    data: st.DataObject,
) -> None:
    snap = a_start(data, deployments=4)
    memo = ScheduleMemo()
    now = NOW
    steps = st.tuples(st.sampled_from(SETTLES), st.sampled_from(CHANGES + MORE * 2))
    history = data.draw(st.lists(steps, min_size=1, max_size=12))
    sign = Signer()
    for step, (how, kind) in enumerate([("none", "nothing"), *history]):
        decision = schedule(snap, now)
        assert schedule(sign(snap), now, memo=memo) == decision, f"step {step}: {how}, {kind}"
        if how != "none":
            snap = settle(snap, decision, report=how == "reported")
        if kind == "later":
            now += timedelta(seconds=data.draw(st.sampled_from([30, 120, 600])))
        snap = _more(data, kind, snap) if kind in MORE else change(data.draw, kind, snap, step)
    keys = frozenset(d.key for d in snap.deployments)
    fresh = plan(snap, now, record=True, explain=keys)
    assert plan(sign(snap), now, record=True, explain=keys, memo=memo) == fresh


def test_a_kept_memo_answers_an_unchanged_deployment_from_its_entry() -> None:
    # Not a timing: the entry the previous call left is the one this call answers from
    # (the same retain result object), while a changed deployment gets a new one.
    fleet = (cluster("a").pool("p0", nodes=4, gpus=8).build(),)
    deps = tuple(deployment(f"ml/d{i}").replicas(1).engine(gpus=1).build() for i in range(3))
    sign = Signer()
    memo = ScheduleMemo()
    first = sign(Snapshot(deployments=deps, clusters=fleet))
    decision = schedule(first, NOW, memo=memo)
    placed = tuple(replica_from(p) for d in decision.deployments for p in d.created)
    second = sign(Snapshot(deployments=deps, clusters=fleet, replicas=placed))
    assert schedule(second, NOW, memo=memo) == schedule(second, NOW)
    table = memo.table
    assert table is not None
    before = dict(table.entries)
    scaled = (*deps[:2], replace(deps[2], replicas=2))
    third = sign(Snapshot(deployments=scaled, clusters=fleet, replicas=placed))
    assert schedule(third, NOW, memo=memo) == schedule(third, NOW)
    after = memo.table
    assert after is not None
    assert after.entries[("ml", "d0")][1] is before[("ml", "d0")][1]
    assert after.entries[("ml", "d1")][1] is before[("ml", "d1")][1]
    assert after.entries[("ml", "d2")][1] is not before[("ml", "d2")][1]


def test_a_kept_memo_drops_an_unchanged_replica_once_an_avoid_entry_names_it() -> None:
    fleet = (
        cluster("a").pool("p0", nodes=4, gpus=8).build(),
        cluster("b").pool("p0", nodes=4, gpus=8).build(),
    )
    deps = (deployment("ml/d").replicas(1).engine(gpus=1).build(),)
    placed = schedule(Snapshot(deployments=deps, clusters=fleet), NOW).deployments[0].created[0]
    stalled = replace(replica_from(placed), status=ReplicaStatus())
    snap = Snapshot(deployments=deps, clusters=fleet, replicas=(stalled,))
    entry = Avoid(
        stalled.deployment,
        stalled.cluster,
        None,
        NOW + timedelta(minutes=5),
        "PodsUnschedulable",
        "stuck",
        stalled.name,
    )
    sign = Signer()
    memo = ScheduleMemo()
    for avoid in ((), (), (entry,), ()):
        decision = schedule(sign(replace(snap, avoid=avoid)), NOW, memo=memo)
        assert decision == schedule(replace(snap, avoid=avoid), NOW)
        assert bool(decision.deployments[0].dropped) == bool(avoid)


def test_a_kept_memo_keeps_the_first_of_two_replicas_of_one_identity_in_snapshot_order() -> None:
    # Two replicas of one identity, one counted by the pool's histogram and one not: the one
    # first in snapshot order is kept and charged, so swapping them changes the pool's state,
    # though the set of signatures is the same (the entry is not reused: `_is_unique`).
    pool = observed({8: 2})
    fleet = (cluster("a").pool("p0", nodes=2, gpus=8, observation=pool).build(),)
    deps = (deployment("ml/d").replicas(1).engine(gpus=8).build(),)
    placed = schedule(Snapshot(deployments=deps, clusters=fleet), NOW).deployments[0].created[0]
    counted = replica_from(placed)
    uncounted = replace(counted, status=ReplicaStatus())
    sign = Signer()
    memo = ScheduleMemo()
    decisions = []
    for replicas in ((counted, uncounted), (uncounted, counted), (counted, uncounted)):
        snap = Snapshot(deployments=deps, clusters=fleet, replicas=replicas)
        decisions.append(schedule(sign(snap), NOW, memo=memo))
        assert decisions[-1] == schedule(snap, NOW)
    assert decisions[0].pools != decisions[1].pools
