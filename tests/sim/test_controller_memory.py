"""What the hub controller keeps between steps to make a step cost what changed (its index of
the hub and the dirty keys, per-cluster trusts and reports, the last decision and what was
applied of it, the core's memo) changes nothing it does: the same fleet run with a controller
that starts every step with a fresh index, so that every key is dirty, ends with the same
stores, the same log, the same refusals and the same errors.

Only what a controller must remember to be correct survives a step in the forgetful one: its
assume ledger, the lease epochs it accepted, when it received each report version (reports
age from their receipt, docs/controller.md), which events it already recorded, and its
memory of re-placements (the backoffs that stand: controller/replace.py) and its quarantine
(the objects whose processing raised, and their backoffs: controller/barrier.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import Scenario, builtin_names, load_scenario

#: The state a controller needs to be correct, which the forgetful one keeps.
_REMEMBERED = {
    "hub",
    "config",
    "identity",
    "timer",
    # Its assume ledger and the events it recorded (`HubWriter`).
    "writer",
    "replacer",
    "quarantine",
}
#: The collaborators' correctness state, kept while the rest of each collaborator is fresh:
#: the lease epochs accepted and the reports' receipts (`ClusterStatuses`). The decision
#: applier (`DecisionApplier`: the last decision and what was applied of it, the rollouts'
#: clock) and the scheduling inputs (`SchedulingInputs`) are forgotten whole.
_REMEMBERED_IN = {"statuses": ("epochs", "receipts")}


def forget(controller: Controller, fresh: Controller) -> None:
    """Set on `controller` every attribute of `fresh` but the correctness state."""
    for name, value in vars(fresh).items():
        if name in _REMEMBERED:
            continue
        for kept in _REMEMBERED_IN.get(name, ()):
            setattr(value, kept, getattr(getattr(controller, name), kept))
        setattr(controller, name, value)
    # The fresh applier writes through the kept writer, behind `controller`'s barrier, and
    # knows its re-placements.
    controller.applier.writer = controller.writer
    controller.applier.barrier = controller
    controller.applier.replacer = controller.replacer


class ForgetfulController(Controller):
    """A controller for which everything is dirty on every step: a fresh index (which lists
    the hub) and nothing remembered from the last step, as after a restart, but for the state
    that correctness needs."""

    def step(self, now: datetime) -> StepResult:
        forget(self, Controller(self.hub, self.config, self.identity, timer=self.timer))
        return super().step(now)


def _outcome(scenario: Scenario, is_forgetful: bool) -> tuple[dict[str, Any], int]:
    fleet, hub_step = build_fleet(scenario, scenario.controller.accounting)
    controller = hub_step.controller
    assert controller is not None
    if is_forgetful:
        forgetful = ForgetfulController(controller.hub, controller.config, controller.identity)
        hub_step.controller = forgetful
        controller = forgetful
    timeline_runner(fleet, scenario)(scenario.end_s)
    outcome = {
        "stores": fleet.snapshot(),
        "log": hub_step.log,
        "refusals": [r.to_json() for r in hub_step.refusals],
        "errors": hub_step.errors,
    }
    return outcome, controller.quiet_steps


SCENARIOS = [
    *((name, lambda name=name: load_scenario(name)) for name in builtin_names()),
    ("fleet-3x10-1h", lambda: fleet_scenario(3, 10, 3600, 40, 7)),
]


@pytest.mark.parametrize(("name", "make"), SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_a_controller_that_forgets_every_step_does_the_same(name: str, make: Any) -> None:
    scenario = make()
    kept, _ = _outcome(scenario, is_forgetful=False)
    forgot, forgot_quiet = _outcome(scenario, is_forgetful=True)
    assert forgot_quiet == 0  # the forgetful controller never takes a quiet step
    assert kept["log"] == forgot["log"]
    assert kept["refusals"] == forgot["refusals"]
    assert kept["errors"] == forgot["errors"]
    assert kept["stores"] == forgot["stores"]


def test_the_fleet_run_takes_quiet_steps() -> None:
    """The comparison above covers quiet steps: the fleet run takes many."""
    _, quiet = _outcome(fleet_scenario(3, 10, 3600, 40, 7), is_forgetful=False)
    assert quiet > 20
