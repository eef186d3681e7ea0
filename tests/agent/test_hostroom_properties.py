"""Host room (agent/hostroom.py): the incremental table against the plain computation, and
the points it reports against the nodes they stand for.

- `HostRoomTable` fed any sequence of adds, changes and deletes of Nodes and Pods (bound or
  not, finished or not, with odd requests), with relists in between, gives each node the
  room `node_rooms` gives for the objects it holds;
- `host_points` is exact up to 8 distinct rooms and never optimistic beyond: the points count
  the nodes, and every node can be given a point of its own that it dominates (a matching,
  found by brute force on small cases);
- the agent reports them: a pod bound to a node takes its requests from the node's point, in
  the PoolObservation status the agent writes (`hostRoom`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.agent.hostroom import (
    MAX_POINTS,
    HostRoomTable,
    host_points,
    node_rooms,
    node_shareable,
    with_host_room,
)
from gpufleet.agent.model import ObservedPool
from gpufleet.core.model import Bucket, DriverName, PoolName
from gpufleet.store.port import NODE, POD, Change, ChangeType

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
NODES = ("n0", "n1", "n2")


def node(name: str, cpu: object, memory: object) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


def pod(
    name: str, on: str | None, cpu: object, memory: object, phase: str, daemon: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    }
    if on is not None:
        spec["nodeName"] = on
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if daemon:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "uid": "u"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


cpus = st.sampled_from(["8", "500m", "2", 4, "bad", "-1", "1.5"])
memories = st.sampled_from(["16Gi", "1Gi", "512Mi", 1000, "x"])
nodes_st = st.builds(node, st.sampled_from(NODES), cpus, memories)
pods_st = st.builds(
    pod,
    st.sampled_from(["p0", "p1", "p2", "p3"]),
    st.sampled_from([*NODES, "gone", None]),
    cpus,
    memories,
    st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
    st.booleans(),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("node"), nodes_st, st.booleans()),
        st.tuples(st.just("pod"), pods_st, st.booleans()),
        st.tuples(st.just("relist"), st.none(), st.booleans()),
    ),
    max_size=25,
)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


@SETTINGS
@given(ops)
def test_table_is_node_rooms_of_what_it_holds(steps: list[tuple[str, Any, bool]]) -> None:
    table = HostRoomTable()
    held: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"node": {}, "pod": {}}
    for what, obj, deleted in steps:
        if what == "relist":
            table.relist({NODE: list(held["node"].values()), POD: list(held["pod"].values())})
        else:
            kind = NODE if what == "node" else POD
            store = held[what]
            if deleted and _key(obj) in store:
                obj = store.pop(_key(obj))
                change_type = ChangeType.DELETED
            else:
                change_type = ChangeType.MODIFIED if _key(obj) in store else ChangeType.ADDED
                store[_key(obj)] = obj
            table.apply([Change(0, change_type, kind, obj)])
        assert table.rooms() == node_rooms(held["node"].values(), held["pod"].values())
        assert table.shareables() == node_shareable(held["node"].values(), held["pod"].values())


def _matched(rooms: list[tuple[int, int]], points: tuple[tuple[int, int, int], ...]) -> bool:
    """Whether each node can take a slot of its own (a point's) that it dominates."""
    slots = [(c, m) for c, m, n in points for _ in range(n)]
    if len(slots) != len(rooms):
        return False
    return any(
        all(r[0] >= s[0] and r[1] >= s[1] for r, s in zip(rooms, perm, strict=True))
        for perm in itertools.permutations(slots)
    )


rooms_st = st.lists(
    st.tuples(st.sampled_from([0, 1000, 2000, 8000, 32000]), st.sampled_from([0, 1, 4, 16, 64])),
    min_size=0,
    max_size=7,
)


@SETTINGS
@given(rooms_st, st.integers(1, 4))
def test_points_are_exact_then_never_optimistic(rooms: list[tuple[int, int]], limit: int) -> None:
    points = host_points(rooms, limit)
    assert len(points) <= limit
    assert sum(n for _, _, n in points) == len(rooms)
    if len(set(rooms)) <= limit:
        assert sorted((c, m) for c, m, n in points for _ in range(n)) == sorted(rooms)
    assert _matched(rooms, points)


def test_many_rooms_merge_to_eight_points_below_every_node() -> None:
    rooms = [(1000 * i, 2**30 * (i % 7)) for i in range(200)]
    points = host_points(rooms)
    assert len(points) == MAX_POINTS and sum(n for *_, n in points) == 200
    # Merged points are minima: none claims more CPU or memory than the nodes have.
    assert min(c for c, _, _ in points) == 0 and max(c for c, _, _ in points) <= 199_000


def test_bucket_points_follow_the_nodes_free_devices() -> None:
    gpu = DriverName("gpu.nvidia.com")
    pool = ObservedPool(
        PoolName("p"), 3, (Bucket({gpu: 0}, 1), Bucket({gpu: 4}, 2)), None, {}, {}, 2
    )
    free = {"n0": {gpu: 4}, "n1": {gpu: 4}, "n2": {gpu: 0}}
    rooms = {"n0": (8000, 2**34), "n1": (2000, 2**34), "n2": (64000, 2**36)}
    annotated = with_host_room(pool, free, rooms.__getitem__)
    assert annotated.free_devices is not None
    hosts = [
        tuple((p.milli_cpu, p.memory, p.nodes) for p in b.host or ())
        for b in annotated.free_devices
    ]
    assert hosts == [((64000, 2**36, 1),), ((2000, 2**34, 1), (8000, 2**34, 1))]
    body = annotated.to_status()["freeDevices"][1]
    assert body["hostRoom"] == [
        {"milliCpu": 2000, "memory": 2**34, "nodes": 1},
        {"milliCpu": 8000, "memory": 2**34, "nodes": 1},
    ]
    # A node the bucket counts but the agent cannot name reads nothing free.
    short = with_host_room(pool, {"n0": {gpu: 4}}, rooms.__getitem__)
    assert short.free_devices is not None
    (point_a, point_b) = short.free_devices[1].host or ()
    assert (point_a.milli_cpu, point_a.memory, point_b.milli_cpu) == (0, 0, 8000)


def test_the_agent_reports_room_less_every_bound_pod() -> None:
    from test_runner import World, pool_status, slice_
    from test_runner import node as bare_node

    w = World()
    n0 = bare_node("n0")
    n0["status"]["allocatable"] = {"cpu": "32", "memory": "128Gi"}
    daemon = pod("ds-n0", "n0", "500m", "1Gi", "Running")  # a DaemonSet's, another tenant's
    done = pod("batch", "n0", "16", "64Gi", "Succeeded")  # finished: holds nothing
    w.add(
        n0,
        slice_("n0"),
        {"apiVersion": "v1", "kind": "Pod", **daemon},
        {"apiVersion": "v1", "kind": "Pod", **done},
    )
    agent = w.agent()
    agent.step(w.at(0))
    (bucket,) = pool_status(w)["freeDevices"]
    assert bucket["hostRoom"] == [{"milliCpu": 31500, "memory": 127 * 2**30, "nodes": 1}]
    # A pod bound later takes its requests too (the feed's changes reach the table).
    w.add({"apiVersion": "v1", "kind": "Pod", **pod("engine", "n0", "24", "64Gi", "Running")})
    agent.step(w.at(30))
    (bucket,) = pool_status(w)["freeDevices"]
    assert bucket["hostRoom"] == [{"milliCpu": 7500, "memory": 63 * 2**30, "nodes": 1}]


def test_a_pool_of_many_buckets_gets_fewer_points_each() -> None:
    gpu = DriverName("gpu.nvidia.com")
    buckets = tuple(Bucket({gpu: i}, 4) for i in range(64))
    pool = ObservedPool(PoolName("p"), 256, buckets, None, {}, {}, 64)
    free = {f"n{i}-{j}": {gpu: i} for i in range(64) for j in range(4)}
    rooms = {name: (1000 * int(name.split("-")[1]), 2**30) for name in free}
    annotated = with_host_room(pool, free, rooms.__getitem__)
    assert annotated.free_devices is not None
    counts = [len(b.host or ()) for b in annotated.free_devices]
    assert counts == [4] * 64 and sum(counts) <= 256  # 256 // 64 = 4 per bucket
    assert all(sum(p.nodes for p in b.host or ()) == 4 for b in annotated.free_devices)


def test_the_agent_reports_the_shareable_room_less_daemonsets_only() -> None:
    """Issue 26 §2: per pool, the least of its nodes' allocatable less their DaemonSet pods'
    requests (another tenant's pod is not subtracted: it may go, a DaemonSet's stays)."""
    from test_runner import World, pool_status, slice_
    from test_runner import node as bare_node

    w = World()
    nodes = []
    for name, cpu in (("n0", "32"), ("n1", "48")):
        n = bare_node(name)
        n["status"]["allocatable"] = {"cpu": cpu, "memory": "128Gi"}
        nodes.append(n)
    daemon = pod("ds-n0", "n0", "2", "4Gi", "Running", daemon=True)
    tenant = pod("other", "n0", "8", "8Gi", "Running")
    w.add(
        *nodes,
        slice_("n0"),
        slice_("n1"),
        {"apiVersion": "v1", "kind": "Pod", **daemon},
        {"apiVersion": "v1", "kind": "Pod", **tenant},
    )
    w.agent().step(w.at(0))
    assert pool_status(w)["shareableRoom"] == {"milliCpu": 30000, "memory": 124 * 2**30}
