"""Gated steering (`gpufleet.agent.gates`) and a restarted agent's choices
(`Steerer.restore`, `written_steering`): which node each gated pod is given, the pod spec
that lifts the gate, and the assume ledger rebuilt from what the workloads hold."""

from __future__ import annotations

from typing import Any

from test_steer import Table, member, replica, steerer

from gpufleet.agent.gates import (
    ASSIGNED_NODE,
    LWS_GROUP_INDEX,
    LWS_WORKER_INDEX,
    assignments,
    pinned_spec,
)
from gpufleet.agent.materialize import materialize
from gpufleet.agent.steer import GATE, STEERED_PODS, written_steering
from gpufleet.core import labels
from gpufleet.core.model import Steering

Obj = dict[str, Any]
GATED = [{"name": GATE}]


def pod(name: str, copies: str, member_: str = "Standalone", **extra: Any) -> Obj:
    pod_labels = {labels.REPLICA: "r", labels.ENGINE: "main", labels.MEMBER: member_}
    pod_labels.update(extra.pop("labels", {}))
    annotations = {STEERED_PODS: copies, **extra.pop("annotations", {})}
    spec = {"schedulingGates": GATED, **extra.pop("spec", {})}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": pod_labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def test_standalone_pods_take_the_chosen_nodes_one_each() -> None:
    pods = [pod("p-b", "n1;n1;n2"), pod("p-a", "n1;n1;n2"), pod("p-c", "n1;n1;n2")]
    assert assignments(pods) == {("ml", "p-a"): "n1", ("ml", "p-b"): "n1", ("ml", "p-c"): "n2"}


def test_a_node_held_by_a_bound_or_pinned_pod_is_not_given_again() -> None:
    bound = pod("p-0", "n1;n2", spec={"schedulingGates": [], "nodeName": "n1"})
    bound["spec"].pop("schedulingGates")
    pinned = pod("p-1", "n1;n2", annotations={ASSIGNED_NODE: "n2"}, spec={"schedulingGates": []})
    pinned["spec"].pop("schedulingGates")
    late = pod("p-2", "n1;n2")  # a third pod (a replacement): the list is used up
    assert assignments([bound, pinned, late]) == {("ml", "p-2"): None}


def test_a_gang_copy_is_assigned_as_the_fit_placed_it() -> None:
    def gang(name: str, group: int, worker: int, role: str) -> Obj:
        return pod(
            name,
            "a,b;c,d",
            role,
            labels={LWS_GROUP_INDEX: str(group), LWS_WORKER_INDEX: str(worker)},
        )

    pods = [
        gang("w-0-1", 0, 1, "Worker"),
        gang("w-0-2", 0, 2, "Worker"),
        gang("w-1-1", 1, 1, "Worker"),
        gang("w-1-2", 1, 2, "Worker"),
    ]
    assert assignments(pods) == {
        ("ml", "w-0-1"): "a",
        ("ml", "w-0-2"): "b",
        ("ml", "w-1-1"): "c",
        ("ml", "w-1-2"): "d",
    }


def test_pinning_narrows_each_required_term_and_lifts_only_our_gate() -> None:
    spec = {
        "schedulingGates": [{"name": GATE}, {"name": "example.com/other"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
                        {"matchFields": []},
                    ]
                }
            }
        },
    }
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
    out = pinned_spec(spec, "n1")
    assert out["schedulingGates"] == [{"name": "example.com/other"}]
    terms = out["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "z", "operator": "Exists"}, host]},
        {"matchFields": [], "matchExpressions": [host]},
    ]
    assert pinned_spec({"schedulingGates": GATED}, None) == {}


def test_gated_templates_carry_the_gate_and_each_copys_nodes() -> None:
    r = replica("r", ("main", 2, [member("Leader", 2), member("Worker", 2, nodes=2)]))
    s = steerer(Table({"n1": 8, "n2": 8, "n3": 8}), Steering.GATED)
    choice = s.choose(r)
    (lws,) = [
        o
        for o in materialize(r, None, choice, Steering.GATED)
        if o["kind"] not in ("ResourceClaimTemplate", "PodDisruptionBudget")
    ]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert worker["spec"]["schedulingGates"] == GATED
    copies = worker["metadata"]["annotations"][STEERED_PODS].split(";")
    assert len(copies) == 2 and all(len(c.split(",")) == 2 for c in copies)


def test_a_restarted_agent_keeps_its_choice_and_assumes_what_is_unbound() -> None:
    r = replica("r", ("main", 2, [member("Standalone", 4)]))
    table = Table({"n1": 4, "n2": 8})
    first = steerer(table, Steering.GATED)
    choice = first.choose(r)
    assert choice == {("main", "Standalone"): ("n1", "n2")}
    workloads = materialize(r, None, choice, Steering.GATED)
    # One pod bound on n1 (the table counts it now), the other still gated.
    bound = {
        "metadata": {
            "namespace": "ml",
            "labels": {labels.REPLICA: "r", labels.ENGINE: "main", labels.MEMBER: "Standalone"},
        },
        "spec": {"nodeName": "n1"},
        "status": {},
    }
    written = written_steering(workloads, [bound])
    assert written == {("ml", "r"): {("main", "Standalone"): (("n1", "n2"), ("n2",))}}
    table.free = {"n1": {"gpu.nvidia.com": 0}, "n2": {"gpu.nvidia.com": 8}}
    again = steerer(table, Steering.GATED)
    again.restore(written)
    assert again.choose(r) == choice  # kept, not chosen anew
    # n2 holds 4 GPUs for the unbound pod: an 8-GPU replica is not given n2.
    big = replica("big", ("main", 1, [member("Standalone", 8)]))
    assert again.choose(big) == {}
    assert again.choose(replica("small", ("main", 1, [member("Standalone", 4)]))) == {
        ("main", "Standalone"): ("n2",)
    }
