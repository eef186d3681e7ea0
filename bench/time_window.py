"""Where a window of the B4 day goes, by component: CPU time (`time.process_time`) of the
controller's step and its phases, the agents' ticks and their halves, and the emulated
clusters' components, for a window after a warm-up.

    .venv/bin/python bench/time_window.py 6 0.5     # 6 h..6.5 h of the day (steady state)
    .venv/bin/python bench/time_window.py 16 0.5    # the busiest hours (~860 replicas)

Timing instruments the classes' methods with wrappers before the fleet is built (this is a
measuring tool, not a test: nothing is replaced, every call goes through). A wrapped method
that calls another is counted in both; the wrappers add a little to every call. CPU time
rather than wall time, because this machine is shared: even so, repeat a run when two
numbers are close.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpufleet.agent.runner import Agent
from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller import loop
from gpufleet.controller.loop import Controller
from gpufleet.sim.emulated.cluster import WorkloadCluster
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.run.runner import _fewer_collections, build_fleet, timeline_runner
from gpufleet.sim.scenario.load import Accounting

SPENT: Counter[str] = Counter()
CALLS: Counter[str] = Counter()


def _timed(key: str, f: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            SPENT[key] += time.process_time() - started
            CALLS[key] += 1

    return timed


def _instrument() -> None:
    methods: list[tuple[type, str]] = [
        *((Agent, n) for n in ("observe", "push", "materialize", "read_replicas")),
        *((Controller, n) for n in ("step", "_judge", "_publish_cluster", "_schedule")),
        *((Fleet, n) for n in ("_agent_step",)),
        *(
            (WorkloadCluster, n)
            for n in ("tick", "_run_components", "_scheduler", "_deployment_controller")
        ),
    ]
    for cls, name in methods:
        setattr(cls, name, _timed(f"{cls.__name__}.{name}", getattr(cls, name)))
    loop.schedule = _timed("core.schedule", loop.schedule)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("start", type=float, help="hours of the day to run first")
    parser.add_argument("window", type=float, help="hours to time after that")
    args = parser.parse_args()
    _instrument()
    scenario = fleet_scenario(10, 50, 24 * 3600, 1000, 1)
    fleet, hub_step = build_fleet(scenario, Accounting.FREE_GPU)
    run_to = timeline_runner(fleet, scenario)
    with _fewer_collections():
        run_to(args.start * 3600)
        SPENT.clear()
        CALLS.clear()
        quiet, steps = 0, hub_step.steps
        if hub_step.controller is not None:
            quiet = hub_step.controller.quiet_steps
        started = time.process_time()
        run_to((args.start + args.window) * 3600)
        total = time.process_time() - started
    print(f"window {args.start:g} h + {args.window:g} h: {total:.2f} s CPU")
    if hub_step.controller is not None:
        quiet = hub_step.controller.quiet_steps - quiet
        print(f"controller steps run: {hub_step.steps - steps}, of which quiet: {quiet}")
    for key in sorted(SPENT, key=lambda k: -SPENT[k]):
        per_ms = 1000 * SPENT[key] / CALLS[key]
        print(f"{key:40} {SPENT[key]:7.3f} s  {CALLS[key]:7} calls  {per_ms:7.3f} ms each")


if __name__ == "__main__":
    main()
