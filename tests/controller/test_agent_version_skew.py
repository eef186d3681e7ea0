"""The version-skew policy (docs/operations.md, "Version skew") is checked at run time: a
cluster whose agent reports a version outside the hub's window gets
`AgentVersionSupported=False` naming both versions, and its report is still used; a report
without a version (an agent older than the field) is today's behaviour: no condition."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from controller_builders import SIM, at, brief, cluster, condition_of, gpu_class, hub, pool_obs
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api import parse_object
from gpufleet.controller import Controller, observation_namespace
from gpufleet.controller.skew import major_minor, skew_condition
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION

HUB = dataclasses.replace(SIM, hub_version="0.3.1")


def _versioned(version: str | None) -> Any:
    obs = pool_obs()
    if version is not None:
        obs["status"]["agent"]["version"] = version
    return obs


def _step(version: str | None, config: Any = HUB) -> Any:
    store: MemoryStore = hub(gpu_class(), cluster(), _versioned(version))
    Controller(store, config, "ctl").step(at(1))
    return store.get(INFERENCE_CLUSTER, "a")


def test_a_too_old_agent_gets_the_condition_and_its_report_is_still_used() -> None:
    obj = _step("0.1.4")
    found = condition_of(obj, "AgentVersionSupported")
    assert brief(found) == ("False", "AgentTooOld")
    assert found is not None and "0.1.4" in found["message"] and "0.3.1" in found["message"]
    assert "0.2.x and 0.3.x" in found["message"]
    assert brief(condition_of(obj, "Ready")) == ("True", "AgentReporting")
    assert obj["status"]["gpuPools"][0]["observation"]["state"] == "Fresh"


def test_a_newer_agent_than_the_hub_gets_the_condition() -> None:
    found = condition_of(_step("0.4.0"), "AgentVersionSupported")
    assert brief(found) == ("False", "AgentTooNew")
    assert found is not None and "0.4.0" in found["message"] and "0.3.1" in found["message"]


@pytest.mark.parametrize("version", ["0.3.0", "0.3.7", "0.2.0", "0.2.9.dev1+gabc"])
def test_an_agent_inside_the_window_gets_no_condition(version: str) -> None:
    assert condition_of(_step(version), "AgentVersionSupported") is None


def test_no_version_is_todays_behaviour() -> None:
    without = _step(None)
    assert condition_of(without, "AgentVersionSupported") is None
    # The same report, with and without a hub version, publishes the same status.
    assert without["status"] == _step(None, SIM)["status"]


def test_the_condition_goes_once_the_agent_is_upgraded() -> None:
    store: MemoryStore = hub(gpu_class(), cluster(), _versioned("0.1.0"))
    controller = Controller(store, HUB, "ctl")
    controller.step(at(1))
    assert condition_of(store.get(INFERENCE_CLUSTER, "a"), "AgentVersionSupported") is not None
    namespace = observation_namespace("a")
    current: Any = store.get(POOL_OBSERVATION, "l4", namespace)
    agent = {**current["status"]["agent"], "version": "0.3.0"}
    status = {**current["status"], "agent": agent, "observedAt": format_time(at(2))}
    store.patch_status(POOL_OBSERVATION, "l4", namespace, status)
    controller.step(at(3))
    assert condition_of(store.get(INFERENCE_CLUSTER, "a"), "AgentVersionSupported") is None


def test_an_unreadable_version_is_refused_by_the_schema_and_a_bare_word_is_named() -> None:
    with pytest.raises(ValueError, match="version"):
        parse_object(_versioned("0.3 beta"))
    found = skew_condition("nightly", "0.3.1")
    assert brief(found) == ("False", "AgentVersionUnreadable")


@given(
    st.tuples(st.integers(0, 5), st.integers(0, 5)), st.tuples(st.integers(0, 5), st.integers(0, 5))
)
def test_the_window_is_the_hubs_minor_and_the_previous_one(
    agent: tuple[int, int], hub_release: tuple[int, int]
) -> None:
    found = skew_condition(f"{agent[0]}.{agent[1]}.2", f"{hub_release[0]}.{hub_release[1]}.0")
    inside = agent[0] == hub_release[0] and hub_release[1] - 1 <= agent[1] <= hub_release[1]
    assert (found is None) == inside
    if found is not None:
        assert found["reason"] == ("AgentTooNew" if agent > hub_release else "AgentTooOld")
    assert major_minor(f"{agent[0]}.{agent[1]}.2") == agent
