"""The freshness states a settled cluster status is keyed by (`cluster_times`, then
`states_at`, in `ClusterState.settled`) hold every time `cluster_status` reads of `now`:
the oracle is the plain computation. A status desired at one time and put in place is what
`cluster_status` desires of it again at that time (so a status just written is settled), and
at any other time with the same states it desires the same, but for ages."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from controller_builders import SIM, at, cluster, gpu_class, pool_obs

from gpufleet.controller import observation_namespace
from gpufleet.controller.conditions import Obj, is_owned_equal
from gpufleet.controller.status import (
    CLUSTER_OWNED,
    AgentReport,
    cluster_status,
    cluster_times,
    judge,
    states_at,
    without_ages,
)

POOLS = tuple({"name": f"p{i}", "className": "l4-4x", "nodeCount": 2} for i in range(3))
CLASSES = {"l4-4x": gpu_class()}


def _report(pool: str, epoch: int, observed_at: datetime) -> AgentReport:
    body = pool_obs(pool=pool, free=((1, 1), (4, 1)), observed_at=observed_at, epoch=epoch)
    identity = f"agent-a-{epoch}"
    namespace = observation_namespace("a")
    return AgentReport("PoolObservation", pool, namespace, identity, epoch, observed_at, body)


def _with_status(status: Obj) -> Obj:
    return cluster(pools=POOLS, status=status)


def _random_reports(rng: random.Random, start: float) -> list[AgentReport]:
    reports = []
    for pool in POOLS:
        if rng.random() < 0.3:
            continue  # no report of this pool
        epoch = rng.choice([1, 1, 2])  # the pools at epoch 1 are rejected beside an epoch 2
        reports.append(_report(pool["name"], epoch, at(start + rng.uniform(0, 400))))
    return reports


@pytest.mark.parametrize("seed", range(60))
def test_equal_states_mean_an_equal_status_but_for_ages(seed: int) -> None:
    rng = random.Random(seed)
    # A status published before, from reports all accepted, at some earlier time.
    before = judge([_report(p["name"], 1, at(rng.uniform(0, 200))) for p in POOLS], None)
    published = cluster_status(_with_status({}), CLASSES, before, at(250), SIM)
    # The status desired now, from other reports (some pools rejected, some without one),
    # is written: the object as it then reads.
    trust = judge(_random_reports(rng, 100), None)
    now = at(rng.uniform(250, 700))
    written = _with_status(cluster_status(_with_status(published), CLASSES, trust, now, SIM))
    status = written["status"]
    again = cluster_status(written, CLASSES, trust, now, SIM)
    assert is_owned_equal(without_ages(status), without_ages(again), CLUSTER_OWNED)
    times = cluster_times(written, trust)
    states = states_at(times, now, SIM)
    equal = 0
    for i in range(40):
        later = now + timedelta(seconds=rng.uniform(0, 30)) if i % 2 else at(rng.uniform(250, 1200))
        if states_at(times, later, SIM) != states:
            continue
        equal += 1
        desired = cluster_status(written, CLASSES, trust, later, SIM)
        assert is_owned_equal(without_ages(status), without_ages(desired), CLUSTER_OWNED)
    assert equal > 0
