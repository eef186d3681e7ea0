"""A report stamped in the future (issue 17, point 4): beyond `max_clock_skew_s` it is not
accepted, fails closed (its cluster ages toward Expired as if silent), says so on the
cluster's status and in an Event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controller_builders import (
    SIM,
    at,
    brief,
    cluster,
    condition_of,
    deployment,
    gpu_class,
    hub,
    pool_obs,
    replica_obs,
)

from gpufleet.controller import Controller, observation_namespace
from gpufleet.controller.status import AgentReport, judge
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import EVENT, INFERENCE_CLUSTER, MODEL_REPLICA, POOL_OBSERVATION

HOUR = 3600.0


def _restamp(store: MemoryStore, observed_at: datetime) -> None:
    """The agent re-sends its pool report, stamped `observed_at`."""
    current: Any = store.get(POOL_OBSERVATION, "l4", observation_namespace("a"))
    status = {**current["status"], "observedAt": format_time(observed_at)}
    store.patch_status(POOL_OBSERVATION, "l4", observation_namespace("a"), status)


def _future_events(store: MemoryStore) -> list[Any]:
    return [e for e in store.list(EVENT) if e["reason"] == "FutureAgentReport"]


def _cluster(store: MemoryStore) -> Any:
    return store.get(INFERENCE_CLUSTER, "a")


def test_a_report_within_the_skew_tolerance_is_accepted() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(29)))
    Controller(store, SIM, "ctl").step(at(0))
    obj = _cluster(store)
    assert brief(condition_of(obj, "Ready")) == ("True", "AgentReporting")
    assert condition_of(obj, "ReportTimesValid") is None
    assert obj["status"]["gpuPools"][0]["observation"]["observedAt"] == format_time(at(29))


def test_a_first_report_from_the_future_is_not_accepted() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(HOUR)))
    controller = Controller(store, SIM, "ctl")
    for t in (0, 1, 2):
        controller.step(at(t))
    obj = _cluster(store)
    assert brief(condition_of(obj, "Ready")) == ("False", "AgentNotReporting")
    assert "observation" not in obj["status"]["gpuPools"][0]
    found = condition_of(obj, "ReportTimesValid")
    assert brief(found) == ("False", "FutureTimestamp")
    assert (
        found is not None and "30s" in found["message"] and "PoolObservation l4" in found["message"]
    )
    (event,) = _future_events(store)
    assert (event["type"], event["count"]) == ("Warning", 1)  # once, not every step
    assert event["involvedObject"]["kind"] == "InferenceCluster"


def test_a_report_stamped_hours_ahead_ages_its_cluster_to_expired_and_takes_nothing() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(0)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    assert brief(condition_of(_cluster(store), "Ready")) == ("True", "AgentReporting")
    _restamp(store, at(10 * HOUR))  # the agent's clock jumped ahead
    for t in (2, 100, 200, 301, 302):
        controller.step(at(t))
    obj = _cluster(store)
    # On main the report stayed Fresh for ten hours; now the cluster ages as if silent.
    assert brief(condition_of(obj, "Ready")) == ("False", "AgentExpired")
    assert obj["status"]["gpuPools"][0]["observation"]["state"] == "Expired"
    assert obj["status"]["agent"]["observedAt"] == format_time(at(0))
    assert brief(condition_of(obj, "ReportTimesValid")) == ("False", "FutureTimestamp")
    store.create(deployment())
    result = controller.step(at(303))
    assert list(store.list(MODEL_REPLICA)) == []
    assert result.refusals.total() == 1
    assert len(_future_events(store)) == 1

    _restamp(store, at(304))  # the clock is fixed: accepted again, the condition goes
    controller.step(at(305))
    controller.step(at(306))
    obj = _cluster(store)
    assert brief(condition_of(obj, "Ready")) == ("True", "AgentReporting")
    assert condition_of(obj, "ReportTimesValid") is None
    assert len(list(store.list(MODEL_REPLICA))) == 1


def test_a_future_replica_report_leaves_the_published_replica_status() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(0)), deployment())
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    (replica,) = store.list(MODEL_REPLICA)
    name = replica["metadata"]["name"]
    store.create(replica_obs(name, observed_at=at(HOUR), pods_scheduled=False))
    controller.step(at(2))
    controller.step(at(3))
    current = store.get(MODEL_REPLICA, name, replica["metadata"]["namespace"])
    assert brief(condition_of(current, "ModelPodsScheduled")) == ("False", "NotObserved")


def _report(name: str, epoch: int, observed_at: datetime) -> AgentReport:
    return AgentReport("PoolObservation", name, "ns", f"agent-{epoch}", epoch, observed_at, {})


def test_a_future_report_counts_for_no_epoch() -> None:
    reports = [_report("a", 1, at(0)), _report("b", 9, at(HOUR))]
    trust = judge(reports, None, horizon=at(30))
    assert trust.epoch == 1
    assert [r.name for r in trust.accepted] == ["a"]
    assert [r.name for r in trust.future] == ["b"]
    assert trust.rejected == ()
    assert judge(reports, None).epoch == 9  # without a horizon, as before


def test_a_future_report_of_an_older_epoch_is_rejected_as_stale() -> None:
    reports = [_report("a", 2, at(0)), _report("b", 1, at(HOUR))]
    trust = judge(reports, None, horizon=at(30))
    assert (trust.epoch, [r.name for r in trust.rejected], trust.future) == (2, ["b"], ())


def test_the_clusters_judged_every_step_are_those_whose_trust_moves_with_the_clock() -> None:
    """Oracle: the kept set (`ClusterStatuses.moving`) equals scanning every cluster's Trust, while a
    future report comes within the tolerance and its cluster's events come and go."""
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(120)))
    controller = Controller(store, SIM, "ctl")
    seen = []
    for t in (0, 1, 60, 100, 119, 130):
        controller.step(at(t))
        plain = {
            n
            for n, trust in controller.statuses.trusts.items()
            if trust.future or trust.is_contested
        }
        assert controller.statuses.moving == plain
        seen.append(bool(plain))
    assert seen[0] and not seen[-1]  # the case was exercised: it moved, then settled
