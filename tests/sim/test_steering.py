"""Steering on the emulated cluster: what the pod spec the agent writes does there.

The materializer's objects (real code) are created in an emulated workload cluster whose
kube-scheduler honours required node affinity and required pod anti-affinity; what happens when
the chosen node fills up first is tested for both modes, and a claimless Leader shares its
Worker's node."""

from __future__ import annotations

from typing import Any

from sim_builders import cluster, fleet, model_replica, pool

from gpufleet.agent.materialize import materialize
from gpufleet.agent.steer import STEERED_NODES
from gpufleet.core.model import Steering
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.objects import is_unschedulable
from gpufleet.sim.run.runner import run_scenario
from gpufleet.sim.scenario.load import builtin_text, parse_scenario_text
from gpufleet.store.port import DEPLOYMENT, INFERENCE_CLUSTER, POD, Obj

QUICK = ClusterBehaviour(
    is_autoscaling=False,
    pod_start_delay_s=1.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=1.0,
)
GPU = "gpu.nvidia.com"


def start(nodes: int, gpus: int = 4) -> tuple[EventLoop, WorkloadCluster]:
    loop = EventLoop(seed=1)
    c = WorkloadCluster(ClusterSpec("a", (pool(nodes=nodes, gpus=gpus),), QUICK), loop)
    c.start()
    loop.run_for(3)  # slices published
    return loop, c


def member(role: str, gpus: int, nodes: int = 1) -> Obj:
    body: Obj = {
        "role": role,
        "nodePoolName": "l4",
        "template": {"spec": {"containers": [{"name": "engine", "image": "v1"}]}},
    }
    if gpus:
        body["deviceRequests"] = [
            {"name": "gpu", "deviceClassName": GPU, "driver": GPU, "count": gpus}
        ]
    if role == "Worker":
        body["worker"] = {"nodes": nodes}
    return body


def replica(members: list[Obj], copies: int = 1) -> Obj:
    return {
        "metadata": {"name": "r", "namespace": "ml", "generation": 1, "labels": {}},
        "spec": {
            "deploymentName": "d",
            "engines": [{"name": "main", "copies": copies, "members": members}],
        },
    }


def create(c: WorkloadCluster, objs: list[Obj]) -> None:
    for obj in objs:
        if obj["kind"] == "ResourceClaimTemplate":
            c.store.create(obj)
    for obj in objs:
        if obj["kind"] != "ResourceClaimTemplate":
            c.store.create(obj)


def pods(c: WorkloadCluster) -> list[dict[str, Any]]:
    return c.store.list(POD, "ml")


def steered_to_l4_0(c: WorkloadCluster, mode: Steering) -> None:
    """l4-0 fills up (a foreign tenant) after the agent chose it, before the pod binds."""
    c.add_foreign_claim("l4-0", count=4)
    objs = materialize(
        replica([member("Standalone", 4)]), None, {("main", "Standalone"): ("l4-0",)}, mode
    )
    create(c, objs)


def test_required_waits_when_its_node_fills_up() -> None:
    loop, c = start(nodes=2)
    steered_to_l4_0(c, Steering.REQUIRED)
    loop.run_for(10)
    (pod,) = pods(c)
    # l4-1 has 4 free GPUs, but the pod may only go to l4-0: it stays Pending.
    assert not pod["spec"].get("nodeName")
    assert is_unschedulable(pod)
    (condition,) = [x for x in pod["status"]["conditions"] if x["type"] == "PodScheduled"]
    assert "1 node(s) didn't match Pod's node affinity/selector" in condition["message"]
    # Until the devices free up: then it binds where it was steered.
    c.remove_foreign_claim("foreign-1")
    loop.run_for(10)
    (pod,) = pods(c)
    assert pod["spec"].get("nodeName") == "l4-0"


def test_preferred_lands_elsewhere_when_its_node_fills_up() -> None:
    loop, c = start(nodes=2)
    steered_to_l4_0(c, Steering.PREFERRED)
    loop.run_for(10)
    (pod,) = pods(c)
    assert pod["spec"].get("nodeName") == "l4-1"


def test_preferred_steering_wins_over_spreading() -> None:
    """Four 1-GPU copies steered to one node land there, though the cluster spreads."""
    loop, c = start(nodes=4)
    objs = materialize(
        replica([member("Standalone", 1)], copies=4),
        None,
        {("main", "Standalone"): ("l4-2",) * 4},
        Steering.PREFERRED,
    )
    create(c, objs)
    loop.run_for(10)
    assert {p["spec"].get("nodeName") for p in pods(c)} == {"l4-2"}
    unsteered, c2 = start(nodes=4)
    create(c2, materialize(replica([member("Standalone", 1)], copies=4)))
    unsteered.run_for(10)
    assert len({p["spec"].get("nodeName") for p in pods(c2)}) == 4


def test_gang_claiming_pods_take_distinct_nodes_and_a_claimless_leader_shares() -> None:
    loop, c = start(nodes=2, gpus=8)
    create(c, materialize(replica([member("Leader", 0), member("Worker", 4, nodes=2)])))
    loop.run_for(10)
    by_role = {
        (p["metadata"]["labels"]["gpufleet.io/member"], p["spec"].get("nodeName")) for p in pods(c)
    }
    workers = sorted(n for r, n in by_role if r == "Worker")
    assert workers == ["l4-0", "l4-1"]  # one copy's claiming pods on distinct nodes
    assert all(n for _, n in by_role)  # the claimless Leader runs too, on one of them


def test_a_claimless_leader_with_an_8_gpu_worker_runs_on_one_node() -> None:
    loop, c = start(nodes=1, gpus=8)
    create(c, materialize(replica([member("Leader", 0), member("Worker", 8)])))
    loop.run_for(10)
    assert sorted(p["spec"].get("nodeName") for p in pods(c)) == ["l4-0", "l4-0"]


def test_mixed_churn_needs_steering() -> None:
    """The built-in scenario's checks hold with steering; with it off, the 8-GPU replicas are
    refused on the same spreading cluster."""
    text = builtin_text("mixed-churn")
    steered = run_scenario(parse_scenario_text(text))
    assert not steered.failures
    off = run_scenario(
        parse_scenario_text(
            text.replace("nodeChoice: Spread,", 'nodeChoice: Spread, steering: "Off",')
        )
    )
    big = next(d for d in off.deployments if d.name.endswith("/big"))
    assert big.running == 0
    assert off.failures


def test_a_restarted_agent_keeps_the_steering_of_running_pods() -> None:
    """A new agent chooses afresh, but a Deployment equal but for its steering is left alone:
    its running pods are not rolled to move them."""
    f, w = fleet(cluster("a", pool(nodes=2, gpus=4)))
    w.create(model_replica(gpus=2, copies=1))
    f.run_for(20)
    store = f.clusters["a"].store
    (before,) = store.list(DEPLOYMENT, "ml")
    (pod,) = store.list(POD, "ml")
    steered = before["spec"]["template"]["metadata"]["annotations"][STEERED_NODES]
    assert pod["spec"]["nodeName"] == steered
    # The steered node fills up (its own pod holds the rest): a fresh best fit, which counts
    # the running pod's devices as taken, would choose the other node.
    f.clusters["a"].add_foreign_claim(steered, count=2)
    f.crash_agent("a")
    f.restart_agent("a")
    f.run_for(20)
    (after,) = store.list(DEPLOYMENT, "ml")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert [p["metadata"]["uid"] for p in store.list(POD, "ml")] == [pod["metadata"]["uid"]]


def test_required_to_a_full_node_does_not_make_the_autoscaler_add_one() -> None:
    """A new node has a new hostname, so a pod required onto the chosen (full) node cannot use
    it: no scale-up (as cluster-autoscaler's simulation finds); a preferred one gets a node."""
    counts: dict[Steering, tuple[int, bool]] = {}
    for mode in (Steering.REQUIRED, Steering.PREFERRED):
        loop = EventLoop(seed=1)
        behaviour = ClusterBehaviour(
            pod_start_delay_s=1.0,
            dra_publish_delay_s=1.0,
            autoscaler_scan_s=5.0,
            scale_up_delay_s=10.0,
        )
        c = WorkloadCluster(
            ClusterSpec("a", (pool(nodes=1, gpus=4, max_nodes=3),), behaviour), loop
        )
        c.start()
        loop.run_for(3)
        c.add_foreign_claim("l4-0", count=4)
        objs = materialize(
            replica([member("Standalone", 4)]), None, {("main", "Standalone"): ("l4-0",)}, mode
        )
        create(c, objs)
        loop.run_for(60)
        (pod,) = pods(c)
        counts[mode] = (len(c.nodes("l4")), bool(pod["spec"].get("nodeName")))
    assert counts == {Steering.REQUIRED: (1, False), Steering.PREFERRED: (2, True)}


def test_the_agent_steers_as_its_inference_cluster_says() -> None:
    """The agent's setting is the fallback: once it reads its InferenceCluster (with the
    declared pools, once per heartbeat), that cluster's `spec.steering` is followed."""
    annotated = []
    for steering in ("Preferred", "Off"):
        f, w = fleet(cluster("a", pool(nodes=2, gpus=4)))
        obj = f.hub.get(INFERENCE_CLUSTER, "a")
        assert obj is not None and obj["spec"]["steering"] == "Preferred"
        obj["spec"]["steering"] = steering
        f.hub.update(obj)
        f.run_for(40)  # past a heartbeat: the agent has read it
        w.create(model_replica(gpus=2))
        f.run_for(20)
        (workload,) = f.clusters["a"].store.list(DEPLOYMENT, "ml")
        annotations = workload["spec"]["template"]["metadata"].get("annotations") or {}
        annotated.append(STEERED_NODES in annotations)
    assert annotated == [True, False]
