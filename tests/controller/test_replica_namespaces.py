"""Replicas live in their cluster's hub namespace, tied to their deployment by labels, and the
controller deletes those of a deployment that is gone (what the garbage collector did through
owner references, which cannot cross namespaces)."""

from __future__ import annotations

from typing import Any

import pytest
from controller_builders import SIM, at, cluster, deployment, gpu_class, hub, pool_obs
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api.names import (
    CLUSTER_NAME_MAX_CHARS,
    ClusterNameError,
    cluster_namespace,
    replica_origin_of,
)
from gpufleet.controller import Controller, ControllerConfig
from gpufleet.controller.replicas import Orphaned, orphaned
from gpufleet.core.decision import replica_name
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import MODEL_DEPLOYMENT, MODEL_REPLICA


def _fleet(*extra: Obj, free: tuple[tuple[int, int], ...] = ((4, 1),)) -> MemoryStore:
    """Clusters a and b (pool l4, 4 GPUs on 1 node each), both reporting `free`."""
    return hub(
        gpu_class(),
        cluster("a"),
        cluster("b"),
        pool_obs("a", free=free),
        pool_obs("b", free=free),
        *extra,
    )


def _replicas(store: Any) -> list[Obj]:
    return list(store.list(MODEL_REPLICA))


def _where(store: Any) -> list[tuple[str, str, str]]:
    """(hub namespace, hub name, deployment namespace label) of each replica, sorted."""
    return sorted(
        (
            r["metadata"]["namespace"],
            r["metadata"]["name"],
            r["metadata"]["labels"]["gpufleet.io/deployment-namespace"],
        )
        for r in _replicas(store)
    )


def test_equal_deployment_names_of_two_tenants_get_distinct_replicas_in_the_cluster_namespace() -> (
    None
):
    store = _fleet(deployment("llama", "ml"), deployment("llama", "research"))
    result = Controller(store, SIM, "ctl").step(at(1))
    assert result.errors == []
    placed = _where(store)
    assert len(placed) == 2
    for namespace, name, tenant in placed:
        assert namespace in ("gpufleet-cluster-a", "gpufleet-cluster-b")
        assert name.startswith(f"{tenant}.llama-")
    assert {t for _, _, t in placed} == {"ml", "research"}
    # Read back, each is its own deployment's replica, under the name scheduling gave it.
    origins = {replica_origin_of(r["metadata"]) for r in _replicas(store)}
    assert {ns for ns, _ in origins} == {"ml", "research"}
    assert all(n.startswith("llama-") for _, n in origins)


def test_a_steady_fleet_writes_nothing_more_once_its_replicas_are_in_place() -> None:
    store = _fleet(deployment("llama", "ml", replicas=2))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    assert len(_replicas(store)) == 2
    result = controller.step(at(2))
    assert result.errors == []
    assert result.count("ModelReplica", "create") == 0
    assert result.count("ModelReplica", "delete") == 0
    assert result.count("ModelReplica", "update") == 0


def test_the_replicas_of_a_deleted_deployment_are_deleted_by_the_controller() -> None:
    store = _fleet(deployment("llama", "ml", replicas=2), deployment("keep", "ml"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    assert len(_replicas(store)) == 3
    store.delete(MODEL_DEPLOYMENT, "llama", "ml")

    result = controller.step(at(2))
    assert result.errors == []
    assert result.count("ModelReplica", "delete") == 2
    assert [r["spec"]["deploymentName"] for r in _replicas(store)] == ["keep"]
    # And nothing more after that.
    assert controller.step(at(3)).count("ModelReplica", "delete") == 0


def test_a_deployment_recreated_under_its_name_does_not_adopt_the_old_replicas() -> None:
    store = _fleet(deployment("llama", "ml"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    (old,) = _replicas(store)
    store.delete(MODEL_DEPLOYMENT, "llama", "ml")
    store.create(deployment("llama", "ml"))
    new_uid = store.get(MODEL_DEPLOYMENT, "llama", "ml")["metadata"]["uid"]  # type: ignore[index]
    assert old["metadata"]["labels"]["gpufleet.io/deployment-uid"] != new_uid

    for second in (2, 3):
        assert controller.step(at(second)).errors == []
    (replica,) = _replicas(store)
    assert replica["metadata"]["labels"]["gpufleet.io/deployment-uid"] == new_uid
    assert replica["metadata"]["uid"] != old["metadata"]["uid"]


def test_a_replica_outside_its_clusters_namespace_is_moved_there() -> None:
    """A replica written in its deployment's namespace (before per-cluster namespaces) is
    deleted, and scheduling places it again where its cluster's agent can read it."""
    legacy = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": replica_name("llama", "a", 0),
            "namespace": "ml",
            "labels": {
                "gpufleet.io/deployment": "llama",
                "gpufleet.io/cluster": "a",
                "gpufleet.io/replica-index": "0",
            },
        },
        "spec": {
            "deploymentName": "llama",
            "clusterName": "a",
            "engines": [
                {
                    "name": "engine",
                    "copies": 1,
                    "members": [{"role": "Standalone", "nodePoolName": "l4", "template": {}}],
                }
            ],
        },
    }
    store = _fleet(deployment("llama", "ml"), legacy)
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    controller.step(at(2))
    (replica,) = _replicas(store)
    assert replica["metadata"]["namespace"] == "gpufleet-cluster-a"
    assert replica["metadata"]["name"] == f"ml.{replica_name('llama', 'a', 0)}"


def _replica_obj(namespace: str, labels: dict[str, str], cluster_name: str = "a") -> Obj:
    return {
        "metadata": {"name": "ml.r", "namespace": namespace, "labels": labels},
        "spec": {"clusterName": cluster_name, "deploymentName": "llama"},
    }


LIVE = {("ml", "llama"): {"metadata": {"uid": "u1"}}}
CASES = [
    ("its-deployment-lives", "gpufleet-cluster-a", {"ns": "ml", "uid": "u1"}, None),
    ("deployment-gone", "gpufleet-cluster-b", {"ns": "ml"}, Orphaned.DEPLOYMENT_DELETED),
    ("other-uid", "gpufleet-cluster-a", {"ns": "ml", "uid": "u0"}, Orphaned.DEPLOYMENT_DELETED),
    ("not-written-by-the-controller", "gpufleet-cluster-a", {}, None),
    ("misplaced", "ml", {"ns": "ml", "uid": "u1"}, Orphaned.MISPLACED),
]


@pytest.mark.parametrize(("id_", "namespace", "marks", "want"), CASES, ids=[c[0] for c in CASES])
def test_orphaned(id_: str, namespace: str, marks: dict[str, str], want: Orphaned | None) -> None:
    labels = {}
    if "ns" in marks:
        labels["gpufleet.io/deployment-namespace"] = marks["ns"]
    if "uid" in marks:
        labels["gpufleet.io/deployment-uid"] = marks["uid"]
    cluster_name = "b" if id_ == "deployment-gone" else "a"
    deployments = {} if id_ == "deployment-gone" else LIVE
    assert orphaned(_replica_obj(namespace, labels, cluster_name), deployments) == want


def test_the_cluster_namespace_is_bounded_by_the_dns_label_rule() -> None:
    longest = "c" * CLUSTER_NAME_MAX_CHARS
    assert cluster_namespace(longest) == f"gpufleet-cluster-{longest}"
    assert len(cluster_namespace(longest)) == 63
    for bad in (longest + "c", "a.b", "A", "", "-a"):
        with pytest.raises(ClusterNameError, match="DNS label of at most 46"):
            cluster_namespace(bad)


def test_a_placement_on_a_cluster_whose_name_names_no_namespace_is_a_step_error() -> None:
    """Such a cluster can have no agent (`gpufleet install` and `join` refuse the name), but
    a platform team may still mark it Ready: the write fails, the step does not."""
    ready = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "MarkedByHand",
                "message": "",
                "lastTransitionTime": "2026-11-29T10:00:00Z",
            }
        ],
        "gateway": {"address": "x.gw"},
    }
    store = hub(gpu_class(), cluster("x.y", status=ready), deployment("llama", "ml"))
    result = Controller(store, ControllerConfig(), "ctl").step(at(1))
    assert _replicas(store) == []
    assert any("DNS label of at most 46" in e for e in result.errors), result.errors


_actions = st.lists(
    st.tuples(
        st.sampled_from(["create", "delete", "recreate", "scale"]),
        st.sampled_from(["llama", "gemma"]),
        st.sampled_from(["ml", "search"]),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None)
@given(_actions)
def test_replicas_always_belong_to_a_live_deployment_in_their_clusters_namespace(
    actions: list[tuple[str, str, str]],
) -> None:
    """Promise: through deployments created, deleted, re-created under their name and scaled,
    once a step has run every replica is in its cluster's namespace, named with its
    deployment's namespace, labelled with a deployment that exists with that uid, and no two
    replicas of one deployment share (cluster, index)."""
    store = _fleet(free=((4, 2),))
    controller = Controller(store, SIM, "ctl")
    for second, (action, name, tenant) in enumerate(actions, start=1):
        current: Any = store.get(MODEL_DEPLOYMENT, name, tenant)
        if action in ("delete", "recreate") and current is not None:
            store.delete(MODEL_DEPLOYMENT, name, tenant)
        if action in ("create", "recreate") and (current is None or action == "recreate"):
            store.create(deployment(name, tenant, replicas=2))
        if action == "scale" and current is not None:
            current["spec"]["replicas"] = 3 - current["spec"]["replicas"]
            store.update(current)
        assert controller.step(at(second)).errors == []
    controller.step(at(len(actions) + 1))  # deletions are seen one step later
    live = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d["metadata"]["uid"]
        for d in store.list(MODEL_DEPLOYMENT)
    }
    seen: set[tuple[str, str, str, str]] = set()
    for replica in _replicas(store):
        meta, spec = replica["metadata"], replica["spec"]
        tenant = meta["labels"]["gpufleet.io/deployment-namespace"]
        assert meta["namespace"] == cluster_namespace(spec["clusterName"])
        assert meta["name"].startswith(f"{tenant}.")
        key = (tenant, spec["deploymentName"])
        assert live.get(key) == meta["labels"]["gpufleet.io/deployment-uid"], meta
        identity = (*key, spec["clusterName"], meta["labels"]["gpufleet.io/replica-index"])
        assert identity not in seen
        seen.add(identity)
