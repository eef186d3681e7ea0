"""Which replica is stuck, and the backoff memory (controller/replace.py): a function of the
replica's status, its object's conditions, the config and `now`; the Replacer counts each
stuck replica once and doubles the backoff per repeat up to its cap."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.replace import Replacer, is_waiting, running_condition, stuck_pools
from gpufleet.core.model import (
    ClusterName,
    DeploymentKey,
    PoolName,
    Replica,
    ReplicaPoolStatus,
    ReplicaStatus,
    ScaleUp,
)
from gpufleet.store import Obj

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CONFIG = ControllerConfig()  # stuckAfter 120s, scaleUpTimeout 900s, backoff 120s to 1800s


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def replica(
    name: str = "llm-0",
    *,
    since: datetime | None = None,
    pods: int = 1,
    scale_up: ScaleUp | None = None,
    scale_up_at: datetime | None = None,
    scheduled: bool = False,
    observed_generation: int | None = 1,
    ready: int = 0,
) -> Replica:
    pool = ReplicaPoolStatus(
        PoolName("l4"), None, (), pods, since, scale_up, scale_up_at, ready_pods=ready
    )
    status = ReplicaStatus(scheduled, observed_generation, (pool,))
    return Replica(name, DeploymentKey("ml", "llm"), ClusterName("east"), 0, (), 1, status)


NO_CONDITIONS: Obj = {"status": {}}
DENIED: Obj = {
    "status": {
        "conditions": [
            {
                "type": "ModelPodsScheduled",
                "status": "False",
                "reason": "PolicyDenied",
                "message": "cluster east's agent refused it: hostNetwork",
            }
        ]
    }
}


@dataclass(frozen=True)
class Case:
    name: str
    replica: Replica
    obj: Obj
    stuck: list[tuple[str | None, str]]
    due: datetime | None


CASES = [
    Case("not yet", replica(since=ago(100)), NO_CONDITIONS, [], ago(100 - 120)),
    Case(
        "past stuckAfter",
        replica(since=ago(121)),
        NO_CONDITIONS,
        [("l4", "PodsUnschedulable")],
        None,
    ),
    Case(
        "a node is coming: waits scaleUpTimeout from the verdict",
        replica(since=ago(300), scale_up=ScaleUp.TRIGGERED, scale_up_at=ago(290)),
        NO_CONDITIONS,
        [],
        ago(290 - 900),
    ),
    Case(
        "the node never came",
        replica(since=ago(1000), scale_up=ScaleUp.TRIGGERED, scale_up_at=ago(901)),
        NO_CONDITIONS,
        [("l4", "PodsUnschedulable")],
        None,
    ),
    Case(
        "no node will come",
        replica(since=ago(121), scale_up=ScaleUp.NOT_TRIGGERED, scale_up_at=ago(110)),
        NO_CONDITIONS,
        [("l4", "PodsUnschedulable")],
        None,
    ),
    Case(
        "running is never moved", replica(since=ago(999), scheduled=True), NO_CONDITIONS, [], None
    ),
    Case("no time given", replica(since=None), NO_CONDITIONS, [], None),
    Case(
        "a replica that serves is never stuck",
        replica(since=ago(999), ready=1),
        NO_CONDITIONS,
        [],
        None,
    ),
    Case(
        "another generation counted",
        replica(since=ago(999), observed_generation=None),
        NO_CONDITIONS,
        [],
        None,
    ),
    Case("refused by policy: at once", replica(pods=0), DENIED, [(None, "PolicyDenied")], None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stuck_pools(case: Case) -> None:
    found, due = stuck_pools(case.replica, case.obj, NOW, CONFIG)
    assert [(pool, cause) for pool, cause, _ in found] == case.stuck
    assert due == case.due
    # The controller follows only waiting replicas: every one that is or may become stuck.
    if case.due is not None or case.stuck:
        assert is_waiting(case.replica, case.obj)


def test_the_message_says_what_and_why_with_numbers() -> None:
    stuck = replica(since=ago(125), pods=2, scale_up=ScaleUp.NOT_TRIGGERED, scale_up_at=ago(115))
    [(_, _, message)] = stuck_pools(stuck, NO_CONDITIONS, NOW, CONFIG)[0]
    assert message == (
        "2 claiming pod(s) on pool l4 Unschedulable for 2m5s since 2026-12-01T11:57:55Z "
        "(stuckAfter 2m); the autoscaler adds no node (NotTriggerScaleUp at "
        "2026-12-01T11:58:05Z)"
    )


def test_the_backoff_doubles_per_repeat_up_to_its_cap_and_each_replica_counts_once() -> None:
    replacer = Replacer(CONFIG)
    backoffs = []
    now = NOW
    for i in range(6):
        stuck = replica(f"llm-{i}", since=now - timedelta(seconds=200))
        assert replacer.update(
            {("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, now
        )
        named = [a for a in replacer.avoid if a.replica]
        assert [a.replica for a in named] == [stuck.name]
        backoffs.append((named[0].until - now).total_seconds())
        # The same stuck replica a step later is not counted again.
        later = now + timedelta(seconds=5)
        assert not replacer.update(
            {("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, later
        )
        # Deleted meanwhile; the next one is stuck there again just after the backoff ended.
        now = now + timedelta(seconds=backoffs[-1] + 1)
        replacer.update({}, set(), now)
    assert backoffs == [120, 240, 480, 960, 1800, 1800]


def test_replicas_stuck_in_one_episode_share_one_backoff() -> None:
    replacer = Replacer(CONFIG)
    stuck = [replica(f"llm-{i}", since=ago(200)) for i in range(4)]
    waiting = {("ml", r.name): (r, NO_CONDITIONS) for r in stuck}
    assert replacer.update(waiting, set(waiting), NOW)
    named = sorted(a.replica for a in replacer.avoid if a.replica)
    assert named == ["llm-0", "llm-1", "llm-2", "llm-3"]
    # stuckAfter's documented first backoff, for all four: one episode, not four repeats.
    assert {(a.until - NOW).total_seconds() for a in replacer.avoid} == {120}
    # A fifth stuck a minute later, while the backoff stands, joins the episode.
    later = NOW + timedelta(seconds=60)
    fifth = replica("llm-4", since=later - timedelta(seconds=200))
    waiting[("ml", "llm-4")] = (fifth, NO_CONDITIONS)
    replacer.update(waiting, set(waiting), later)
    assert {a.until for a in replacer.avoid} == {NOW + timedelta(seconds=120)}
    # Stuck there again after it ended: the backoff doubles.
    after = NOW + timedelta(seconds=121)
    again = replica("llm-5", since=after - timedelta(seconds=200))
    replacer.update({("ml", "llm-5"): (again, NO_CONDITIONS)}, {("ml", "llm-5")}, after)
    [entry] = [a for a in replacer.avoid if a.replica == "llm-5"]
    assert (entry.until - after).total_seconds() == 240


def test_what_ended_is_forgotten_and_the_count_starts_again() -> None:
    replacer = Replacer(CONFIG)
    stuck = replica(since=ago(200))
    replacer.update({("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, NOW)
    assert replacer.due == NOW + timedelta(seconds=120)
    ended = NOW + timedelta(seconds=121)
    assert replacer.update({}, set(), ended)
    assert replacer.avoid == () and replacer.due is None
    # Long after the backoff ended (its cap), a new stuck replica starts at 120s again.
    much_later = NOW + timedelta(seconds=120 + 1800)
    again = dataclasses.replace(stuck, name="llm-9")
    replacer.update({("ml", "llm-9"): (again, NO_CONDITIONS)}, {("ml", "llm-9")}, much_later)
    [named, _] = sorted(replacer.avoid, key=lambda a: a.replica, reverse=True)
    assert (named.until - much_later).total_seconds() == 120


def test_replicas_running_tells_placed_from_running() -> None:
    assert running_condition(2, 2, [], [])["reason"] == "AllReplicasRunning"
    waiting = [("llm-1", {"reason": "PodsUnschedulable"})]
    condition = running_condition(2, 1, waiting, [])
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "PodsUnschedulable",
        "1 of 2 replicas running; 1 placed but not all pods scheduled: llm-1 (PodsUnschedulable)",
    )
    assert running_condition(1, 0, [("llm-2", None)], [])["reason"] == "PodsPending"


def test_a_running_replica_is_not_even_followed() -> None:
    assert not is_waiting(replica(since=ago(999), scheduled=True), NO_CONDITIONS)
    assert not is_waiting(replica(pods=0), NO_CONDITIONS)


def test_replicas_running_reads_short_until_whole() -> None:
    # The stuck replica went and its replacement has nowhere to go: never True "0 of 0".
    replacer = Replacer(CONFIG)
    stuck = replica(since=ago(200))
    replacer.update({("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, NOW)
    standing = replacer.replaced("ml", "llm", NOW)
    condition = running_condition(0, 0, [], standing, desired=1, short_reason="BackingOff")
    assert (condition["status"], condition["reason"]) == ("False", "BackingOff")
    assert condition["message"].startswith("0 of 1 replicas running; 0 of 1 placed; re-placed:")
    assert condition["message"].endswith("backing off until 2026-12-01T12:02:00Z")
    # Placed again, not yet running: Replaced while the backoff stands.
    again = running_condition(1, 0, [("llm-1", None)], standing, desired=1)
    assert again["reason"] == "Replaced"
    # Short for another reason: the diagnosis' code; whole and running: True.
    assert running_condition(1, 1, [], [], 2, "InsufficientGPU")["reason"] == "InsufficientGPU"
    assert running_condition(2, 2, [], [], 2)["status"] == "True"


def test_the_backoff_grows_across_pools_and_clusters_per_deployment() -> None:
    """Issue 30.3: one deployment stuck on pool after pool, cluster after cluster, backs off
    longer each time (its budget is the deployment's), not `replace_backoff_s` on each; another
    deployment keeps its own count."""
    replacer = Replacer(CONFIG)
    now = NOW
    backoffs = []
    for i, cluster in enumerate(["east", "west", "north", "south"]):
        stuck = dataclasses.replace(
            replica(f"llm-{i}", since=now - timedelta(seconds=200)), cluster=ClusterName(cluster)
        )
        replacer.update({("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, now)
        [named] = [a for a in replacer.avoid if a.replica == stuck.name]
        assert named.cluster == cluster
        backoffs.append((named.until - now).total_seconds())
        now += timedelta(seconds=30)  # re-placed onto the next cluster, stuck there too
    assert backoffs == [120, 240, 480, 960]  # on main: 120 on each
    other = dataclasses.replace(
        replica("web-0", since=now - timedelta(seconds=200)), deployment=DeploymentKey("ml", "web")
    )
    replacer.update({("ml", "web-0"): (other, NO_CONDITIONS)}, {("ml", "web-0")}, now)
    [named] = [a for a in replacer.avoid if a.replica == "web-0"]
    assert (named.until - now).total_seconds() == 120


def test_a_deployment_stuck_again_backs_off_on_every_cluster() -> None:
    """Issue 30.3 across clusters: its first episode avoids the pool it was stuck on (it may
    try another cluster at once); stuck again within the horizon, its backoff stands on every
    cluster (cluster ""), so with 20 pools it is not re-placed every `stuck_after_s` (50 on 20
    clusters: 28 an hour each before, 5 after; bench/bench_churn_clusters.py)."""
    replacer = Replacer(CONFIG)
    now = NOW
    for i, cluster in enumerate(["east", "west"]):
        stuck = dataclasses.replace(
            replica(f"llm-{i}", since=now - timedelta(seconds=200)), cluster=ClusterName(cluster)
        )
        replacer.update({("ml", stuck.name): (stuck, NO_CONDITIONS)}, {("ml", stuck.name)}, now)
        now += timedelta(seconds=30)
    backoffs = sorted((a.cluster, a.pool) for a in replacer.avoid if not a.replica)
    assert backoffs == [("", None), ("east", PoolName("l4"))]  # on main: ("west", "l4")
