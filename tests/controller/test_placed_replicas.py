"""What the index takes a created replica to read as without parsing it (`placed_replica`,
built from the core's placement and the body the controller built) against its oracle,
`read_replica` of the object the hub returned: on every replica the controller creates in
every built-in scenario and a simulated fleet; and every record the index then holds reads as
a listing would read it (the first status write is read from the placed replica)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller.conditions import Obj, ReadObj
from gpufleet.controller.index import read_replica
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.controller.writes import HubWriter, StepErrors
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import builtin_names, load_scenario
from gpufleet.store import Kind
from gpufleet.store.port import MODEL_REPLICA


class CheckingWriter(HubWriter):
    """The controller's writer, checking each shortcut it takes against the plain read."""

    placed = 0

    def create(
        self,
        kind: Kind,
        body: Obj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepErrors,
        read: Callable[[ReadObj], object | None] | None = None,
    ) -> None:
        def checked(written: ReadObj) -> object | None:
            assert read is not None
            got = read(written)
            if got is not None:
                CheckingWriter.placed += 1
                meta = written["metadata"]
                assert got == read_replica(written)
                assert got[0].signature == (meta["uid"], meta["resourceVersion"])  # type: ignore[index]
            return got

        super().create(kind, body, change, now, result, checked if read is not None else None)


class CheckingController(Controller):
    """After every step, each replica record reads as the plain read of its object."""

    def step(self, now: datetime) -> StepResult:
        result = super().step(now)
        for record in self.index.records[MODEL_REPLICA].values():
            meta = record.obj["metadata"]
            core, error = record.parsed
            assert (core, error) == read_replica(record.obj)
            assert core is None or core.signature == (meta["uid"], meta["resourceVersion"])
        return result


SCENARIOS = [
    *((name, lambda name=name: load_scenario(name)) for name in builtin_names()),
    ("fleet-3x10-1h", lambda: fleet_scenario(3, 10, 3600, 40, 7)),
]


@pytest.mark.parametrize(("name", "make"), SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_a_created_replica_reads_as_its_placement_says(name: str, make: Any) -> None:
    scenario = make()
    fleet, hub_step = build_fleet(scenario, scenario.controller.accounting)
    plain = hub_step.controller
    assert plain is not None
    controller = CheckingController(plain.hub, plain.config, plain.identity, timer=plain.timer)
    controller.writer = CheckingWriter(
        controller.hub, controller.config, controller.identity, controller
    )
    controller.applier.writer = controller.writer
    hub_step.controller = controller
    before = CheckingWriter.placed
    created = len(fleet.hub.changes(0, [MODEL_REPLICA])[0])
    timeline_runner(fleet, scenario)(scenario.end_s)
    changes, _ = fleet.hub.changes(0, [MODEL_REPLICA])
    if len(changes) > created:  # the scenario's controller created replicas
        assert CheckingWriter.placed > before


def test_the_fleet_run_takes_the_shortcut() -> None:
    """The check above is not vacuous: a simulated fleet's creates are all placed replicas."""
    before = CheckingWriter.placed
    test_a_created_replica_reads_as_its_placement_says("fleet", SCENARIOS[-1][1])
    assert CheckingWriter.placed - before >= 10
