"""Running scenarios: the checks on pods, replicas and the hub's accounting, interval checks,
the invariants every run is held to, and the actions on InferenceClusters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import yaml

from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.run.invariants import (
    DEVICE_HELD_TWICE,
    HUB_ABOVE_ACTUAL,
    PENDING_WITHOUT_CAUSE,
    InvariantWatch,
)
from gpufleet.sim.run.runner import RunResult, build_fleet, run_scenario
from gpufleet.sim.run.state import FleetState
from gpufleet.sim.scenario.load import Accounting, Scenario, parse_scenario
from gpufleet.store.port import RESOURCE_CLAIM

FLEET = """
name: t
seed: 2
end: 4m
classes:
  l4-4x:
    devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4}]
fleet:
  clusters:
  - name: east
    labels: {region: east}
    behaviour: {reportInterval: 5s, podStartDelay: 5s}
    pools: [{name: l4, class: l4-4x, nodeCount: 1}]
  - name: west
    labels: {region: west}
    behaviour: {reportInterval: 5s, podStartDelay: 5s}
    pools: [{name: l4, class: l4-4x, nodeCount: 1}]
controller: {interval: 5s}
manifests:
- apiVersion: gpufleet.io/v1alpha1
  kind: ModelDeployment
  metadata: {name: llm, namespace: ml}
  spec:
    replicas: 2
    template:
      spec:
        clusterSelector: {matchLabels: {region: east}}
        engines:
        - name: engine
          members:
          - role: Standalone
            nodeSelector: {devices: [{name: gpu, count: 2, selectors: [{cel: 'device.driver != ""'}]}]}
            template: {spec: {containers: [{name: e, image: "vllm/vllm-openai:v0.23.0"}]}}
"""


def scenario(**overrides: Any) -> Scenario:
    data = yaml.safe_load(FLEET)
    data.update(overrides)
    return parse_scenario(data)


def failures(result: RunResult) -> list[tuple[float, str, str]]:
    return [(f.at_s, f.path, f.what) for f in result.failures]


def test_the_new_checks_see_pods_replicas_and_the_hub_accounting() -> None:
    result = run_scenario(
        scenario(
            checks=[
                {
                    "at": "1m",
                    "expect": {
                        "pods": {"llm": {"running": 2, "pending": 0, "unschedulable": 0}},
                        "modelPodsScheduled": {"llm": {"status": "True"}},
                        "readyReplicas": {"llm": 2},
                        "hubFreeGPUs": {"east/l4": "actual", "west/l4": 4},
                        "freeGPUs": {"east/l4": 0},
                    },
                },
                {
                    "at": "1m",
                    "expect": {
                        "pods": {"llm": {"running": 1}},
                        "modelPodsScheduled": {"llm": {"status": "False", "count": 1}},
                        "readyReplicas": {"llm": 1},
                        "hubFreeGPUs": {"east/l4": 3},
                    },
                },
            ]
        )
    )
    assert failures(result) == [
        (60.0, "checks[1]", "running pods of ml/llm"),
        (60.0, "checks[1]", "replicas of ml/llm with ModelPodsScheduled status=False"),
        (60.0, "checks[1]", "replicas.ready of ml/llm"),
        (60.0, "checks[1]", "free GPUs in east/l4 (hub's accounting)"),
    ]
    assert [f.got for f in result.failures] == [2, 0, 2, 0]


def test_a_refused_replica_is_pending_but_has_no_pods() -> None:
    # Three 2-GPU replicas for one 4-GPU node: the hub refuses the third, so it is a pending
    # replica, and no pod of it waits on the cluster.
    result = run_scenario(
        scenario(
            timeline=[{"at": "1m", "action": "scale", "deployment": "llm", "replicas": 3}],
            checks=[
                {
                    "at": "2m",
                    "expect": {"pending": 1, "pods": {"llm": {"running": 2, "pending": 0}}},
                }
            ],
        )
    )
    assert not result.failures, [str(f) for f in result.failures]


def test_always_is_reported_once_where_first_broken() -> None:
    result = run_scenario(
        scenario(
            timeline=[{"at": "2m", "action": "scale", "deployment": "llm", "replicas": 1}],
            checks=[
                {
                    "always": {"from": "1m", "to": "3m"},
                    "every": "10s",
                    "expect": {"placements": {"llm": 2}},
                }
            ],
        )
    )
    # At 2m the check sees the state before the scale; the controller drops a replica at
    # its next step (2m05s), and the window's instant there sees it (every second: the
    # run's samples).
    [broken] = result.failures
    assert (broken.path, broken.expected, broken.at_s) == ("checks[0]", 2, 125.0)
    assert "always from 1m00s to 3m00s: first broken here" in broken.what


def test_within_passes_at_the_first_instant_it_holds_and_fails_at_the_end() -> None:
    result = run_scenario(
        scenario(
            timeline=[{"at": "2m", "action": "scale", "deployment": "llm", "replicas": 1}],
            checks=[
                {"at": "2m", "within": "30s", "expect": {"pods": {"llm": {"running": 1}}}},
                {"at": "2m", "within": "1s", "expect": {"pods": {"llm": {"running": 1}}}},
            ],
        )
    )
    [late] = result.failures
    assert (late.path, late.at_s, late.got) == ("checks[1]", 121.0, 2)
    assert "within 1s after 2m00s: never held" in late.what


def test_label_cluster_moves_a_selected_deployment() -> None:
    result = run_scenario(
        scenario(
            timeline=[
                {
                    "at": "1m",
                    "action": "labelCluster",
                    "cluster": "east",
                    "labels": {"region": None},
                },
                {
                    "at": "1m",
                    "action": "labelCluster",
                    "cluster": "west",
                    "labels": {"region": "east"},
                },
                {
                    "at": "1m",
                    "action": "labelCluster",
                    "cluster": "west",
                    "labels": {"region": "east"},
                },
            ],
            checks=[
                {
                    "at": "1m",
                    "within": "1m",
                    "expect": {"placements": {"llm": {"count": 2, "clusters": {"west": 2}}}},
                }
            ],
        )
    )
    # The third action changes nothing: a failure, as for any action that changes nothing.
    [unchanged] = result.failures
    assert (unchanged.path, unchanged.what) == (
        "timeline[2]",
        "labelCluster west region=east",
    )
    assert "already has those labels" in str(unchanged.got)


def test_delete_cluster_drops_its_replicas() -> None:
    data = yaml.safe_load(FLEET)
    data["manifests"][0]["spec"]["template"]["spec"].pop("clusterSelector")
    data["manifests"][0]["spec"]["replicas"] = 4
    data["timeline"] = [
        {"at": "1m", "action": "deleteCluster", "cluster": "west"},
        {"at": "2m", "action": "deleteCluster", "cluster": "west"},
    ]
    data["checks"] = [
        {
            "at": "50s",
            "expect": {"placements": {"llm": {"count": 4, "clusters": {"east": 2, "west": 2}}}},
        },
        {"at": "1m", "within": "1m", "expect": {"placements": {"llm": {"clusters": {"east": 2}}}}},
    ]
    result = run_scenario(parse_scenario(data))
    [gone] = result.failures
    assert gone.path == "timeline[1]" and "no InferenceCluster west" in str(gone.got)


def test_untaint_without_effect_removes_the_key_at_both_levels() -> None:
    taint = {"action": "taint", "cluster": "east", "key": "maintenance", "effect": "NoExecute"}
    untaint = {"action": "untaint", "cluster": "east", "key": "maintenance"}
    result = run_scenario(
        scenario(
            timeline=[
                {"at": "1m", **taint},
                {"at": "1m", **taint, "node": "l4-0"},
                {"at": "2m", **untaint},
                {"at": "2m", **untaint, "node": "l4-0"},
                {"at": "3m", **untaint},
                {"at": "3m", **untaint, "node": "l4-0"},
                {"at": "3m", "action": "uncordon", "cluster": "east", "node": "l4-0"},
                {"at": "3m", "action": "startAgent", "cluster": "east"},
            ],
            checks=[{"at": "1m30s", "expect": {"placements": {"llm": 0}}}],
        )
    )
    # At 3m there is nothing left to remove, nothing to uncordon, and the agent is running.
    assert [(f.path, f.at_s) for f in result.failures] == [
        ("timeline[4]", 180.0),
        ("timeline[5]", 180.0),
        ("timeline[6]", 180.0),
        ("timeline[7]", 180.0),
    ]
    assert "has no taint maintenance" in str(result.failures[0].got)
    assert "has no such taint" in str(result.failures[1].got)


# --- invariants ---------------------------------------------------------------------------


def test_a_device_held_by_two_claims_is_caught_however_briefly() -> None:
    s = scenario()
    fleet, hub_step = build_fleet(s, Accounting.FREE_GPU)
    fleet.run_until(EPOCH + timedelta(seconds=60))
    watch = InvariantWatch(fleet, s, is_observing=True)
    assert watch.at(60.0, FleetState(fleet, None, hub_step.last_decision)) == []
    east = fleet.clusters["east"]
    held = next(
        c for c in east.store.peek(RESOURCE_CLAIM) if (c.get("status") or {}).get("allocation")
    )
    # Another tenant's claim on the same device, written past the scheduler, and gone again.
    east.store.create(
        {
            "apiVersion": RESOURCE_CLAIM.api_version,
            "kind": RESOURCE_CLAIM.kind,
            "metadata": {"name": "intruder", "namespace": "other"},
            "spec": {"devices": {"requests": []}},
        }
    )
    east.store.patch_status(
        RESOURCE_CLAIM, "intruder", "other", {"allocation": held["status"]["allocation"]}
    )
    east.store.delete(RESOURCE_CLAIM, "intruder", "other")
    found = watch.at(60.0, FleetState(fleet, None, hub_step.last_decision))
    # One failure per device the two claims shared (the held claim has 2).
    assert [f.path for f in found] == [f"invariant {DEVICE_HELD_TWICE}"] * 2
    assert all("other/intruder" in str(f.got) for f in found)
    assert watch.at(61.0, FleetState(fleet, None, hub_step.last_decision)) == []


def test_a_hub_that_stops_accounting_is_caught_above_the_actual() -> None:
    s = scenario()
    fleet, hub_step = build_fleet(s, Accounting.FREE_GPU)
    watch = InvariantWatch(fleet, s, is_observing=True)
    fleet.run_until(EPOCH + timedelta(seconds=60))
    assert watch.at(60.0, FleetState(fleet, None, hub_step.last_decision)) == []
    hub_step.controller = None  # its last decision, and the published Fresh state, stay
    fleet.clusters["west"].add_foreign_claim("l4-0", 3)
    found = []
    for at_s in range(61, 91):
        fleet.run_until(EPOCH + timedelta(seconds=at_s))
        found += watch.at(float(at_s), FleetState(fleet, None, hub_step.last_decision))
    # One report interval, its delay (0) and the controller interval: 10s of grace.
    [broken] = found
    assert (broken.path, broken.at_s, broken.got) == (f"invariant {HUB_ABOVE_ACTUAL}", 72.0, 4)
    assert broken.expected == "at most the actual 1"


def test_a_pod_pending_on_growth_nobody_brings_has_no_cause() -> None:
    data = yaml.safe_load(FLEET)
    east = data["fleet"]["clusters"][0]
    east["behaviour"]["autoscaling"] = False
    east["pools"][0]["maxNodeCount"] = 2
    data["manifests"][0]["spec"]["replicas"] = 3
    result = run_scenario(parse_scenario(data))
    [broken] = result.failures
    assert broken.path == f"invariant {PENDING_WITHOUT_CAUSE}"
    assert "no action on east" in str(broken.got)


def test_a_foreign_claim_is_a_cause_for_a_pending_pod() -> None:
    # The claim lands just after the hub placed the replica: the pod cannot be scheduled,
    # and the event log says why.
    data = yaml.safe_load(FLEET)
    data["manifests"][0]["spec"]["replicas"] = 1
    data["timeline"] = [
        {"at": "1m", "action": "scale", "deployment": "llm", "replicas": 2},
        {
            "at": "1m6s",
            "action": "addForeignClaim",
            "cluster": "east",
            "node": "l4-0",
            "devices": 2,
        },
    ]
    data["checks"] = [{"at": "2m", "expect": {"pods": {"llm": {"running": 1, "unschedulable": 1}}}}]
    result = run_scenario(parse_scenario(data))
    assert not result.failures, [str(f) for f in result.failures]


def test_whole_node_accounting_is_not_held_to_the_observed_invariants() -> None:
    data = yaml.safe_load(FLEET)
    east = data["fleet"]["clusters"][0]
    east["behaviour"]["autoscaling"] = False
    east["pools"][0]["maxNodeCount"] = 2
    result = run_scenario(parse_scenario(data), Accounting.WHOLE_NODE)
    assert not result.failures, [str(f) for f in result.failures]
