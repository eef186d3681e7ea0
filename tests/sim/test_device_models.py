"""Issue 27 end to end: partitionable GPUs (KEP-4815 shared counters, MIG-shaped), device taints
(KEP-5055) and counters the agent cannot account, in the simulator with the real agent and
controller (`mig-partitions`, `tainted-device`, `counters-unaccounted`). The scenarios' own
checks run in test_builtin_scenarios; here the key numbers and what the hub publishes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpufleet.sim.scenario as scenario_pkg
from gpufleet.sim.emulated import dra
from gpufleet.sim.run.runner import RunResult, build_fleet, run_scenario, timeline_runner
from gpufleet.sim.scenario.load import ScenarioInvalid, load_scenario, parse_scenario
from gpufleet.store.port import INFERENCE_CLUSTER, POD


@functools.cache
def run(name: str) -> RunResult:
    return run_scenario(load_scenario(name))


def _pool_status(name: str, cluster: str, pool: str, until_s: float) -> tuple[Any, Any]:
    """The hub's `status.gpuPools[pool]` of `cluster` after `until_s`, and the fleet."""
    scenario = load_scenario(name)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(until_s)
    hub_cluster = fleet.hub.get(INFERENCE_CLUSTER, cluster)
    assert hub_cluster is not None
    entry = next(p for p in hub_cluster["status"]["gpuPools"] if p["name"] == pool)
    return entry, fleet


def _conditions(entry: Any) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
        for c in entry["observation"].get("conditions", [])
    }


def test_a_whole_gpu_replica_is_not_placed_on_partitioned_gpus() -> None:
    result = run("mig-partitions")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    (refusal,) = result.refusals
    assert (refusal.reason, refusal.placed, refusal.numbers["best_node_free"]) == (
        "InsufficientGPU",
        1,
        0,
    )
    # The ground truth counts whole GPUs: h100-0's two are partly held, h100-1's two run llm.
    assert [(p.key, p.nodes, p.gpus_total, p.gpus_allocated) for p in result.pools] == [
        ("lab/h100", 2, 4, 4)
    ]


def test_the_replica_runs_on_the_node_with_whole_gpus() -> None:
    _, fleet = _pool_status("mig-partitions", "lab", "h100", 90)
    store = fleet.clusters["lab"].store
    llm = [p for p in store.list(POD) if p["metadata"]["labels"].get("gpufleet.io/replica")]
    assert [p["spec"].get("nodeName") for p in llm] == ["h100-1"]
    # Its claim holds both whole GPUs of h100-1; the partitions are the other tenant's.
    taken = sorted(d for _, node, d in store.taken() if node == "h100-1")
    assert taken == ["gpu-0", "gpu-1"]


def test_a_tainted_device_is_left_out_and_said_so() -> None:
    result = run("tainted-device")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    big = [r for r in result.refusals if r.deployment == "ml/big"]
    assert big[0].numbers["best_node_free"] == 3
    entry, _ = _pool_status("tainted-device", "solo", "l4", 18)
    status, reason, message = _conditions(entry)["TaintedDevice"]
    assert (status, reason) == ("True", "TaintedDevice")
    assert "gpu-3 (gpu.nvidia.com/unhealthy=NoSchedule)" in message


def test_unaccountable_counters_make_the_pool_unobservable_with_the_reason() -> None:
    result = run("counters-unaccounted")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    entry, _ = _pool_status("counters-unaccounted", "lab", "h100", 40)
    conditions = _conditions(entry)
    status, reason, message = conditions["HistogramAvailable"]
    assert (status, reason) == ("False", "PartitionableDevicesUnaccounted")
    assert "shared counters cannot be accounted" in message
    assert "freeDevices" not in entry["observation"]
    # The pool's own condition names the DRA pools and the counter that is not whole.
    status, _, detail = conditions["PartitionableDevicesUnaccounted"]
    assert status == "True"
    assert "gpu.nvidia.com/h100-0" in detail and "counter 'memory'" in detail, detail


def test_the_emulated_allocator_gives_whole_gpus_only_and_respects_counters() -> None:
    devices, sets = dra.node_devices("gpu", 2, 2, "1", ["gpu-1"])
    assert [d["name"] for d in devices] == [
        "gpu-0",
        "gpu-0-mig-0",
        "gpu-0-mig-1",
        "gpu-1",
        "gpu-1-mig-0",
        "gpu-1-mig-1",
    ]
    assert sets[0] == {"name": "gpu-0", "counters": {"memory": {"value": "2"}}}
    slice_ = {
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": devices,
            "sharedCounters": sets,
        }
    }
    published = dra.published_devices([slice_])["n1"]
    request = dra.Request("gpu", "gpu.nvidia.com", 1, ())
    # gpu-1 is tainted: only gpu-0, a whole device, is allocatable.
    assert [r["device"] for r in dra.allocate([request], published, set()) or []] == ["gpu-0"]
    # A partition of gpu-0 held: no whole GPU is left.
    assert dra.allocate([request], published, {("gpu.nvidia.com", "n1", "gpu-0-mig-1")}) is None
    assert dra.units(published, {("gpu.nvidia.com", "n1", "gpu-0-mig-1")}) == (2, 1)


def test_bad_device_models_are_named_field_by_field() -> None:
    path = Path(scenario_pkg.__file__).parent / "builtin" / "mig-partitions.yaml"
    data = yaml.safe_load(path.read_text())
    pool = data["fleet"]["clusters"][0]["pools"][0]
    pool.update(partitions=40, partitionCounter=["1"], taintedDevices="gpu-0")
    data["timeline"][0]["device"] = 3
    with pytest.raises(ScenarioInvalid) as error:
        parse_scenario(data)
    problems = error.value.problems
    for line in (
        "fleet.clusters[0].pools[0].partitions: must be 0 to 16 (MIG partitions per GPU)",
        "fleet.clusters[0].pools[0].partitionCounter: must be a quantity",
        "timeline[0].device: must be a device name",
    ):
        assert line in problems, f"missing {line!r} in {problems}"
    assert any(p.startswith("fleet.clusters[0].pools[0].taintedDevices") for p in problems)


def test_a_dra_and_a_device_plugin_cluster_are_both_packed_and_explained() -> None:
    result = run("device-plugin-mixed")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    (refusal,) = [r for r in result.refusals if r.deployment == "ml/llm"]
    assert refusal.numbers["best_node_free"] == 0
    entry, fleet = _pool_status("device-plugin-mixed", "plugin", "l4", 150)
    assert entry["devices"][0]["resourceName"] == "nvidia.com/gpu"
    # Every GPU is held; the host room of those nodes is reported beside (issue 26).
    buckets = [{k: b[k] for k in ("free", "nodes")} for b in entry["observation"]["freeDevices"]]
    assert buckets == [{"free": {"nvidia.com/gpu": 0}, "nodes": 2}]
    pods = [p for p in fleet.clusters["plugin"].store.peek(POD)]
    assert pods and all("resourceClaims" not in p["spec"] for p in pods)
    limits = {str(p["spec"]["containers"][0]["resources"]["limits"]) for p in pods}
    assert limits == {"{'nvidia.com/gpu': '2'}"}
