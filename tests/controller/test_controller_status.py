"""Published status: cluster gpuPools from observations, trust by lease epoch, replica status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pytest
from controller_builders import (
    SIM,
    T0,
    at,
    brief,
    cluster,
    condition_of,
    gpu_class,
    hub,
    pool_obs,
    replica_obs,
)

from gpufleet.controller import Controller, ControllerConfig, observation_namespace
from gpufleet.controller.status import AgentReport, judge
from gpufleet.store import Obj, format_time
from gpufleet.store.port import (
    EVENT,
    INFERENCE_CLUSTER,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

CLASS_DEVICES = gpu_class()["spec"]["devices"]


@dataclass(frozen=True)
class PoolCase:
    id: str
    observation: Obj | None
    now: datetime
    want_pool: Obj
    want_ready: tuple[str, str]
    config: ControllerConfig = SIM
    pools: tuple[Obj, ...] = ({"name": "l4", "className": "l4-4x", "nodeCount": 2},)


def _observation(age_s: int, state: str, **extra: object) -> Obj:
    return {
        "observedAt": format_time(T0),
        "ageSeconds": age_s,
        "state": state,
        "observedNodes": 2,
        "freeDevices": [
            {"free": {"gpu.nvidia.com": 1}, "nodes": 1},
            {"free": {"gpu.nvidia.com": 4}, "nodes": 1},
        ],
        "lastAllocationTime": format_time(at(-2)),
        "excludedNodes": {"Cordoned": 0},
        "extendedResources": {},
        "conditions": [{"type": "HistogramAvailable", "status": "True"}],
        **extra,
    }


TWO_NODES = pool_obs(free=((1, 1), (4, 1)), last_allocation=at(-2))
GROWING = ({"name": "l4", "className": "l4-4x", "nodeCount": 2, "maxNodeCount": 5},)

POOL_CASES = [
    PoolCase(
        "fresh",
        TWO_NODES,
        at(10),
        {
            "name": "l4",
            "nodes": 2,
            "devices": CLASS_DEVICES,
            "observation": _observation(10, "Fresh"),
        },
        ("True", "AgentReporting"),
    ),
    PoolCase(
        "stale-still-used",
        TWO_NODES,
        at(61),
        {
            "name": "l4",
            "nodes": 2,
            "devices": CLASS_DEVICES,
            "observation": _observation(61, "Stale"),
        },
        ("True", "AgentReporting"),
    ),
    PoolCase(
        "expired-not-ready",
        TWO_NODES,
        at(301),
        {
            "name": "l4",
            "nodes": 2,
            "devices": CLASS_DEVICES,
            "observation": _observation(301, "Expired"),
        },
        ("False", "AgentExpired"),
    ),
    PoolCase(
        "nodes-is-max-node-count",
        TWO_NODES,
        at(0),
        {
            "name": "l4",
            "nodes": 5,
            "devices": CLASS_DEVICES,
            "observation": _observation(0, "Fresh"),
        },
        ("True", "AgentReporting"),
        pools=GROWING,
    ),
    PoolCase(
        "over-bucket-cap-falls-back-visibly",
        TWO_NODES,
        at(0),
        {
            "name": "l4",
            "nodes": 2,
            "devices": CLASS_DEVICES,
            "observation": {k: v for k, v in _observation(0, "Fresh").items() if k != "freeDevices"}
            | {
                "conditions": [
                    {
                        "type": "HistogramAvailable",
                        "status": "False",
                        "reason": "TooManyBuckets",
                        "message": "2 buckets over the cap of 1: whole-node accounting for "
                        "this pool",
                    }
                ]
            },
        },
        ("True", "AgentReporting"),
        config=ControllerConfig(
            manages_ready=True, default_gateway_address="{cluster}.gw", max_histogram_buckets=1
        ),
    ),
    PoolCase(
        "no-observation-whole-node",
        None,
        at(0),
        {"name": "l4", "nodes": 2, "devices": CLASS_DEVICES},
        ("False", "AgentNotReporting"),
    ),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.id)
def test_cluster_status_is_published_from_observations(case: PoolCase) -> None:
    objs = [gpu_class(), cluster(pools=case.pools)]
    if case.observation is not None:
        objs.append(case.observation)
    store = hub(*objs)
    Controller(store, case.config, "ctl").step(case.now)
    status = store.get(INFERENCE_CLUSTER, "a")["status"]  # type: ignore[index]
    assert status["gpuPools"] == [case.want_pool]
    assert brief(condition_of({"status": status}, "Ready")) == case.want_ready
    assert status["gateway"] == {"address": "a.gw"}
    if case.observation is not None:
        assert status["agent"] == {
            "identity": "agent-a-1",
            "leaseEpoch": 1,
            "observedAt": format_time(T0),
        }


def test_last_allocation_time_is_cleared_when_the_agent_reports_none() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(last_allocation=at(-5)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    published = store.get(INFERENCE_CLUSTER, "a")["status"]["gpuPools"][0]["observation"]  # type: ignore[index]
    assert published["lastAllocationTime"] == format_time(at(-5))

    store.patch_status(POOL_OBSERVATION, "l4", "gpufleet-cluster-a", {"lastAllocationTime": None})
    controller.step(at(2))
    published = store.get(INFERENCE_CLUSTER, "a")["status"]["gpuPools"][0]["observation"]  # type: ignore[index]
    assert "lastAllocationTime" not in published


def test_a_pool_whose_class_is_missing_is_not_published_and_says_so() -> None:
    pools = (
        {"name": "l4", "className": "l4-4x", "nodeCount": 1},
        {"name": "h100", "className": "h100-8x", "nodeCount": 1},
    )
    store = hub(gpu_class(), cluster(pools=pools))
    Controller(store, SIM, "ctl").step(T0)
    got = store.get(INFERENCE_CLUSTER, "a")
    assert [p["name"] for p in got["status"]["gpuPools"]] == ["l4"]  # type: ignore[index]
    published = condition_of(got, "PoolsPublished")
    assert published is not None
    assert brief(published) == ("False", "ClassNotFound")
    assert published["message"] == "pool h100: InferenceClass h100-8x not found"


def test_a_ready_condition_and_gateway_set_by_another_writer_are_kept() -> None:
    status = {
        "conditions": [{"type": "Ready", "status": "False", "reason": "Maintenance"}],
        "gateway": {"address": "10.0.0.1"},
    }
    store = hub(gpu_class(), cluster(status=status), pool_obs())
    Controller(store, SIM, "ctl").step(T0)
    got = store.get(INFERENCE_CLUSTER, "a")
    assert brief(condition_of(got, "Ready")) == ("False", "Maintenance")
    assert got["status"]["gateway"] == {"address": "10.0.0.1"}  # type: ignore[index]


def test_without_manages_ready_the_controller_writes_no_ready_condition() -> None:
    store = hub(gpu_class(), cluster(), pool_obs())
    Controller(store, ControllerConfig(manages_ready=False), "ctl").step(T0)
    got = store.get(INFERENCE_CLUSTER, "a")
    assert condition_of(got, "Ready") is None
    assert "gateway" not in got["status"]  # type: ignore[index]


# --- trust --------------------------------------------------------------------------------


def _events(store: object, reason: str) -> list[Obj]:
    return [e for e in store.list(EVENT) if e["reason"] == reason]  # type: ignore[attr-defined]


def test_an_older_lease_epoch_is_rejected_with_an_event_and_a_newer_one_accepted() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(free=((3, 1),), epoch=3))
    controller = Controller(store, SIM, "ctl")
    controller.step(T0)
    first = store.get(INFERENCE_CLUSTER, "a")["status"]  # type: ignore[index]
    assert first["agent"]["leaseEpoch"] == 3

    # A deposed agent (epoch 2) overwrites the observation: ignored, what was published stays.
    stale = pool_obs(free=((4, 1),), epoch=2, observed_at=at(5))["status"]
    store.patch_status(POOL_OBSERVATION, "l4", "gpufleet-cluster-a", stale)
    result = controller.step(at(6))
    status = store.get(INFERENCE_CLUSTER, "a")["status"]  # type: ignore[index]
    assert status["agent"] == first["agent"]
    assert status["gpuPools"][0]["observation"]["freeDevices"] == [
        {"free": {"gpu.nvidia.com": 3}, "nodes": 1}
    ]
    assert len(result.rejected_reports) == 1
    events = _events(store, "StaleAgentReport")
    assert len(events) == 1
    assert events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["kind"] == "InferenceCluster"
    assert "lease epoch 2 ignored" in events[0]["message"]

    # The same stale report next step: no new event (the situation did not change).
    controller.step(at(7))
    assert [e["count"] for e in _events(store, "StaleAgentReport")] == [1]

    # The new leader (epoch 4) is accepted and its epoch becomes the cluster's.
    fresh = pool_obs(free=((2, 1),), epoch=4, observed_at=at(8))["status"]
    store.patch_status(POOL_OBSERVATION, "l4", "gpufleet-cluster-a", fresh)
    controller.step(at(9))
    status = store.get(INFERENCE_CLUSTER, "a")["status"]  # type: ignore[index]
    assert status["agent"]["leaseEpoch"] == 4
    assert status["agent"]["identity"] == "agent-a-4"
    assert status["gpuPools"][0]["observation"]["freeDevices"] == [
        {"free": {"gpu.nvidia.com": 2}, "nodes": 1}
    ]


def test_a_restarted_controller_keeps_the_epoch_from_the_cluster_status() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(epoch=5))
    Controller(store, SIM, "ctl-1").step(T0)
    store.patch_status(
        POOL_OBSERVATION, "l4", "gpufleet-cluster-a", pool_obs(epoch=4, observed_at=at(3))["status"]
    )
    restarted = Controller(store, SIM, "ctl-2")
    result = restarted.step(at(4))
    assert len(result.rejected_reports) == 1
    assert store.get(INFERENCE_CLUSTER, "a")["status"]["agent"]["leaseEpoch"] == 5  # type: ignore[index]


# --- replica status -----------------------------------------------------------------------


def _replica(generation_bumps: int = 0) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": "orphan-0",
            # In its cluster's namespace, without the deployment labels the controller
            # writes: a replica the controller did not write, which it leaves alone.
            "namespace": "gpufleet-cluster-a",
            "labels": {
                "gpufleet.io/deployment": "gone",
                "gpufleet.io/cluster": "a",
                "gpufleet.io/replica-index": "0",
            },
        },
        "spec": {
            "deploymentName": "gone",
            "clusterName": "a",
            "engines": [
                {
                    "name": "engine",
                    "copies": 1 + generation_bumps,
                    "members": [
                        {
                            "role": "Standalone",
                            "nodePoolName": "l4",
                            "deviceRequests": [
                                {
                                    "name": "gpu",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "driver": "gpu.nvidia.com",
                                    "count": 1,
                                }
                            ],
                            "template": {},
                        }
                    ],
                }
            ],
        },
    }


@dataclass(frozen=True)
class ReplicaCase:
    id: str
    observations: tuple[Obj, ...]
    want: tuple[str, str]
    want_observed_generation: int | None = None
    want_pools: bool = False
    #: Spec edits after creation (each bumps metadata.generation).
    edits: int = 0
    extra: tuple[Obj, ...] = field(default_factory=tuple)


REPLICA_CASES = [
    ReplicaCase(
        "all-allocated",
        (replica_obs("orphan-0", generation=1),),
        ("True", "AllPodsAllocated"),
        1,
        True,
    ),
    ReplicaCase(
        "pods-pending",
        (replica_obs("orphan-0", generation=1, pods_scheduled=False),),
        ("False", "PodsPending"),
        1,
        True,
    ),
    ReplicaCase(
        "generation-mismatch",
        (replica_obs("orphan-0", generation=1),),
        ("False", "GenerationMismatch"),
        1,
        True,
        edits=1,
    ),
    ReplicaCase("not-observed", (), ("False", "NotObserved")),
    ReplicaCase(
        "other-namespace-is-not-this-replica",
        (replica_obs("orphan-0", namespace="other"),),
        ("False", "NotObserved"),
    ),
    ReplicaCase(
        "older-epoch-is-ignored",
        (replica_obs("orphan-0", epoch=1),),
        ("False", "NotObserved"),
        extra=(pool_obs(epoch=2),),
    ),
]


@pytest.mark.parametrize("case", REPLICA_CASES, ids=lambda c: c.id)
def test_replica_status_from_its_observation(case: ReplicaCase) -> None:
    store = hub(gpu_class(), cluster(), _replica(), *case.observations, *case.extra)
    for bump in range(case.edits):
        current = store.get(MODEL_REPLICA, "orphan-0", "gpufleet-cluster-a")
        current["spec"] = _replica(bump + 1)["spec"]  # type: ignore[index]
        store.update(current)  # type: ignore[arg-type]
    Controller(store, SIM, "ctl").step(at(1))
    got = store.get(MODEL_REPLICA, "orphan-0", "gpufleet-cluster-a")
    assert brief(condition_of(got, "ModelPodsScheduled")) == case.want
    status = got["status"]  # type: ignore[index]
    assert status.get("observedGeneration") == case.want_observed_generation
    assert ("pools" in status) == case.want_pools
    if case.want_pools:
        assert status["pools"] == case.observations[0]["status"]["pools"]


# --- judge (pure) -------------------------------------------------------------------------


def _report(name: str, epoch: int, seconds: float = 0) -> AgentReport:
    return AgentReport("PoolObservation", name, "ns", f"agent-{epoch}", epoch, at(seconds), {})


@dataclass(frozen=True)
class JudgeCase:
    id: str
    reports: tuple[AgentReport, ...]
    known: int | None
    want_epoch: int | None
    want_accepted: tuple[str, ...]
    want_rejected: tuple[str, ...]


JUDGE_CASES = [
    JudgeCase("nothing", (), None, None, (), ()),
    JudgeCase("remembered-only", (), 3, 3, (), ()),
    JudgeCase("epoch-zero-is-an-epoch", (_report("l4", 0),), None, 0, ("l4",), ()),
    JudgeCase("older-than-known", (_report("l4", 2),), 3, 3, (), ("l4",)),
    JudgeCase("newer-than-known", (_report("l4", 4),), 3, 4, ("l4",), ()),
    JudgeCase(
        "mixed: the newest epoch wins",
        (_report("h100", 2), _report("l4", 3)),
        None,
        3,
        ("l4",),
        ("h100",),
    ),
]


@pytest.mark.parametrize("case", JUDGE_CASES, ids=lambda c: c.id)
def test_judge_accepts_the_highest_epoch(case: JudgeCase) -> None:
    trust = judge(case.reports, case.known)
    assert (
        trust.epoch,
        tuple(r.name for r in trust.accepted),
        tuple(r.name for r in trust.rejected),
    ) == (case.want_epoch, case.want_accepted, case.want_rejected)


def test_replica_status_follows_its_report_across_steps_and_skips_heartbeats() -> None:
    """Statuses are published again only for dirty keys: a heartbeat (observedAt only)
    changes no replica status and schedules nothing; a report whose content moved does."""
    store = hub(gpu_class(), cluster(), _replica(), replica_obs("orphan-0", pods_scheduled=False))
    controller = Controller(store, SIM, "ctl")

    def report(seconds: float, pods_scheduled: bool, epoch: int = 1) -> None:
        fresh = replica_obs(
            "orphan-0", pods_scheduled=pods_scheduled, epoch=epoch, observed_at=at(seconds)
        )
        namespace = observation_namespace("a")
        # The allocation times stay: only the agent's clock moves between reports.
        before = store.get(REPLICA_OBSERVATION, "orphan-0", namespace)
        assert before is not None
        allocated = before["status"]["pools"][0]["lastAllocationTime"]
        fresh["status"]["pools"][0]["lastAllocationTime"] = allocated
        store.patch_status(REPLICA_OBSERVATION, "orphan-0", namespace, fresh["status"], None)

    def pods() -> tuple[str, str] | None:
        return brief(
            condition_of(
                store.get(MODEL_REPLICA, "orphan-0", "gpufleet-cluster-a"), "ModelPodsScheduled"
            )
        )

    controller.step(at(1))
    assert pods() == ("False", "PodsPending")
    # Nothing moved but the controller's own status writes: a quiet step, as the decision
    # of the first step was made from those statuses.
    assert controller.step(at(11)).is_quiet
    report(20, pods_scheduled=False)  # a heartbeat: only observedAt moved
    result = controller.step(at(21))
    assert result.count("ModelReplica", "patch_status") == 0
    # A quiet step: only a heartbeat since a step with nothing to do, so the replicas were
    # not published again and the decision is the last one.
    assert result.is_quiet
    assert result.decision is not None
    report(30, pods_scheduled=False)
    controller.step(at(31))
    assert controller.quiet_steps == 3
    report(40, pods_scheduled=True)
    result = controller.step(at(41))
    assert not result.is_quiet  # the report's content moved, not only its time
    assert pods() == ("True", "AllPodsAllocated")
    assert result.count("ModelReplica", "patch_status") == 1
    report(60, pods_scheduled=False)
    controller.step(at(61))
    assert pods() == ("False", "PodsPending")


def test_a_silent_agent_ages_into_stale_and_expired_while_nothing_else_moves() -> None:
    """A settled cluster status is still published again when an observation's freshness
    state moves with time alone, and is not rewritten for its age in between."""
    store = hub(gpu_class(), cluster(), pool_obs())
    controller = Controller(store, SIM, "ctl")

    def published() -> tuple[str, tuple[str, str] | None]:
        got = store.get(INFERENCE_CLUSTER, "a")
        assert got is not None
        state = got["status"]["gpuPools"][0]["observation"]["state"]
        return state, brief(condition_of(got, "Ready"))

    controller.step(at(1))
    controller.step(at(11))
    assert published() == ("Fresh", ("True", "AgentReporting"))
    result = controller.step(at(50))  # older, still fresh: the age alone is not written
    assert result.count("InferenceCluster", "patch_status") == 0
    controller.step(at(61))
    assert published() == ("Stale", ("True", "AgentReporting"))
    controller.step(at(200))
    assert published() == ("Stale", ("True", "AgentReporting"))
    controller.step(at(301))
    assert published() == ("Expired", ("False", "AgentExpired"))


@pytest.mark.parametrize("observed_at", ["2026-11-29T10:00:30", "not a time", ""])
def test_a_heartbeat_with_a_bad_time_is_refused_as_a_new_report_would_be(
    observed_at: object,
) -> None:
    """A report that only moved `observedAt` is not validated again (the controller re-times
    the last one), unless the new time is not one the API accepts."""
    store = hub(gpu_class(), cluster(), pool_obs())
    controller = Controller(store, SIM, "ctl")
    assert controller.step(at(1)).errors == []
    namespace = observation_namespace("a")
    good = {"observedAt": format_time(at(20))}
    store.patch_status(POOL_OBSERVATION, "l4", namespace, good, None)
    assert controller.step(at(21)).errors == []
    store.patch_status(POOL_OBSERVATION, "l4", namespace, {"observedAt": observed_at}, None)
    errors = controller.step(at(41)).errors
    assert len(errors) == 1
    assert "PoolObservation gpufleet-cluster-a/l4 is invalid" in errors[0]
    assert "observedAt" in errors[0]
