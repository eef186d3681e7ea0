"""The free-device table against its specification: after any sequence of deltas (objects added,
changed and deleted in any order, the feed restarted, the hub's declared pools changed),
`FreeDeviceTable.snapshot` gives exactly what the pure `observe` gives on the same objects, with
the clock the last snapshot returned."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from observe_builders import T0, claim, member, node, pod, replica, rslice
from test_binding_health import _bound as bound
from test_counters_properties import CONFIG as COUNTERS_CONFIG
from test_counters_properties import partitioned_slices
from test_observe_properties import NODE_NAMES, clusters

from gpufleet.agent.feed import ClusterFeed
from gpufleet.agent.observe import AllocationClock, ClusterObjects, observe
from gpufleet.agent.table import TABLE_KINDS, FreeDeviceTable
from gpufleet.core.model import Bucket, DriverName
from gpufleet.store import MemoryStore
from gpufleet.store.port import (
    LATEST,
    MODEL_REPLICA,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    Change,
    ChangeType,
    Expired,
    Kind,
    Obj,
    kind_of,
)

#: The fleet's claims tolerate one device taint (`fleet-ok`), so tolerated device taints occur.
CONFIG = COUNTERS_CONFIG

_KINDS: dict[str, Kind] = {
    "nodes": NODE,
    "slices": RESOURCE_SLICE,
    "claims": RESOURCE_CLAIM,
    "pods": POD,
    "replicas": MODEL_REPLICA,
}


def _key(obj: Mapping[str, Any]) -> tuple[Kind, str, str]:
    meta = obj["metadata"]
    return kind_of(obj), meta.get("namespace") or "", meta["name"]


#: Pools the hub may declare: some that nodes and replicas name, some that nothing else names
#: (observed at zero nodes).
_DECLARABLE = ("a", "b", "c", "empty", "zero")


def _declared(at: int) -> frozenset[str]:
    """The `at`-th subset of `_DECLARABLE` (by bits)."""
    return frozenset(p for i, p in enumerate(_DECLARABLE) if at >> i & 1)


def _objects(
    held: Mapping[tuple[Kind, str, str], Obj], declared: frozenset[str] = frozenset()
) -> ClusterObjects:
    by_kind: dict[Kind, list[Obj]] = {kind: [] for kind in _KINDS.values()}
    for (kind, _, _), obj in held.items():
        by_kind[kind].append(obj)
    return ClusterObjects(*(tuple(by_kind[k]) for k in _KINDS.values()), declared_pools=declared)


_BREAKS = (
    "devices-not-a-list",
    "device-without-name",
    "duplicate-device",
    "no-pool",
    "pool-name-not-a-string",
    "generation-not-an-int",
    "no-node",
    "node-not-a-string",
    "driver-missing",
    "spec-not-a-mapping",
    "older-generation",
    "newer-generation",
    "count-zero",
    "count-two",
    "count-not-an-int",
    "device-not-a-mapping",
    "all-nodes",
    "pool-not-a-mapping",
    "other-driver",
)


def _malformed(source: Obj, how: str) -> Obj:
    """A copy of the slice `source`, broken in one way `how`, under its own name (or, for the
    generation changes, the same name: a replacement)."""
    obj = copy.deepcopy(source)
    spec = obj["spec"]
    if how not in ("older-generation", "newer-generation"):
        obj["metadata"]["name"] += f"-{how}"
    if how == "devices-not-a-list":
        spec["devices"] = {"gpu-0": {}}
    elif how == "device-without-name" and spec.get("devices"):
        del spec["devices"][0]["name"]
    elif how == "duplicate-device" and spec.get("devices"):
        spec["devices"].append(copy.deepcopy(spec["devices"][0]))
    elif how == "no-pool":
        del spec["pool"]
    elif how == "pool-name-not-a-string":
        spec["pool"]["name"] = 7
    elif how == "generation-not-an-int":
        spec["pool"]["generation"] = "one"
    elif how == "no-node":
        spec.pop("nodeName", None)
    elif how == "node-not-a-string":
        spec["nodeName"] = ["n1"]
    elif how == "driver-missing":
        del spec["driver"]
    elif how == "spec-not-a-mapping":
        obj["spec"] = "broken"
    elif how == "older-generation":
        spec["pool"]["generation"] = 0
    elif how == "newer-generation":
        spec["pool"]["generation"] = 2
    elif how == "count-zero":
        spec["pool"]["resourceSliceCount"] = 0
    elif how == "count-two":
        spec["pool"]["resourceSliceCount"] = 2
    elif how == "count-not-an-int":
        spec["pool"]["resourceSliceCount"] = "two"
    elif how == "device-not-a-mapping" and spec.get("devices"):
        spec["devices"][0] = "gpu-0"
    elif how == "all-nodes":
        spec.pop("nodeName", None)
        spec["allNodes"] = True
    elif how == "pool-not-a-mapping":
        spec["pool"] = "a"
    elif how == "other-driver":
        spec["driver"] = "other.example.com"
    return obj


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Obj], list[tuple[str, int, bool]]]:
    """Objects of two generated clusters (so keys recur with other content), and a sequence of
    operations on them: put (add or change), delete, restart (relist), declare (the hub's
    declared pools become a subset of `_DECLARABLE`), snapshot."""
    objects: list[Obj] = []
    for cluster, _ in (draw(clusters()), draw(clusters())):
        for field in _KINDS:
            objects.extend(getattr(cluster, field))
    # Some of the pods' claims wait on a binding condition (KEP-5007): not counted allocated.
    for obj in objects:
        results = obj.get("status", {}).get("allocation", {}).get("devices", {}).get("results")
        if kind_of(obj) == RESOURCE_CLAIM and results and len(results) == 1 and draw(st.booleans()):
            bound(obj, binding=("Attached",))
    # Claims the table cannot index by DRA pool (results unreadable), and one pinned by a
    # node selector to a device no slice publishes.
    unreadable = claim("c1", node_selector="n1")
    unreadable["status"]["allocation"]["devices"]["results"] = "unreadable"
    objects += [unreadable, claim("c2", [("n9", "gpu-0")], node_selector="n2")]
    # Partitionable devices (KEP-4815 counters, MIG-shaped) and device taints (KEP-5055) in a
    # second DRA pool of some nodes, and claims on their whole devices and partitions.
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=3)):
        mig, devices = draw(partitioned_slices(name, f"{name}-mig"))
        objects.append(mig)
        for i, (dev, _) in enumerate(
            draw(st.lists(st.sampled_from(devices), max_size=3)) if devices else []
        ):
            obj = claim(f"mig-{name}-{i}", [(f"{name}-mig", dev)])
            state = draw(st.sampled_from(["bound", "pending", "met", "unhealthy"]))
            if state != "bound":  # binding conditions (KEP-5007) and health (KEP-4680)
                conditions = {"Attached": ("True", "")} if state == "met" else {}
                if state == "unhealthy":
                    conditions = {"Healthy": ("False", "XID")}
                obj = bound(obj, binding=("Attached",), conditions=conditions)
            objects.append(obj)
    # Malformed ResourceSlices (issue 30.4: the table and `observe` disagreed on a pool's
    # allocation time after some histories with them): a variant of a generated slice.
    slices = [o for o in objects if o.get("kind") == "ResourceSlice"]
    for _ in range(draw(st.integers(0, 3)) if slices else 0):
        objects.append(_malformed(draw(st.sampled_from(slices)), draw(st.sampled_from(_BREAKS))))
    ops = st.tuples(
        st.sampled_from(["put", "put", "put", "delete", "restart", "declare", "snapshot"]),
        st.integers(0, max(0, len(objects) - 1)),
        st.booleans(),
    )
    return objects, draw(st.lists(ops, max_size=40))


def _check(
    table: FreeDeviceTable,
    held: Mapping[tuple[Kind, str, str], Obj],
    clock: AllocationClock,
    step: int,
    declared: frozenset[str] = frozenset(),
) -> AllocationClock:
    now = T0 + timedelta(minutes=step // 2)  # two snapshots at one instant now and then
    objects = _objects(held, declared)
    want = observe(objects, clock, CONFIG, now)
    got = table.snapshot(list(objects.replicas), now, declared)
    assert {p.name for p in got.result.pools} >= declared
    assert got.result.pools == want[0].pools, (got.result.pools, want[0].pools)
    assert got.result.nodes == want[0].nodes
    assert (got.result, got.clock) == want
    # The steering query (kept per pool until the pool is observed again): each node's free
    # devices as `observe` gives them. Asked every other step, so that kept answers are
    # asked again after later deltas.
    if step % 2:
        for pool in want[0].pools:
            plain = {n.name: n.free for n in want[0].nodes if n.pool == pool.name}
            assert table.free_devices(pool.name) == plain
    return want[1]


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_table_gives_what_observe_gives_after_any_deltas(
    history: tuple[list[Obj], list[tuple[str, int, bool]]],
) -> None:
    objects, ops = history
    table = FreeDeviceTable(CONFIG)
    held: dict[tuple[Kind, str, str], Obj] = {}
    clock = AllocationClock()
    changes: list[Change] = []
    version = 0
    declared: frozenset[str] = frozenset()
    for step, (op, at, flag) in enumerate(ops):
        if op == "snapshot":
            table.apply(changes)
            changes = []
            clock = _check(table, held, clock, step, declared)
            continue
        if op == "declare":
            declared = _declared(at)
            continue
        if op == "restart":
            # The feed expired: what was not read yet is lost, and the table relists.
            changes = []
            table.relist(
                {kind: [o for (k, _, _), o in held.items() if k == kind] for kind in TABLE_KINDS}
            )
            continue
        if not objects:
            continue
        obj = copy.deepcopy(objects[at])
        key = _key(obj)
        version += 1
        if op == "delete":
            gone = held.pop(key, None)
            if gone is not None and key[0] in TABLE_KINDS:
                changes.append(Change(version, ChangeType.DELETED, key[0], gone))
            continue
        obj["metadata"]["resourceVersion"] = str(version)
        if flag and key[0] == RESOURCE_CLAIM:
            del obj["metadata"]["uid"]  # a claim without a uid: its time is always now
        kind = ChangeType.MODIFIED if key in held else ChangeType.ADDED
        held[key] = obj
        if key[0] in TABLE_KINDS:
            changes.append(Change(version, kind, key[0], obj))
    table.apply(changes)
    _check(table, held, clock, len(ops), declared)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_the_table_fed_by_a_store_gives_what_observe_gives(
    history: tuple[list[Obj], list[tuple[str, int, bool]]],
) -> None:
    """The same through a `MemoryStore`'s change feed (`ClusterFeed`), a restart being a
    compaction of the feed (`Expired`)."""
    objects, ops = history
    store = MemoryStore(uid_seed="cluster")
    table = FreeDeviceTable(CONFIG)
    feed = ClusterFeed(store, table)
    clock = AllocationClock()
    declared: frozenset[str] = frozenset()
    for step, (op, at, _) in enumerate(ops):
        if op == "snapshot":
            feed.sync()
            held = {_key(o): o for kind in _KINDS.values() for o in store.list(kind)}
            clock = _check(table, held, clock, step, declared)
            continue
        if op == "declare":
            declared = _declared(at)
            continue
        if op == "restart":
            store.compact(store.revision)
            continue
        if not objects:
            continue
        obj = copy.deepcopy(objects[at])
        obj["metadata"].pop("deletionTimestamp", None)  # a store's objects are deleted at once
        kind, ns, name = _key(obj)
        current = store.get(kind, name, ns or None)
        if op == "delete":
            if current is not None:
                store.delete(kind, name, ns or None)
        elif current is None:
            store.create(obj)
        else:
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            store.update(obj)
            if "status" in obj:
                store.patch_status(kind, name, ns or None, obj["status"])
    feed.sync()
    held = {_key(o): o for kind in _KINDS.values() for o in store.list(kind)}
    _check(table, held, clock, len(ops), declared)
    assert feed.relists >= 1


def test_free_devices_per_node_of_a_pool() -> None:
    """What issue 14's steering asks: each node of a pool and its exact free devices."""
    table = FreeDeviceTable(CONFIG)
    objs = [
        node("n1", "a"),
        node("n2", "a", cordoned=True),
        node("n3", "b"),
        rslice("n1", 4),
        rslice("n2", 4),
        rslice("n3", 2),
        claim("c1", [("n1", "gpu-0"), ("n1", "gpu-1")]),
        claim("c2", [("n3", "gpu-0")]),
        pod("p1", "r1", claims=["c1"]),
        replica("r1"),
    ]
    table.apply(
        Change(i, ChangeType.ADDED, kind_of(o), o)
        for i, o in enumerate(objs)
        if kind_of(o) in TABLE_KINDS
    )
    table.snapshot([objs[-1]], T0)
    assert table.free_devices("a") == {"n1": {"gpu.nvidia.com": 2}, "n2": {"gpu.nvidia.com": 0}}
    assert table.free_devices("b") == {"n3": {"gpu.nvidia.com": 1}}
    assert table.free_devices("h100") == {}  # the replica's pool: no nodes yet
    assert table.free_devices("none") == {}
    # A claim released frees its devices at the next snapshot, not before.
    table.apply([Change(99, ChangeType.DELETED, RESOURCE_CLAIM, objs[6])])
    assert table.free_devices("a")["n1"] == {"gpu.nvidia.com": 2}
    table.snapshot([objs[-1]], T0 + timedelta(seconds=1))
    assert table.free_devices("a")["n1"] == {"gpu.nvidia.com": 4}


def test_a_snapshot_rebuilds_only_what_the_moved_generations_touch() -> None:
    """A quiet snapshot keeps everything (and the generation); a claim on a node of pool a
    moves that node's generation and rebuilds pool a and the replica whose pod names it,
    never pool b or the other replica."""
    table = FreeDeviceTable(CONFIG)
    objs = [
        node("n1", "a"),
        node("n2", "b"),
        rslice("n1", 4),
        rslice("n2", 4),
        pod("p1", "r1", claims=["c1"]),
        pod("p2", "r2", claims=["c2"]),
    ]
    replicas = [replica("r1", member(pool="a")), replica("r2", member(pool="b"))]
    for i, r in enumerate(replicas):
        r["metadata"]["resourceVersion"] = str(i)
    table.apply(Change(i, ChangeType.ADDED, kind_of(o), o) for i, o in enumerate(objs))
    first = table.snapshot(replicas, T0)
    quiet = table.snapshot(replicas, T0 + timedelta(seconds=1))
    assert (quiet.result, quiet.generation, quiet.changed_replicas) == (
        first.result,
        first.generation,
        frozenset(),
    )
    table.apply([Change(9, ChangeType.ADDED, RESOURCE_CLAIM, claim("c1", [("n1", "gpu-0")]))])
    moved = table.snapshot(replicas, T0 + timedelta(seconds=2))
    assert moved.generation > first.generation
    assert moved.changed_replicas == {("ml", "r1")}
    (a0, b0), (a1, b1) = first.result.pools, moved.result.pools
    assert b1 is b0 and a1 != a0
    assert moved.result.replicas[1] is first.result.replicas[1]
    assert moved.result.replicas[0] != first.result.replicas[0]


class StrictFeedStore(MemoryStore):
    """A store whose feed refuses a cursor beyond its newest but for the port's `LATEST`, as
    the Kubernetes store's does."""

    def changes(self, cursor: int, kinds: Sequence[Kind] | None = None) -> tuple[list[Change], int]:
        if self.revision < cursor < LATEST:
            raise Expired(f"cursor {cursor} is beyond the newest ({self.revision})")
        return super().changes(cursor, kinds)


def test_a_feed_that_refuses_a_cursor_beyond_its_newest_still_relists() -> None:
    store = StrictFeedStore(uid_seed="cluster")
    for obj in (node("n1", "a"), rslice("n1", 4)):
        store.create(obj)
    table = FreeDeviceTable(CONFIG)
    feed = ClusterFeed(store, table)
    feed.sync()
    store.create(claim("c1", [("n1", "gpu-0")]))
    feed.sync()
    assert feed.relists == 1
    assert table.snapshot([], T0).result.pools[0].free_devices == (
        Bucket({DriverName("gpu.nvidia.com"): 3}, 1),
    )


def test_declared_pools_are_observed_at_zero_nodes() -> None:
    """Issue 14, section 3: every pool the hub declares is reported, with zero nodes and an
    empty histogram when the agent sees none of its nodes; a pool no longer declared (and
    named by nothing else) is not."""
    table = FreeDeviceTable(CONFIG)
    objs = [node("n1", "a"), rslice("n1", 4)]
    table.apply(Change(i, ChangeType.ADDED, kind_of(o), o) for i, o in enumerate(objs))
    first = table.snapshot([], T0, frozenset({"a", "zero"}))
    assert [(p.name, p.observed_nodes, p.free_devices) for p in first.result.pools] == [
        ("a", 1, (Bucket({DriverName("gpu.nvidia.com"): 4}, 1),)),
        ("zero", 0, ()),
    ]
    assert first.result.pools[1].to_status()["freeDevices"] == []
    want, _ = observe(
        _objects({_key(o): o for o in objs}, frozenset({"a", "zero"})),
        AllocationClock(),
        CONFIG,
        T0,
    )
    assert first.result == want
    # The same declaration again: a quiet snapshot; another one: rebuilt.
    quiet = table.snapshot([], T0, frozenset({"a", "zero"}))
    assert quiet.result is first.result
    moved = table.snapshot([], T0, frozenset({"a"}))
    assert [p.name for p in moved.result.pools] == ["a"]


_CLAIM_BREAKS = ("on-malformed-slice", "unknown-pool", "other-driver", "half-unknown")


def _reallocated(source: Obj, how: str, malformed: Sequence[Obj]) -> Obj:
    """A copy of the claim `source` under its own name (a new version of it: pods that name it
    keep naming it) whose allocation names a device of a malformed slice, a DRA pool or a
    driver no slice publishes, or one known device and one unknown."""
    obj = copy.deepcopy(source)
    results = obj.get("status", {}).get("allocation", {}).get("devices", {}).get("results")
    if not isinstance(results, list) or not results:
        return obj
    first = results[0]
    if how == "on-malformed-slice" and malformed:
        spec = malformed[0].get("spec")
        pool = spec.get("pool") if isinstance(spec, Mapping) else None
        devices = spec.get("devices") if isinstance(spec, Mapping) else None
        if isinstance(pool, Mapping) and isinstance(devices, list) and devices:
            device = devices[0]
            first["pool"] = pool.get("name")
            first["device"] = device.get("name") if isinstance(device, Mapping) else device
            first["driver"] = spec.get("driver", first["driver"])
    elif how == "unknown-pool":
        first["pool"] = "nowhere"
    elif how == "other-driver":
        first["driver"] = "other.example.com"
    elif how == "half-unknown":
        results.append({**first, "pool": "nowhere", "device": "gpu-9"})
    return obj


@st.composite
def harder_histories(draw: st.DrawFn) -> tuple[list[Obj], list[tuple[str, int, bool]]]:
    """`histories`, plus (issue 30.4, kinds the earlier 19 breaks did not try): claims that
    pods name re-allocated onto a malformed slice's device or onto a pool or driver nobody
    publishes, and slices copied under another name (the same devices in two slices of one
    pool); with a slice deleted and re-created under its name at a lower generation left to
    the operations (delete, then put of its `older-generation` variant)."""
    objects, ops = draw(histories())
    slices = [o for o in objects if o.get("kind") == "ResourceSlice"]
    malformed = [o for o in slices if o["metadata"]["name"].count("-") > 1]
    named = {c for o in objects if o.get("kind") == "Pod" for c in _claim_names(o)}
    claims = [o for o in objects if o.get("kind") == "ResourceClaim"]
    claims = [c for c in claims if c["metadata"]["name"] in named] or claims
    for _ in range(draw(st.integers(0, 3)) if claims else 0):
        source = draw(st.sampled_from(claims))
        objects.append(_reallocated(source, draw(st.sampled_from(_CLAIM_BREAKS)), malformed))
    for _ in range(draw(st.integers(0, 2)) if slices else 0):
        copied = copy.deepcopy(draw(st.sampled_from(slices)))
        copied["metadata"]["name"] += "-copy"
        objects.append(copied)
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["put", "put", "put", "delete", "restart", "declare", "snapshot"]),
                st.integers(0, max(0, len(objects) - 1)),
                st.booleans(),
            ),
            max_size=40,
        )
    )
    return objects, ops


def _claim_names(pod_obj: Obj) -> list[str]:
    claims = pod_obj.get("spec", {}).get("resourceClaims")
    if not isinstance(claims, list):
        return []
    names = []
    for c in claims:
        if isinstance(c, Mapping) and isinstance(c.get("resourceClaimName"), str):
            names.append(c["resourceClaimName"])
    status = pod_obj.get("status", {}).get("resourceClaimStatuses")
    if isinstance(status, list):
        names += [
            s["resourceClaimName"]
            for s in status
            if isinstance(s, Mapping) and isinstance(s.get("resourceClaimName"), str)
        ]
    return names


@settings(max_examples=200, deadline=None)
@given(harder_histories(), st.booleans())
def test_the_table_gives_what_observe_gives_after_harder_histories(
    history: tuple[list[Obj], list[tuple[str, int, bool]]], backwards: bool
) -> None:
    """The same as `test_the_table_gives_what_observe_gives_after_any_deltas` on the harder
    histories; with `backwards`, an object's resourceVersion now and then goes back below one
    it had (a cluster restored from a backup), never repeating one with other content."""
    objects, ops = history
    table = FreeDeviceTable(CONFIG)
    held: dict[tuple[Kind, str, str], Obj] = {}
    clock = AllocationClock()
    changes: list[Change] = []
    version = 1000
    used: set[int] = set()
    declared: frozenset[str] = frozenset()
    for step, (op, at, flag) in enumerate(ops):
        if op == "snapshot":
            table.apply(changes)
            changes = []
            clock = _check(table, held, clock, step, declared)
            continue
        if op == "declare":
            declared = _declared(at)
            continue
        if op == "restart":
            changes = []
            table.relist(
                {kind: [o for (k, _, _), o in held.items() if k == kind] for kind in TABLE_KINDS}
            )
            continue
        if not objects:
            continue
        obj = copy.deepcopy(objects[at])
        key = _key(obj)
        version += 1
        rv = version - 500 - at if backwards and flag else version
        while rv in used:
            rv += 1
        used.add(rv)
        if op == "delete":
            gone = held.pop(key, None)
            if gone is not None and key[0] in TABLE_KINDS:
                changes.append(Change(version, ChangeType.DELETED, key[0], gone))
            continue
        obj["metadata"]["resourceVersion"] = str(rv)
        kind = ChangeType.MODIFIED if key in held else ChangeType.ADDED
        held[key] = obj
        if key[0] in TABLE_KINDS:
            changes.append(Change(version, kind, key[0], obj))
    table.apply(changes)
    _check(table, held, clock, len(ops), declared)
