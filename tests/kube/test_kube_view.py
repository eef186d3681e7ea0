"""KubeStore.view: served from a synced, unfiltered watch's cache, else a list."""

from __future__ import annotations

import time

import pytest

from gpufleet.kube.store import KubeStore
from gpufleet.store.port import MODEL_REPLICA, Obj

pytestmark = pytest.mark.timeout(30)


def replica(name: str, namespace: str = "ml", value: int = 0) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": name[0]}},
        "spec": {"value": value},
    }


def names(objs: list[Obj]) -> list[tuple[str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs]


def test_without_a_watch_a_view_is_a_list(store: KubeStore) -> None:
    store.create(replica("a"))
    assert store.view(MODEL_REPLICA) == store.list(MODEL_REPLICA)
    # Decoded afresh each time: nothing shared.
    assert store.view(MODEL_REPLICA)[0] is not store.view(MODEL_REPLICA)[0]


def test_with_a_synced_watch_a_view_comes_from_the_cache_and_follows_it(
    store: KubeStore,
) -> None:
    store.create(replica("a"))
    store.create(replica("b", namespace="other"))
    store.watch(MODEL_REPLICA)
    first = store.view(MODEL_REPLICA)
    assert names(first) == [("ml", "a"), ("other", "b")]
    assert store.view(MODEL_REPLICA)[0] is first[0]  # the cached object: no request made
    assert names(store.view(MODEL_REPLICA, "other")) == [("other", "b")]
    assert names(store.view(MODEL_REPLICA, label_selector={"team": "a"})) == [("ml", "a")]

    a = store.get(MODEL_REPLICA, "a", "ml")
    assert a is not None
    written = store.update(a | {"spec": {"value": 7}})
    deadline = time.monotonic() + 10
    while (
        store.view(MODEL_REPLICA, "ml")[0]["metadata"]["resourceVersion"]
        != (written["metadata"]["resourceVersion"])
    ):
        assert time.monotonic() < deadline, "the cache never caught up with the write"
        store.wait_for_changes(store.cursor, 0.1)
    assert store.view(MODEL_REPLICA, "ml")[0]["spec"] == {"value": 7}
    assert store.view(MODEL_REPLICA) == store.list(MODEL_REPLICA)


def test_a_watch_of_exactly_the_requested_scope_serves_the_view(store: KubeStore) -> None:
    store.create(replica("a"))
    store.create(replica("b"))
    store.watch(MODEL_REPLICA, "ml", "team=a")
    first = store.view(MODEL_REPLICA, "ml", "team=a")
    assert names(first) == [("ml", "a")]
    assert store.view(MODEL_REPLICA, "ml", "team=a")[0] is first[0]
    # Another scope is not covered by that watch: listed afresh.
    assert names(store.view(MODEL_REPLICA, "ml")) == [("ml", "a"), ("ml", "b")]
    assert store.view(MODEL_REPLICA, "ml")[0] is not store.view(MODEL_REPLICA, "ml")[0]
