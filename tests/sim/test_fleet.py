"""End-to-end runs of the simulated fleet with the real agent and a test-only controller.

Each timeline case runs the fleet to a time, checks what the hub's PoolObservation says
({free GPUs: nodes}, and the excluded nodes) and what the cluster really has, then acts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from sim_builders import ReplicaWriter, cluster, fleet, histogram, model_replica, pool, pool_status

from gpufleet.agent.runner import OWNED_KINDS
from gpufleet.core import labels
from gpufleet.core.model import NodeChoice, Steering
from gpufleet.sim.emulated.cluster import ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.run.hub_step import HubStep
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import load_scenario
from gpufleet.store.port import (
    DEPLOYMENT,
    EVENT,
    MODEL_REPLICA,
    NODE,
    POD,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
)

Action = Callable[[Fleet, ReplicaWriter], Any]


@dataclass(frozen=True)
class Step:
    at_s: float
    #: The published histogram at `at_s`, before `do` (None: not checked).
    histogram: dict[int, int] | None = None
    #: The published excludedNodes at `at_s` (None: not checked).
    excluded: dict[str, int] | None = None
    #: What the cluster really has free, per node, at `at_s` (None: not checked).
    free: dict[str, int] | None = None
    do: Action | None = None


@dataclass(frozen=True)
class Case:
    id: str
    cluster: ClusterSpec
    steps: tuple[Step, ...]
    #: What the cluster holds at the end: nodes in the pool, pods by phase.
    nodes: int | None = None
    pods: dict[str, int] = field(default_factory=dict)


def run(case: Case) -> Fleet:
    f, writer = fleet(case.cluster)
    for step in case.steps:
        f.run_until(EPOCH + timedelta(seconds=step.at_s))
        if step.histogram is not None:
            assert histogram(f) == step.histogram, f"histogram at t={step.at_s}"
        if step.excluded is not None:
            assert pool_status(f)["excludedNodes"] == step.excluded, f"excluded at t={step.at_s}"
        if step.free is not None:
            assert f.clusters["a"].free_devices() == step.free, f"free at t={step.at_s}"
        if step.do is not None:
            step.do(f, writer)
    return f


def create(**kwargs: Any) -> Action:
    return lambda f, w: w.create(model_replica(**kwargs))


def delete(name: str = "llama-0") -> Action:
    return lambda f, w: w.delete(name)


def on(method: str, *args: Any, **kwargs: Any) -> Action:
    """Call a WorkloadCluster operation on cluster `a`."""
    return lambda f, w: getattr(f.clusters["a"], method)(*args, **kwargs)


def phases(f: Fleet) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in f.clusters["a"].store.list(POD):
        phase = p["status"].get("phase", "Pending")
        out[phase] = out.get(phase, 0) + 1
    return out


CASES = [
    Case(
        "replica-takes-and-frees-gpus",
        cluster("a", pool(nodes=2, gpus=4)),
        (
            # Steered (the default): best fit puts both copies on one node.
            Step(0, {4: 2}, do=create(gpus=2, copies=2)),
            Step(30, {0: 1, 4: 1}, do=delete()),
            Step(60, {4: 2}),
        ),
        nodes=2,
    ),
    Case(
        "foreign-claim-counts-as-taken",
        cluster("a", pool(nodes=2, gpus=4)),
        (
            Step(0, {4: 2}, do=on("add_foreign_claim", "l4-0", 3)),
            Step(10, {1: 1, 4: 1}, do=on("remove_foreign_claim", "foreign-1")),
            Step(20, {4: 2}),
        ),
    ),
    Case(
        "cordon-removes-capacity-and-uncordon-restores-it",
        cluster("a", pool(nodes=2, gpus=4)),
        (
            Step(0, {4: 2}, do=on("cordon", "l4-0")),
            Step(10, {0: 1, 4: 1}, {"Cordoned": 1}, do=on("uncordon", "l4-0")),
            Step(20, {4: 2}, {}),
        ),
    ),
    Case(
        "untolerated-taint-removes-capacity",
        cluster("a", pool(nodes=2, gpus=4)),
        (
            Step(0, do=on("taint", "l4-1", "example.com/maintenance")),
            Step(10, {0: 1, 4: 1}, {"Tainted:example.com/maintenance": 1}),
        ),
    ),
    Case(
        # A 4-GPU pod lands on l4-0 (Spread, ties by name); l4-0 fails, the pod fails and is
        # recreated on l4-1; recovery returns l4-0's GPUs (its claim was released).
        "node-failure-moves-pods",
        cluster("a", pool(nodes=2, gpus=4)),
        (
            Step(0, do=create(gpus=4)),
            Step(30, {0: 1, 4: 1}, do=on("fail_node", "l4-0")),
            Step(60, {0: 2}, {"NotReady": 1}, do=on("recover_node", "l4-0")),
            Step(80, {0: 1, 4: 1}, {}),
        ),
        pods={"Running": 1},
    ),
    Case(
        # Three 4-GPU pods on a 1-node pool that may grow to 2: one node is added, the third
        # pod stays Pending. The new node counts with nothing free until its slices exist.
        "autoscaler-adds-up-to-max",
        cluster("a", pool(nodes=1, gpus=4, max_nodes=2)),
        (
            Step(0, do=create(gpus=4, copies=3)),
            Step(90, {0: 2}),
        ),
        nodes=2,
        pods={"Running": 2, "Pending": 1},
    ),
    Case(
        "autoscaler-adds-nothing-under-stockout",
        cluster("a", pool(nodes=1, gpus=4, max_nodes=3), is_stocked_out=True),
        (
            Step(0, do=create(gpus=4, copies=3)),
            Step(90, {0: 1}),
        ),
        nodes=1,
        pods={"Running": 1, "Pending": 2},
    ),
    Case(
        "autoscaler-removes-idle-nodes-down-to-min",
        cluster("a", pool(nodes=3, gpus=4, min_nodes=1, max_nodes=3)),
        (
            Step(0, {4: 3}),
            Step(120, {4: 1}),
        ),
        nodes=1,
    ),
    Case(
        # The DRA driver publishes slices 5 s after the node appears: until then the agent
        # reports the node with nothing free (NoSlices).
        "new-node-counts-as-nothing-free-until-published",
        cluster("a", pool(nodes=1, gpus=4)),
        (
            Step(10, {4: 1}, do=on("add_node", "l4")),
            Step(13, {0: 1, 4: 1}, {"NoSlices": 1}),
            Step(20, {4: 2}, {}),
        ),
    ),
    Case(
        # Agent at 0: GPUs freed meanwhile stay taken on the hub until it is back.
        "agent-crash-keeps-freed-gpus-taken-until-restart",
        cluster("a", pool(nodes=1, gpus=4)),
        (
            Step(0, do=on("add_foreign_claim", "l4-0", 2)),
            Step(10, {2: 1}, do=lambda f, w: f.crash_agent("a")),
            Step(12, do=on("remove_foreign_claim", "foreign-1")),
            Step(60, {2: 1}, free={"l4-0": 4}, do=lambda f, w: f.restart_agent("a")),
            Step(62, {4: 1}),
        ),
    ),
    Case(
        "partition-keeps-the-hub-stale-until-healed",
        cluster("a", pool(nodes=1, gpus=4)),
        (
            Step(0, do=on("add_foreign_claim", "l4-0", 2)),
            Step(10, {2: 1}, do=lambda f, w: f.partition("a")),
            Step(12, do=on("remove_foreign_claim", "foreign-1")),
            Step(60, {2: 1}, free={"l4-0": 4}, do=lambda f, w: f.heal("a")),
            Step(62, {4: 1}),
        ),
    ),
    Case(
        "report-delay-lags-the-hub",
        cluster("a", pool(nodes=1, gpus=4), report_delay_s=5.0),
        (
            Step(10, {4: 1}, do=on("add_foreign_claim", "l4-0", 1)),
            Step(13, {4: 1}),
            Step(18, {3: 1}),
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_timeline(case: Case) -> None:
    f = run(case)
    if case.nodes is not None:
        assert len(f.clusters["a"].nodes("l4")) == case.nodes
    if case.pods:
        assert phases(f) == case.pods


def test_replica_is_materialized_bound_with_dra_and_observed() -> None:
    # Unsteered: the cluster's own scheduler spreads the two copies of one owner.
    f, w = fleet(cluster("a", pool(nodes=2, gpus=4), steering=Steering.OFF))
    w.create(model_replica(gpus=2, copies=2))
    f.run_for(30)
    store = f.clusters["a"].store
    pods = store.list(POD, "ml")
    bound = sorted(
        (p["spec"]["nodeName"], p["status"]["phase"], p["metadata"]["labels"]["gpufleet.io/member"])
        for p in pods
    )
    assert bound == [("l4-0", "Running", "Standalone"), ("l4-1", "Running", "Standalone")]
    allocations = sorted(
        (
            c["metadata"]["name"] == f"{c['status']['reservedFor'][0]['name']}-gpus",
            tuple(
                (r["pool"], r["device"]) for r in c["status"]["allocation"]["devices"]["results"]
            ),
        )
        for c in store.list(RESOURCE_CLAIM, "ml")
    )
    assert allocations == [
        (True, (("l4-0", "gpu-0"), ("l4-0", "gpu-1"))),
        (True, (("l4-1", "gpu-0"), ("l4-1", "gpu-1"))),
    ]
    obs = f.hub.get(REPLICA_OBSERVATION, "ml.llama-0", "gpufleet-cluster-a")
    assert obs is not None
    status = obs["status"]
    assert (status["podsScheduled"], status["pools"][0]["members"]) == (
        True,
        [{"engine": "main", "role": "Standalone", "livePods": 2, "allocatedPods": 2}],
    )
    w.delete("llama-0")
    f.run_for(30)
    assert (store.list(POD), store.list(RESOURCE_CLAIM)) == ([], [])
    assert f.hub.list(REPLICA_OBSERVATION) == []


@dataclass(frozen=True)
class ChoiceCase:
    id: str
    choice: NodeChoice
    want: dict[int, int]


@pytest.mark.parametrize(
    "case",
    [
        ChoiceCase("spread-one-owner-spreads", NodeChoice.SPREAD, {3: 2}),
        ChoiceCase("pack-fewest-free-that-fits", NodeChoice.PACK, {2: 1, 4: 1}),
    ],
    ids=lambda c: c.id,
)
def test_node_choice(case: ChoiceCase) -> None:
    """The cluster's own choice: its agent does not steer."""
    f, w = fleet(
        cluster("a", pool(nodes=2, gpus=4), node_choice=case.choice, steering=Steering.OFF)
    )
    w.create(model_replica(gpus=1, copies=2))
    f.run_for(30)
    assert histogram(f) == case.want


def test_pack_passes_over_the_fullest_node_when_the_claim_does_not_fit_there() -> None:
    f, w = fleet(cluster("a", pool(nodes=2, gpus=4), node_choice=NodeChoice.PACK))
    w.create(model_replica("big-0", gpus=3, deployment="big"))
    f.run_for(30)
    # The fullest node has 1 GPU free: a 2-GPU pod goes to the next node in Pack's order.
    w.create(model_replica("small-0", gpus=2, deployment="small"))
    f.run_for(30)
    assert histogram(f) == {1: 1, 2: 1}


def test_a_pod_that_fits_no_node_counts_every_nodes_reason() -> None:
    spec = cluster("a", pool(nodes=2, gpus=4), pool("h100", nodes=1), is_autoscaling=False)
    f, w = fleet(spec)
    w.create(model_replica(gpus=8))
    f.run_for(30)
    (pod,) = f.clusters["a"].store.list(POD, "ml")
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        "0/3 nodes are available: 2 cannot allocate all claims, "
        "1 node(s) didn't match Pod's node affinity/selector.",
    )


@dataclass(frozen=True)
class GangCase:
    id: str
    nodes: int
    want_bound: int
    want_scheduled: bool


@pytest.mark.parametrize(
    "case",
    [
        GangCase("distinct-nodes", 2, 2, True),
        # Pod by pod, no gang scheduling: the leader binds, its worker waits for another node
        # even though the one node has room for both.
        GangCase("one-node-binds-part-of-the-gang", 1, 1, False),
    ],
    ids=lambda c: c.id,
)
def test_gang_pods_go_to_distinct_nodes(case: GangCase) -> None:
    f, w = fleet(cluster("a", pool(nodes=case.nodes, gpus=4), is_autoscaling=False))
    w.create(model_replica(gpus=2, workers=1))
    f.run_for(30)
    pods = f.clusters["a"].store.list(POD, "ml")
    nodes = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
    assert (len(pods), len(nodes), len(set(nodes))) == (2, case.want_bound, case.want_bound)
    obs = f.hub.get(REPLICA_OBSERVATION, "ml.llama-0", "gpufleet-cluster-a")
    assert obs is not None and obs["status"]["podsScheduled"] is case.want_scheduled


def test_stockout_and_max_are_recorded_as_events() -> None:
    f, w = fleet(cluster("a", pool(nodes=1, gpus=4, max_nodes=1)))
    w.create(model_replica(gpus=4, copies=2))
    f.run_for(30)
    reasons = sorted({e["reason"] for e in f.clusters["a"].store.list(EVENT)})
    assert reasons == ["NotTriggerScaleUp"]


def test_agent_restart_bumps_the_lease_epoch() -> None:
    f, _ = fleet()
    f.run_for(5)
    lease = pool_status(f)["agent"]["leaseUID"]
    f.crash_agent("a")
    f.restart_agent("a")
    f.run_for(5)
    assert pool_status(f)["agent"] == {"identity": "agent-a-2", "leaseEpoch": 2, "leaseUID": lease}


def test_a_reinstalled_agent_reports_a_new_lease_incarnation_at_epoch_0() -> None:
    f, _ = fleet()
    f.run_for(5)
    old = pool_status(f)["agent"]["leaseUID"]
    f.restart_agent("a", new_lease=True)  # a running agent: crashed first
    f.run_for(5)
    agent = pool_status(f)["agent"]
    assert (agent["identity"], agent["leaseEpoch"]) == ("agent-a-0", 0)
    assert agent["leaseUID"] != old and len(agent["leaseUID"]) == 36


@pytest.mark.parametrize("for_cluster", ["a", "b"])
def test_a_replica_change_wakes_its_own_clusters_agent_only(for_cluster: str) -> None:
    """A replica for one cluster is materialized by that cluster's agent only."""
    f, _ = fleet(cluster("a"), cluster("b"))
    f.run_for(60)
    other = "b" if for_cluster == "a" else "a"
    f.hub.create(model_replica("r", cluster=for_cluster))
    f.run_for(20)
    assert [d["metadata"]["name"] for d in f.clusters[for_cluster].store.peek(DEPLOYMENT)] == [
        "r-main"
    ]
    assert f.clusters[other].store.peek(DEPLOYMENT) == []


def test_a_replica_relabelled_to_another_cluster_wakes_the_agent_it_left() -> None:
    """The agent of the cluster a replica's label moved away from is woken too, and removes
    the workload it made (the change itself names only the new cluster). The other cluster's
    agent never sees it: it reads only its own hub namespace, where the replica is not."""
    f, _ = fleet(cluster("a"), cluster("b"))
    f.run_for(60)
    f.hub.create(model_replica("r", cluster="a"))
    f.run_for(20)
    assert [d["metadata"]["name"] for d in f.clusters["a"].store.peek(DEPLOYMENT)] == ["r-main"]
    moved = f.hub.get(MODEL_REPLICA, "ml.r", "gpufleet-cluster-a")
    assert moved is not None
    moved["metadata"]["labels"][labels.CLUSTER] = "b"
    moved["spec"]["clusterName"] = "b"
    f.hub.update(moved)
    f.run_for(20)
    assert f.clusters["a"].store.peek(DEPLOYMENT) == []
    assert f.clusters["b"].store.peek(DEPLOYMENT) == []
    # Written in b's namespace (as the controller writes a replica of b), b makes it.
    f.hub.create(model_replica("r", cluster="b"))
    f.run_for(20)
    assert [d["metadata"]["name"] for d in f.clusters["b"].store.peek(DEPLOYMENT)] == ["r-main"]


def test_a_replica_status_write_changes_no_workload_and_a_spec_change_does() -> None:
    """Neither observe nor materialize reads a replica's status: the controller publishing
    one leaves the cluster's workloads as they were; a new spec changes them."""
    f, w = fleet(cluster("a"))
    w.create(model_replica("r", cluster="a"))
    f.run_for(60)
    local = f.clusters["a"].store
    before = local.kind_revisions(OWNED_KINDS)
    f.hub.patch_status(MODEL_REPLICA, "ml.r", "gpufleet-cluster-a", {"observedGeneration": 1})
    f.run_for(10)
    assert local.kind_revisions(OWNED_KINDS) == before
    changed = f.hub.get(MODEL_REPLICA, "ml.r", "gpufleet-cluster-a")
    assert changed is not None
    changed["spec"]["engines"][0]["copies"] = 2  # a new generation of the same replica
    f.hub.update(changed)
    f.run_for(10)
    assert local.kind_revisions(OWNED_KINDS) != before  # the next step materialized it


def test_a_replica_change_during_a_partition_is_materialized_after_it_heals() -> None:
    """The agent cannot read its replicas while partitioned; once healed, it reads them
    again, even though nothing it read locally changed meanwhile."""
    f, _ = fleet(cluster("a"))
    f.run_for(60)
    f.partition("a")
    f.hub.create(model_replica("r", cluster="a"))
    f.run_for(20)
    assert f.clusters["a"].store.peek(DEPLOYMENT) == []
    f.heal("a")
    f.run_for(20)
    assert [d["metadata"]["name"] for d in f.clusters["a"].store.peek(DEPLOYMENT)] == ["r-main"]


def scenario(seed: int) -> Fleet:
    f, w = fleet(
        cluster("a", pool(nodes=1, gpus=4, max_nodes=3)),
        cluster("b", pool(nodes=2, gpus=8), node_choice=NodeChoice.PACK),
        seed=seed,
    )
    w.create(model_replica("r-a", cluster="a", gpus=3, copies=3))
    w.create(model_replica("r-b", cluster="b", gpus=2, workers=1, copies=2))
    f.run_for(40)
    f.clusters["b"].fail_node("l4-0")
    w.delete("r-a")
    f.run_for(120)
    return f


def test_same_seed_gives_identical_stores() -> None:
    a, b = scenario(seed=3), scenario(seed=3)
    assert a.snapshot() == b.snapshot()
    assert a.loop.events_run == b.loop.events_run


def test_a_different_seed_changes_only_random_names() -> None:
    a, b = scenario(seed=3), scenario(seed=4)
    assert a.snapshot() != b.snapshot()
    for name in ("a", "b"):
        assert histogram(a, name) == histogram(b, name)


def test_fleet_publishes_its_inventory_on_the_hub() -> None:
    f, _ = fleet(cluster("a", pool(nodes=2, gpus=4, max_nodes=5)))
    objs = {
        (o["kind"], o["metadata"]["name"]): o["spec"]
        for o in f.snapshot()["hub/InferenceCluster.gpufleet.io/v1alpha1"]
    }
    assert objs == {
        ("InferenceCluster", "a"): {
            "nodePools": [
                {
                    "name": "l4",
                    "className": "l4-4x",
                    "nodeCount": 2,
                    "minNodeCount": 0,
                    "maxNodeCount": 5,
                }
            ],
            "steering": "Preferred",
        }
    }
    assert [n["metadata"]["name"] for n in f.clusters["a"].store.list(NODE)] == ["l4-0", "l4-1"]


def test_gang_is_recreated_whole_after_its_leader_node_fails() -> None:
    f, w = fleet(cluster("a", pool(nodes=3, gpus=4), is_autoscaling=False))
    w.create(model_replica(gpus=2, workers=1))
    f.run_for(20)
    store = f.clusters["a"].store
    leader = store.get(POD, "llama-0-main-0", "ml")
    assert leader is not None
    failed = leader["spec"]["nodeName"]
    f.clusters["a"].fail_node(failed)
    f.run_for(40)
    pods = store.list(POD, "ml")
    placed = sorted((p["metadata"]["name"], p["status"]["phase"]) for p in pods)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert placed == [("llama-0-main-0", "Running"), ("llama-0-main-0-1", "Running")]
    assert len(nodes) == 2 and failed not in nodes
    claims = {c["metadata"]["name"] for c in store.list(RESOURCE_CLAIM, "ml")}
    assert claims == {"llama-0-main-0-gpus", "llama-0-main-0-1-gpus"}
    obs = f.hub.get(REPLICA_OBSERVATION, "ml.llama-0", "gpufleet-cluster-a")
    assert obs is not None and obs["status"]["podsScheduled"] is True


def test_replica_change_rolls_pods_to_the_new_generation() -> None:
    f, w = fleet(cluster("a", pool(nodes=2, gpus=4)))
    w.create(model_replica(gpus=1, copies=2))
    f.run_for(20)
    replica = f.hub.get(MODEL_REPLICA, "ml.llama-0", "gpufleet-cluster-a")
    assert replica is not None
    replica["spec"]["engines"][0]["members"][0]["deviceRequests"][0]["count"] = 2
    f.hub.update(replica)
    f.run_for(60)
    pods = f.clusters["a"].store.list(POD, "ml")
    assert sorted(
        (p["metadata"]["labels"]["gpufleet.io/replica-generation"], p["status"]["phase"])
        for p in pods
    ) == [("2", "Running"), ("2", "Running")]
    assert histogram(f) == {2: 2}
    obs = f.hub.get(REPLICA_OBSERVATION, "ml.llama-0", "gpufleet-cluster-a")
    assert obs is not None
    assert (obs["status"]["observedGeneration"], obs["status"]["podsScheduled"]) == (2, True)


class _EveryInterval(HubStep):
    """The controller stepped at every interval, changes or not: the oracle of the wake rule."""

    def step(self, now: datetime) -> None:
        self._seen = -1
        super().step(now)


@pytest.mark.parametrize(
    "name", ["stale-expired", "eks-agent-down", "agent-reinstall", "replace-episode"]
)
def test_the_controller_woken_by_changes_and_next_due_decides_as_stepped_every_interval(
    name: str,
) -> None:
    """The hub step runs the controller only on a hub change or at its `next_due`; stepping
    it at every interval instead places and drops the same, at the same times, and refuses
    the same deployments for the same reasons (a refusal's numbers may quote an age, which
    moves with every step: docs/controller.md)."""
    scenario = load_scenario(name)

    def decisions(every: bool) -> tuple[list[tuple[float, str]], set[tuple[str, str]], int]:
        f, hub_step = build_fleet(scenario, scenario.controller.accounting)
        if every:
            oracle = _EveryInterval(f.hub)
            oracle.controller = hub_step.controller
            f.controller = hub_step = oracle
        timeline_runner(f, scenario)(scenario.end_s)
        moves = [(at, line) for at, line in hub_step.log if not line.startswith("refused")]
        refused = {(r.deployment, r.reason) for r in hub_step.refusals}
        return moves, refused, hub_step.steps

    woken, every = decisions(False), decisions(True)
    assert woken[:2] == every[:2]
    assert woken[2] < every[2]  # and it skipped steps


@pytest.mark.parametrize("name", ["serving-not-replaced", "replace-nowhere", "autoscale-quiet"])
def test_a_cluster_ticked_every_tick_ends_as_one_that_skips_quiet_ticks(name: str) -> None:
    """A cluster tick that would write nothing is skipped; waking every cluster for every
    tick instead ends with the same stores (the emulated autoscaler's scans fall at the same
    times however the cluster is ticked)."""
    scenario = load_scenario(name)

    def final(every_tick: bool) -> dict[str, list[dict[str, Any]]]:
        f, _ = build_fleet(scenario, scenario.controller.accounting)
        if every_tick:
            for c in f.clusters.values():
                # Right after each tick: the next one is due, so none is skipped.
                f.loop.every(c.behaviour.tick_s, functools.partial(_wake, c), f"{c.name}/wake")
        timeline_runner(f, scenario)(scenario.end_s)
        return f.snapshot()

    assert final(False) == final(True)


def _wake(cluster: WorkloadCluster) -> None:
    cluster._wake_at(cluster.loop.now)
