"""The emulated kube-scheduler's choice on a Spread cluster: the default profile's weighted sum,
worked by hand on one example; and, for any cluster, a chosen node passes the filters and the
same cluster makes the same choices."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from functools import partial
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_builders import pool

from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated import kube_scoring as ks
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.kube_scheduler import KubeScheduler, eligible_keys
from gpufleet.sim.emulated.objects import node_filter
from gpufleet.store.port import NODE, POD, Obj

QUICK = ClusterBehaviour(
    has_gpu_taint=False,
    is_autoscaling=False,
    pod_start_delay_s=1.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=1.0,
)


def start(nodes: int, seed: int = 1) -> tuple[EventLoop, WorkloadCluster]:
    loop = EventLoop(seed=seed)
    c = WorkloadCluster(ClusterSpec("a", (pool(nodes=nodes),), QUICK), loop)
    c.start()
    return loop, c


def label(c: WorkloadCluster, name: str, key: str, value: str) -> None:
    node = c.store.get(NODE, name)
    assert node is not None
    node["metadata"]["labels"][key] = value
    c.store.update(node)


def deployment(replicas: int, spec: dict[str, Any]) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"nodeSelector": {"gpufleet.io/pool": "l4"}, **spec},
            },
        },
    }


ENGINE = {
    "name": "engine",
    "image": "v1",
    "resources": {"requests": {"cpu": "12", "memory": "12Gi"}},
}
PREFER_FAST = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "preference": {
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast"]}]
                },
            }
        ]
    }
}


def placed(c: WorkloadCluster) -> Counter[str]:
    return Counter(p["spec"].get("nodeName") for p in c.store.list(POD, "ml"))


def test_the_weighted_sum_worked_by_hand() -> None:
    """Three 48-CPU 192Gi nodes; l4-0 has a PreferNoSchedule taint, l4-2 the label the pods
    prefer (weight 10); four pods of one Deployment request 12 CPUs and 12Gi each.

    With k of the pods already on l4-2 and none elsewhere, the totals (TaintToleration x3 +
    NodeAffinity x2 + PodTopologySpread x2 + LeastAllocated + BalancedAllocation) are:

    - l4-0: 0 + 0 + 200 + 84 + 90 = 374 (the taint: raw [1, 0, 0], reversed [0, 100, 100]);
    - l4-1: 300 + 0 + 200 + 84 + 90 = 674 (LeastAllocated (75 + 93) // 2 = 84, balance 90);
    - l4-2, k = 0: 300 + 200 + 200 + 84 + 90 = 874;
      k = 1: spread raw round(log 5 + 2) = 4 against 2: 100 * (6 - 4) // 4 = 50;
      LeastAllocated (50 + 87) // 2 = 68; balance 1 - (.5 - .125) / 2: 81; 749;
      k = 2: spread round(2 log 5 + 2) = 5: 40; (25 + 81) // 2 = 53; balance 71; 704;
      k = 3: spread round(3 log 5 + 2) = 7: 100 * 2 // 7 = 28; (0 + 75) // 2 = 37; 62; 655.

    So three pods go to l4-2 and the fourth, at 655 < 674, to l4-1; none to l4-0."""
    loop, c = start(nodes=3)
    c.taint("l4-0", "spot", effect="PreferNoSchedule")
    label(c, "l4-2", "tier", "fast")
    c.store.create(deployment(4, {"containers": [ENGINE], "affinity": PREFER_FAST}))
    loop.run_for(10)
    assert placed(c) == {"l4-2": 3, "l4-1": 1}
    # The same totals from the pure functions, for the fourth pod (the one on l4-1).
    (pod,) = c.store.pods_on("l4-1")
    nodes = c.nodes()
    key = ks.spread_key(pod)
    on_l4_2 = c.store.pods_on("l4-2")
    loads = [ks.node_load([], key), ks.node_load([], key), ks.node_load(on_l4_2, key)]
    assert ks.total_scores(pod, nodes, loads, {}) == [374, 674, 655]


def test_pods_of_one_owner_spread_and_those_of_many_owners_tie() -> None:
    loop, c = start(nodes=4)
    c.store.create(deployment(4, {"containers": [{"name": "engine", "image": "v1"}]}))
    loop.run_for(10)
    # Best-effort pods: LeastAllocated cannot tell 100m on 48 CPUs apart, the spread does.
    assert sorted(placed(c).values()) == [1, 1, 1, 1]


node_setup = st.fixed_dictionaries(
    {
        "cordoned": st.booleans(),
        "prefer_taint": st.booleans(),
        "hard_taint": st.booleans(),
        "fast": st.booleans(),
        "zone": st.sampled_from([None, "a", "b"]),
    }
)


def build(
    setups: list[dict[str, Any]], replicas: int, cpu: str | None, seed: int
) -> dict[str, str]:
    loop, c = start(nodes=len(setups), seed=seed)
    for i, s in enumerate(setups):
        name = f"l4-{i}"
        if s["cordoned"]:
            c.cordon(name)
        if s["prefer_taint"]:
            c.taint(name, "spot", effect="PreferNoSchedule")
        if s["hard_taint"]:
            c.taint(name, "dedicated", effect="NoSchedule")
        if s["fast"]:
            label(c, name, "tier", "fast")
        if s["zone"]:
            label(c, name, ks.ZONE_KEY, s["zone"])
    engine: dict[str, Any] = {"name": "engine", "image": "v1"}
    if cpu is not None:
        engine["resources"] = {"requests": {"cpu": cpu}}
    c.store.create(deployment(replicas, {"containers": [engine], "affinity": PREFER_FAST}))
    loop.run_for(6)
    bound: dict[str, str] = {}
    nodes = {n["metadata"]["name"]: n for n in c.nodes()}
    for p in c.store.list(POD, "ml"):
        name = p["spec"].get("nodeName")
        if name:
            assert node_filter(nodes[name], p["spec"]) is None, (name, p["spec"])
            bound[p["metadata"]["name"]] = name
    # Nothing else stops a pod here but NodeResourcesFit's CPU filter: as many bind as the
    # usable nodes' allocatable CPU holds.
    room = 0
    for i, s in enumerate(setups):
        if not s["cordoned"] and not s["hard_taint"]:
            allocatable = float(nodes[f"l4-{i}"]["status"]["allocatable"]["cpu"])
            room += replicas if cpu is None else int(allocatable // float(cpu))
    assert len(bound) == min(replicas, room)
    return bound


@settings(max_examples=25, deadline=None)
@given(
    setups=st.lists(node_setup, min_size=1, max_size=5),
    replicas=st.integers(1, 6),
    cpu=st.sampled_from([None, "4", "20"]),
    seed=st.integers(0, 3),
)
def test_chosen_nodes_pass_the_filters_and_choices_repeat(
    setups: list[dict[str, Any]], replicas: int, cpu: str | None, seed: int
) -> None:
    assert build(setups, replicas, cpu, seed) == build(setups, replicas, cpu, seed)


#: No selector, one some devices pass, and one that does not compile (matches nothing).
SELECTORS = [(), ('device.attributes["a"].index % 2 == 0',), ("(",)]


@settings(max_examples=60, deadline=None)
@given(
    drivers=st.lists(st.sampled_from(["a", "b"]), max_size=8),
    taken_at=st.sets(st.integers(0, 7)),
    requests=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5), st.sampled_from(SELECTORS)),
        min_size=1,
        max_size=2,
    ),
)
def test_the_fit_check_agrees_with_allocation(
    drivers: list[str], taken_at: set[int], requests: list[tuple[str, int, tuple[str, ...]]]
) -> None:
    """`_can_allocate` (no results built for one request, counting its `eligible_keys` that
    are free) is `_allocate_on(...) is not None`."""
    devices = [
        dra.PublishedDevice(d, "n", f"gpu-{i}", "n", {"index": {"int": i}}, {})
        for i, d in enumerate(drivers)
    ]
    taken = {devices[i].key for i in taken_at if i < len(devices)}
    claim_requests = [[dra.Request(f"r{i}", d, n, sel) for i, (d, n, sel) in enumerate(requests)]]
    claims: list[Obj] = [{"metadata": {"name": "c"}}]
    allocated = KubeScheduler._allocate_on(devices, taken, claims, claim_requests)
    can = KubeScheduler._can_allocate(
        devices, taken, claims, claim_requests, partial(eligible_keys, devices)
    )
    assert can == (allocated is not None)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "run"]), st.integers(0, 5))))
def test_the_eligible_keys_kept_per_slice_revision_are_the_plain_ones(
    ops: list[tuple[str, int]],
) -> None:
    """`KubeScheduler._eligible` (kept per revision of the ResourceSlices) against
    `eligible_keys` of the devices published now, as nodes and their slices come and go."""
    loop, c = start(nodes=2)
    requests = [dra.Request("r", "gpu.nvidia.com", 1, sel) for sel in SELECTORS]
    requests.append(dra.Request("r", "other.driver", 1, ()))
    for op, i in [*ops, ("run", 1)]:
        names = sorted(n["metadata"]["name"] for n in c.store.peek(NODE))
        if op == "add":
            c.add_node("l4")
        elif op == "remove" and names:
            c.remove_node(names[i % len(names)])
        loop.run_for(1.0 + i)
        for name in [*names, "l4-9"]:
            for r in requests:
                plain = eligible_keys(c.store.published().get(name, []), r)
                assert c.scheduler._eligible(name, r) == plain


def test_cpu_that_does_not_fit_leaves_the_pod_unschedulable_with_the_reason() -> None:
    # Nodes have 48 CPUs: four 12-CPU pods fill one node, so eight fill both and a ninth
    # waits, "Insufficient cpu" on each node (NodeResourcesFit's filter).
    loop, c = start(nodes=2)
    c.store.create(deployment(9, {"containers": [ENGINE]}))
    loop.run_until(loop.now + timedelta(seconds=30))
    assert sum(placed(c).values()) == 9 and placed(c)[None] == 1
    assert all(n <= 4 for node, n in placed(c).items() if node is not None)
    (waiting,) = [p for p in c.store.list(POD, "ml") if not p["spec"].get("nodeName")]
    (scheduled,) = [t for t in waiting["status"]["conditions"] if t["type"] == "PodScheduled"]
    assert scheduled["reason"] == "Unschedulable"
    assert "2 Insufficient cpu" in scheduled["message"]


def test_a_gated_pod_waits_until_its_gate_is_lifted() -> None:
    loop, c = start(nodes=1)
    c.store.create(
        deployment(1, {"containers": [{"name": "e"}], "schedulingGates": [{"name": "g"}]})
    )
    loop.run_until(loop.now + timedelta(seconds=10))
    (pod,) = c.store.list(POD, "ml")
    assert not pod["spec"].get("nodeName")
    (scheduled,) = [t for t in pod["status"]["conditions"] if t["type"] == "PodScheduled"]
    assert scheduled["reason"] == "SchedulingGated"
    pod["spec"].pop("schedulingGates")
    c.store.update(pod)
    loop.run_until(loop.now + timedelta(seconds=10))
    (pod,) = c.store.list(POD, "ml")
    assert pod["spec"]["nodeName"] == "l4-0"
