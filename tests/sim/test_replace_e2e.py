"""Re-placement end to end in the simulator (the real agent, controller and emulated
autoscaler): what the agent reports of a stuck replica, and that the autoscaler's verdict is
what keeps a replica waiting for its node in place (controller/replace.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpufleet.sim.run.runner import build_fleet, run_scenario, timeline_runner
from gpufleet.sim.scenario.load import builtin_text, load_scenario, parse_scenario_text
from gpufleet.sim.scenario.model import ScenarioInvalid


def _replica_on(snap: dict[str, Any], deployment: str) -> list[dict[str, Any]]:
    return [
        o
        for o in snap["hub/ModelReplica.gpufleet.io/v1alpha1"]
        if o["spec"]["deploymentName"] == deployment
    ]


def test_a_replica_waiting_for_its_node_reports_the_autoscalers_verdict() -> None:
    scenario = load_scenario("autoscale-wait")
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(180)  # past stuckAfter, before the node is there
    [replica] = _replica_on(fleet.snapshot(), "llm")
    assert replica["spec"]["clusterName"] == "a"
    [pool] = replica["status"]["pools"]
    assert (pool["unschedulablePods"], pool["scaleUp"]) == (1, "Triggered")
    assert pool["unschedulableSince"] <= pool["scaleUpTime"]  # RFC 3339 in UTC: sorts as text
    [pods] = [c for c in replica["status"]["conditions"] if c["type"] == "ModelPodsScheduled"]
    assert pods["reason"] == "PodsUnschedulable"
    assert "autoscaler: TriggeredScaleUp" in pods["message"]


def test_without_a_node_coming_the_same_replica_is_moved() -> None:
    """The control for autoscale-wait: the same fleet with a's autoscaler stocked out
    (NotTriggerScaleUp) moves llm to b once its pod has been Unschedulable for stuckAfter."""
    doc: dict[str, Any] = yaml.safe_load(builtin_text("autoscale-wait"))
    doc["fleet"]["clusters"][0]["behaviour"]["stockout"] = True
    doc["checks"] = [
        {"at": "2m50s", "expect": {"placements": {"llm": {"count": 1, "clusters": {"b": 1}}}}},
        {"at": "6m", "expect": {"podsRunning": {"llm": 1}, "nodes": {"a/l4": 1}}},
    ]
    result = run_scenario(parse_scenario_text(yaml.safe_dump(doc), "autoscale-stockout"))
    assert not result.failures, result.failures
    moved = [line for _, line in result.log if line.startswith("dropped ml/llm")]
    assert moved == ["dropped ml/llm from a (PodsUnschedulable)"]


def test_stuck_after_is_a_controller_setting_of_the_scenario() -> None:
    doc: dict[str, Any] = yaml.safe_load(builtin_text("foreign-tenant-replace"))
    doc["controller"]["stuckAfter"] = "30s"
    doc["checks"] = []
    result = run_scenario(parse_scenario_text(yaml.safe_dump(doc), "stuck-30s"))
    # The pod is Unschedulable since 35s: re-placed at the first step from 65s.
    assert [(t, line) for t, line in result.log if line.startswith("dropped")] == [
        (65.0, "dropped ml/llm from east (PodsUnschedulable)")
    ]


def test_a_stuck_after_below_a_second_is_refused_naming_the_field() -> None:
    doc: dict[str, Any] = yaml.safe_load(builtin_text("foreign-tenant-replace"))
    doc["controller"]["stuckAfter"] = "0s"
    with pytest.raises(ScenarioInvalid, match=r"controller\.stuckAfter: must be at least 1s"):
        parse_scenario_text(yaml.safe_dump(doc), "stuck-0s")
