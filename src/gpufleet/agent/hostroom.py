"""Host room: the CPU and memory each node has free, reported per free-device bucket.

The hub fits each pod's CPU and memory requests with its devices (docs/scheduling.md), so each
bucket of a pool's histogram carries the room of its nodes (`Bucket.host`: points of free
millicores, free memory bytes and a node count; docs/agent.md, "Host room").

- **Free** per node = its `status.allocatable` `cpu` and `memory` less the requests
  (`pod_requests`: containers, init containers and sidecars, limits where a request is absent,
  overhead) of every pod bound to it (`spec.nodeName`) that is not Succeeded or Failed, of
  every tenant and DaemonSet, as kube-scheduler's NodeResourcesFit counts them; never
  negative. A terminating pod still counts (it holds its requests until it is gone). A node
  without allocatable CPU or memory has none free. `node_rooms` is the plain computation.
- **Points** per bucket (`host_points`): its nodes' rooms, exact while they take at most
  `MAX_POINTS` distinct values; beyond that, groups of points are merged into their
  component-wise minimum (each node is then represented by a point below its room), merging
  first what loses the least room; a pool of more than 32 buckets gets fewer points per
  bucket (`MAX_POOL_POINTS` in all, at least one each). Never optimistic: every node stands behind a point it
  dominates, and the points count exactly the bucket's nodes (nodes the agent cannot name
  read 0 free).
- **Shareable** per pool (`ObservedPool.shareable`): the least, over the pool's nodes, of a
  node's allocatable less the requests of its bound DaemonSet pods (an owner reference of
  kind DaemonSet), what proportional requests divide (docs/agent.md, "Proportional
  requests"); nodes without allocatable CPU and memory say nothing (none said: None);
  `node_shareable` is the plain computation.
- **Incremental** (`HostRoomTable`): fed the same changes as the free-device table (its Nodes
  and Pods), it keeps each node's allocatable and the requests bound to it, and makes a
  pool's points again only when the pool's observation or one of its nodes' room moved. A
  property test holds it equal to `node_rooms` of the objects it was fed
  (`tests/agent/test_hostroom_properties.py`).

Not counted: pods not bound yet whose claims kube-scheduler has already allocated (between its
PreBind and Bind, within one binding cycle), and requests of extended resources other than
DRA devices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from gpufleet.agent.model import ObservationResult, ObservedPool
from gpufleet.core.model import Bucket, HostRoom
from gpufleet.core.pod_requests import container_requests, pod_requests
from gpufleet.store.port import NODE, POD, ChangeType, Kind

#: Points per bucket (the API's bound, `hostRoom` at most 8 items).
MAX_POINTS: Final = 8
#: Points per pool: a pool of many buckets gets fewer per bucket (at least 1), so a report
#: stays small (its cluster's status on the hub holds every pool's).
MAX_POOL_POINTS: Final = 256
#: Beyond this many distinct rooms in a bucket, contiguous runs (in (CPU, memory) order) are
#: merged first, so the pairwise merge below stays small.
_PREMERGE: Final = 24
#: The API's bounds on a point's values (`HostPoint`): larger rooms read as these.
MAX_MILLI_CPU: Final = 10**9
MAX_MEMORY_BYTES: Final = 2**50

#: (free millicores, free memory bytes).
Room = tuple[int, int]
#: (millicores, memory bytes, nodes).
Point = tuple[int, int, int]
_Key = tuple[str, str]


def allocatable(node: Mapping[str, Any]) -> Room:
    """A Node's allocatable CPU (millicores) and memory (bytes); absent reads 0."""
    status = node.get("status")
    values = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(values, Mapping):
        return (0, 0)
    return container_requests({"resources": {"requests": values}})


def bound_requests(pod: Mapping[str, Any]) -> tuple[str, Room] | None:
    """The node a pod is bound to and its requests, when it holds them there."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    node = spec.get("nodeName")
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if not isinstance(node, str) or not node or phase in ("Succeeded", "Failed"):
        return None
    return node, pod_requests(spec)


def is_daemon(pod: Mapping[str, Any]) -> bool:
    """Whether a DaemonSet owns the pod (one of its owner references is of kind DaemonSet)."""
    meta = pod.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(owners, list):
        return False
    return any(isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners)


def node_shareable(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, Room]:
    """Per named Node, its allocatable less its bound DaemonSet pods' requests (the plain
    computation)."""
    return node_rooms(nodes, (p for p in pods if is_daemon(p)))


def least(rooms: Iterable[Room]) -> Room | None:
    """The component-wise least of `rooms`; None when there is none."""
    found: Room | None = None
    for cpu, memory in rooms:
        found = (cpu, memory) if found is None else (min(found[0], cpu), min(found[1], memory))
    return found


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def _key(obj: Mapping[str, Any]) -> _Key:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name", "")))


def node_rooms(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, Room]:
    """Per named Node, its free CPU and memory (the plain computation)."""
    used: dict[str, list[int]] = {}
    for pod in pods:
        found = bound_requests(pod)
        if found is not None:
            bound, (cpu, memory) = found
            total = used.setdefault(bound, [0, 0])
            total[0] += cpu
            total[1] += memory
    rooms: dict[str, Room] = {}
    for node in nodes:
        name = _name(node)
        if name:
            cpu, memory = allocatable(node)
            taken = used.get(name, [0, 0])
            rooms[name] = (max(0, cpu - taken[0]), max(0, memory - taken[1]))
    return rooms


def _loss(a: list[int], b: list[int], scale: tuple[int, int]) -> float:
    cpu, memory = min(a[0], b[0]), min(a[1], b[1])
    return a[2] * ((a[0] - cpu) / scale[0] + (a[1] - memory) / scale[1]) + b[2] * (
        (b[0] - cpu) / scale[0] + (b[1] - memory) / scale[1]
    )


def _premerge(groups: list[list[int]]) -> list[list[int]]:
    """Contiguous runs (in (CPU, memory) order, about equal in nodes) as their minimum."""
    total = sum(g[2] for g in groups)
    merged: list[list[int]] = []
    run: list[int] | None = None
    seen = 0
    for group in groups:
        if run is None:
            run = list(group)
        else:
            run = [min(run[0], group[0]), min(run[1], group[1]), run[2] + group[2]]
        seen += group[2]
        if seen * _PREMERGE >= total * (len(merged) + 1):
            merged.append(run)
            run = None
    if run is not None:
        merged.append(run)
    return merged


def host_points(rooms: Iterable[Room], limit: int = MAX_POINTS) -> tuple[Point, ...]:
    """The rooms of a bucket's nodes as at most `limit` points, sorted (see the module
    docstring): exact while there are at most `limit` distinct rooms, else merged into
    component-wise minima, least room lost first (ties: the first pair in sorted order)."""
    counts = Counter(
        (min(max(0, c), MAX_MILLI_CPU), min(max(0, m), MAX_MEMORY_BYTES)) for c, m in rooms
    )
    groups = [[c, m, n] for (c, m), n in sorted(counts.items())]
    if len(groups) > limit:
        if len(groups) > _PREMERGE:
            groups = _premerge(groups)
        scale = (max(g[0] for g in groups) or 1, max(g[1] for g in groups) or 1)
        while len(groups) > limit:
            best: tuple[float, int, int] | None = None
            for i in range(len(groups)):
                for j in range(i + 1, len(groups)):
                    cost = _loss(groups[i], groups[j], scale)
                    if best is None or cost < best[0]:
                        best = (cost, i, j)
            assert best is not None
            _, i, j = best
            a, b = groups[i], groups[j]
            groups[i] = [min(a[0], b[0]), min(a[1], b[1]), a[2] + b[2]]
            del groups[j]
    merged: Counter[Room] = Counter()
    for c, m, n in groups:
        merged[(c, m)] += n
    return tuple((c, m, n) for (c, m), n in sorted(merged.items()))


def _vector(free: Mapping[Any, int]) -> tuple[tuple[str, int], ...]:
    """A free-device mapping as a key, zero counts dropped (a bucket lists every driver)."""
    return tuple(sorted((str(d), n) for d, n in free.items() if n))


def with_host_room(
    pool: ObservedPool, free: Mapping[str, Mapping[Any, int]], room: Callable[[str], Room]
) -> ObservedPool:
    """`pool` with each bucket's points: its nodes (by their free devices in `free`, as
    `FreeDeviceTable.free_devices` gives them) and their `room`. Nodes a bucket counts but
    `free` does not name read 0 free; a withheld histogram stays withheld."""
    if pool.free_devices is None:
        return pool
    by_vector: dict[tuple[tuple[str, int], ...], list[Room]] = {}
    for name, devices in free.items():
        by_vector.setdefault(_vector(devices), []).append(room(name))
    buckets = []
    limit = max(1, min(MAX_POINTS, MAX_POOL_POINTS // max(1, len(pool.free_devices))))
    for bucket in pool.free_devices:
        rooms = sorted(by_vector.get(_vector(bucket.free), ()))[: bucket.nodes]
        rooms.extend((0, 0) for _ in range(bucket.nodes - len(rooms)))
        points = tuple(HostRoom(c, m, n) for c, m, n in host_points(rooms, limit))
        buckets.append(Bucket(bucket.free, bucket.nodes, points))
    return replace(pool, free_devices=tuple(buckets))


class HostRoomTable:
    """Each node's free CPU and memory from the cluster's changes (see the module
    docstring), and the pools' observations with their points (`annotate`)."""

    def __init__(self) -> None:
        self._allocatable: dict[str, Room] = {}
        #: Per bound, live pod (namespace, name): its node and requests, and whether a
        #: DaemonSet owns it.
        self._pods: dict[_Key, tuple[tuple[str, Room], bool]] = {}
        self._used: dict[str, list[int]] = {}
        #: Per node, its DaemonSet pods' requests (`shareable`).
        self._daemons: dict[str, list[int]] = {}
        #: Nodes whose room moved since the last `annotate`.
        self._dirty: set[str] = set()
        #: Per pool name: the observation annotated, its nodes, and the annotated one.
        self._pools: dict[str, tuple[ObservedPool, frozenset[str], ObservedPool]] = {}

    def apply(self, changes: Iterable[Any]) -> None:
        """Take in the changes of Nodes and Pods (others are ignored), oldest first."""
        for change in changes:
            deleted = change.type is ChangeType.DELETED
            self._take(change.kind, change.obj, deleted)

    def relist(self, listed: Mapping[Kind, Iterable[Mapping[str, Any]]]) -> None:
        """Hold exactly the Nodes and Pods listed."""
        self._dirty |= set(self._allocatable) | set(self._used)
        self._allocatable, self._pods, self._used, self._daemons = {}, {}, {}, {}
        for kind in (NODE, POD):
            for obj in listed.get(kind, ()):
                self._take(kind, obj, deleted=False)

    def _take(self, kind: Kind, obj: Mapping[str, Any], deleted: bool) -> None:
        if kind == NODE:
            name = _name(obj)
            if deleted:
                self._allocatable.pop(name, None)
            else:
                self._allocatable[name] = allocatable(obj)
            self._dirty.add(name)
        elif kind == POD:
            key = _key(obj)
            old = self._pods.pop(key, None)
            if old is not None:
                self._count(*old, -1)
            found = None if deleted else bound_requests(obj)
            if found is not None:
                self._pods[key] = (found, is_daemon(obj))
                self._count(found, is_daemon(obj), 1)

    def _count(self, held: tuple[str, Room], daemon: bool, by: int) -> None:
        node, (cpu, memory) = held
        for table in (self._used, self._daemons) if daemon else (self._used,):
            total = table.setdefault(node, [0, 0])
            total[0] += by * cpu
            total[1] += by * memory
            if total == [0, 0]:
                del table[node]
        self._dirty.add(node)

    def room(self, node: str) -> Room:
        """The node's free CPU and memory (a node without a Node object: none)."""
        cpu, memory = self._allocatable.get(node, (0, 0))
        used = self._used.get(node)
        if used is None:
            return (max(0, cpu), max(0, memory))
        return (max(0, cpu - used[0]), max(0, memory - used[1]))

    def shareable(self, node: str) -> Room:
        """The node's allocatable less its DaemonSet pods' requests (never negative)."""
        cpu, memory = self._allocatable.get(node, (0, 0))
        used = self._daemons.get(node, (0, 0))
        return (max(0, cpu - used[0]), max(0, memory - used[1]))

    def shareables(self) -> dict[str, Room]:
        """Every named Node's `shareable` (what `node_shareable` gives for the objects fed)."""
        return {name: self.shareable(name) for name in self._allocatable if name}

    def rooms(self) -> dict[str, Room]:
        """Every named Node's room (what `node_rooms` gives for the objects fed)."""
        return {name: self.room(name) for name in self._allocatable if name}

    def annotate(
        self,
        result: ObservationResult,
        free_devices: Callable[[str], Mapping[str, Mapping[Any, int]]],
    ) -> ObservationResult:
        """`result` with every pool's buckets carrying their points (`with_host_room`);
        a pool whose observation and nodes' rooms are unchanged keeps its last one."""
        dirty, self._dirty = self._dirty, set()
        pools: list[ObservedPool] = []
        kept: dict[str, tuple[ObservedPool, frozenset[str], ObservedPool]] = {}
        for pool in result.pools:
            last = self._pools.get(pool.name)
            if last is not None and (last[0] is pool or last[0] == pool) and not last[1] & dirty:
                entry = last
            else:
                free = free_devices(pool.name)
                annotated = with_host_room(pool, free, self.room)
                shared = least(
                    self.shareable(name)
                    for name in free
                    if self._allocatable.get(name, (0, 0)) != (0, 0)
                )
                annotated = replace(annotated, shareable=shared)
                entry = (pool, frozenset(free), annotated)
            kept[pool.name] = entry
            pools.append(entry[2])
        self._pools = kept
        return replace(result, pools=tuple(pools))
