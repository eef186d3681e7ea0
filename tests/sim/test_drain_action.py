"""The simulator's `drain` action behaves as `kubectl drain`: it cordons the node and evicts
every pod on it at once (no PodDisruptionBudget guards the fleet's pods), which is why the
fleet's make-before-break for drains starts at the cordon (scenario cordon-replaced-first)."""

from __future__ import annotations

import yaml

from gpufleet.sim.run.runner import run_scenario
from gpufleet.sim.scenario.load import parse_scenario_text


def _builtin(name: str) -> dict[str, object]:
    from importlib.resources import files

    text = (files("gpufleet.sim.scenario") / "builtin" / f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def test_a_drain_without_a_cordon_first_evicts_the_replica_pod_at_once() -> None:
    data = _builtin("cordon-replaced-first")
    data["timeline"] = [{"at": "1m", "action": "drain", "cluster": "solo", "node": "l4-0"}]
    data["checks"] = [{"at": "1m1s", "expect": {"podsRunning": {"llm": 1}}}]
    result = run_scenario(parse_scenario_text(yaml.safe_dump(data), "drain-now"))
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    # The evicted pod's Deployment made another, which the free node took: whole again.
    series = result.series
    running = [n for t, n in zip(series.times_s, series.running["ml/llm"], strict=True) if t > 90]
    assert min(running) == 2
    # No replica was replaced: the drain took the pod, not the replica.
    assert not [line for _, line in result.log if "dropped" in line]
