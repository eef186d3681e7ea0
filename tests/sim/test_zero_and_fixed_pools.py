"""Issue 14, sections 3 and 4, end to end: a cluster whose only pool is at zero nodes takes
replicas and grows from zero (`scale-from-zero`), and a fixed pool whose node was removed takes
nothing into the missing node (`fixed-pool-node-removed`). The scenarios' own checks run in
test_builtin_scenarios; here the key numbers, and how whole-node accounting differs."""

from __future__ import annotations

import functools

from gpufleet.sim.run.runner import RunResult, build_fleet, run_scenario, timeline_runner
from gpufleet.sim.scenario.load import Accounting, load_scenario
from gpufleet.store.port import EVENT, INFERENCE_CLUSTER


@functools.cache
def run(name: str, accounting: Accounting = Accounting.FREE_GPU) -> RunResult:
    return run_scenario(load_scenario(name), accounting)


def summary(result: RunResult) -> list[tuple[str, int, int, int]]:
    return [(d.name, d.desired, d.placed, d.running) for d in result.deployments]


def test_a_pool_at_zero_nodes_counts_its_growth_and_grows_from_zero() -> None:
    result = run("scale-from-zero")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    first = result.refusals[0]
    # Placed at once on the two nodes of growth; the third refused at the ceiling.
    assert (first.at_s, first.placed, first.reason, first.where) == (
        0.0,
        2,
        "InsufficientGPU",
        "cluster burst, pool a10g",
    )
    assert (first.numbers["nodes"], first.numbers["free_devices"]) == (2, 0)
    assert summary(result) == [("ml/from-zero", 1, 1, 1)]
    assert [(p.key, p.nodes, p.gpus_allocated) for p in result.pools] == [("burst/a10g", 1, 4)]


def test_the_zero_node_cluster_is_ready_and_its_pods_trigger_scale_up() -> None:
    scenario = load_scenario("scale-from-zero")
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(30)
    hub_cluster = fleet.hub.get(INFERENCE_CLUSTER, "burst")
    assert hub_cluster is not None
    ready = next(c for c in hub_cluster["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "AgentReporting")
    events = fleet.clusters["burst"].store.list(EVENT)
    # One per placed replica's pod: the emulated cluster-autoscaler grows the pool from zero.
    assert sorted(e["reason"] for e in events) == ["TriggeredScaleUp", "TriggeredScaleUp"]


def test_whole_node_accounting_places_on_the_zero_node_pool_too() -> None:
    result = run("scale-from-zero", Accounting.WHOLE_NODE)
    first = result.refusals[0]
    assert (first.placed, first.reason, first.numbers["nodes"]) == (2, "InsufficientNodes", 2)
    assert summary(result) == [("ml/from-zero", 1, 1, 1)]


def test_a_fixed_pool_takes_nothing_into_a_removed_node() -> None:
    result = run("fixed-pool-node-removed")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    (refusal,) = result.refusals
    assert (refusal.placed, refusal.reason) == (1, "InsufficientGPU")
    assert (refusal.numbers["nodes"], refusal.numbers["best_node_free"]) == (1, 0)
    assert summary(result) == [("ml/whole-node", 2, 1, 1)]


def test_whole_node_accounting_still_counts_a_fixed_pool_by_its_declared_size() -> None:
    # Modelplane HEAD semantics (no observation read): the removed node is counted, and the
    # second replica never runs. This is the difference the free-GPU fix makes.
    result = run("fixed-pool-node-removed", Accounting.WHOLE_NODE)
    assert summary(result) == [("ml/whole-node", 2, 2, 1)]
