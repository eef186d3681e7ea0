"""The clusters' freshness the step keeps (computed again only for the clusters whose reports
moved, and for all when a state may cross or an age is quoted) against its plain computation:
every cluster's state at `now`, after every step of runs where agents go silent and come back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

from controller_builders import SIM, at, cluster, gpu_class, hub, pool_obs

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.core.capacity import cluster_freshness
from gpufleet.core.decision import ObservationState
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import Scenario, load_scenario
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION

_QUOTED = (ObservationState.STALE, ObservationState.EXPIRED)


class CheckedController(Controller):
    """A controller that checks its kept freshness against the plain one after each step."""

    checked: ClassVar[int] = 0
    states: ClassVar[set[ObservationState]] = set()

    def step(self, now: datetime) -> StepResult:
        result = super().step(now)
        config = self.config.scheduling()
        plain = {}
        for name, reported in self.inputs.reported.items():
            state = cluster_freshness(reported, now, config)
            plain[name] = (state.state, state.age_s if state.state in _QUOTED else None)
            CheckedController.states.add(state.state)
        assert self.inputs.freshness(now, config) == plain
        CheckedController.checked += 1
        return result


_RUNS: list[Callable[[], Scenario]] = [
    lambda: load_scenario("stale-expired"),
    lambda: load_scenario("eks-agent-down"),
    lambda: fleet_scenario(3, 10, 1800, 20, 7),
]


def test_the_kept_freshness_is_the_plain_one_after_every_step() -> None:
    CheckedController.states = set()
    for make in _RUNS:
        scenario = make()
        fleet, hub_step = build_fleet(scenario, scenario.controller.accounting)
        assert hub_step.controller is not None
        kept = hub_step.controller
        hub_step.controller = CheckedController(kept.hub, kept.config, kept.identity)
        CheckedController.checked = 0
        timeline_runner(fleet, scenario)(scenario.end_s)
        assert CheckedController.checked > 10
    # The runs go through every state (so crossings and quoted ages are met).
    every = {ObservationState.FRESH, ObservationState.STALE, ObservationState.EXPIRED}
    assert every <= CheckedController.states


def test_clusters_that_come_report_and_go_are_kept_as_the_plain_freshness_reads_them() -> None:
    store = hub(gpu_class(), cluster("a"), pool_obs("a", observed_at=at(0)))
    controller = CheckedController(store, SIM)
    CheckedController.checked = 0
    for second in range(0, 500, 5):
        if second == 10:
            store.create(cluster("b"))
            store.create(pool_obs("b", observed_at=at(10)))
        if second == 20:
            store.create(cluster("c"))  # never reports
        if second == 60:
            store.delete(INFERENCE_CLUSTER, "a")
        if second > 10 and second % 25 == 0 and second < 300:  # b's crossing moves on
            b = pool_obs("b", observed_at=at(second))
            meta = b["metadata"]
            stamp = {"observedAt": b["status"]["observedAt"]}
            store.patch_status(POOL_OBSERVATION, meta["name"], meta["namespace"], stamp, None)
        controller.step(at(second))
    assert CheckedController.checked == 100
