"""The controller skips computing a cluster's status when its inputs' signature is the one it
last settled at (`ClusterState.settled`: the status found in place, or the one it just
wrote). The oracle: after every publish, whether it computed or skipped, the status in the
controller's index is what the plain computation (`cluster_status`, compared as the next
publish compares it) desires of it at that time, in every built-in scenario and a fleet."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller.conditions import ReadObj, is_owned_equal
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.controller.reports import NO_TRUST
from gpufleet.controller.status import (
    CLUSTER_OWNED,
    cluster_status,
    is_refresh_due,
    without_ages,
    without_times,
)
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import builtin_names, load_scenario
from gpufleet.store.port import INFERENCE_CLUSTER


class CheckedController(Controller):
    """A controller that checks, after each publish of a cluster's status, that the plain
    computation desires no write."""

    published = 0
    skipped = 0

    def _publish_cluster(
        self, name: str, classes: Mapping[str, ReadObj], now: datetime, result: StepResult
    ) -> None:
        state = self.statuses.clusters.get(name)
        settled_before = state.settled if state is not None else None
        errors = len(result.errors)
        super()._publish_cluster(name, classes, now, result)
        if len(result.errors) != errors or ("", name) not in self.index.records[INFERENCE_CLUSTER]:
            return  # an error: the next step reads the store again
        state = self.statuses.clusters[name]
        if state.settled is None:
            return  # computed again next step
        self.published += 1
        self.skipped += settled_before is not None and state.settled == settled_before
        cluster = self.index.records[INFERENCE_CLUSTER][("", name)].obj
        trust = self.statuses.trusts.get(name) or NO_TRUST
        desired = cluster_status(cluster, classes, trust, now, self.config)
        normalize = without_ages if is_refresh_due(cluster, now, self.config) else without_times
        status = cluster.get("status") or {}
        assert is_owned_equal(normalize(status), normalize(desired), CLUSTER_OWNED), name


SCENARIOS = [
    *((name, lambda name=name: load_scenario(name)) for name in builtin_names()),
    ("fleet-3x10-1h", lambda: fleet_scenario(3, 10, 3600, 40, 7)),
]


@pytest.mark.parametrize(("name", "make"), SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_a_settled_cluster_status_is_the_one_the_plain_computation_desires(
    name: str, make: Any
) -> None:
    scenario = make()
    fleet, hub_step = build_fleet(scenario, scenario.controller.accounting)
    controller = hub_step.controller
    assert controller is not None
    checked = CheckedController(controller.hub, controller.config, controller.identity)
    hub_step.controller = checked
    timeline_runner(fleet, scenario)(scenario.end_s)
    assert checked.published > 0


def test_the_fleet_run_skips_settled_statuses() -> None:
    """The check above covers skips: the fleet run skips many publishes."""
    scenario = fleet_scenario(3, 10, 3600, 40, 7)
    fleet, hub_step = build_fleet(scenario, scenario.controller.accounting)
    controller = hub_step.controller
    assert controller is not None
    checked = CheckedController(controller.hub, controller.config, controller.identity)
    hub_step.controller = checked
    timeline_runner(fleet, scenario)(scenario.end_s)
    assert checked.skipped > 20
