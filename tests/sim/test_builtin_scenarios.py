"""Every built-in scenario is an end-to-end test: the real agent and controller on the simulated
fleet, the scenario's own checks, and a few key numbers asserted here directly."""

from __future__ import annotations

import functools
from collections import Counter

import pytest

from gpufleet.sim.run.runner import RunResult, run_scenario
from gpufleet.sim.scenario.load import Accounting, builtin_names, load_scenario


@functools.cache
def run(name: str, accounting: Accounting | None = None) -> RunResult:
    return run_scenario(load_scenario(name), accounting)


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_scenario_checks_pass(name: str) -> None:
    result = run(name)
    assert result.checks_run > 0
    assert not result.failures, "\n".join(str(f) for f in result.failures)


def deployment(result: RunResult, name: str) -> tuple[int, int, int]:
    found = next(d for d in result.deployments if d.name.endswith(f"/{name}"))
    return found.desired, found.placed, found.running


def test_quickstart_tells_the_story() -> None:
    result = run("quickstart")
    # The fifth 1-GPU deployment is refused, with the numbers.
    first = result.refusals[0]
    assert (first.deployment, first.reason, first.placed) == (
        "ml-team/qwen-2-7b",
        "InsufficientGPU",
        0,
    )
    assert first.numbers["best_node_free"] == 0
    assert first.where == "cluster solo, pool l4"
    # The scale-down let it in; the node is full again.
    assert deployment(result, "qwen-2-7b") == (1, 1, 1)
    assert deployment(result, "phi-4") == (0, 0, 0)
    assert [(p.gpus_allocated, dict(p.histogram)) for p in result.pools] == [(4, {0: 1})]
    assert result.wall_s < 10


def test_eks_validation_refuses_two_gpus_with_one_free() -> None:
    result = run("eks-validation")
    foxtrot = [r for r in result.refusals if r.deployment == "ml/foxtrot"]
    assert [(r.numbers["best_node_free"], r.numbers["requested_devices"]) for r in foxtrot] == [
        (0, 2),
        (1, 2),
    ]
    assert deployment(result, "foxtrot") == (1, 1, 1)


def test_race_places_exactly_one() -> None:
    result = run("race")
    placed = [deployment(result, n)[1] for n in ("waiter-a", "waiter-b")]
    assert sorted(placed) == [0, 1]


def test_mixed_sizes_refusal_names_the_best_node() -> None:
    result = run("mixed-sizes")
    big = next(r for r in result.refusals if r.deployment == "ml/big")
    assert (big.reason, big.numbers["best_node_free"], big.numbers["free_devices"]) == (
        "InsufficientGPU",
        3,
        12,
    )


def test_whole_node_accounting_places_fewer_on_the_quickstart() -> None:
    whole = run("quickstart", Accounting.WHOLE_NODE)
    free = run("quickstart", Accounting.FREE_GPU)
    assert sum(d.placed for d in whole.deployments) == 1
    assert sum(d.placed for d in free.deployments) == 4
    assert {r.reason for r in whole.refusals} == {"InsufficientNodes"}


def test_runs_are_deterministic() -> None:
    a = run_scenario(load_scenario("race")).to_json()
    b = run_scenario(load_scenario("race")).to_json()
    a.pop("stats")
    b.pop("stats")
    assert a == b


def test_the_example_in_the_docs_runs_and_passes() -> None:
    import re
    from pathlib import Path

    from gpufleet.sim.scenario.load import parse_scenario_text

    docs = (Path(__file__).parents[2] / "docs" / "scenarios.md").read_text()
    found = re.search(r"## Example\n\n```yaml\n(.*?)```", docs, re.S)
    assert found is not None
    result = run_scenario(parse_scenario_text(found.group(1), "docs/scenarios.md"))
    assert result.checks_run == 2
    assert not result.failures, "\n".join(str(f) for f in result.failures)


def _first_time(result: RunResult, pool: tuple[str, str], nodes: int, after_s: float) -> float:
    series = result.series
    return next(
        t
        for t, n in zip(series.times_s, series.pool_nodes[pool], strict=True)
        if t >= after_s and n == nodes
    )


def test_the_autoscaler_scans_on_its_own_cadence_in_a_quiet_cluster() -> None:
    # Nothing but the autoscaler can wake this cluster once its pod is Unschedulable (at ~5s,
    # after the agent's first report): the scale-up must come from a scan within 10s, plus
    # the 1m scale-up delay; and the idle nodes must go 2m after a scan sees them idle.
    # Before the autoscaler kept its own cadence, neither happened at all in this run.
    result = run("autoscale-quiet")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    assert _first_time(result, ("quiet", "l4"), 1, 0) <= 5 + 10 + 60 + 1
    assert _first_time(result, ("quiet", "l4"), 0, 6 * 60) <= 6 * 60 + 15 + 10 + 120 + 1


def test_a_serving_replica_is_kept_though_a_pod_of_it_is_stuck() -> None:
    result = run("serving-not-replaced")
    assert deployment(result, "llm") == (1, 1, 1)
    assert not [line for _, line in result.log if "dropped" in line or "avoid" in line]
    assert [line for _, line in result.log if "placed ml/llm" in line] == ["placed ml/llm on solo"]


def _after(result: RunResult, series: dict[str, list[int]], from_s: float) -> list[int]:
    return [n for t, n in zip(result.series.times_s, series["ml/llm"], strict=True) if t >= from_s]


def _rolled(result: RunResult) -> list[str]:
    """What the controller did to ml/llm after the image change at 1m."""
    return [
        line for t, line in result.log if t >= 60 and "ml/llm" in line and "refused" not in line
    ]


def test_an_image_change_on_a_full_pool_deletes_nothing_and_waits_with_numbers() -> None:
    # On main the change re-stamped every replica in place: all four pods went at once.
    result = run("rollout-no-room")
    assert min(_after(result, result.series.running, 30)) == 4
    assert _rolled(result) == ["apply ml/llm"]
    assert deployment(result, "llm") == (4, 4, 4)


def test_max_unavailable_one_rolls_one_replica_at_a_time() -> None:
    result = run("rollout-in-place")
    assert min(_after(result, result.series.running, 30)) == 3  # replicas - maxUnavailable
    assert max(_after(result, result.series.placed, 30)) == 4
    rolled = _rolled(result)
    # Each old replica goes, then its replacement is placed, before the next old one goes.
    one_at_a_time = ["dropped ml/llm from solo (Superseded)", "placed ml/llm on solo"] * 4
    assert rolled == ["apply ml/llm", *one_at_a_time]
    assert deployment(result, "llm") == (4, 4, 4)


def test_room_on_another_cluster_rolls_make_before_break() -> None:
    result = run("rollout-room-elsewhere")
    assert min(_after(result, result.series.running, 30)) == 4
    rolled = _rolled(result)
    assert rolled[:3] == [
        "apply ml/llm",
        "placed ml/llm on spare",  # the surge, first
        "dropped ml/llm from main (Superseded)",  # only once it runs
    ]
    assert rolled.count("dropped ml/llm from main (Superseded)") == 4
    assert deployment(result, "llm") == (4, 4, 4)


def test_a_cordoned_node_under_a_serving_replica_is_replaced_first() -> None:
    # On main the replica stayed on the cordoned node (and a drain then evicted its pod).
    result = run("cordon-replaced-first")
    assert min(_after(result, result.series.running, 30)) == 2
    assert [line for t, line in result.log if t >= 60] == [
        "cordon solo/l4-0",
        "placed ml/llm on solo",  # the replacement, first
        "dropped ml/llm from solo (Superseded)",  # once it runs
        "drain solo/l4-0",  # evicts nothing of the fleet
    ]


def test_one_namespaces_stuck_deployments_neither_starve_another_nor_churn() -> None:
    """churn-bounded (issue 30.3): 24 unrunnable deployments in noisy, tenant/llm applied at
    5m. llm is placed in the step the first GPUs free (6m15s), and each stuck deployment is
    re-placed (its replica dropped as stuck) at most 5 times in the hour."""
    result = run("churn-bounded")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    placed = [t for t, line in result.log if line == "placed tenant/llm on east"]
    freed = min(t for t, line in result.log if t >= 300 and line.startswith("dropped noisy/"))
    assert placed == [freed] == [375.0]
    drops = Counter(line.split()[1] for _, line in result.log if line.startswith("dropped noisy/"))
    assert len(drops) == 24
    assert max(drops.values()) <= 5
    # While a deployment backs off, its replica is not re-created on the pool it avoids (it
    # holds no GPU): its placements and drops alternate, one replica at a time.
    for name in drops:
        mine = [
            line.split()[0]
            for _, line in result.log
            if line.startswith((f"placed {name} ", f"dropped {name} "))
        ]
        assert mine[::2] == ["placed"] * len(mine[::2])
        assert mine[1::2] == ["dropped"] * len(mine[1::2])


def test_a_drained_node_under_a_serving_replica_is_replaced_first() -> None:
    # On main the drain evicted the replica's pod at once: one replica served nothing.
    result = run("drain-replaced-first")
    assert min(_after(result, result.series.running, 30)) == 2
    assert [line for t, line in result.log if t >= 60] == [
        "drain solo/l4-0",  # no cordon first
        "placed ml/llm on solo",  # the replacement, first
        "dropped ml/llm from solo (Superseded)",  # once it runs
    ]


def test_a_pod_whose_cpu_does_not_fit_is_refused_with_its_numbers() -> None:
    """Issue 26 §2: nodes of 16 cores less a DaemonSet's 1; a 24-core pod is refused with its
    numbers (from the agent's hostRoom report), a 96Gi one for memory, and neither is placed."""
    result = run("cpu-does-not-fit")
    big = next(r for r in result.refusals if r.deployment == "ml/big")
    assert big.reason == "InsufficientCPU"
    assert (big.numbers["pod_milli_cpu"], big.numbers["best_node_milli_cpu"]) == (24000, 15000)
    assert "needs 24 cores, best node with 4 free devices has 15 free" in big.detail
    hungry = next(r for r in result.refusals if r.deployment == "ml/hungry")
    assert hungry.reason == "InsufficientMemory"
    assert hungry.numbers["best_node_memory"] == 63 * 2**30
    assert deployment(result, "big") == (1, 0, 0)
    assert deployment(result, "hungry") == (1, 0, 0)
    assert deployment(result, "small") == (1, 1, 1)


def test_proportional_requests_on_a_spreading_cluster_strand_no_big_replica() -> None:
    """Issue 26 §2: 4-copy engines sized in proportion (DaemonSets' 2 cores and 8Gi less) fill
    two nodes as the fit chose; the 8-GPU replica sized to a whole node's share (46 cores,
    184Gi: it binds only because the DaemonSet's requests were taken off) runs on the third."""
    result = run("proportional-spread")
    assert result.refusals == []
    assert deployment(result, "small") == (4, 4, 16)
    assert deployment(result, "big") == (1, 1, 1)
    assert not result.controller_errors


def test_proportional_pods_ask_what_the_hub_sized() -> None:
    """The figures reach the pods: the hub sized them from the agent's shareableRoom (46
    cores, 184Gi after the DaemonSet's 2 cores and 8Gi), the replica carries them and the
    agent wrote them where the template asks none (small's 2 explicit cores win)."""
    from gpufleet.core.pod_requests import pod_requests
    from gpufleet.sim.run.runner import build_fleet, timeline_runner
    from gpufleet.store.port import POD

    scenario = load_scenario("proportional-spread")
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(scenario.end_s)
    asked = Counter(
        (p["metadata"]["labels"].get("gpufleet.io/deployment"), pod_requests(p["spec"]))
        for p in fleet.clusters["spread"].store.list(POD)
        if p["metadata"]["namespace"] != "other-tenant"
    )
    assert asked == {("small", (2000, 23 * 2**30)): 16, ("big", (46_000, 184 * 2**30)): 1}
