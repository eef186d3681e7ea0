"""KubeStore CRUD against the emulated API server over HTTP: the `Store` contract."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kmockplus import Served

from gpufleet.kube.store import KubeStore, KubeStoreConfig
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    LEASE,
    MODEL_REPLICA,
    AlreadyExists,
    Conflict,
    Invalid,
    NotFound,
    Obj,
    StoreError,
)

pytestmark = pytest.mark.timeout(30)


def replica(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
        "spec": {"clusterName": "a", **spec},
    }


def test_create_stamps_metadata_and_get_returns_it(store: KubeStore) -> None:
    created = store.create(replica("r1", status_ignored=True) | {"status": {"x": 1}})
    meta = created["metadata"]
    assert meta["namespace"] == "ml"
    assert meta["generation"] == 1
    assert meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert "status" not in created  # the status subresource is separate
    assert store.get(MODEL_REPLICA, "r1", "ml") == created
    assert store.get(MODEL_REPLICA, "missing", "ml") is None


def test_create_twice_is_already_exists(store: KubeStore) -> None:
    store.create(replica("r1"))
    with pytest.raises(AlreadyExists):
        store.create(replica("r1"))


def test_update_with_stale_resource_version_conflicts(store: KubeStore) -> None:
    v1 = store.create(replica("r1"))
    v2 = store.update(v1 | {"spec": {"clusterName": "b"}})
    assert v2["spec"] == {"clusterName": "b"}
    assert v2["metadata"]["generation"] == 2
    assert int(v2["metadata"]["resourceVersion"]) > int(v1["metadata"]["resourceVersion"])
    with pytest.raises(Conflict):
        store.update(v1 | {"spec": {"clusterName": "c"}})
    assert store.get(MODEL_REPLICA, "r1", "ml")["spec"] == {"clusterName": "b"}  # type: ignore[index]


def test_update_and_delete_of_a_missing_object_are_not_found(store: KubeStore) -> None:
    with pytest.raises(NotFound):
        store.update(replica("nope"))
    with pytest.raises(NotFound):
        store.delete(MODEL_REPLICA, "nope", "ml")
    with pytest.raises(NotFound):
        store.patch_status(MODEL_REPLICA, "nope", "ml", {"a": 1})


def test_status_goes_through_the_status_subresource_only(store: KubeStore) -> None:
    v1 = store.create(replica("r1"))
    v2 = store.patch_status(MODEL_REPLICA, "r1", "ml", {"observedGeneration": 1, "pools": []})
    assert v2["status"] == {"observedGeneration": 1, "pools": []}
    assert v2["metadata"]["generation"] == 1  # status writes never bump generation
    v3 = store.update(v2 | {"status": {"observedGeneration": 99}})
    assert v3["status"] == {"observedGeneration": 1, "pools": []}  # update keeps the status
    merged = store.patch_status(MODEL_REPLICA, "r1", "ml", {"pools": None, "x": {"y": 1}})
    assert merged["status"] == {"observedGeneration": 1, "x": {"y": 1}}  # a merge patch
    with pytest.raises(Conflict):
        store.patch_status(MODEL_REPLICA, "r1", "ml", {"x": 2}, v1["metadata"]["resourceVersion"])
    guarded = store.patch_status(
        MODEL_REPLICA, "r1", "ml", {"x": 3}, merged["metadata"]["resourceVersion"]
    )
    assert guarded["status"]["x"] == 3


def test_label_selectors_on_list(store: KubeStore) -> None:
    store.create(replica("a", {"gpufleet.io/cluster": "east", "tier": "gold"}))
    store.create(replica("b", {"gpufleet.io/cluster": "west"}))
    store.create(replica("c", {"gpufleet.io/cluster": "east"}))

    def names(selector: Any) -> list[str]:
        return [o["metadata"]["name"] for o in store.list(MODEL_REPLICA, "ml", selector)]

    assert names(None) == ["a", "b", "c"]
    assert names("gpufleet.io/cluster=east") == ["a", "c"]
    assert names({"gpufleet.io/cluster": "west"}) == ["b"]
    assert names("gpufleet.io/cluster!=east") == ["b"]
    assert names("tier") == ["a"]
    assert names("!tier") == ["b", "c"]
    assert names("gpufleet.io/cluster in (west, north),!tier") == ["b"]
    assert names("gpufleet.io/cluster notin (west)") == ["a", "c"]
    assert [o["metadata"]["name"] for o in store.list(MODEL_REPLICA)] == ["a", "b", "c"]
    assert store.list(MODEL_REPLICA, "other") == []


def test_delete_with_finalizers_waits_for_them(store: KubeStore) -> None:
    obj = store.create(
        replica("r1")
        | {"metadata": {"name": "r1", "namespace": "ml", "finalizers": ["gpufleet.io/x"]}}
    )
    store.delete(MODEL_REPLICA, "r1", "ml")
    marked = store.get(MODEL_REPLICA, "r1", "ml")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    marked["metadata"]["finalizers"] = []
    store.update(marked)
    assert store.get(MODEL_REPLICA, "r1", "ml") is None
    assert obj["metadata"]["uid"]


def test_cluster_scoped_and_builtin_kinds(store: KubeStore) -> None:
    cluster = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "east"},
        "spec": {"nodePools": []},
    }
    store.create(cluster)
    assert [o["metadata"]["name"] for o in store.list(INFERENCE_CLUSTER)] == ["east"]
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "sys"},
        "spec": {"holderIdentity": "x"},
    }
    assert store.create(lease)["spec"] == {"holderIdentity": "x"}
    store.delete(LEASE, "l", "sys")
    assert store.get(LEASE, "l", "sys") is None
    with pytest.raises(Invalid):
        store.get(INFERENCE_CLUSTER, "east", "ns")
    with pytest.raises(Invalid):
        store.create(replica("x") | {"metadata": {"name": "x"}})


def test_conflicting_updates_retried_by_callers_lose_nothing(make_store: Any) -> None:
    """Two writers increment one counter with read-modify-write; every increment lands."""
    setup = make_store()
    setup.create(replica("counter", count=0))
    increments_per_writer = 15
    conflicts = [0, 0]

    def writer(index: int) -> None:
        store = make_store()
        for _ in range(increments_per_writer):
            while True:
                current = store.get(MODEL_REPLICA, "counter", "ml")
                assert current is not None
                current["spec"]["count"] += 1
                try:
                    store.update(current)
                    break
                except Conflict:
                    conflicts[index] += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(25)
    final = setup.get(MODEL_REPLICA, "counter", "ml")
    assert final is not None
    assert final["spec"]["count"] == 2 * increments_per_writer
    assert final["metadata"]["generation"] == 1 + 2 * increments_per_writer


def test_an_unreachable_server_is_a_store_error(api: Served) -> None:
    config = KubeStoreConfig(request_timeout_s=1.0)
    with KubeStore.from_url("http://127.0.0.1:9", config) as store, pytest.raises(StoreError):
        store.get(MODEL_REPLICA, "r1", "ml")


def test_a_gated_pod_is_narrowed_and_ungated_but_never_gated_again(store: KubeStore) -> None:
    from gpufleet.agent.gates import pinned_spec
    from gpufleet.store.port import POD

    pod = store.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "schedulingGates": [{"name": "gpufleet.io/steer"}],
            },
        }
    )
    lifted = store.update(pod | {"spec": pinned_spec(pod["spec"], "n1")})
    assert "schedulingGates" not in lifted["spec"]
    with pytest.raises(Invalid, match="schedulingGates"):
        store.update(lifted | {"spec": {**lifted["spec"], "schedulingGates": [{"name": "x"}]}})
    with pytest.raises(Invalid, match="scheduling gates"):
        store.update(lifted | {"spec": pinned_spec(lifted["spec"], "n2")})
    assert store.get(POD, "p", "ml") == lifted
