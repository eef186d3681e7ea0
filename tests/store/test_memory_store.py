"""The in-memory store keeps API-server semantics: versions, conflicts, generation, feed."""

from datetime import UTC, datetime

import pytest

from gpufleet.store import (
    AlreadyExists,
    ChangeType,
    Conflict,
    Expired,
    Invalid,
    MemoryStore,
    NotFound,
    SelectorError,
    parse_selector,
)
from gpufleet.store.port import MODEL_REPLICA, NODE

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def replica(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
        "spec": {"clusterName": "a"},
    }


def test_create_stamps_metadata_and_rejects_duplicates() -> None:
    store = MemoryStore(clock=lambda: T0)
    created = store.create(replica("r1"))
    meta = created["metadata"]
    assert (meta["resourceVersion"], meta["generation"], meta["creationTimestamp"]) == (
        "1",
        1,
        "2026-11-29T12:00:00Z",
    )
    assert meta["uid"]
    with pytest.raises(AlreadyExists):
        store.create(replica("r1"))


def test_update_is_guarded_by_resource_version_and_bumps_generation_on_spec_change() -> None:
    store = MemoryStore(clock=lambda: T0)
    first = store.create(replica("r1"))
    first["spec"]["clusterName"] = "b"
    second = store.update(first)
    assert second["metadata"]["generation"] == 2
    first["spec"]["clusterName"] = "c"
    with pytest.raises(Conflict):
        store.update(first)  # first's resourceVersion is stale now
    second["metadata"]["labels"] = {"x": "y"}
    third = store.update(second)
    assert third["metadata"]["generation"] == 2  # labels are not spec


def test_update_never_touches_status_and_patch_status_merges() -> None:
    store = MemoryStore(clock=lambda: T0)
    obj = store.create(replica("r1"))
    patched = store.patch_status(MODEL_REPLICA, "r1", "ml", {"a": 1, "b": {"c": 2}})
    patched = store.patch_status(MODEL_REPLICA, "r1", "ml", {"b": {"d": 3}, "a": None})
    assert patched["status"] == {"b": {"c": 2, "d": 3}}
    obj["status"] = {"overwritten": True}
    store.update(patched | {"status": {"overwritten": True}})
    assert store.get(MODEL_REPLICA, "r1", "ml")["status"] == {"b": {"c": 2, "d": 3}}  # type: ignore[index]


def test_list_filters_by_namespace_and_label_selector_sorted_by_name() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("b", {"gpufleet.io/cluster": "x"}))
    store.create(replica("a", {"gpufleet.io/cluster": "y"}))
    names = [o["metadata"]["name"] for o in store.list(MODEL_REPLICA, "ml")]
    assert names == ["a", "b"]
    selected = store.list(MODEL_REPLICA, label_selector="gpufleet.io/cluster in (x)")
    assert [o["metadata"]["name"] for o in selected] == ["b"]
    assert (
        store.list(MODEL_REPLICA, label_selector={"gpufleet.io/cluster": "y"})[0]["metadata"][
            "name"
        ]
        == "a"
    )
    assert store.list(MODEL_REPLICA, "other") == []


def test_returned_objects_are_copies() -> None:
    store = MemoryStore(clock=lambda: T0)
    obj = store.create(replica("r1"))
    obj["spec"]["clusterName"] = "mutated"
    assert store.get(MODEL_REPLICA, "r1", "ml")["spec"]["clusterName"] == "a"  # type: ignore[index]


def test_delete_with_finalizers_waits_for_them() -> None:
    store = MemoryStore(clock=lambda: T0)
    obj = replica("r1")
    obj["metadata"]["finalizers"] = ["gpufleet.io/cleanup"]  # type: ignore[index]
    store.create(obj)
    store.delete(MODEL_REPLICA, "r1", "ml")
    held = store.get(MODEL_REPLICA, "r1", "ml")
    assert held is not None and held["metadata"]["deletionTimestamp"] == "2026-11-29T12:00:00Z"
    held["metadata"]["finalizers"] = []
    store.update(held)
    assert store.get(MODEL_REPLICA, "r1", "ml") is None
    with pytest.raises(NotFound):
        store.delete(MODEL_REPLICA, "r1", "ml")


def test_change_feed_returns_every_change_in_order_and_expires_after_compaction() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("r1"))
    store.patch_status(MODEL_REPLICA, "r1", "ml", {"x": 1})
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    store.delete(MODEL_REPLICA, "r1", "ml")
    changes, cursor = store.changes(0)
    assert [(c.type, c.kind.kind, c.name) for c in changes] == [
        (ChangeType.ADDED, "ModelReplica", "r1"),
        (ChangeType.MODIFIED, "ModelReplica", "r1"),
        (ChangeType.ADDED, "Node", "n1"),
        (ChangeType.DELETED, "ModelReplica", "r1"),
    ]
    only_nodes, _ = store.changes(0, [NODE])
    assert [c.name for c in only_nodes] == ["n1"]
    assert store.changes(cursor) == ([], cursor)
    store.compact(2)
    with pytest.raises(Expired):
        store.changes(1)
    assert [c.cursor for c in store.changes(2)[0]] == [3, 4]


def test_scope_is_enforced() -> None:
    store = MemoryStore(clock=lambda: T0)
    with pytest.raises(Invalid):
        store.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "x"}}
        )
    with pytest.raises(Invalid):
        store.create(replica("r1") | {"metadata": {"name": "r1"}})


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("a in (x, y),b notin (z)", {"a": "y", "b": "z"}, False),
        ("a in (x, y),b notin (z)", {"a": "y"}, True),
        ("", {"anything": "1"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    from gpufleet.store import matches

    assert matches(parse_selector(selector), labels) is expected


def test_bad_selector_names_the_term() -> None:
    with pytest.raises(SelectorError, match="'a=b=c'"):
        parse_selector("x=y,a=b=c")
