"""The emulated workload cluster's controllers act on exactly what changed: pods are found by
owner and node through indexes, and a workload whose objects did not change is not looked at
again. These tests change pods behind the controllers' backs and check they keep up."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sim_builders import pool

from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.store.port import DEPLOYMENT, POD, Obj

QUICK = ClusterBehaviour(
    has_gpu_taint=False,
    is_autoscaling=False,
    pod_start_delay_s=1.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=1.0,
)


def cluster(nodes: int = 2) -> tuple[EventLoop, WorkloadCluster]:
    loop = EventLoop(seed=1)
    c = WorkloadCluster(ClusterSpec("a", (pool(nodes=nodes),), QUICK), loop)
    c.start()
    return loop, c


def deployment(name: str, replicas: int, image: str = "v1") -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"gpufleet.io/pool": "l4"},
                    "containers": [{"name": "engine", "image": image}],
                },
            },
        },
    }


def owners(c: WorkloadCluster) -> Counter[str]:
    """Live pods per owning Deployment name (each pod counted once per ownerReference)."""
    found: Counter[str] = Counter()
    for p in c.store.list(POD, "ml"):
        if not p["metadata"].get("deletionTimestamp"):
            for ref in p["metadata"]["ownerReferences"]:
                found[ref["name"]] += 1
    return found


def pod_of(c: WorkloadCluster, owner: str) -> dict[str, Any]:
    return next(
        p for p in c.store.list(POD, "ml") if p["metadata"]["ownerReferences"][0]["name"] == owner
    )


def test_pods_follow_their_owner_through_re_owning_and_deletes() -> None:
    loop, c = cluster()
    c.store.create(deployment("d1", 2))
    d2 = c.store.create(deployment("d2", 1))
    loop.run_for(10)
    assert owners(c) == {"d1": 2, "d2": 1}
    moved = pod_of(c, "d1")
    moved["metadata"]["ownerReferences"][0].update(name="d2", uid=d2["metadata"]["uid"])
    c.store.update(moved)
    loop.run_for(10)
    # d1 replaced the pod it lost; d2 scaled the one it gained (or its own) away.
    assert owners(c) == {"d1": 2, "d2": 1}
    assert len(c.store.list(POD, "ml")) == 3
    gone = pod_of(c, "d2")["metadata"]["name"]
    c.store.delete(POD, gone, "ml")
    loop.run_for(10)
    assert owners(c) == {"d1": 2, "d2": 1}
    assert gone not in {p["metadata"]["name"] for p in c.store.list(POD, "ml")}
    c.store.delete(DEPLOYMENT, "d1", "ml")
    loop.run_for(10)
    assert owners(c) == {"d2": 1}
    assert len(c.store.list(POD, "ml")) == 1


def test_a_failed_pod_is_replaced_though_its_deployment_did_not_change() -> None:
    loop, c = cluster()
    c.store.create(deployment("d1", 1))
    loop.run_for(10)
    first = pod_of(c, "d1")
    assert first["status"]["phase"] == "Running"
    c.store.patch_status(POD, first["metadata"]["name"], "ml", {"phase": "Failed"})
    loop.run_for(10)
    now = pod_of(c, "d1")
    assert now["metadata"]["name"] != first["metadata"]["name"]
    assert now["status"]["phase"] == "Running"
    assert len(c.store.list(POD, "ml")) == 1


def test_a_template_change_rolls_every_pod_and_status_follows() -> None:
    loop, c = cluster()
    c.store.create(deployment("d1", 2))
    loop.run_for(10)
    before = {p["metadata"]["labels"]["pod-template-hash"] for p in c.store.list(POD, "ml")}
    current = c.store.get(DEPLOYMENT, "d1", "ml")
    assert current is not None
    current["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"
    c.store.update(current)
    loop.run_for(30)
    pods = c.store.list(POD, "ml")
    after = {p["metadata"]["labels"]["pod-template-hash"] for p in pods}
    assert len(before) == len(after) == 1 and before != after
    assert [p["spec"]["containers"][0]["image"] for p in pods] == ["v2", "v2"]
    status = c.store.get(DEPLOYMENT, "d1", "ml")
    assert status is not None
    assert (status["status"]["updatedReplicas"], status["status"]["readyReplicas"]) == (2, 2)


def test_pods_of_a_failed_node_are_found_and_moved() -> None:
    loop, c = cluster(nodes=2)
    c.store.create(deployment("d1", 1))
    loop.run_for(10)
    node = pod_of(c, "d1")["spec"]["nodeName"]
    assert [p["metadata"]["name"] for p in c.store.pods_on(node)] == [
        pod_of(c, "d1")["metadata"]["name"]
    ]
    c.fail_node(node)
    loop.run_for(20)
    moved = pod_of(c, "d1")
    assert moved["spec"]["nodeName"] != node and moved["status"]["phase"] == "Running"
    assert c.store.pods_on(node) == []


def test_the_dra_driver_and_the_kubelet_follow_nodes_as_they_come_and_fail() -> None:
    loop, c = cluster(nodes=1)
    loop.run_for(5)
    assert c.store.unpublished_nodes() == [] and c.store.ready_nodes() == {"l4-0"}
    added = c.add_node("l4")
    c.fail_node(added)
    assert c.store.unpublished_nodes() == [] and c.store.ready_nodes() == {"l4-0"}
    loop.run_for(5)
    assert c.free_devices()[added] == 0
    c.recover_node(added)
    assert c.store.unpublished_nodes() == [added]
    assert c.store.ready_nodes() == {"l4-0", added}
    loop.run_for(5)
    assert c.store.unpublished_nodes() == [] and c.free_devices()[added] == 4
    c.remove_node(added)
    assert c.store.ready_nodes() == {"l4-0"} and added not in c.free_devices()
