"""Issue 30.4: an agent whose clock is far behind (more than `expire_after_s`) left its cluster
Expired forever while it kept reporting. A report version that replaced one the controller saw
(its agent wrote it while the controller watched) and is stamped more than `expire_after_s`
before its receipt is aged from its receipt, and the cluster's Ready condition says so
(reason ClockBehind, with the skew). A report first seen in a listing keeps its stamp: it may
be a dead agent's last one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controller_builders import SIM, at, brief, cluster, condition_of, gpu_class, hub, pool_obs

from gpufleet.controller import Controller, observation_namespace
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION

HOUR = 3600


def _restamp(store: MemoryStore, observed_at: datetime) -> None:
    current: Any = store.get(POOL_OBSERVATION, "l4", observation_namespace("a"))
    status = {**current["status"], "observedAt": format_time(observed_at)}
    store.patch_status(POOL_OBSERVATION, "l4", observation_namespace("a"), status)


def _state(store: MemoryStore) -> tuple[str, str, str]:
    obj: Any = store.get(INFERENCE_CLUSTER, "a")
    ready = condition_of(obj, "Ready")
    return (
        obj["status"]["gpuPools"][0]["observation"]["state"],
        brief(ready)[1],
        ready["message"],
    )


def test_a_reporting_agent_an_hour_behind_is_fresh_and_its_condition_says_why() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(-HOUR)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    # First seen in the listing: it may be a dead agent's last report, so its stamp ages it.
    assert _state(store)[:2] == ("Expired", "AgentExpired")
    for t in (5, 10, 15):  # the agent heartbeats, its clock an hour behind
        _restamp(store, at(t - HOUR))
        controller.step(at(t))
        state, reason, message = _state(store)
        assert (state, reason) == ("Fresh", "ClockBehind"), message
    assert "its clock is 3600s behind the hub's (more than expireAfter, 300s)" in message
    assert "aged from when the hub received them" in message
    # Silent: it ages from its last receipt, Stale then Expired on the hub's schedule.
    controller.step(at(15 + 61))
    assert _state(store)[:2] == ("Stale", "ClockBehind")
    controller.step(at(15 + 301))
    assert _state(store)[:2] == ("Expired", "AgentExpired")


def test_a_clock_behind_by_less_than_expire_after_ages_from_its_stamp() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(-100)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    _restamp(store, at(5 - 100))
    controller.step(at(5))
    assert _state(store)[:2] == ("Stale", "AgentReporting")  # 100 s old by its stamp


def test_a_dead_agents_old_report_stays_expired_for_a_restarted_controller() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(-HOUR)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    _restamp(store, at(5 - HOUR))
    controller.step(at(5))
    assert _state(store)[:2] == ("Fresh", "ClockBehind")
    restarted = Controller(store, SIM, "ctl")  # receipts start empty; the agent is now silent
    restarted.step(at(400))
    assert _state(store)[:2] == ("Expired", "AgentExpired")
