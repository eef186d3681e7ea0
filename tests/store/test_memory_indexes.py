"""What makes `MemoryStore` reads cheap must never make them wrong: the label index, caller
indexes, the ordered keys and the subtrees a new version shares with the one it replaces."""

import random
from datetime import UTC, datetime
from typing import Any

from gpufleet.store import MemoryStore
from gpufleet.store.labels import matches, parse_selector
from gpufleet.store.merge import merged
from gpufleet.store.port import MODEL_REPLICA, POD

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def replica(name: str, namespace: str = "ml", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"clusterName": "a", "members": [{"name": "m", "pool": "l4"}]},
    }


def pod(name: str, *owners: str) -> dict[str, Any]:
    refs = [{"kind": "Deployment", "name": o, "uid": o} for o in owners]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": refs},
        "spec": {},
    }


def names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_label_selection_follows_relabels_and_deletes() -> None:
    store = MemoryStore(clock=lambda: T0)
    for name, cluster in (("c", "x"), ("a", "x"), ("b", "y")):
        store.create(replica(name, cluster=cluster))
    assert names(store.peek(MODEL_REPLICA, None, {"cluster": "x"})) == ["a", "c"]
    a = store.get(MODEL_REPLICA, "a", "ml")
    assert a is not None
    a["metadata"]["labels"] = {"cluster": "y"}
    store.update(a)
    assert names(store.peek(MODEL_REPLICA, None, {"cluster": "x"})) == ["c"]
    assert names(store.peek(MODEL_REPLICA, None, "cluster in (y, z)")) == ["a", "b"]
    store.delete(MODEL_REPLICA, "b", "ml")
    assert names(store.peek(MODEL_REPLICA, None, {"cluster": "y"})) == ["a"]
    assert names(store.peek(MODEL_REPLICA, None, "cluster=y,!gone")) == ["a"]
    assert store.peek(MODEL_REPLICA, None, {"cluster": "z"}) == []


def test_existence_and_notin_terms_select_like_kubernetes() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("a", cluster="x"))
    store.create(replica("b"))
    assert names(store.peek(MODEL_REPLICA, None, "cluster")) == ["a"]
    assert names(store.peek(MODEL_REPLICA, None, "cluster notin (x)")) == ["b"]


def test_existence_terms_use_the_label_key_index_and_follow_relabels() -> None:
    """`key` (exists) finds its objects through the index of label keys: the same answer as
    matching every object, as labels come, change and go."""
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("a", replica="r1", cluster="x"))
    store.create(replica("b", cluster="x"))
    store.create(replica("c", namespace="other", replica="r2"))

    def scanned(selector: str) -> list[str]:
        wanted = parse_selector(selector)
        every = store.peek(MODEL_REPLICA)
        return names([o for o in every if matches(wanted, o["metadata"].get("labels"))])

    for selector in ("replica", "replica,cluster=x", "cluster=x,!replica", "replica,cluster"):
        assert names(store.peek(MODEL_REPLICA, None, selector)) == scanned(selector)
    assert names(store.peek(MODEL_REPLICA, None, "replica")) == ["a", "c"]
    assert names(store.peek(MODEL_REPLICA, "ml", "replica")) == ["a"]
    b = store.get(MODEL_REPLICA, "b", "ml")
    assert b is not None
    b["metadata"]["labels"] = {"replica": "r3"}
    store.update(b)
    assert names(store.peek(MODEL_REPLICA, None, "replica")) == ["a", "b", "c"]
    assert names(store.peek(MODEL_REPLICA, None, "replica,cluster")) == ["a"]
    store.delete(MODEL_REPLICA, "a", "ml")
    assert names(store.peek(MODEL_REPLICA, None, "replica")) == ["b", "c"]
    assert names(store.peek(MODEL_REPLICA, None, "replica")) == scanned("replica")


def test_namespaces_that_prefix_each_other_are_kept_apart() -> None:
    store = MemoryStore(clock=lambda: T0)
    for namespace in ("ml-2", "ml", "m", "mlx"):
        store.create(replica("r", namespace))
        store.create(replica("s", namespace, cluster="x"))
    listed = store.peek(MODEL_REPLICA, "ml")
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed] == [
        ("ml", "r"),
        ("ml", "s"),
    ]
    selected = store.peek(MODEL_REPLICA, "ml", {"cluster": "x"})
    assert [o["metadata"]["namespace"] for o in selected] == ["ml"]
    assert [o["metadata"]["namespace"] for o in store.peek(MODEL_REPLICA)] == [
        "m",
        "m",
        "ml",
        "ml",
        "ml-2",
        "ml-2",
        "mlx",
        "mlx",
    ]


def test_a_caller_index_follows_re_owning_and_deletes() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(pod("p2", "d1"))
    store.add_index(
        POD, "owner", lambda o: [r["uid"] for r in o["metadata"]["ownerReferences"]]
    )  # added after p2 exists: it is indexed too
    store.create(pod("p1", "d1", "d2"))
    store.create(pod("p3", "d2"))
    assert names(store.peek_indexed(POD, "owner", "d1")) == ["p1", "p2"]
    p1 = store.get(POD, "p1", "ml")
    assert p1 is not None
    p1["metadata"]["ownerReferences"] = [{"kind": "Deployment", "name": "d3", "uid": "d3"}]
    store.update(p1)
    assert names(store.peek_indexed(POD, "owner", "d1")) == ["p2"]
    assert names(store.peek_indexed(POD, "owner", "d2")) == ["p3"]
    assert names(store.peek_indexed(POD, "owner", "d3")) == ["p1"]
    assert sorted(map(str, store.indexed_values(POD, "owner"))) == ["d1", "d2", "d3"]
    store.delete(POD, "p2", "ml")
    assert store.peek_indexed(POD, "owner", "d1") == []
    assert sorted(map(str, store.indexed_values(POD, "owner"))) == ["d2", "d3"]
    assert store.peek_indexed(POD, "owner", "d3", "other") == []


def test_listing_follows_creates_and_deletes() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("b"))
    assert names(store.peek(MODEL_REPLICA)) == ["b"]
    store.create(replica("a"))
    listed = store.peek(MODEL_REPLICA)
    listed.clear()  # the caller's list, not the store's
    assert names(store.peek(MODEL_REPLICA)) == ["a", "b"]
    store.patch_status(MODEL_REPLICA, "a", "ml", {"phase": "Ready"})
    assert store.peek(MODEL_REPLICA)[0]["status"] == {"phase": "Ready"}
    store.delete(MODEL_REPLICA, "a", "ml")
    assert names(store.peek(MODEL_REPLICA)) == ["b"]


def test_a_new_version_shares_nothing_a_caller_can_change() -> None:
    store = MemoryStore(clock=lambda: T0)
    store.create(replica("r"))
    store.patch_status(MODEL_REPLICA, "r", "ml", {"members": {"m": {"phase": "Pending"}}})
    before = store.peek_one(MODEL_REPLICA, "r", "ml")
    patch = {"members": {"m": {"node": "n1"}}, "conditions": [{"type": "Ready"}]}
    patched = store.patch_status(MODEL_REPLICA, "r", "ml", patch)
    # The old version is untouched, and the new one shares its spec (nothing copied).
    assert before is not None and before["status"] == {"members": {"m": {"phase": "Pending"}}}
    after = store.peek_one(MODEL_REPLICA, "r", "ml")
    assert after is not None and after["spec"] is before["spec"]
    # What the caller gets back is the stored version, read-only (no copy); the patch it
    # handed in does not reach the store.
    assert patched is after
    patch["members"]["m"]["node"] = "mutated"
    patch["conditions"][0]["type"] = "mutated"
    got = store.get(MODEL_REPLICA, "r", "ml")
    assert got is not None
    assert got["spec"]["members"][0]["pool"] == "l4"
    assert got["status"] == {
        "members": {"m": {"phase": "Pending", "node": "n1"}},
        "conditions": [{"type": "Ready"}],
    }
    got["spec"]["members"][0]["pool"] = "mutated again"
    assert store.peek(MODEL_REPLICA)[0]["spec"]["members"][0]["pool"] == "l4"
    # An update keeps the status, shared with the version it replaces, out of the caller's reach.
    got["status"] = {"overwritten": True}
    updated = store.update(got)
    updated["status"]["members"]["m"]["phase"] = "mutated"
    now = store.peek_one(MODEL_REPLICA, "r", "ml")
    assert now is not None and now["status"]["members"]["m"]["phase"] == "Pending"
    # The change feed hands out the stored versions, read-only (no copy), as `view` does.
    changes, _ = store.changes(0)
    assert changes[-1].obj is now
    assert [c.obj["metadata"]["resourceVersion"] for c in changes] == ["1", "2", "3", "4"]


def test_shared_writes_leave_the_version_they_start_from_alone() -> None:
    store = MemoryStore(clock=lambda: T0)
    created = store.create_shared(replica("r"))
    assert created is store.peek_one(MODEL_REPLICA, "r", "ml")
    first = store.peek_one(MODEL_REPLICA, "r", "ml")
    assert first is not None
    store.update_shared({**first, "spec": {**first["spec"], "clusterName": "b"}})
    assert first["spec"]["clusterName"] == "a"
    assert first["metadata"]["resourceVersion"] == "1"
    second = store.peek_one(MODEL_REPLICA, "r", "ml")
    assert second is not None and second["metadata"]["generation"] == 2
    assert second["spec"]["members"] is first["spec"]["members"]
    store.delete(MODEL_REPLICA, "r", "ml")
    assert store.peek_one(MODEL_REPLICA, "r", "ml") is None


def test_merged_copies_what_the_patch_brings_and_shares_the_rest() -> None:
    target: dict[str, Any] = {"a": {"b": 1, "c": [1]}, "d": {"e": 2}, "gone": 3}
    patch: dict[str, Any] = {"a": {"b": None, "f": {"g": [1]}}, "gone": None, "h": [{"i": 1}]}
    out = merged(target, patch)
    assert out == {"a": {"c": [1], "f": {"g": [1]}}, "d": {"e": 2}, "h": [{"i": 1}]}
    assert target == {"a": {"b": 1, "c": [1]}, "d": {"e": 2}, "gone": 3}
    assert out["d"] is target["d"] and out["a"]["c"] is target["a"]["c"]
    assert out["h"] is not patch["h"] and out["a"]["f"] is not patch["a"]["f"]


def test_kept_views_follow_every_write_like_a_fresh_listing() -> None:
    """Views kept across writes (a new version put in its place; an add, delete or relabel
    dropping what it may change) equal what a store that keeps nothing lists, after every
    write of a random sequence."""
    rng = random.Random(7)
    store = MemoryStore(clock=lambda: T0)
    selectors = ["c=x", "c in (x,y)", "c", "!c", "c!=x", "t=1,c=y"]
    namespaces = ["ml", "ml2", "m"]
    for _ in range(600):
        name, namespace = f"r{rng.randrange(12)}", rng.choice(namespaces)
        current = store.get(MODEL_REPLICA, name, namespace)
        op = rng.random()
        if current is None:
            labels = {"c": rng.choice("xyz")} if rng.random() < 0.8 else {}
            store.create(replica(name, namespace, **labels))
        elif op < 0.15:
            store.delete(MODEL_REPLICA, name, namespace)
        elif op < 0.35:
            current["metadata"]["labels"] = {"c": rng.choice("xyz"), "t": rng.choice("12")}
            store.update(current)
        elif op < 0.5:
            current["spec"]["clusterName"] = rng.choice("ab")
            store.update(current)
        else:
            store.patch_status(MODEL_REPLICA, name, namespace, {"n": rng.randrange(5)})
        # Read some views (so that some are kept into the next write), and check them all.
        every = sorted(
            store.list(MODEL_REPLICA),
            key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]),
        )
        for namespace in (None, *namespaces):
            if rng.random() < 0.5:
                continue
            in_ns = [o for o in every if namespace in (None, o["metadata"]["namespace"])]
            assert list(store.view(MODEL_REPLICA, namespace)) == in_ns
            for text in selectors:
                selector = parse_selector(text)
                want = [o for o in in_ns if matches(selector, o["metadata"].get("labels"))]
                assert list(store.view(MODEL_REPLICA, namespace, text)) == want, text
