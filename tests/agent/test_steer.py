"""Steering: the agent's best-fit choice of nodes, its assume, and the pod templates it writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.materialize import materialize
from gpufleet.agent.steer import (
    STEERED_NODES,
    STEERED_PODS,
    Steerer,
    keep_steering,
    steer_template,
    steered_nodes,
    steering_of,
    unsteer_template,
)
from gpufleet.core.model import Steering

GPU = "gpu.nvidia.com"
Obj = dict[str, Any]


def member(role: str, gpus: int, pool: str = "h100", nodes: int = 1) -> Obj:
    body: Obj = {"role": role, "nodePoolName": pool, "template": {"spec": {"containers": []}}}
    if gpus:
        body["deviceRequests"] = [
            {"name": "gpu", "deviceClassName": GPU, "driver": GPU, "count": gpus}
        ]
    if role == "Worker":
        body["worker"] = {"nodes": nodes}
    return body


def replica(name: str, *engines: tuple[str, int, list[Obj]]) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {
            "deploymentName": "d",
            "engines": [{"name": e, "copies": c, "members": m} for e, c, m in engines],
        },
    }


class Table:
    """Free devices per node, as the agent's table gives them."""

    def __init__(self, free: Mapping[str, int], allocated: int | None = None) -> None:
        self.free = {n: {GPU: f} for n, f in free.items()}
        self.allocated = allocated

    def free_devices(self, pool: str) -> Mapping[str, Mapping[Any, int]]:
        return self.free if pool == "h100" else {}

    def allocated_pods(self, key: tuple[str, str]) -> int | None:
        return self.allocated


def steerer(table: Table, mode: Steering = Steering.PREFERRED) -> Steerer:
    return Steerer(mode, table.free_devices, table.allocated_pods)


def test_best_fit_takes_the_fullest_node_that_fits() -> None:
    s = steerer(Table({"n1": 8, "n2": 2, "n3": 4}))
    assert s.choose(replica("a", ("main", 1, [member("Standalone", 2)]))) == {
        ("main", "Standalone"): ("n2",)
    }


def test_two_replicas_in_one_pass_never_choose_the_same_free_devices() -> None:
    s = steerer(Table({"n1": 8, "n2": 4}))
    first = s.choose(replica("a", ("main", 1, [member("Standalone", 4)])))
    second = s.choose(replica("b", ("main", 1, [member("Standalone", 4)])))
    third = s.choose(replica("c", ("main", 1, [member("Standalone", 4)])))
    assert (first, second, third) == (
        {("main", "Standalone"): ("n2",)},
        {("main", "Standalone"): ("n1",)},
        {("main", "Standalone"): ("n1",)},
    )
    # The pool is now full: a fourth fits nowhere and is not steered.
    assert s.choose(replica("d", ("main", 1, [member("Standalone", 1)]))) == {}


def test_the_assume_holds_until_the_pods_are_allocated() -> None:
    table = Table({"n1": 4})
    s = steerer(table)
    r = replica("a", ("main", 1, [member("Standalone", 4)]))
    assert s.choose(r) == {("main", "Standalone"): ("n1",)}
    s.begin([r])  # not yet allocated: still held
    assert s.choose(replica("b", ("main", 1, [member("Standalone", 4)]))) == {}
    table.allocated, table.free = 1, {"n1": {GPU: 0}}  # the table counts it now
    s.begin([r])
    table.free = {"n1": {GPU: 4}}  # freed again: nothing assumed any more
    assert s.choose(replica("c", ("main", 1, [member("Standalone", 4)]))) == {
        ("main", "Standalone"): ("n1",)
    }


def test_a_gone_replica_releases_its_choice() -> None:
    s = steerer(Table({"n1": 4}))
    s.choose(replica("a", ("main", 1, [member("Standalone", 4)])))
    s.begin([])
    assert s.choose(replica("b", ("main", 1, [member("Standalone", 4)]))) != {}


def test_gang_copies_take_distinct_nodes_and_a_claimless_leader_rides_free() -> None:
    s = steerer(Table({"n1": 8, "n2": 8, "n3": 8}))
    gang = replica("g", ("main", 1, [member("Leader", 0), member("Worker", 8, nodes=2)]))
    assert s.choose(gang) == {("main", "Worker"): ("n1", "n2")}


def test_a_pd_pair_that_fits_one_node_is_steered_to_one_node() -> None:
    s = steerer(Table({"n1": 8, "n2": 2}))
    pd = replica(
        "pd",
        ("prefill", 1, [member("Standalone", 2)]),
        ("decode", 1, [member("Standalone", 4)]),
    )
    chosen = s.choose(pd)
    assert chosen == {("prefill", "Standalone"): ("n2",), ("decode", "Standalone"): ("n1",)}
    s2 = steerer(Table({"n1": 8, "n2": 8}))
    chosen2 = s2.choose(pd)
    assert chosen2[("prefill", "Standalone")] == chosen2[("decode", "Standalone")]


def test_off_chooses_nothing() -> None:
    s = steerer(Table({"n1": 8}), Steering.OFF)
    assert s.choose(replica("a", ("main", 1, [member("Standalone", 2)]))) == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=6),
    st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=8),
)
def test_choices_never_overcommit_a_node(free: list[int], sizes: list[int]) -> None:
    """Whatever replicas come, the devices chosen on a node never exceed what it has free."""
    table = Table({f"n{i}": f for i, f in enumerate(free)})
    s = steerer(table)
    used = dict.fromkeys(table.free, 0)
    for i, size in enumerate(sizes):
        chosen = s.choose(replica(f"r{i}", ("main", 1, [member("Standalone", size)])))
        for nodes in chosen.values():
            for node in nodes:
                used[node] += size
    assert all(used[n] <= table.free[n][GPU] for n in used)


# --- the pod template ---------------------------------------------------------------------

TENANT = {
    "metadata": {"labels": {"team": "a"}},
    "spec": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["y"]}]},
                    ]
                }
            }
        }
    },
}
HOST_IN = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2", "n1"]}


def test_preferred_is_one_term_of_weight_100_over_the_set() -> None:
    steered = steer_template(TENANT, ["n2", "n1", "n2"], Steering.PREFERRED)
    affinity = steered["spec"]["affinity"]["nodeAffinity"]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [HOST_IN]}}
    ]
    # The set, and the node of each pod (one pod a copy): what a restarted agent reads.
    assert steered["metadata"]["annotations"] == {
        STEERED_NODES: "n2,n1",
        STEERED_PODS: "n2;n1;n2",
    }
    assert steered_nodes(steered) == ("n2", "n1")


def test_required_is_anded_into_every_tenant_term() -> None:
    steered = steer_template(TENANT, ["n2", "n1"], Steering.REQUIRED)
    terms = steered["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchExpressions"][-1] for t in terms] == [HOST_IN, HOST_IN]
    assert [len(t["matchExpressions"]) for t in terms] == [2, 2]


@pytest.mark.parametrize("mode", [Steering.PREFERRED, Steering.REQUIRED])
@pytest.mark.parametrize("template", [TENANT, {"spec": {"containers": []}}], ids=["tenant", "bare"])
def test_unsteer_gives_back_the_template(mode: Steering, template: Obj) -> None:
    assert unsteer_template(steer_template(template, ["n1", "n2"], mode)) == template


def test_a_workload_equal_but_for_its_steering_keeps_it() -> None:
    r = replica("a", ("main", 2, [member("Standalone", 2)]))
    current = next(
        o
        for o in materialize(r, None, {("main", "Standalone"): ("n1", "n2")}, Steering.REQUIRED)
        if o["kind"] == "Deployment"
    )
    want = next(
        o
        for o in materialize(r, None, {("main", "Standalone"): ("n3",)}, Steering.PREFERRED)
        if o["kind"] == "Deployment"
    )
    assert keep_steering(want, current) == current
    unsteered = next(o for o in materialize(r) if o["kind"] == "Deployment")
    assert keep_steering(want, unsteered) == unsteered


@pytest.mark.parametrize(
    ("cluster", "want"),
    [
        (None, Steering.REQUIRED),  # no InferenceCluster: the agent's own setting
        ({"spec": {"nodePools": []}}, Steering.PREFERRED),  # absent: the API's default
        ({"spec": {"steering": "Off"}}, Steering.OFF),
        ({"spec": {"steering": False}}, Steering.REQUIRED),  # not a mode
        ({"spec": "nonsense"}, Steering.REQUIRED),
    ],
)
def test_the_agent_follows_its_inference_cluster(cluster: Any, want: Steering) -> None:
    assert steering_of(cluster, Steering.REQUIRED) is want


def _with_requests(body: Obj, cpu: str, memory: str = "1Gi") -> Obj:
    body["template"] = {
        "spec": {
            "containers": [{"name": "e", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
        }
    }
    return body


def test_the_choice_checks_cpu_and_memory_and_assumes_them() -> None:
    """Issue 26 §2: the fullest node by devices has too little CPU, so the pod goes to the node
    that has both; what it takes of the host room is assumed, so a second replica in the same
    pass is not given that CPU again; without a room check the fullest node is chosen."""
    table = Table({"n1": 8, "n2": 2})
    rooms = {"n1": (32000, 2**37), "n2": (4000, 2**37)}
    s = Steerer(
        Steering.PREFERRED, table.free_devices, table.allocated_pods, room=rooms.__getitem__
    )
    first = s.choose(replica("a", ("main", 1, [_with_requests(member("Standalone", 1), "24")])))
    assert first == {("main", "Standalone"): ("n1",)}
    # n1 keeps 7 GPUs but only 8 cores: a second 24-core pod fits nowhere and is not steered.
    second = s.choose(replica("b", ("main", 1, [_with_requests(member("Standalone", 1), "24")])))
    assert second == {}
    # A small pod still goes to the fullest node that has its CPU.
    third = s.choose(replica("c", ("main", 1, [_with_requests(member("Standalone", 1), "2")])))
    assert third == {("main", "Standalone"): ("n2",)}
    # Memory binds the same way.
    big = _with_requests(member("Standalone", 1), "1", "256Gi")
    assert s.choose(replica("d", ("main", 1, [big]))) == {}
    assert steerer(Table({"n1": 8, "n2": 2})).choose(
        replica("a", ("main", 1, [_with_requests(member("Standalone", 1), "24")]))
    ) == {("main", "Standalone"): ("n2",)}
