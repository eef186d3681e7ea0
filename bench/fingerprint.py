"""A fingerprint of what the simulator computes, to check that a speed change changed nothing.

    .venv/bin/python bench/fingerprint.py            # one line per run, then a total

Runs every built-in scenario and two small B4 fleets (the fleet of bench_simulate.py), and
hashes each run's outcome: every object of every store at the end (`Fleet.snapshot()`: hub and
clusters, with resourceVersions), the controller's log and refusals, the metrics series, and
the event count. The simulator is deterministic, so a change that only makes it faster leaves
every hash as it was; a change of behaviour shows which run moved.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.sim.run.runner import build_fleet, run_scenario, timeline_runner
from gpufleet.sim.scenario.load import Scenario, builtin_names, load_scenario


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(scenario: Scenario) -> tuple[str, float]:
    started = time.perf_counter()
    captured: dict[str, Any] = {}
    result = run_scenario(scenario)
    wall = time.perf_counter() - started
    captured["log"] = result.log
    captured["refusals"] = [r.to_json() for r in result.refusals]
    captured["series"] = repr(result.series)
    captured["events"] = result.events_run
    captured["steps"] = result.controller_steps
    captured["pools"] = [repr(p) for p in result.pools]
    captured["deployments"] = [repr(d) for d in result.deployments]
    captured["snapshot"] = _final_stores(scenario)
    return _digest(captured), wall


def _final_stores(scenario: Scenario) -> dict[str, Any]:
    """Every store's objects at the end, from a second run of the timeline (no samples)."""
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(scenario.end_s)
    return fleet.snapshot()


def main() -> None:
    runs: list[tuple[str, Scenario]] = [(n, load_scenario(n)) for n in builtin_names()]
    runs.append(("b4-2x50-1h", fleet_scenario(2, 50, 3600, 60, 1)))
    runs.append(("b4-3x20-2h", fleet_scenario(3, 20, 7200, 150, 2)))
    total = hashlib.sha256()
    for name, scenario in runs:
        digest, wall = fingerprint(scenario)
        total.update(digest.encode())
        print(f"{name:<22} {digest}  {wall:6.2f} s", flush=True)
    print(f"{'total':<22} {total.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
