"""Issue 26 section 1 and issue 25 item 6, end to end: Gated steering (each claiming pod
created behind gpufleet's scheduling gate, given its node, the gate lifted), gangs through
gates, growth from zero with gated pods, and an agent restarted while its pods are gated."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gpufleet.agent.gates import ASSIGNED_NODE
from gpufleet.agent.steer import GATE
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.run.runner import RunResult, build_fleet, run_scenario, timeline_runner
from gpufleet.sim.scenario.load import load_scenario
from gpufleet.store.port import POD, RESOURCE_CLAIM

Obj = dict[str, Any]


@functools.cache
def run(name: str) -> RunResult:
    scenario = load_scenario(name)
    return run_scenario(scenario, scenario.controller.accounting)


def fleet_at(name: str, times: list[int], each: Callable[[int, Fleet], None]) -> None:
    scenario = load_scenario(name)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    step = timeline_runner(fleet, scenario)
    for t in times:
        step(t)
        each(t, fleet)


def gpus_of(fleet: Fleet, cluster: str, pod: Obj) -> int:
    """The GPUs the pod's claim asks for (its claim's requests)."""
    store = fleet.clusters[cluster].store
    total = 0
    for entry in pod["status"].get("resourceClaimStatuses") or []:
        claim = store.peek_one(RESOURCE_CLAIM, entry["resourceClaimName"], "ml")
        for r in (claim or {}).get("spec", {}).get("devices", {}).get("requests", []):
            total += int(r.get("exactly", {}).get("count", 1))
    return total


def chosen_per_node(fleet: Fleet, cluster: str) -> dict[str, int]:
    """Per node, the GPUs of the live pods given that node (their `gpufleet.io/node`)."""
    out: dict[str, int] = defaultdict(int)
    for pod in fleet.clusters[cluster].store.peek(POD, "ml"):
        node = (pod["metadata"].get("annotations") or {}).get(ASSIGNED_NODE)
        if node and not pod["metadata"].get("deletionTimestamp"):
            out[node] += gpus_of(fleet, cluster, pod)
    return dict(out)


def test_gangs_go_through_gates_each_pod_on_its_node() -> None:
    result = run("gated-gangs")
    assert not result.failures, "\n".join(str(f) for f in result.failures)

    def check(_: int, fleet: Fleet) -> None:
        pods = fleet.clusters["lab"].store.peek(POD, "ml")
        claiming = [p for p in pods if p["spec"].get("resourceClaims")]
        assert len(claiming) == 5  # 2 claiming pods of one gang, 3 of the other
        for pod in pods:
            assert not pod["spec"].get("schedulingGates"), pod["metadata"]["name"]
        for pod in claiming:
            node = pod["metadata"]["annotations"][ASSIGNED_NODE]
            assert pod["spec"]["nodeName"] == node  # kube-scheduler bound it where it was given
            terms = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert all(
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                in t["matchExpressions"]
                for t in terms
            )
        # A gang copy's claiming pods on distinct nodes.
        by_group: dict[str, list[str]] = defaultdict(list)
        for pod in claiming:
            group = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]
            by_group[group].append(pod["spec"]["nodeName"])
        assert all(len(set(n)) == len(n) for n in by_group.values())
        # Leaders that claim nothing are not gated and not pinned.
        for pod in pods:
            if not pod["spec"].get("resourceClaims"):
                assert ASSIGNED_NODE not in (pod["metadata"].get("annotations") or {})

    fleet_at("gated-gangs", [60], check)


def test_growth_from_zero_with_gated_steering() -> None:
    result = run("gated-from-zero")
    assert not result.failures, "\n".join(str(f) for f in result.failures)

    def check(t: int, fleet: Fleet) -> None:
        pods = fleet.clusters["burst"].store.peek(POD, "ml")
        # No node to choose: the pods are created ungated and unpinned, so the autoscaler
        # sees them Unschedulable and grows the pool.
        for pod in pods:
            assert {"name": GATE} not in (pod["spec"].get("schedulingGates") or [])
            given = (pod["metadata"].get("annotations") or {}).get(ASSIGNED_NODE)
            if pod["metadata"]["name"].startswith("later"):
                # On the grown pool there is a node to give: through the gate, pinned.
                assert given == pod["spec"]["nodeName"]
            else:
                assert given is None
        if t >= 120:
            # Binpacked: one new node for the gang (its claimless Leader needs none of its
            # own), one for the 4-GPU replica; not three.
            assert len(fleet.clusters["burst"].nodes("h100")) == 2
            assert all(p["spec"].get("nodeName") for p in pods)

    fleet_at("gated-from-zero", [15, 120, 240], check)


def test_a_restarted_agent_keeps_its_choices_per_pod() -> None:
    result = run("gated-restart")
    assert not result.failures, "\n".join(str(f) for f in result.failures)
    seen: list[tuple[int, dict[str, int]]] = []

    def check(t: int, fleet: Fleet) -> None:
        per_node = chosen_per_node(fleet, "lab")
        seen.append((t, per_node))
        assert all(gpus <= 8 for gpus in per_node.values()), (t, per_node)
        pods = fleet.clusters["lab"].store.peek(POD, "ml")
        if t == 49:  # the agent is down: the first pod waits behind its gate
            (pod,) = pods
            assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
            assert not pod["spec"].get("nodeName")

    fleet_at("gated-restart", [30, 49, 51, 56, 60, 90, 120], check)
    # The first pod kept its node; the 8-GPU pod was given no node (none has 8 free).
    assert seen[-1][1] == {"h100-0": 4}
