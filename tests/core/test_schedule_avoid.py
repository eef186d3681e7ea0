"""`Snapshot.avoid`: the re-placement backoff as an explicit input of the pure core.

A stuck replica named by an entry is dropped (never a running one), new replicas of that
deployment avoid the (cluster, pool) until the entry's `until`, and a diagnosis says so with
the `BackingOff` code and the time it ends. Entries at or before `now` change nothing, and
the order of the entries changes nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from builders import NOW, Outcome, cluster, deployment, key, outcome, settled, snapshot, stamp
from gpufleet.core.decision import ReasonCode
from gpufleet.core.model import Avoid, ClusterName, PoolName, ReplicaPoolStatus, ReplicaStatus
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.schedule import plan, schedule

A = cluster("a").pool("p", nodes=2, gpus=8).pool("q", nodes=2, gpus=8)
B = cluster("b").pool("p", nodes=2, gpus=8)
DEP = deployment("ml/x").replicas(1).engine(gpus=8)


def _avoid(cluster_name: str, pool: str | None, seconds: float, replica: str = "") -> Avoid:
    return Avoid(
        key("ml/x"),
        ClusterName(cluster_name),
        PoolName(pool) if pool is not None else None,
        NOW + timedelta(seconds=seconds),
        "PodsUnschedulable",
        "1 pod Unschedulable for 130s (stuckAfter 120s)",
        replica,
    )


def test_a_stuck_replica_is_dropped_and_placed_on_another_pool() -> None:
    stuck = stamp(DEP, A, 0, "p", status=ReplicaStatus(pods_scheduled=False))
    snap = dataclasses.replace(
        snapshot([A], [DEP], [stuck]), avoid=(_avoid("a", "p", 120, stuck.name),)
    )
    got = outcome(schedule(snap, NOW))
    # index 0 on a is still being deleted: the new replica takes index 1 on pool q.
    assert got == Outcome(created=("a/1:q",), dropped=("a/0:PodsUnschedulable",))
    # With b beside it, the replica goes wherever the fill order says, but never to a's p.
    snap = dataclasses.replace(snap, clusters=snapshot([A, B], [DEP], [stuck]).clusters)
    got = outcome(schedule(snap, NOW))
    assert got.dropped == ("a/0:PodsUnschedulable",)
    assert len(got.created) == 1 and got.created[0] != "a/1:p"


def test_a_running_replica_is_never_moved() -> None:
    running = settled(stamp(DEP, A, 0, "p"))
    snap = dataclasses.replace(
        snapshot([A, B], [DEP], [running]), avoid=(_avoid("a", "p", 120, running.name),)
    )
    assert outcome(schedule(snap, NOW)) == Outcome(retained=("a/0:p",))


def test_a_serving_replica_is_never_moved_though_a_pod_of_it_waits() -> None:
    serving_pool = ReplicaPoolStatus(PoolName("p"), None, (), 1, NOW, ready_pods=1)
    serving = stamp(
        DEP, A, 0, "p", status=ReplicaStatus(pods_scheduled=False, pools=(serving_pool,))
    )
    assert serving.status.is_serving
    snap = dataclasses.replace(
        snapshot([A, B], [DEP], [serving]), avoid=(_avoid("a", "p", 120, serving.name),)
    )
    assert outcome(schedule(snap, NOW)) == Outcome(retained=("a/0:p",))


def test_a_whole_cluster_is_avoided_and_the_diagnosis_says_backing_off() -> None:
    only_a = deployment("ml/x").replicas(1).engine(gpus=8)
    snap = dataclasses.replace(snapshot([A], [only_a]), avoid=(_avoid("a", None, 90),))
    decided = schedule(snap, NOW).for_deployment(key("ml/x"))
    assert decided.shortfall == 1
    assert decided.condition.reason == ReasonCode.BACKING_OFF.value
    assert decided.diagnosis is not None
    pools = decided.diagnosis.clusters[0].pools
    assert [(p.pool, p.reasons[0].code) for p in pools] == [
        ("p", ReasonCode.BACKING_OFF),
        ("q", ReasonCode.BACKING_OFF),
    ]
    assert pools[0].reasons[0].details["until"] == "2026-11-29T10:01:30Z"


def test_an_entry_that_ended_changes_nothing() -> None:
    base = snapshot([A, B], [DEP])
    ended = dataclasses.replace(base, avoid=(_avoid("a", "p", 0), _avoid("a", "q", -5)))
    assert schedule(ended, NOW) == schedule(base, NOW)


@pytest.mark.parametrize("reverse", [False, True])
def test_entry_order_changes_nothing_and_the_memo_changes_nothing(reverse: bool) -> None:
    stuck = stamp(DEP, A, 0, "p", status=ReplicaStatus(pods_scheduled=False))
    entries = (_avoid("a", "p", 120, stuck.name), _avoid("a", "q", 60), _avoid("b", "p", 30))
    snap = dataclasses.replace(
        snapshot([A, B], [DEP], [stuck]), avoid=entries[::-1] if reverse else entries
    )
    memo = ScheduleMemo()
    first = schedule(snap, NOW, memo=memo)
    assert first == schedule(snap, NOW, memo=memo) == plan(snap, NOW).decision
    assert outcome(first) == Outcome(
        dropped=("a/0:PodsUnschedulable",), condition=("False", "BackingOff")
    )


def test_one_deployments_backoff_does_not_refuse_its_twin() -> None:
    # ml/x and ml/y ask the same (one explain profile); only ml/x avoids a's pool. The fill
    # index shares failures between deployments of one profile: ml/x's must not be shared.
    only_p = cluster("a").pool("p", nodes=2, gpus=8)
    twin = deployment("ml/y").replicas(1).engine(gpus=8)
    snap = dataclasses.replace(snapshot([only_p], [DEP, twin]), avoid=(_avoid("a", "p", 120),))
    decision = schedule(snap, NOW)
    assert decision.for_deployment(key("ml/x")).shortfall == 1
    assert decision.for_deployment(key("ml/y")).shortfall == 0
