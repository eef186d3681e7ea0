"""Fleet-level rolling updates (core/rollout.py): the arithmetic of one step, and what
`schedule` does with a deployment whose kept replicas run an older revision."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from builders import (
    NOW,
    Outcome,
    cluster,
    deployment,
    observed,
    outcome,
    settled,
    snapshot,
    stamp,
)
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    Replica,
    RolloutStrategy,
)
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.rollout import Candidate, RolloutStep, step
from gpufleet.core.schedule import schedule

# --- the arithmetic -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    desired: int
    surge: int
    unavailable: int
    #: Kept replicas: "n" current whole, "s" current starting, "o" old serving, "i" old idle.
    kept: str
    want: tuple[tuple[int, ...], int] | None  # (superseded positions, create)


CASES = [
    Case("no old replica: no rollout", 2, 1, 0, "nn", None),
    Case("full, make-before-break: one surge, nothing goes", 4, 1, 0, "oooo", ((), 1)),
    Case("surge starting: wait", 4, 1, 0, "oooos", ((), 0)),
    Case("surge whole: one old goes, the next surge", 4, 1, 0, "oooon", ((3,), 1)),
    Case("maxUnavailable 1: one old goes first", 4, 1, 1, "oooo", ((3,), 2)),
    Case("maxUnavailable 1, replacement starting: no more", 3, 1, 1, "oos", ((), 1)),
    Case("maxUnavailable 1, no surge: one at a time", 3, 0, 1, "oos", ((), 0)),
    Case("an old replica that serves nothing goes first", 2, 1, 0, "oin", ((1,), 1)),
    Case("all whole: every old goes", 2, 1, 0, "oonn", ((0, 1), 0)),
    Case("both 0 reads as surge 1", 2, 0, 0, "oo", ((), 1)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_step(case: Case) -> None:
    candidates = [
        Candidate(i, ClusterName("a"), i, kind in "ns", kind in "no")
        for i, kind in enumerate(case.kept)
    ]
    got = step(case.desired, RolloutStrategy(case.surge, case.unavailable), candidates)
    assert (None if got is None else (got.superseded, got.create)) == case.want


def test_never_fewer_available_than_desired_minus_max_unavailable() -> None:
    # Every mix of up to 5 kept replicas: what stays available after the step is at least
    # desired - maxUnavailable, or all that was available (never less than before).
    import itertools

    for n in range(1, 6):
        for kinds in itertools.product("nsoi", repeat=n):
            for desired, surge, unavailable in itertools.product(range(1, 5), range(3), range(3)):
                candidates = [
                    Candidate(i, ClusterName("a"), i, k in "ns", k in "no")
                    for i, k in enumerate(kinds)
                ]
                got = step(desired, RolloutStrategy(surge, unavailable), candidates)
                if got is None:
                    continue
                assert isinstance(got, RolloutStep)
                before = sum(c.is_available for c in candidates)
                gone = set(got.superseded) | set(got.scaled_down)
                after = sum(c.is_available for c in candidates if c.position not in gone)
                assert after >= min(before, desired - unavailable), (kinds, desired)


# --- through schedule ---------------------------------------------------------------------

# Observed pools: a's two nodes are taken by the old replicas, b's are free.
FULL = cluster("a").pool("p", nodes=2, gpus=8, observation=observed({0: 2})).reported(NOW)
ROOM = cluster("b").pool("p", nodes=2, gpus=8, observation=observed({8: 2})).reported(NOW)


def _deployment(unavailable: int = 0) -> Deployment:
    return dataclasses.replace(
        deployment("ml/x").replicas(2).engine(gpus=8).build(),
        revision="new",
        strategy=RolloutStrategy(1, unavailable),
    )


def _serving(replica: Replica, revision: str) -> Replica:
    """The replica whole: every pod allocated, Running and Ready, made for `revision`."""
    done = settled(replica)
    pools = tuple(dataclasses.replace(p, ready_pods=1) for p in done.status.pools)
    status = dataclasses.replace(done.status, pools=pools)
    return dataclasses.replace(done, status=status, revision=revision)


def _old(dep: Deployment, index: int, builder: object = FULL) -> Replica:
    return _serving(stamp(dep, builder, index, "p"), "old")  # type: ignore[arg-type]


def test_a_full_pool_waits_with_the_numbers_and_drops_nothing() -> None:
    dep = _deployment()
    decided = schedule(snapshot([FULL], [dep], [_old(dep, 0), _old(dep, 1)]), NOW)
    mine = decided.for_deployment(dep.key)
    assert outcome(mine) == Outcome(retained=("a/0:p", "a/1:p"))
    assert mine.rollout is not None
    assert (mine.rollout.updated, mine.rollout.old) == (0, 2)
    condition = mine.rollout.condition
    assert (condition.status, condition.reason) == ("False", "NoRoomForSurge")
    assert "0/1 clusters fit: 1 InsufficientGPU" in condition.message
    assert "best node has 0 free" in condition.message, condition.message


def test_max_unavailable_one_lets_one_old_replica_go_first() -> None:
    dep = _deployment(unavailable=1)
    decided = schedule(snapshot([FULL], [dep], [_old(dep, 0), _old(dep, 1)]), NOW)
    mine = decided.for_deployment(dep.key)
    assert outcome(mine) == Outcome(
        retained=("a/0:p",), dropped=("a/1:Superseded",), condition=("True", "ReplicasCreated")
    )
    assert mine.rollout is not None and mine.rollout.condition.reason == "RollingOut"


def test_room_elsewhere_takes_the_surge_and_old_replicas_stay() -> None:
    dep = _deployment()
    decided = schedule(snapshot([FULL, ROOM], [dep], [_old(dep, 0), _old(dep, 1)]), NOW)
    mine = decided.for_deployment(dep.key)
    assert outcome(mine) == Outcome(retained=("a/0:p", "a/1:p"), created=("b/0:p",))
    assert mine.rollout is not None and mine.rollout.updated == 1
    # Once the new one is whole, one old replica goes and the next new one is placed.
    new = _serving(stamp(dep, ROOM, 0, "p"), "new")
    replicas = [_old(dep, 0), _old(dep, 1), new]
    memo = ScheduleMemo()
    for _ in range(2):  # the memo changes nothing
        mine = schedule(snapshot([FULL, ROOM], [dep], replicas), NOW, memo=memo).for_deployment(
            dep.key
        )
        assert outcome(mine) == Outcome(
            retained=("a/0:p", "b/0:p"), created=("b/1:p",), dropped=("a/1:Superseded",)
        )


def test_old_replicas_are_not_restamped_with_the_new_template() -> None:
    dep = _deployment()
    old = _old(dep, 0)
    bigger = dataclasses.replace(
        deployment("ml/x").replicas(1).engine(gpus=4).build(), revision="new"
    )
    half = cluster("a").pool("p", nodes=2, gpus=8, observation=observed({0: 1, 8: 1}))
    mine = schedule(snapshot([half.reported(NOW)], [bigger], [old]), NOW).for_deployment(dep.key)
    (kept,) = mine.retained
    assert kept.engines[0].members[0].requests[0].count == 8  # as it runs, not 4
    assert mine.created and mine.created[0].engines[0].members[0].requests[0].count == 4


def test_a_change_that_only_scales_is_no_rollout() -> None:
    dep = dataclasses.replace(_deployment(), replicas=3)
    current = [_serving(stamp(dep, ROOM, i, "p"), "new") for i in range(2)]
    mine = schedule(snapshot([FULL, ROOM], [dep], current), NOW).for_deployment(dep.key)
    assert mine.rollout is None and len(mine.created) == 1


def test_unknown_revisions_roll_nothing() -> None:
    dep = dataclasses.replace(_deployment(), revision="")
    mine = schedule(snapshot([FULL], [dep], [_old(dep, 0), _old(dep, 1)]), NOW).for_deployment(
        dep.key
    )
    assert mine.rollout is None and outcome(mine) == Outcome(retained=("a/0:p", "a/1:p"))
