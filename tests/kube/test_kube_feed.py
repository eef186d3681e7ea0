"""The KubeStore change feed: informers that list, watch, resume, relist and resync."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kmockplus import Served
from kube_helpers import FAST

from gpufleet.kube.store import ChangeFeed, KubeStore
from gpufleet.store.port import (
    LATEST,
    MODEL_REPLICA,
    NODE,
    POD,
    Change,
    ChangeType,
    Expired,
    Kind,
    Obj,
)

pytestmark = pytest.mark.timeout(30)


def replica(name: str, value: int = 0) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"value": value},
    }


def feed_until(
    store: KubeStore, done: Callable[[list[Change]], bool], timeout_s: float = 10.0
) -> list[Change]:
    """The whole feed of ModelReplicas once `done` holds of it (fails after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        changes, cursor = store.changes(0, [MODEL_REPLICA])
        if done(changes):
            return changes
        if time.monotonic() > deadline:
            pytest.fail(f"the feed never got there: {[(c.type, c.name) for c in changes]}")
        store.wait_for_changes(cursor, 0.1)


def versions(changes: list[Change]) -> list[int]:
    return [int(c.obj["metadata"]["resourceVersion"]) for c in changes]


def has_version(version: str) -> Callable[[list[Change]], bool]:
    return lambda changes: any(c.obj["metadata"]["resourceVersion"] == version for c in changes)


def test_the_feed_starts_with_existing_objects_then_follows_changes(store: KubeStore) -> None:
    store.create(replica("a"))
    store.create(replica("b"))
    first, cursor = store.changes(0, [MODEL_REPLICA])
    assert [(c.type, c.name) for c in first] == [(ChangeType.ADDED, "a"), (ChangeType.ADDED, "b")]
    assert [c.cursor for c in first] == [1, 2] and cursor == 2

    a = store.get(MODEL_REPLICA, "a", "ml")
    assert a is not None
    store.update(a | {"spec": {"value": 1}})
    store.delete(MODEL_REPLICA, "b", "ml")
    last = store.create(replica("c"))
    changes = feed_until(store, has_version(last["metadata"]["resourceVersion"]))
    assert [(c.type, c.name) for c in changes[2:]] == [
        (ChangeType.MODIFIED, "a"),
        (ChangeType.DELETED, "b"),
        (ChangeType.ADDED, "c"),
    ]
    later, _ = store.changes(cursor, [MODEL_REPLICA])
    assert later == changes[2:]
    assert store.changes(cursor, [POD])[0] == []  # kinds filter (and start a Pod informer)


def test_a_broken_watch_resumes_without_losing_or_repeating_a_change(
    store: KubeStore, api: Served
) -> None:
    store.watch(MODEL_REPLICA)
    written = []
    for round_ in range(4):
        for i in range(3):
            obj = store.create(replica(f"r{round_}-{i}"))
            written.append(int(obj["metadata"]["resourceVersion"]))
            updated = store.update(obj | {"spec": {"value": 1}})
            written.append(int(updated["metadata"]["resourceVersion"]))
        api.api.kill_watches()  # the informer's connection drops mid-stream
    changes = feed_until(store, has_version(str(written[-1])))
    assert versions(changes) == written  # each change exactly once, in order
    assert [c.cursor for c in changes] == list(range(1, len(written) + 1))
    assert [c.type for c in changes] == [ChangeType.ADDED, ChangeType.MODIFIED] * 12


def test_410_gone_relists_and_delivers_each_change_once(store: KubeStore, api: Served) -> None:
    store.watch(MODEL_REPLICA)
    before = [store.create(replica(f"a{i}")) for i in range(3)]
    feed_until(store, lambda changes: len(changes) == 3)

    api.api.expire_watches()  # compaction: the informer's version is gone, it must list again
    after = [store.create(replica(f"b{i}")) for i in range(3)]
    modified = store.update(before[0] | {"spec": {"value": 7}})
    deleted_version = api.api.resource_version + 1
    store.delete(MODEL_REPLICA, "a1", "ml")

    changes = feed_until(store, lambda changes: len(changes) >= 8)
    time.sleep(0.3)  # nothing more may arrive: no duplicates from the relist
    changes = store.changes(0, [MODEL_REPLICA])[0]
    seen = [(c.type, c.name) for c in changes]
    assert len(seen) == len(set(seen)) == 8
    assert seen[:3] == [(ChangeType.ADDED, f"a{i}") for i in range(3)]
    assert set(seen[3:]) == {
        *((ChangeType.ADDED, f"b{i}") for i in range(3)),
        (ChangeType.MODIFIED, "a0"),
        (ChangeType.DELETED, "a1"),
    }
    by_name = {c.name: c for c in changes[3:] if c.type is not ChangeType.DELETED}
    assert by_name["a0"].obj == modified
    assert {by_name[o["metadata"]["name"]].obj["metadata"]["uid"] for o in after} == {
        o["metadata"]["uid"] for o in after
    }
    assert deleted_version > 0


def test_resync_bounds_staleness_when_a_watch_dies_silently(
    make_store: Callable[..., KubeStore], api: Served
) -> None:
    store = make_store(replace(FAST, resync_period_s=1.0))
    objs = [store.create(replica(f"r{i}")) for i in range(5)]
    store.watch(MODEL_REPLICA)
    feed_until(store, lambda changes: len(changes) == 5)

    api.api.stall_watches()  # the connection stays open and delivers nothing more
    changed = store.update(objs[2] | {"spec": {"value": 1}})
    started = time.monotonic()
    changes = feed_until(store, has_version(changed["metadata"]["resourceVersion"]), 5.0)
    assert time.monotonic() - started < 3.0  # within about one resync period
    # The relist emitted only what differed from the cache: one change, not five.
    assert [(c.type, c.name) for c in changes[5:]] == [(ChangeType.MODIFIED, "r2")]


def test_a_reader_behind_the_feed_capacity_gets_expired(
    make_store: Callable[..., KubeStore],
) -> None:
    store = make_store(replace(FAST, feed_capacity=2))
    for i in range(4):
        store.create(replica(f"r{i}"))
    store.watch(MODEL_REPLICA)
    with pytest.raises(Expired):
        store.changes(0, [MODEL_REPLICA])
    assert [c.name for c in store.changes(2, [MODEL_REPLICA])[0]] == ["r2", "r3"]


def test_a_namespaced_selector_watch_sees_only_its_objects(store: KubeStore) -> None:
    labelled = replica("mine") | {
        "metadata": {"name": "mine", "namespace": "ml", "labels": {"gpufleet.io/cluster": "a"}}
    }
    store.create(labelled)
    store.create(replica("other"))
    store.watch(MODEL_REPLICA, namespace="ml", label_selector="gpufleet.io/cluster=a")
    mine = store.get(MODEL_REPLICA, "mine", "ml")
    assert mine is not None
    mine["metadata"]["labels"] = {}  # leaves the selection: a DELETED for this watch
    left = store.update(mine)
    changes = feed_until(store, lambda changes: len(changes) >= 2)
    assert [(c.type, c.name) for c in changes] == [
        (ChangeType.ADDED, "mine"),
        (ChangeType.DELETED, "mine"),
    ]
    assert changes[1].obj["metadata"]["resourceVersion"] == left["metadata"]["resourceVersion"]


def test_close_stops_the_informers(make_store: Callable[..., KubeStore], api: Served) -> None:
    store = make_store()
    store.watch(MODEL_REPLICA)
    deadline = time.monotonic() + 5
    while api.api.watch_count == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert api.api.watch_count == 1
    store.close()
    deadline = time.monotonic() + 5
    while api.api.watch_count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert api.api.watch_count == 0


def pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"}}


def test_the_feed_is_kept_per_kind_and_read_in_cursor_order(
    make_store: Callable[..., KubeStore],
) -> None:
    store = make_store(replace(FAST, feed_capacity=2))
    store.watch(MODEL_REPLICA)
    store.watch(POD)
    for i in range(4):  # interleaved: r0 p0 r1 p1 r2 p2 r3 (cursors 1..7)
        cursor = store.cursor
        store.create(replica(f"r{i}"))
        until_past(store, cursor)
        if i < 3:
            cursor = store.cursor
            store.create(pod(f"p{i}"))
            until_past(store, cursor)
    assert store.cursor == 7
    # r0 and r1 were dropped (2 replicas kept), p0 (2 pods kept): a reader from 0 of either
    # kind is behind; a reader of pods from 1 (after r0) is not, since p0 came at 2.
    for kinds in ([MODEL_REPLICA], [POD], None):
        with pytest.raises(Expired):
            store.changes(0, kinds)
    assert [c.name for c in store.changes(2, [POD])[0]] == ["p1", "p2"]
    both, cursor = store.changes(4, [POD, MODEL_REPLICA])
    assert [(c.cursor, c.name) for c in both] == [(5, "r2"), (6, "p2"), (7, "r3")]
    assert cursor == 7 and store.changes(7, [POD, MODEL_REPLICA]) == ([], 7)
    with pytest.raises(Expired):
        store.changes(8, [POD])  # a cursor this store never handed out
    # The port's LATEST asks for no change and the newest cursor (what a reader takes before
    # it lists), whatever the feed dropped.
    assert store.changes(LATEST, [POD, MODEL_REPLICA]) == ([], 7)


def test_wake_on_change_sets_the_event_of_every_waiter(store: KubeStore) -> None:
    store.watch(MODEL_REPLICA)
    event = threading.Event()
    store.wake_on_change(event)
    store.create(replica("r"))
    assert event.wait(5)
    event.clear()
    store.stop_waking(event)
    cursor = store.cursor
    store.create(replica("s"))
    until_past(store, cursor)
    assert not event.is_set()


def until_past(store: KubeStore, cursor: int) -> None:
    assert store.wait_for_changes(cursor, 5), "the informer delivered nothing"


KINDS = (MODEL_REPLICA, POD, NODE)


@settings(max_examples=200, deadline=None)
@given(
    kinds_written=st.lists(st.sampled_from(KINDS), max_size=40),
    capacity=st.integers(1, 6),
    cursor=st.integers(0, 41),
    kinds_read=st.one_of(st.none(), st.lists(st.sampled_from(KINDS), unique=True)),
)
def test_the_feed_agrees_with_the_plain_filter_of_the_whole_history(
    kinds_written: list[Kind], capacity: int, cursor: int, kinds_read: list[Kind] | None
) -> None:
    """The oracle: the changes after `cursor` of the kinds read, from the whole history, in
    order; `Expired` exactly when one of them was dropped (the feed keeps the last `capacity`
    of each kind) or the cursor is beyond the newest."""
    feed = ChangeFeed(capacity)
    history = [
        feed.append(ChangeType.ADDED, kind, {"metadata": {"name": f"o{i}"}})
        for i, kind in enumerate(kinds_written)
    ]
    wanted = set(KINDS if kinds_read is None else kinds_read)
    expected = [c for c in history if c.cursor > cursor and c.kind in wanted]
    kept = {c.cursor for kind in KINDS for c in [h for h in history if h.kind == kind][-capacity:]}
    if cursor > len(history) or any(c.cursor not in kept for c in expected):
        with pytest.raises(Expired):
            feed.read(cursor, kinds_read)
        return
    assert feed.read(cursor, kinds_read) == expected
    assert feed.cursor == len(history)
