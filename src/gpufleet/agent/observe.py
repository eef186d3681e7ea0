"""The cluster agent's observation core: from DRA objects to pool and replica observations.

`observe(objects, clock, config, now) -> (ObservationResult, clock)` is a pure, deterministic
function of the workload cluster's objects as the Kubernetes API returns them (plain camelCase
dicts), the previous allocation clock, the configuration and the time. It does no I/O, reads no
clock and imports only the standard library and `gpufleet.core`. A caller that observes the same
cluster again and again passes an `ObserveCache`: objects it saw before (the same objects, as a
store view hands them out) are not read again, and what they gave is not computed again. The
result is the same with or without it.

What is modelled
----------------
- **Pools** are the distinct values of the pool label (`gpufleet.io/pool`) over Nodes, plus every
  pool a fleet ModelReplica pins a member to (a pool with no nodes yet is observed as empty).
- **Published devices.** A device is identified by (driver, DRA pool, device name), as in
  `resource.k8s.io/v1`. Only the newest `spec.pool.generation` of each (driver, DRA pool) counts,
  and only once all `spec.pool.resourceSliceCount` slices of that generation are present. A DRA
  pool whose newest generation is incomplete, lists a device name twice, or is malformed is
  *unusable*, as kube-scheduler's allocator treats it: the nodes it names get that driver with
  nothing free. Devices are attributed to nodes by `spec.nodeName` (or, with
  `perDeviceNodeSelection`, by the device's `nodeName`); devices available through a node
  selector or to all nodes are not node-local and are not counted (reported `SliceNotNodeLocal`).
- **Taken devices.** Every device named by an allocated ResourceClaim (`status.allocation`) of any
  tenant is taken, whatever the state of the pods that use it: a terminating pod's claim stays
  taken until it is deallocated. A device listed by two claims (or for admin access) is taken once.
  A claim naming a device no usable slice publishes (`UnknownDevice`) leaves its node with
  nothing free of that driver, when the node can be told (from the DRA pool's slices, or the
  allocation's node selector).
- **Free devices** per node and driver = published − taken, never negative. A node that is
  cordoned, NotReady, deleting, or carries a NoSchedule/NoExecute taint the fleet's pods do not
  tolerate, and a node with no usable published device (`NoSlices`), is counted in
  `observedNodes` with nothing free. Exactly one exclusion reason is reported per node, the first
  of Cordoned, NotReady, Deleting, Tainted:<key> (smallest key), NoSlices.
- **Histogram.** Per pool, nodes are grouped by their free-device vector over the pool's drivers
  (the union of drivers seen on its nodes, absent drivers filled with zero). More buckets than
  the cap means no histogram (the scheduler falls back to whole-node accounting for that pool).
- **Allocation clock.** The first time each claim (by uid) is seen allocated; forgotten once the
  claim is released or gone. After a restart the clock is empty and every allocated claim is
  stamped `now`. A pool's `lastAllocationTime` is the latest over claims holding devices on its
  nodes; a replica's, per pool, the latest over the allocated claims of all its pods.
- **Replica pods.** Pods belong to a replica by namespace and the `gpufleet.io/replica` label;
  engine and role from `gpufleet.io/engine` and `gpufleet.io/member`. Live pods are neither
  Succeeded, Failed nor deleting; a pod holds allocated claims when it names at least one claim
  and every claim it names exists and is allocated. Only pods of the replica's current
  `metadata.generation` are counted. `podsScheduled` holds when every claiming member has at
  least copies × pods-per-copy live allocated pods.

Which way each choice errs
--------------------------
Every uncertainty makes the observation look *fuller* or makes a replica look *less accounted
for*, so the scheduler charges more, never less: unpublished or ambiguous devices are not free;
unknown claims empty their node; a missing Ready condition is NotReady; a malformed taint is
untolerated; claims of old-generation or finishing pods still raise the replica's allocation
time; an empty clock stamps `now`. Bad input never raises: it is handled this way and reported as
a `Problem` (per pool when it touches a pool's nodes, otherwise on the whole result).

What is not modelled
--------------------
Shared counters (MIG partitions) and multi-allocation devices are counted by device name; device
taints; DeviceClass selectors (every published device of a driver counts); device-plugin
allocations (only visible as `extendedResources`); `ScaleUpBlocked` (not derivable from these
objects).
"""

from __future__ import annotations

import bisect
import functools
import json
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

from gpufleet.core import labels
from gpufleet.core.model import (
    MAX_HISTOGRAM_BUCKETS,
    Bucket,
    DriverName,
    MemberPods,
    PoolName,
    PoolObservation,
    ReplicaPoolStatus,
    Role,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

#: A raw Kubernetes object as the API returns it (camelCase, possibly malformed).
RawObject = Mapping[str, Any]

POOL_LABEL: Final = labels.POOL
REPLICA_LABEL: Final = labels.REPLICA
ENGINE_LABEL: Final = labels.ENGINE
MEMBER_LABEL: Final = labels.MEMBER
REPLICA_GENERATION_LABEL: Final = labels.REPLICA_GENERATION

#: How many object names a problem's message lists; the count says how many there are.
_MAX_NAMES_IN_MESSAGE: Final = 5

_V = TypeVar("_V")


_R = TypeVar("_R")


# --- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """The workload cluster's objects as listed from the API, plus the fleet replicas for it."""

    nodes: tuple[RawObject, ...] = ()
    slices: tuple[RawObject, ...] = ()
    claims: tuple[RawObject, ...] = ()
    pods: tuple[RawObject, ...] = ()
    replicas: tuple[RawObject, ...] = ()


def _default_tolerations() -> tuple[Toleration, ...]:
    return (
        Toleration(
            key="nvidia.com/gpu",
            operator=TolerationOperator.EXISTS,
            effect=TaintEffect.NO_SCHEDULE,
        ),
    )


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    #: The Node label whose value names the node's pool.
    pool_label: str = POOL_LABEL
    #: The taints the fleet's pods tolerate; a node with any other NoSchedule/NoExecute taint
    #: contributes no free devices.
    tolerations: tuple[Toleration, ...] = field(default_factory=_default_tolerations)
    #: A pool with more histogram buckets than this reports no histogram.
    max_histogram_buckets: int = MAX_HISTOGRAM_BUCKETS


@dataclass(frozen=True, slots=True)
class AllocationClock:
    """When each ResourceClaim (by uid) was first seen allocated, on the agent's clock.

    Immutable: `observe` returns a new clock. Lives in the agent's memory only; a restarted agent
    starts from `AllocationClock()`, which stamps everything seen `now` (errs toward charging).
    """

    first_seen: Mapping[str, datetime] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.first_seen, MappingProxyType):
            object.__setattr__(self, "first_seen", MappingProxyType(dict(self.first_seen)))

    def __len__(self) -> int:
        return len(self.first_seen)


# --- outputs ----------------------------------------------------------------------------


class ExclusionReason(StrEnum):
    """Why a node contributes no free devices; one per node, first in this order."""

    CORDONED = "Cordoned"
    NOT_READY = "NotReady"
    DELETING = "Deleting"
    #: Reported as `Tainted:<taint key>`.
    TAINTED = "Tainted"
    NO_SLICES = "NoSlices"


class ProblemCode(StrEnum):
    """Input the agent could not take at face value. Each is handled conservatively."""

    #: The newest generation of a DRA pool has fewer (or more) slices than resourceSliceCount:
    #: its devices are treated as unpublished.
    INCOMPLETE_SLICE_GENERATION = "IncompleteSliceGeneration"
    #: A DRA pool's newest generation lists the same device name twice: the DRA pool is unusable.
    DUPLICATE_DEVICE = "DuplicateDevice"
    #: A ResourceSlice lacks a driver, pool, generation, slice count or device name, or has the
    #: wrong types: its DRA pool (if known) is unusable, otherwise the slice is ignored.
    MALFORMED_SLICE = "MalformedSlice"
    #: A ResourceSlice without a nodeName (node selector, all nodes): its devices are not counted.
    SLICE_NOT_NODE_LOCAL = "SliceNotNodeLocal"
    #: An allocated claim names a device no usable slice publishes: its node has nothing free of
    #: that driver.
    UNKNOWN_DEVICE = "UnknownDevice"
    #: An allocated claim whose results cannot be read: its node (if known) has nothing free.
    MALFORMED_CLAIM = "MalformedClaim"
    #: An allocated claim without metadata.uid: its allocation time is always `now`.
    CLAIM_WITHOUT_UID = "ClaimWithoutUID"
    #: An allocatable quantity that is not a whole number: left out of extendedResources.
    MALFORMED_QUANTITY = "MalformedQuantity"
    #: A Node field of the wrong type: the node is treated as unusable for that field's check.
    MALFORMED_NODE = "MalformedNode"
    #: A Pod field of the wrong type: the pod is not counted as live or allocated.
    MALFORMED_POD = "MalformedPod"
    #: A ModelReplica the agent cannot read fully: its pods are not counted as scheduled.
    MALFORMED_REPLICA = "MalformedReplica"
    #: Two objects of one kind with the same name: one is kept, chosen by content.
    DUPLICATE_OBJECT = "DuplicateObject"


@dataclass(frozen=True, slots=True)
class Problem:
    """`count` objects had problem `code`; `message` names up to five of them, sorted."""

    code: ProblemCode
    message: str
    count: int


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class Condition:
    """A Kubernetes-style status condition (without lastTransitionTime: the writer sets it)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


HISTOGRAM_AVAILABLE: Final = "HistogramAvailable"
REASON_OBSERVED: Final = "Observed"
REASON_TOO_MANY_BUCKETS: Final = "TooManyBuckets"


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """One node as the agent saw it. Not pushed; for explaining a histogram."""

    name: str
    pool: PoolName
    published: Mapping[DriverName, int]
    free: Mapping[DriverName, int]
    excluded: str | None = None


@dataclass(frozen=True, slots=True)
class ObservedPool:
    """A PoolObservation's status, field for field (the writer adds agent and observedAt)."""

    name: PoolName
    observed_nodes: int
    #: The histogram, sorted by free vector; None when over the bucket cap.
    free_devices: tuple[Bucket, ...] | None
    last_allocation_time: datetime | None
    excluded_nodes: Mapping[str, int]
    extended_resources: Mapping[str, int]
    #: How many buckets the histogram has (also when it is withheld for being over the cap).
    bucket_count: int
    problems: tuple[Problem, ...] = ()

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """HistogramAvailable, then one True condition per problem code (type = code)."""
        if self.free_devices is None:
            available = Condition(
                HISTOGRAM_AVAILABLE,
                ConditionStatus.FALSE,
                REASON_TOO_MANY_BUCKETS,
                f"{self.bucket_count} buckets exceed the cap",
            )
        else:
            available = Condition(
                HISTOGRAM_AVAILABLE,
                ConditionStatus.TRUE,
                REASON_OBSERVED,
                f"{self.bucket_count} buckets",
            )
        return (available, *(_problem_condition(p) for p in self.problems))

    def to_core(self, observed_at: datetime | None = None) -> PoolObservation:
        """The core's view of this observation (what the scheduler reads)."""
        return PoolObservation(
            observed_nodes=self.observed_nodes,
            buckets=self.free_devices,
            observed_at=observed_at,
            last_allocation_time=self.last_allocation_time,
            excluded_nodes=self.excluded_nodes,
            extended_resources=self.extended_resources,
            unusable_reason="" if self.free_devices is not None else REASON_TOO_MANY_BUCKETS,
        )

    def to_status(self) -> dict[str, Any]:
        """The PoolObservation `status` body (docs/design/shapes.md), minus agent/observedAt."""
        status: dict[str, Any] = {"observedNodes": self.observed_nodes}
        if self.free_devices is not None:
            status["freeDevices"] = [
                {"free": dict(b.free), "nodes": b.nodes} for b in self.free_devices
            ]
        if self.last_allocation_time is not None:
            status["lastAllocationTime"] = format_time(self.last_allocation_time)
        status["excludedNodes"] = dict(self.excluded_nodes)
        status["extendedResources"] = dict(self.extended_resources)
        status["conditions"] = [_condition_body(c) for c in self.conditions]
        return status


@dataclass(frozen=True, slots=True)
class ObservedReplica:
    """A ReplicaObservation's status, field for field (the writer adds agent and observedAt)."""

    namespace: str
    name: str
    observed_generation: int | None
    pods_scheduled: bool
    pools: tuple[ReplicaPoolStatus, ...]
    problems: tuple[Problem, ...] = ()
    #: Conditions set by the agent beyond observing (the policy's refusal: `agent.admission`),
    #: after those of the problems.
    conditions: tuple[Condition, ...] = ()

    def to_status(self) -> dict[str, Any]:
        """The ReplicaObservation `status` body, minus agent/observedAt."""
        pools: list[dict[str, Any]] = []
        for p in self.pools:
            body: dict[str, Any] = {"name": p.pool}
            if p.last_allocation_time is not None:
                body["lastAllocationTime"] = format_time(p.last_allocation_time)
            body["members"] = [
                {
                    "engine": m.engine,
                    "role": str(m.role),
                    "livePods": m.live_pods,
                    "allocatedPods": m.allocated_pods,
                }
                for m in p.members
            ]
            pools.append(body)
        status: dict[str, Any] = {}
        if self.observed_generation is not None:
            status["observedGeneration"] = self.observed_generation
        status["podsScheduled"] = self.pods_scheduled
        status["pools"] = pools
        if self.problems or self.conditions:
            status["conditions"] = [
                *(_condition_body(_problem_condition(p)) for p in self.problems),
                *(_condition_body(c) for c in self.conditions),
            ]
        return status


@dataclass(frozen=True, slots=True)
class ObservationResult:
    #: One per pool, sorted by name.
    pools: tuple[ObservedPool, ...]
    #: One per fleet replica, sorted by (namespace, name).
    replicas: tuple[ObservedReplica, ...]
    #: Problems that touch no pool's nodes (e.g. a slice without a nodeName), sorted by code.
    problems: tuple[Problem, ...]
    #: Every pooled node, sorted by name (for explanations; not pushed).
    nodes: tuple[ObservedNode, ...]


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as Kubernetes writes times."""
    text = t.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _problem_condition(p: Problem) -> Condition:
    return Condition(str(p.code), ConditionStatus.TRUE, str(p.code), p.message)


def _condition_body(c: Condition) -> dict[str, str]:
    return {"type": c.type, "status": str(c.status), "reason": c.reason, "message": c.message}


# --- small readers for untrusted dicts --------------------------------------------------


def _map(value: object) -> Mapping[str, Any]:
    # `type(...) is dict` first: the ABC check is slow and almost every value is a dict.
    return value if type(value) is dict or isinstance(value, Mapping) else _EMPTY


def _list(value: object) -> list[Any] | tuple[Any, ...]:
    return value if isinstance(value, list | tuple) else ()


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    """An int that is not a bool, or a decimal string of one; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})

_QUANTITY = re.compile(r"^\s*(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\s*$")
_MULTIPLIERS: Final = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_count_quantity(value: object) -> int | None:
    """A whole-number Kubernetes quantity (`8`, `2k`, `1Ki`) as an int; None if malformed.

    Extended resources are whole numbers, so fractions, exponents and milli-units are refused.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value)
    if m is None:
        return None
    return int(m.group(1)) * _MULTIPLIERS[m.group(2)]


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def _ns_name(obj: RawObject) -> tuple[str, str]:
    meta = _map(obj.get("metadata"))
    ns = meta.get("namespace")
    name = meta.get("name")
    return (ns if type(ns) is str else _str(ns)), (name if type(name) is str else _str(name))


# --- problem collection -----------------------------------------------------------------


class _Problems:
    """Collects problems by scope (a pool, or None for the whole cluster) and code."""

    def __init__(self) -> None:
        self._by_scope: dict[str | None, dict[ProblemCode, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )

    def __bool__(self) -> bool:
        return bool(self._by_scope)

    def add(self, scope: str | None, code: ProblemCode, name: str) -> None:
        self._by_scope[scope][code].add(name)

    def merge(self, other: _Problems) -> None:
        """Add every problem `other` holds (what a cached read found, reported again)."""
        for scope, by_code in other._by_scope.items():
            mine = self._by_scope[scope]
            for code, names in by_code.items():
                mine[code].update(names)

    def add_for_pools(self, pools: Iterable[str], code: ProblemCode, name: str) -> None:
        """Report on each pool in `pools`, or on the cluster when there are none."""
        any_pool = False
        for pool in pools:
            any_pool = True
            self.add(pool, code, name)
        if not any_pool:
            self.add(None, code, name)

    def get(self, scope: str | None) -> tuple[Problem, ...]:
        by_code = self._by_scope.get(scope)
        if not by_code:
            return ()
        out = []
        for code in sorted(by_code):
            names = sorted(by_code[code])
            shown = ", ".join(names[:_MAX_NAMES_IN_MESSAGE])
            more = len(names) - _MAX_NAMES_IN_MESSAGE
            suffix = f" and {more} more" if more > 0 else ""
            out.append(Problem(code, f"{len(names)}: {shown}{suffix}", len(names)))
        return tuple(out)


_MALFORMED: Final = {
    "node": ProblemCode.MALFORMED_NODE,
    "slice": ProblemCode.MALFORMED_SLICE,
    "claim": ProblemCode.MALFORMED_CLAIM,
    "pod": ProblemCode.MALFORMED_POD,
    "replica": ProblemCode.MALFORMED_REPLICA,
}


def _mappings(objects: Iterable[object], kind: str, problems: _Problems) -> list[RawObject]:
    """The objects that are mappings; anything else is reported and dropped."""
    out: list[RawObject] = []
    for obj in objects:
        if type(obj) is dict or isinstance(obj, Mapping):
            out.append(obj)
        else:
            problems.add(None, _MALFORMED[kind], f"{kind} that is a {type(obj).__name__}")
    return out


def _dedupe(
    objects: Iterable[RawObject], key: Any, kind: str, problems: _Problems
) -> dict[Any, RawObject]:
    """Objects by `key(obj)`; of duplicates the one with the smallest canonical JSON is kept."""
    out: dict[Any, RawObject] = {}
    for obj in objects:
        k = key(obj)
        prev = out.get(k)
        if prev is None:
            out[k] = obj
            continue
        problems.add(None, ProblemCode.DUPLICATE_OBJECT, f"{kind} {k}")
        if _canonical(obj) < _canonical(prev):
            out[k] = obj
    return out


def _read_each(
    objects: Iterable[object],
    kind: str,
    problems: _Problems,
    memo: IdentityMemo[_R],
    read: Callable[[RawObject], _R],
    key_of: Callable[[_R], Any],
) -> tuple[dict[Any, _R], dict[Any, RawObject]]:
    """`_dedupe(_mappings(objects))` by the key `key_of` finds in what `read` made of each
    object (read once per object: `memo`): what was read of each kept object, and the object,
    by key."""
    infos: dict[Any, _R] = {}
    kept: dict[Any, RawObject] = {}
    read = memo.reader(read)
    for obj in objects:
        if not (type(obj) is dict or isinstance(obj, Mapping)):
            problems.add(None, _MALFORMED[kind], f"{kind} that is a {type(obj).__name__}")
            continue
        info = read(obj)
        k = key_of(info)
        prev = kept.get(k)
        if prev is None:
            infos[k], kept[k] = info, obj
            continue
        problems.add(None, ProblemCode.DUPLICATE_OBJECT, f"{kind} {k}")
        if _canonical(obj) < _canonical(prev):
            infos[k], kept[k] = info, obj
    return infos, kept


# --- nodes ------------------------------------------------------------------------------


def _tolerated(key: str, value: str, effect: str, tolerations: tuple[Toleration, ...]) -> bool:
    """Kubernetes toleration matching: Exists with an empty key tolerates every taint."""
    for t in tolerations:
        if t.effect is not None and t.effect != effect:
            continue
        if t.operator is TolerationOperator.EXISTS:
            if t.key == "" or t.key == key:
                return True
        elif t.key != "" and t.key == key and t.value == value:
            return True
    return False


def _exclusion(
    node: RawObject, name: str, config: ObserveConfig, problems: _Problems, pool: str
) -> str | None:
    """The first exclusion reason that applies, ignoring NoSlices (decided after slices)."""
    meta = _map(node.get("metadata"))
    spec = _map(node.get("spec"))
    unschedulable = spec.get("unschedulable")
    if unschedulable is True:
        return str(ExclusionReason.CORDONED)
    if unschedulable not in (None, False):
        problems.add(pool, ProblemCode.MALFORMED_NODE, f"{name}: spec.unschedulable")
        return str(ExclusionReason.CORDONED)
    is_ready = False
    for cond in _list(_map(node.get("status")).get("conditions")):
        cond = _map(cond)
        if cond.get("type") == "Ready":
            is_ready = cond.get("status") == "True"
            break
    if not is_ready:
        return str(ExclusionReason.NOT_READY)
    if meta.get("deletionTimestamp") is not None:
        return str(ExclusionReason.DELETING)
    untolerated: list[str] = []
    for taint in _list(spec.get("taints")):
        if not (type(taint) is dict or isinstance(taint, Mapping)) or not isinstance(
            taint.get("key"), str
        ):
            problems.add(pool, ProblemCode.MALFORMED_NODE, f"{name}: spec.taints")
            untolerated.append(_str(_map(taint).get("key")))
            continue
        effect = taint.get("effect")
        if effect not in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE):
            continue  # PreferNoSchedule does not repel
        key = taint["key"]
        if not _tolerated(key, _str(taint.get("value")), effect, config.tolerations):
            untolerated.append(key)
    if untolerated:
        return f"{ExclusionReason.TAINTED}:{min(untolerated)}"
    return None


def _add_extended_resources(
    node: RawObject, name: str, totals: dict[str, int], problems: _Problems, pool: str
) -> None:
    allocatable = _map(_map(node.get("status")).get("allocatable"))
    for key, value in allocatable.items():
        if not isinstance(key, str) or "/" not in key or key.startswith("hugepages-"):
            continue
        count = parse_count_quantity(value)
        if count is None:
            problems.add(pool, ProblemCode.MALFORMED_QUANTITY, f"{name}: {key}={value!r}")
            continue
        totals[key] = totals.get(key, 0) + count


@dataclass(frozen=True, slots=True)
class _NodeInfo:
    """What one pooled Node says, read once per object (`ObserveCache`)."""

    pool: str
    #: "" when the node has no name (it counts, but nothing can be published for it).
    name: str
    #: The exclusion reason, ignoring NoSlices (decided after slices).
    excluded: str | None
    extended: Mapping[str, int]
    #: The node's own problems; reported only for the node kept among duplicates.
    problems: _Problems | None


@dataclass(frozen=True, slots=True, eq=False)
class _NodeTable:
    """The cluster's pooled nodes as the Node objects say (everything but the slices)."""

    #: Named pooled node -> its pool, by name.
    node_pool: Mapping[str, str]
    #: Named pooled node -> its exclusion reason (NoSlices aside).
    excluded: Mapping[str, str | None]
    #: Pool -> its named nodes, sorted.
    pool_nodes: Mapping[str, tuple[str, ...]]
    #: Pool -> how many of its nodes have no name.
    unnamed: Mapping[str, int]
    #: Pool -> extended resource -> total over its nodes.
    extended: Mapping[str, Mapping[str, int]]
    #: Every pool a node is in (named or not).
    pools: frozenset[str]
    problems: _Problems


def _read_node_table(
    objects: Iterable[object], config: ObserveConfig, memo: IdentityMemo[_NodeInfo | None]
) -> _NodeTable:
    """Pool membership, exclusions (except NoSlices) and extended resources. A pooled node
    without a name still counts: nothing can be published for it."""
    problems = _Problems()
    pool_names: set[str] = set()
    extended: dict[str, dict[str, int]] = defaultdict(dict)
    unnamed_per_pool: dict[str, int] = defaultdict(int)
    named: dict[str, RawObject] = {}
    infos: dict[int, _NodeInfo] = {}
    read_node = memo.reader(functools.partial(_read_node, config=config))
    for node in _mappings(objects, "node", problems):
        info = read_node(node)
        if info is None:
            continue
        pool_names.add(info.pool)
        if not info.name:
            unnamed_per_pool[info.pool] += 1
            problems.add(info.pool, ProblemCode.MALFORMED_NODE, "<unnamed>: metadata.name")
            continue
        infos[id(node)] = info
        prev = named.get(info.name)
        if prev is None:
            named[info.name] = node
            continue
        problems.add(None, ProblemCode.DUPLICATE_OBJECT, f"node {info.name}")
        if _canonical(node) < _canonical(prev):
            named[info.name] = node
    node_pool: dict[str, str] = {}
    node_excluded: dict[str, str | None] = {}
    pool_nodes: dict[str, list[str]] = defaultdict(list)
    for name in sorted(named):
        info = infos[id(named[name])]
        node_pool[name] = info.pool
        node_excluded[name] = info.excluded
        pool_nodes[info.pool].append(name)
        totals = extended[info.pool]
        for key, count in info.extended.items():
            totals[key] = totals.get(key, 0) + count
        if info.problems is not None:
            problems.merge(info.problems)
    return _NodeTable(
        node_pool=node_pool,
        excluded=node_excluded,
        pool_nodes={pool: tuple(names) for pool, names in pool_nodes.items()},
        unnamed=dict(unnamed_per_pool),
        extended={pool: dict(sorted(totals.items())) for pool, totals in extended.items()},
        pools=frozenset(pool_names),
        problems=problems,
    )


def _read_node(node: RawObject, config: ObserveConfig) -> _NodeInfo | None:
    """The node's pool, exclusion and extended resources; None when it is in no pool."""
    meta = _map(node.get("metadata"))
    pool = _map(meta.get("labels")).get(config.pool_label)
    if not isinstance(pool, str) or not pool:
        return None
    name = _str(meta.get("name"))
    if not name:
        return _NodeInfo(pool, "", None, {}, None)
    problems = _Problems()
    excluded = _exclusion(node, name, config, problems, pool)
    extended: dict[str, int] = {}
    _add_extended_resources(node, name, extended, problems, pool)
    return _NodeInfo(pool, name, excluded, extended, problems if problems else None)


# --- slices -----------------------------------------------------------------------------

_DevKey = tuple[str, str, str]  # (driver, DRA pool, device name)


@dataclass(slots=True)
class _DraPool:
    """The slices of one (driver, DRA pool) at its newest generation."""

    generation: int
    slices: list[RawObject] = field(default_factory=list)
    slice_counts: set[int] = field(default_factory=set)
    is_malformed: bool = False


class _Inventory:
    """Published devices by node, and which (node, driver) pairs have nothing free."""

    def __init__(self) -> None:
        #: (driver, DRA pool, device) -> node
        self.device_node: dict[_DevKey, str] = {}
        #: node -> driver -> published device count
        self.published: dict[str, dict[str, int]] = defaultdict(dict)
        #: node -> drivers with nothing free on that node
        self.poisoned: dict[str, set[str]] = defaultdict(set)
        #: nodes with nothing free of any driver
        self.poisoned_all: set[str] = set()
        #: (driver, DRA pool) -> nodes its newest slices name
        self.dra_pool_nodes: dict[tuple[str, str], set[str]] = defaultdict(set)
        #: (driver, DRA pool) pairs whose devices are not counted
        self.unusable: set[tuple[str, str]] = set()

    def working_copy(self) -> _Inventory:
        """A copy whose poisoned nodes can grow (claims add to them) without changing this
        one; the rest is only read once built, so it is shared."""
        inv = _Inventory()
        inv.device_node = self.device_node
        inv.published = self.published
        inv.poisoned = defaultdict(set, {n: set(d) for n, d in self.poisoned.items()})
        inv.poisoned_all = set(self.poisoned_all)
        inv.dra_pool_nodes = self.dra_pool_nodes
        inv.unusable = self.unusable
        return inv


def _slice_nodes(spec: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(nodeName, perDeviceNodeSelection) of a slice."""
    node = spec.get("nodeName")
    per_device = spec.get("perDeviceNodeSelection") is True
    return (node if isinstance(node, str) and node else None), per_device


def _build_inventory(
    slices: Iterable[RawObject], node_pool: Mapping[str, str], problems: _Problems
) -> _Inventory:
    inv = _Inventory()

    def pools_of(nodes: Iterable[str]) -> set[str]:
        return {node_pool[n] for n in nodes if n in node_pool}

    # Group by (driver, DRA pool), keeping only the newest generation.
    groups: dict[tuple[str, str], _DraPool] = {}
    malformed: dict[tuple[str, str], list[RawObject]] = defaultdict(list)
    for s in slices:
        meta = _map(s.get("metadata"))
        spec = _map(s.get("spec"))
        name = _str(meta.get("name")) or "<unnamed>"
        driver = spec.get("driver")
        pool = _map(spec.get("pool"))
        pool_name = pool.get("name")
        generation = _int(pool.get("generation"))
        count = _int(pool.get("resourceSliceCount"))
        if not isinstance(driver, str) or not driver or not isinstance(pool_name, str):
            node, _ = _slice_nodes(spec)
            problems.add_for_pools(
                pools_of([node] if node else []), ProblemCode.MALFORMED_SLICE, f"slice {name}"
            )
            continue
        key = (driver, pool_name)
        if generation is None:
            # Unreadable: it might be the newest, so the whole DRA pool is unusable.
            malformed[key].append(s)
            continue
        group = groups.get(key)
        if group is None or generation > group.generation:
            group = groups[key] = _DraPool(generation)
        elif generation < group.generation:
            continue
        group.slices.append(s)
        if count is None or count < 1:
            group.is_malformed = True
        else:
            group.slice_counts.add(count)

    for key, bad in malformed.items():
        group = groups.get(key)
        if group is None:
            group = groups[key] = _DraPool(-1)
        group.slices.extend(bad)  # for their nodeNames: those nodes get nothing free
        group.is_malformed = True
    for key in sorted(groups):
        group = groups[key]
        driver, pool_name = key
        local: list[tuple[str, str]] = []  # (device name, node)
        slice_names: set[str] = set()
        is_usable = not group.is_malformed
        problem: ProblemCode | None = ProblemCode.MALFORMED_SLICE if group.is_malformed else None
        label = f"{driver}/{pool_name}"
        for s in group.slices:
            meta = _map(s.get("metadata"))
            spec = _map(s.get("spec"))
            name = _str(meta.get("name")) or "<unnamed>"
            slice_names.add(name)
            node, per_device = _slice_nodes(spec)
            if node is not None:
                inv.dra_pool_nodes[key].add(node)
            elif not per_device:
                problems.add(None, ProblemCode.SLICE_NOT_NODE_LOCAL, f"slice {name} ({label})")
            for dev in _list(spec.get("devices")):
                dev_name = dev.get("name") if type(dev) is dict else _map(dev).get("name")
                if type(dev_name) is not str or not dev_name:
                    is_usable = False
                    problem = ProblemCode.MALFORMED_SLICE
                    continue
                dev_node = node
                if per_device:
                    dn = _map(dev).get("nodeName")
                    dev_node = dn if isinstance(dn, str) and dn else None
                    if dev_node is None:
                        problems.add(
                            None,
                            ProblemCode.SLICE_NOT_NODE_LOCAL,
                            f"slice {name} ({label}) device {dev_name}",
                        )
                    else:
                        inv.dra_pool_nodes[key].add(dev_node)
                local.append((dev_name, dev_node or ""))
        if is_usable and (
            len(group.slice_counts) != 1 or len(slice_names) != next(iter(group.slice_counts))
        ):
            is_usable = False
            problem = ProblemCode.INCOMPLETE_SLICE_GENERATION
        if is_usable:
            seen: set[str] = set()
            for dev_name, _ in local:
                if dev_name in seen:
                    is_usable = False
                    problem = ProblemCode.DUPLICATE_DEVICE
                    break
                seen.add(dev_name)
        nodes = inv.dra_pool_nodes.get(key, set())
        if not is_usable:
            inv.unusable.add(key)
            for node in nodes:
                inv.poisoned[node].add(driver)
            assert problem is not None
            problems.add_for_pools(pools_of(nodes), problem, label)
            continue
        for dev_name, dev_node in local:
            if not dev_node:
                continue  # not node-local: not counted
            inv.device_node[(driver, pool_name, dev_name)] = dev_node
            per_driver = inv.published[dev_node]
            per_driver[driver] = per_driver.get(driver, 0) + 1
    return inv


# --- claims -----------------------------------------------------------------------------


def _selector_node(allocation: Mapping[str, Any]) -> str | None:
    """The node an allocation's node selector pins to (matchFields metadata.name In [node])."""
    for term in _list(_map(allocation.get("nodeSelector")).get("nodeSelectorTerms")):
        for req in _list(_map(term).get("matchFields")):
            req = _map(req)
            values = _list(req.get("values"))
            if (
                req.get("key") == "metadata.name"
                and req.get("operator") == "In"
                and len(values) == 1
                and isinstance(values[0], str)
            ):
                return values[0]
    return None


#: An allocated ResourceClaim, read once per object (`ObserveCache`):
#: `(key, is_allocated, uid, keys)`: its (namespace, name); whether it is allocated; its uid
#: (None when missing or not a string); every result's (driver, DRA pool, device) when all
#: are well-formed, else None (the claim is then read again, in full, from the object).
#: A plain tuple of plain values, which the garbage collector stops tracking: observing
#: 40,000 claims must not leave 40,000 more objects for it to scan.
_ClaimInfo = tuple[tuple[str, str], bool, str | None, tuple[_DevKey, ...] | None]


def _read_claim(claim: RawObject) -> _ClaimInfo:
    meta = _map(claim.get("metadata"))
    ns, name = meta.get("namespace"), meta.get("name")
    key = (ns if type(ns) is str else _str(ns)), (name if type(name) is str else _str(name))
    allocation = _allocation(claim)
    if allocation is None:
        return key, False, None, None
    uid = meta.get("uid")
    if not (type(uid) is str and uid):
        uid = None
    results = _map(allocation.get("devices")).get("results", ())
    if type(results) is list and len(results) == 1 and type(results[0]) is dict:
        # The common case (one device), without the general loop.
        result = results[0]
        driver, dra_pool, device = result.get("driver"), result.get("pool"), result.get("device")
        if type(driver) is str and type(dra_pool) is str and type(device) is str:
            return key, True, uid, ((driver, dra_pool, device),)
    return key, True, uid, _device_keys(results)


def _device_keys(results: object) -> tuple[_DevKey, ...] | None:
    """Every result's (driver, DRA pool, device); None when one is malformed."""
    if not isinstance(results, list | tuple):
        return None
    found: list[_DevKey] = []
    for result in results:
        if not (type(result) is dict or isinstance(result, Mapping)):
            return None
        driver, dra_pool, device = result.get("driver"), result.get("pool"), result.get("device")
        if type(driver) is not str or type(dra_pool) is not str or type(device) is not str:
            return None
        found.append((driver, dra_pool, device))
    return tuple(found)


def _allocation(claim: RawObject) -> Mapping[str, Any] | None:
    """`status.allocation` (as a mapping), None when the claim is not allocated."""
    status = claim.get("status")
    if not (type(status) is dict or isinstance(status, Mapping)):
        return None
    allocation = status.get("allocation")
    return None if allocation is None else _map(allocation)


@dataclass(frozen=True, slots=True, eq=False)
class _ClaimsRead:
    """What the allocated claims say, given the inventory (`_read_claims`)."""

    #: (namespace, name) of each allocated claim -> its allocation time.
    allocated: Mapping[tuple[str, str], datetime]
    #: The new allocation clock: uid -> first seen allocated.
    clock: AllocationClock
    #: node -> driver -> taken devices.
    taken: Mapping[str, Mapping[str, int]]
    #: node -> latest allocation time of a claim holding devices on it.
    node_last: Mapping[str, datetime]
    #: The inventory with the nodes bad claims leave with nothing free.
    inventory: _Inventory
    problems: _Problems
    #: Whether an allocation time is `now` (a claim the clock had not seen, or without uid).
    uses_now: bool
    #: Whether an allocated claim has no uid (its allocation time is always `now`).
    has_uidless: bool


def _read_claims(
    claims: Mapping[tuple[str, str], _ClaimInfo],
    objects: Mapping[tuple[str, str], RawObject],
    inv: _Inventory,
    node_pool: Mapping[str, str],
    prev: Mapping[str, datetime],
    now: datetime,
    problems: _Problems,
) -> _ClaimsRead:
    """Allocated claims' times, the new clock, taken counts per node/driver, latest per node.

    `inv` is a working copy: claims whose devices are unknown poison more of its nodes."""
    allocated: dict[tuple[str, str], datetime] = {}
    clock: dict[str, datetime] = {}
    taken_devices: set[_DevKey] = set()
    node_last: dict[str, datetime] = {}
    device_node = inv.device_node
    unusable = inv.unusable
    uses_now = has_uidless = False

    def touch(node: str, t: datetime) -> None:
        last = node_last.get(node)
        if last is None or t > last:
            node_last[node] = t

    def pools_of(nodes: Iterable[str]) -> set[str]:
        return {node_pool[n] for n in nodes if n in node_pool}

    for claim_key, (_, is_allocated, uid, keys) in claims.items():
        if not is_allocated:
            continue
        if uid is not None:
            t = prev.get(uid)
            if t is None:
                t, uses_now = now, True
            clock[uid] = t
        else:
            t, uses_now, has_uidless = now, True, True
            ns, name = claim_key
            problems.add(None, ProblemCode.CLAIM_WITHOUT_UID, f"claim {ns}/{name}")
        allocated[claim_key] = t
        if keys is not None:
            for key in keys:
                if key not in device_node:
                    break
            else:
                # The common case (every device known), without the general bookkeeping.
                for key in keys:
                    taken_devices.add(key)
                    holder = device_node[key]
                    last = node_last.get(holder)
                    if last is None or t > last:
                        node_last[holder] = t
                continue
        label = "/".join(claim_key)
        allocation = _allocation(objects[claim_key]) or _EMPTY
        results = _map(allocation.get("devices")).get("results", ())
        if not isinstance(results, list | tuple):
            node = _selector_node(allocation)
            if node is not None:
                inv.poisoned_all.add(node)
                touch(node, t)
            problems.add_for_pools(
                pools_of([node] if node else []), ProblemCode.MALFORMED_CLAIM, f"claim {label}"
            )
            continue
        for result in results:
            if not (type(result) is dict or isinstance(result, Mapping)):
                driver = dra_pool = device = None
            else:
                driver = result.get("driver")
                dra_pool = result.get("pool")
                device = result.get("device")
            if isinstance(driver, str) and isinstance(dra_pool, str) and isinstance(device, str):
                key = (driver, dra_pool, device)
                found = device_node.get(key)
                if found is not None:
                    taken_devices.add(key)
                    touch(found, t)
                    continue
                if (driver, dra_pool) in unusable:
                    # Its nodes already have nothing free of this driver.
                    for n in inv.dra_pool_nodes.get((driver, dra_pool), ()):
                        touch(n, t)
                    continue
                code = ProblemCode.UNKNOWN_DEVICE
                msg = f"claim {label}: {driver}/{dra_pool}/{device}"
            else:
                driver = driver if isinstance(driver, str) else None
                dra_pool = dra_pool if isinstance(dra_pool, str) else None
                code = ProblemCode.MALFORMED_CLAIM
                msg = f"claim {label}"
            # Attribute to nodes: the DRA pool's nodes, else the allocation's node selector.
            nodes: set[str] = set()
            if driver is not None and dra_pool is not None:
                nodes = set(inv.dra_pool_nodes.get((driver, dra_pool), ()))
            if not nodes:
                sel = _selector_node(allocation)
                if sel is not None:
                    nodes = {sel}
            for n in nodes:
                if driver is not None:
                    inv.poisoned[n].add(driver)
                else:
                    inv.poisoned_all.add(n)
                touch(n, t)
            problems.add_for_pools(pools_of(nodes), code, msg)

    taken: dict[str, dict[str, int]] = defaultdict(dict)
    for key in taken_devices:
        per_driver = taken[device_node[key]]
        per_driver[key[0]] = per_driver.get(key[0], 0) + 1
    new_clock = AllocationClock(MappingProxyType(dict(sorted(clock.items()))))
    return _ClaimsRead(
        allocated, new_clock, dict(taken), node_last, inv, problems, uses_now, has_uidless
    )


# --- replicas ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Member:
    engine: str
    role: Role
    pool: str | None
    is_claiming: bool
    pods_needed: int
    live_pods: int = 0
    allocated_pods: int = 0


@dataclass(slots=True)
class _Replica:
    namespace: str
    name: str
    generation: int | None
    members: dict[tuple[str, str], _Member]
    #: `generation` as the pods' label spells it (a fast path for comparing).
    generation_label: str | None
    is_readable: bool
    problems: set[str] = field(default_factory=set)
    #: pool -> latest allocation time over the replica's pods' claims there
    pool_last: dict[str, datetime] = field(default_factory=dict)
    #: The pools its members name.
    pools: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def fresh(self) -> _Replica:
        """A copy with nothing counted yet: a cached read is shared between calls."""
        members = {
            key: _Member(m.engine, m.role, m.pool, m.is_claiming, m.pods_needed)
            for key, m in self.members.items()
        }
        return _Replica(
            self.namespace,
            self.name,
            self.generation,
            members,
            self.generation_label,
            self.is_readable,
            set(self.problems),
            pools=self.pools,
        )


def _read_replica(obj: RawObject) -> _Replica:
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    ns, name = _str(meta.get("namespace")), _str(meta.get("name"))
    generation = _int(meta.get("generation"))
    rep = _Replica(ns, name, generation, {}, None if generation is None else str(generation), True)
    if generation is None:
        rep.is_readable = False
        rep.problems.add("metadata.generation")
    engines = spec.get("engines")
    if not isinstance(engines, list | tuple):
        rep.is_readable = False
        rep.problems.add("spec.engines")
        engines = ()
    for i, engine in enumerate(engines):
        engine = _map(engine)
        engine_name = _str(engine.get("name"))
        copies = _int(engine.get("copies", 1))
        if not engine_name or copies is None or copies < 0:
            rep.is_readable = False
            rep.problems.add(f"spec.engines[{i}]")
            copies = copies if copies is not None and copies >= 0 else 0
        members = engine.get("members")
        if not isinstance(members, list | tuple):
            rep.is_readable = False
            rep.problems.add(f"spec.engines[{i}].members")
            members = ()
        for j, member in enumerate(members):
            member = _map(member)
            where = f"spec.engines[{i}].members[{j}]"
            try:
                role = Role(member.get("role", Role.STANDALONE))
            except ValueError:
                rep.is_readable = False
                rep.problems.add(f"{where}.role")
                continue
            worker_nodes = 1
            if role is Role.WORKER:
                wn = _int(_map(member.get("worker")).get("nodes", 1))
                if wn is None or wn < 1:
                    rep.is_readable = False
                    rep.problems.add(f"{where}.worker.nodes")
                    wn = 1
                worker_nodes = wn
            pool = member.get("nodePoolName")
            if not isinstance(pool, str) or not pool:
                rep.is_readable = False
                rep.problems.add(f"{where}.nodePoolName")
                pool = None
            requests = member.get("deviceRequests")
            is_claiming = bool(requests)
            if requests is not None and not isinstance(requests, list | tuple):
                rep.is_readable = False
                rep.problems.add(f"{where}.deviceRequests")
                is_claiming = True  # unknown: assume it claims, so it must be seen allocated
            key = (engine_name, str(role))
            if key in rep.members:
                rep.is_readable = False
                rep.problems.add(f"{where}: duplicate {engine_name}/{role}")
                continue
            rep.members[key] = _Member(engine_name, role, pool, is_claiming, copies * worker_nodes)
    rep.pools = frozenset(m.pool for m in rep.members.values() if m.pool is not None)
    return rep


def _pod_claim_names(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[tuple[str, ...], bool] | None:
    """The claim names a pod uses, and whether every claim it asks for has been created.

    None when the fields are malformed.
    """
    spec_claims = spec.get("resourceClaims") or ()
    status_claims = status.get("resourceClaimStatuses") or ()
    if not isinstance(spec_claims, list | tuple) or not isinstance(status_claims, list | tuple):
        return None
    if len(spec_claims) == 1 and len(status_claims) == 1:
        # The common case (one claim from a template), without the general bookkeeping.
        spec_entry, status_entry = spec_claims[0], status_claims[0]
        if type(spec_entry) is dict and type(status_entry) is dict:
            ref = spec_entry.get("name")
            claim_name = status_entry.get("resourceClaimName")
            if (
                type(ref) is str
                and ref == status_entry.get("name")
                and not spec_entry.get("resourceClaimName")
            ):
                return ((claim_name,) if type(claim_name) is str and claim_name else ()), True
    generated: dict[str, str | None] = {}
    for entry in status_claims:
        if not (type(entry) is dict or isinstance(entry, Mapping)) or not isinstance(
            entry.get("name"), str
        ):
            return None
        claim_name = entry.get("resourceClaimName")
        generated[entry["name"]] = claim_name if isinstance(claim_name, str) else None
    names: list[str] = []
    is_complete = True
    seen_spec: set[str] = set()
    for entry in spec_claims:
        if not (type(entry) is dict or isinstance(entry, Mapping)):
            return None
        ref = _str(entry.get("name"))
        seen_spec.add(ref)
        direct = entry.get("resourceClaimName")
        if isinstance(direct, str) and direct:
            names.append(direct)
        elif ref in generated:
            generated_name = generated[ref]
            if generated_name:
                names.append(generated_name)
        else:
            is_complete = False  # template not yet turned into a claim
    for ref, claim_name in generated.items():
        if ref not in seen_spec and claim_name:
            names.append(claim_name)
    return tuple(names), is_complete


#: What a Pod says about the replica it belongs to, read once per object (`ObserveCache`):
#: `(key, replica, engine, member, generation, claim_names, is_complete, is_malformed,
#: is_live, node_name)`: its (namespace, name); its replica, engine and member labels (the
#: replica None when the pod belongs to none, and the rest then unread); the replica
#: generation label as found; the claims it names, and whether every claim it asks for has
#: been created; whether its claim fields are malformed (never counted allocated); whether
#: it is neither Succeeded, Failed nor deleting; its node. A plain tuple (see `_ClaimInfo`).
_PodInfo = tuple[
    tuple[str, str], str | None, str, str, object, tuple[str, ...], bool, bool, bool, str
]
_NO_REPLICA: Final = (None, "", "", None, (), False, False, False, "")


def _read_pod(pod: RawObject) -> _PodInfo:
    meta = pod.get("metadata")
    if not (type(meta) is dict or isinstance(meta, Mapping)):
        return (_ns_name(pod), *_NO_REPLICA)
    ns, name = meta.get("namespace"), meta.get("name")
    key = (ns if type(ns) is str else _str(ns)), (name if type(name) is str else _str(name))
    labels = meta.get("labels")
    if not (type(labels) is dict or isinstance(labels, Mapping)):
        return (key, *_NO_REPLICA)
    replica_name = labels.get(REPLICA_LABEL)
    if not isinstance(replica_name, str):
        return (key, *_NO_REPLICA)
    spec, status = _map(pod.get("spec")), _map(pod.get("status"))
    claim_info = _pod_claim_names(spec, status)
    claim_names, is_complete = claim_info if claim_info is not None else ((), False)
    engine, role, node = labels.get(ENGINE_LABEL), labels.get(MEMBER_LABEL), spec.get("nodeName")
    return (
        key,
        replica_name,
        engine if type(engine) is str else _str(engine),
        role if type(role) is str else _str(role),
        labels.get(REPLICA_GENERATION_LABEL),
        claim_names,
        is_complete,
        claim_info is None,
        status.get("phase") not in ("Succeeded", "Failed")
        and meta.get("deletionTimestamp") is None,
        node if type(node) is str else _str(node),
    )


def _count_pods(
    rep: _Replica,
    pods: Iterable[_PodInfo],
    allocated: Mapping[tuple[str, str], datetime],
    node_pool: Mapping[str, str],
) -> None:
    """Count the replica's pods (those labelled with it, in its namespace) into `rep`."""
    ns = rep.namespace
    for pod in pods:
        (
            key,
            _,
            engine,
            role,
            pod_generation,
            claim_names,
            is_complete,
            is_malformed,
            is_live,
            node_name,
        ) = pod
        if is_malformed:
            rep.problems.add(f"pod {key[1]}: resourceClaims")
        times = []
        for c in claim_names:
            t = allocated.get((ns, c))
            if t is not None:
                times.append(t)
        is_allocated = is_complete and bool(claim_names) and len(times) == len(claim_names)
        member = rep.members.get((engine, role))
        if times:
            pool = member.pool if member is not None else None
            if pool is None:
                pool = node_pool.get(node_name)
            if pool is not None:
                latest = max(times)
                prev = rep.pool_last.get(pool)
                if prev is None or latest > prev:
                    rep.pool_last[pool] = latest
        if member is None or rep.generation is None:
            continue
        if pod_generation != rep.generation_label and _int(pod_generation) != rep.generation:
            continue
        if not is_live:
            continue
        member.live_pods += 1
        if is_allocated:
            member.allocated_pods += 1


def _observed_replica(rep: _Replica) -> ObservedReplica:
    by_pool: dict[str, list[MemberPods]] = defaultdict(list)
    is_scheduled = rep.is_readable
    for key in sorted(rep.members):
        m = rep.members[key]
        if m.is_claiming and m.allocated_pods < m.pods_needed:
            is_scheduled = False
        if m.pool is not None:
            by_pool[m.pool].append(MemberPods(m.engine, m.role, m.live_pods, m.allocated_pods))
    for pool in rep.pool_last:
        by_pool.setdefault(pool, [])
    pools = tuple(
        ReplicaPoolStatus(PoolName(p), rep.pool_last.get(p), tuple(by_pool[p]))
        for p in sorted(by_pool)
    )
    problems: tuple[Problem, ...] = ()
    if rep.problems:
        names = sorted(rep.problems)
        shown = ", ".join(names[:_MAX_NAMES_IN_MESSAGE])
        more = len(names) - _MAX_NAMES_IN_MESSAGE
        suffix = f" and {more} more" if more > 0 else ""
        problems = (
            Problem(ProblemCode.MALFORMED_REPLICA, f"{len(names)}: {shown}{suffix}", len(names)),
        )
    return ObservedReplica(rep.namespace, rep.name, rep.generation, is_scheduled, pools, problems)


# --- the cache between calls -------------------------------------------------------------


def _came_and_gone(
    held: Set[int], objects: tuple[object, ...], share: int
) -> tuple[dict[int, object], Set[int], Set[int]] | None:
    """`objects` by identity, the identities in `held` gone from them and those come since;
    None when an object is there twice, or when more came and went than 8 and one in
    `share` of the objects (reading them all then costs about the same as patching)."""
    by_id = dict(zip(map(id, objects), objects, strict=True))
    if len(by_id) != len(objects):
        return None
    gone = held - by_id.keys()
    came = by_id.keys() - held
    if len(gone) + len(came) > 8 + len(objects) // share:
        return None
    return by_id, gone, came


class IdentityMemo(Generic[_V]):
    """Values computed from read-only objects, by the object's identity.

    An entry holds its object, so the identity cannot be taken by another object while the
    entry lives; entries no call used are dropped when the call ends (`end_call`).
    """

    __slots__ = ("_entries", "_keeps", "_used")

    def __init__(self, *, keeps: bool = True) -> None:
        self._entries: dict[int, tuple[RawObject, _V]] = {}
        self._used: dict[int, tuple[RawObject, _V]] = {}
        #: False: compute every time and keep nothing (a cache used once).
        self._keeps = keeps

    def reader(self, compute: Callable[[RawObject], _V]) -> Callable[[RawObject], _V]:
        """`compute` through this memo (`compute` itself, for a memo that keeps nothing).
        For one call: the next `end_call` turns the memo over."""
        if not self._keeps:
            return compute
        used, entries = self._used, self._entries

        def read(obj: RawObject) -> _V:
            key = id(obj)
            hit = used.get(key)
            if hit is None:
                hit = entries.get(key)
                if hit is None or hit[0] is not obj:
                    hit = (obj, compute(obj))
                used[key] = hit
            return hit[1]

        return read

    def end_call(self) -> None:
        self._entries, self._used = self._used, {}

    def entries(self) -> Mapping[int, tuple[RawObject, _V]]:
        """What the last call read: each object (held) and its value, by identity."""
        return self._entries

    def patch(self, gone: Iterable[int], came: Iterable[tuple[RawObject, _V]]) -> None:
        """Drop the objects `gone` (identities) and add what was read of those `came`: for a
        call that read only what changed, so that the memo holds what reading every object
        would have left. Between calls only."""
        entries = dict(self._entries)
        for key in gone:
            del entries[key]
        for obj, value in came:
            entries[id(obj)] = (obj, value)
        self._entries = entries


class ObserveCache:
    """What `observe` computed, kept between calls so that a call costs what changed.

    The agent lists its cluster with `Store.view`, which hands out the same object until the
    object changes (a changed object is replaced, never changed in place). So:

    - each node, claim, pod and replica is read once (`IdentityMemo`);
    - a stage whose inputs are the same objects as last call is not run again: the node table
      (all nodes the same), the DRA inventory (slices and node pools), the claims (claims,
      inventory, clock, and the time when it was used), the pods grouped per replica (all
      pods the same);
    - when only a few claims came or went (a changed claim is one gone and one come) and
      the last read was plain (no problem, every claim with its own uid and published
      devices), that read is patched with them rather than every claim read again
      (`_patched_claims`); so are the replicas' reads and the pods grouped per replica
      (`_patched_replica_reads`, `_patched_pods`), and each patch says which keys it
      changed, so that the replicas to look at are found without looking at every one;
    - a pool whose nodes, inventory, taken devices and problems are as last call keeps its
      observation, and so does a replica whose own read, pods and their claims' times are;
      only the replicas whose read or pods are not the same objects as last call, or whose
      pods name a claim whose time is not, are looked at (`observed_replicas`).

    The result is the same with or without a cache: `observe` stays a pure function of its
    inputs. A cache must only ever be given objects that are never changed in place.

    `keeps=False` is a cache for one call (what `observe` uses without one): it remembers
    nothing, so a large cluster observed once leaves no garbage for the collector to scan.
    """

    def __init__(self, *, keeps: bool = True) -> None:
        self._config: ObserveConfig | None = None
        self._keeps = keeps
        self.nodes: IdentityMemo[_NodeInfo | None] = IdentityMemo(keeps=keeps)
        self.replicas: IdentityMemo[_Replica] = IdentityMemo(keeps=keeps)
        self.claims: IdentityMemo[_ClaimInfo] = IdentityMemo(keeps=keeps)
        self.pods: IdentityMemo[_PodInfo] = IdentityMemo(keeps=keeps)
        #: Each stage's last inputs (held: their identities stay theirs) and output.
        self._table: tuple[tuple[object, ...], _NodeTable] | None = None
        self._inventory: tuple[tuple[object, ...], Mapping[str, str], _Inventory, _Problems]
        self._inventory = ((), {}, _Inventory(), _Problems())
        self._claims: _ClaimsCall | None = None
        self._claims_aux: _ClaimsAux | None = None
        self._pods_of: _PodsCall | None = None
        self._replica_reads: _ReplicaReads | None = None
        #: The allocation times of the last claims read patched from the one before (held
        #: both) and the claims whose time is not the same object in the two.
        self._claims_since: _ClaimsSince | None = None
        self._pools: dict[str, _PoolResult] = {}
        self._next_pools: dict[str, _PoolResult] = {}
        self._replica_results: dict[tuple[str, str], _ReplicaResult] = {}
        self._next_replicas: dict[tuple[str, str], _ReplicaResult] = {}
        self._replicas_call: _ReplicasCall | None = None
        self._nodes: tuple[tuple[tuple[ObservedNode, ...], ...], tuple[ObservedNode, ...]]
        self._nodes = ((), ())
        #: How many times each stage ran (for tests).
        self.runs: dict[str, int] = defaultdict(int)

    def begin_call(self, config: ObserveConfig) -> None:
        if config != self._config:
            # What a node says depends on the pool label and the tolerations.
            self.nodes = IdentityMemo(keeps=self._keeps)
            self._table = None
            self._pools = {}
            self._config = config

    def end_call(self) -> None:
        # The memos turn over only when their stage runs.
        self._pools, self._next_pools = self._next_pools, {}
        self._replica_results, self._next_replicas = self._next_replicas, {}

    def node_table(self, objects: tuple[object, ...], config: ObserveConfig) -> _NodeTable:
        if self._table is None or not _same(self._table[0], objects):
            self.runs["nodes"] += 1
            self._table = (objects, _read_node_table(objects, config, self.nodes))
            self.nodes.end_call()
        return self._table[1]

    def inventory(
        self, objects: tuple[object, ...], node_pool: Mapping[str, str], problems: _Problems
    ) -> _Inventory:
        """The DRA inventory of the slices (read-only: claims use a working copy)."""
        held, pools, inv, found = self._inventory
        if not (_same(held, objects) and (pools is node_pool or pools == node_pool)):
            self.runs["inventory"] += 1
            found = _Problems()
            slices = _dedupe(
                _mappings(objects, "slice", found),
                lambda s: _str(_map(s.get("metadata")).get("name")) or _canonical(s),
                "slice",
                found,
            )
            inv = _build_inventory(slices.values(), node_pool, found)
            self._inventory = (objects, node_pool, inv, found)
        problems.merge(found)
        return inv

    def claims_read(
        self,
        objects: tuple[object, ...],
        inv: _Inventory,
        node_pool: Mapping[str, str],
        clock: AllocationClock,
        now: datetime,
    ) -> _ClaimsRead:
        """`_read_claims`, or what it gave last call when that is what it would give."""
        prev = clock.first_seen
        if self._claims is not None and self._claims.is_valid(objects, inv, node_pool, prev, now):
            return self._claims.read
        if self._claims is not None:
            patched = self._patched_claims(objects, inv, node_pool, prev, now)
            if patched is not None:
                self.runs["claims_patched"] += 1
                return patched
        self.runs["claims"] += 1
        self._claims_since = None
        found = _Problems()
        claims, kept = _read_each(objects, "claim", found, self.claims, _read_claim, _first)
        self.claims.end_call()
        read = _read_claims(claims, kept, inv.working_copy(), node_pool, prev, now, found)
        if self._keeps:
            self._claims = _ClaimsCall(objects, inv, node_pool, prev, now, read, claims, kept)
        return read

    def _patched_claims(
        self,
        objects: tuple[object, ...],
        inv: _Inventory,
        node_pool: Mapping[str, str],
        prev: Mapping[str, datetime],
        now: datetime,
    ) -> _ClaimsRead | None:
        """What `_read_claims` gives, from last call's read and the few claims that came or
        went since; None when that cannot be told this way (then it is read in full).

        Only for the plain case: last call's read found no problem and every allocated claim
        had a uid of its own and named only published devices, the inventory and node pools
        are the same, the clock is the one that read returned, and so are the claims that
        came. Then each claim that stayed has the time it had (the clock holds it), so the
        read changes only by what the claims that came or went hold.
        """
        last = self._claims
        assert last is not None
        read = last.read
        if not (
            last.inventory is inv
            and (last.node_pool is node_pool or last.node_pool == node_pool)
            and (read.clock.first_seen is prev or read.clock.first_seen == prev)
        ):
            return None
        aux = self._claims_aux
        if aux is None or aux.read is not read:
            aux = _ClaimsAux.of(last)
            self._claims_aux = aux
            if aux is None:
                return None
        diff = _came_and_gone(aux.by_id.keys(), objects, 8)
        if diff is None:
            return None
        by_id, gone, came_ids = diff
        came = [by_id[i] for i in came_ids]
        device_node = inv.device_node
        claims = dict(last.claims)
        kept = dict(last.kept)
        gone_keys = [aux.key_of[i] for i in gone]
        for key in gone_keys:
            del claims[key], kept[key]
        came_infos: list[tuple[RawObject, _ClaimInfo]] = []
        # The uids of the allocated claims that stay (each claim has its own).
        uids = set(read.clock.first_seen)
        uids.difference_update(last.claims[key][2] for key in gone_keys)
        for obj in came:
            if not isinstance(obj, dict):
                return None
            info = _read_claim(obj)
            key, is_allocated, uid, keys = info
            if key in claims:
                return None  # a duplicate
            if is_allocated:
                if uid is None or keys is None or not all(k in device_node for k in keys):
                    return None
                if uid in uids:
                    return None  # two claims with one uid
                uids.add(uid)
            claims[key] = info
            kept[key] = obj
            came_infos.append((obj, info))
        # Apply: the read's own mappings are copied (the last read stays as it was).
        allocated = dict(read.allocated)
        clock = dict(read.clock.first_seen)
        taken = dict(read.taken)
        node_last = dict(read.node_last)
        touched: set[str] = set()

        def count(holder: str, driver: str, by: int) -> None:
            per_driver = dict(taken.get(holder, {}))
            n = per_driver.get(driver, 0) + by
            if n:
                per_driver[driver] = n
            else:
                del per_driver[driver]
            if per_driver:
                taken[holder] = per_driver
            else:
                del taken[holder]

        for key in gone_keys:
            _, is_allocated, uid, keys = last.claims[key]
            if not is_allocated:
                continue
            assert uid is not None and keys is not None
            t = allocated.pop(key)
            del clock[uid]
            for dk in keys:
                aux.device_claims[dk] -= 1
                if not aux.device_claims[dk]:
                    del aux.device_claims[dk]
                    count(device_node[dk], dk[0], -1)
                holder = device_node[dk]
                aux.node_times[holder].remove(t)
                touched.add(holder)
        uses_now = False
        for _, (key, is_allocated, uid, keys) in came_infos:
            if not is_allocated:
                continue
            assert uid is not None and keys is not None
            seen = prev.get(uid)
            if seen is None:
                seen, uses_now = now, True
            allocated[key] = seen
            clock[uid] = seen
            for dk in keys:
                n = aux.device_claims.get(dk, 0)
                aux.device_claims[dk] = n + 1
                if not n:
                    count(device_node[dk], dk[0], 1)
                holder = device_node[dk]
                aux.node_times.setdefault(holder, []).append(seen)
                touched.add(holder)
        for holder in touched:
            times = aux.node_times.get(holder)
            if times:
                node_last[holder] = max(times)
            else:
                node_last.pop(holder, None)
                aux.node_times.pop(holder, None)
        new_read = _ClaimsRead(
            allocated,
            AllocationClock(MappingProxyType(dict(sorted(clock.items())))),
            taken,
            node_last,
            read.inventory,
            _Problems(),
            uses_now,
            False,
        )
        for i in gone:
            del aux.by_id[i], aux.key_of[i]
        for obj, info in came_infos:
            aux.by_id[id(obj)] = obj
            aux.key_of[id(obj)] = info[0]
        aux.read = new_read
        self._claims = _ClaimsCall(objects, inv, node_pool, prev, now, new_read, claims, kept)
        before = read.allocated
        moved = {*gone_keys, *(info[0] for _, info in came_infos)}
        changed = [k for k in moved if before.get(k) is not allocated.get(k)]
        self._claims_since = (before, allocated, changed)
        return new_read

    def replica_reads(
        self, objects: tuple[object, ...], problems: _Problems
    ) -> tuple[Mapping[tuple[str, str], _Replica], frozenset[str]]:
        """Each named replica's read by (namespace, name), sorted, and the pools they name;
        what it gave last call when the replicas are the same objects, patched with those
        that came and went when the last call was plain (`_patched_replica_reads`)."""
        held = self._replica_reads
        if held is None or not _same(held[0], objects):
            patched = self._patched_replica_reads(held, objects) if held is not None else None
            if patched is not None:
                self.runs["replica_reads_patched"] += 1
                held = patched
            else:
                self.runs["replica_reads"] += 1
                found = _Problems()
                reads, _ = _read_each(objects, "replica", found, self.replicas, _read_replica, _key)
                self.replicas.end_call()
                replicas: dict[tuple[str, str], _Replica] = {}
                pools: set[str] = set()
                for key in sorted(reads):
                    if not key[1]:
                        found.add(None, ProblemCode.MALFORMED_REPLICA, "<unnamed>: metadata.name")
                        continue
                    rep = reads[key]
                    replicas[key] = rep
                    pools |= rep.pools
                is_plain = not found and len(replicas) == len(objects)
                is_plain = is_plain and len(self.replicas.entries()) == len(objects)
                held = (objects, replicas, found, frozenset(pools), is_plain, None)
            if self._keeps:
                self._replica_reads = held
        problems.merge(held[2])
        return held[1], held[3]

    def _patched_replica_reads(
        self, held: _ReplicaReads, objects: tuple[object, ...]
    ) -> _ReplicaReads | None:
        """The last call's reads patched with the replicas that came and went (by identity);
        None when that cannot be told this way (then every replica is looked at).

        Only for a plain last call (every object a mapping, each replica named, with a key
        of its own) and plain replicas that came (mappings, named, keys not taken). A replica
        that came whose read equals the one of the replica of its key that went (a status
        write: it reads no status) keeps that read, so that what was derived from it is
        kept by identity; when every one does, so do the mapping and the pools. The keys of
        the reads that changed are told `observed_replicas` (the sixth field)."""
        if not held[4]:
            return None
        last = self.replicas.entries()
        diff = _came_and_gone(last.keys(), objects, 4)
        if diff is None:
            return None
        by_id, gone, came = diff
        before = held[1]
        replicas = dict(before)
        for i in gone:
            del replicas[last[i][1].key]
        read: list[tuple[RawObject, _Replica]] = []
        changed: list[tuple[str, str]] = []
        for i in came:
            obj = by_id[i]
            if type(obj) is not dict:
                return None
            rep = _read_replica(obj)
            key = rep.key
            if not key[1] or key in replicas:
                return None  # unnamed, or two replicas of one key
            was = before.get(key)
            if was is not None and was == rep:
                rep = was
            else:
                changed.append(key)
            replicas[key] = rep
            read.append((obj, rep))
        changed.extend(last[i][1].key for i in gone if last[i][1].key not in replicas)
        self.replicas.patch(gone, read)
        if not changed:
            return (objects, before, held[2], held[3], True, None)
        pools = frozenset().union(*(rep.pools for rep in replicas.values()))
        return (objects, replicas, held[2], pools, True, (before, frozenset(changed)))

    def pods_of(
        self, objects: tuple[object, ...], problems: _Problems
    ) -> Mapping[tuple[str, str], tuple[_PodInfo, ...]]:
        """The pods of each replica, by (namespace, replica label); what it gave last call
        when the pods are the same objects, patched with the pods that came and went when
        few did (`_patched_pods`)."""
        held = self._pods_of
        if held is None or not _same(held[0], objects):
            patched = self._patched_pods(held, objects) if held is not None else None
            if patched is not None:
                self.runs["pods_patched"] += 1
                held = patched
            else:
                self.runs["pods"] += 1
                held = self._grouped_pods(held, objects)
            if self._keeps:
                self._pods_of = held
        problems.merge(held[2])
        return held[1]

    def _grouped_pods(self, held: _PodsCall | None, objects: tuple[object, ...]) -> _PodsCall:
        """Every pod read (once per object: the memo) and grouped by replica."""
        found = _Problems()
        pods, _ = _read_each(objects, "pod", found, self.pods, _read_pod, _first)
        self.pods.end_call()
        grouped: dict[tuple[str, str], list[_PodInfo]] = defaultdict(list)
        claimed_by: dict[tuple[str, str], dict[tuple[str, str], int]] = defaultdict(dict)
        for (ns, _), pod in pods.items():
            replica = pod[1]
            if replica is not None:
                key = (ns, replica)
                grouped[key].append(pod)
                for c in pod[5]:
                    by = claimed_by[(ns, c)]
                    by[key] = by.get(key, 0) + 1
        # Tuples, and last call's tuple when equal: a replica's pods are then the same
        # tuple while they are the same pods (`observed_replicas` compares by identity).
        before = held[1] if held is not None else {}
        groups: dict[tuple[str, str], tuple[_PodInfo, ...]] = {}
        for key, ps in grouped.items():
            group = tuple(ps)
            last = before.get(key)
            groups[key] = last if last is not None and last == group else group
        # Patchable next call when plain: every object a pod with a key of its own.
        is_plain = not found and len(pods) == len(objects) == len(self.pods.entries())
        return (objects, groups, found, claimed_by, is_plain, None, pods)

    def _patched_pods(self, held: _PodsCall, objects: tuple[object, ...]) -> _PodsCall | None:
        """The last call's grouping patched with the pods that came and went since (by
        identity: a changed pod is one gone and one come); None when that cannot be told this
        way (then every pod is grouped again).

        Only for a plain last call (no problem: every object a mapping, every pod with a key
        of its own) and plain pods that came (mappings, keys not taken). Then a replica's pods
        are the last ones but for what came and went: only the replicas those belong to get
        a new tuple (of their pods by key; the order of a replica's pods changes nothing
        observe says), and `observed_replicas` is told which (the sixth field)."""
        if not held[4]:
            return None
        last = self.pods.entries()
        diff = _came_and_gone(last.keys(), objects, 8)
        if diff is None:
            return None
        by_id, gone, came = diff
        read: list[tuple[RawObject, _PodInfo]] = []
        for i in came:
            obj = by_id[i]
            if type(obj) is not dict:
                return None
            read.append((obj, _read_pod(obj)))
        by_key = dict(held[6])
        for i in gone:
            del by_key[last[i][1][0]]
        for _, pod in read:
            if pod[0] in by_key:
                return None  # two pods of one key
            by_key[pod[0]] = pod
        groups = dict(held[1])
        claimed_by = dict(held[3])
        touched: dict[tuple[str, str], list[_PodInfo]] = {}

        def claims(ns: str, pod: _PodInfo, key: tuple[str, str], by: int) -> None:
            for c in pod[5]:
                counts = dict(claimed_by.get((ns, c), {}))
                n = counts.get(key, 0) + by
                if n:
                    counts[key] = n
                else:
                    del counts[key]
                if counts:
                    claimed_by[(ns, c)] = counts
                else:
                    claimed_by.pop((ns, c), None)

        for i in gone:
            pod = last[i][1]
            if pod[1] is None:
                continue
            key = (pod[0][0], pod[1])
            if key not in touched:
                touched[key] = list(groups.get(key, ()))
            touched[key].remove(pod)
            claims(pod[0][0], pod, key, -1)
        for _, pod in read:
            if pod[1] is None:
                continue
            key = (pod[0][0], pod[1])
            if key not in touched:
                touched[key] = list(groups.get(key, ()))
            touched[key].append(pod)
            claims(pod[0][0], pod, key, 1)
        for key, ps in touched.items():
            if ps:
                groups[key] = tuple(sorted(ps, key=_first))
            else:
                groups.pop(key, None)
        self.pods.patch(gone, read)
        since = (held[1], frozenset(touched))
        return (objects, groups, held[2], claimed_by, True, since, by_key)

    def observed_pool(
        self,
        pool: str,
        table: _NodeTable,
        claims: _ClaimsRead,
        problems: tuple[Problem, ...],
        max_buckets: int,
    ) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
        """`_observe_pool`, or what it gave last call when nothing it reads differs."""
        if not self._keeps:
            return _observe_pool(pool, table, claims, problems, max_buckets)
        last = self._pools.get(pool)
        if last is None or not (
            last.table is table
            and last.claims is claims
            and last.problems == problems
            and last.max_buckets == max_buckets
        ):
            inputs = _pool_inputs(pool, table, claims)
            if (
                last is None
                or last.table is not table
                or last.problems != problems
                or last.max_buckets != max_buckets
                or last.inputs != inputs
            ):
                self.runs["pools"] += 1
                result = _observe_pool(pool, table, claims, problems, max_buckets)
                last = _PoolResult(table, claims, inputs, problems, max_buckets, *result)
            else:
                last = _PoolResult(
                    table, claims, inputs, problems, max_buckets, last.pool, last.nodes
                )
        self._next_pools[pool] = last
        return last.pool, last.nodes

    def observed_replicas(
        self,
        replicas: Mapping[tuple[str, str], _Replica],
        pods_of: Mapping[tuple[str, str], tuple[_PodInfo, ...]],
        claims: _ClaimsRead,
        table: _NodeTable,
    ) -> tuple[ObservedReplica, ...]:
        """Every replica's observation, sorted by key (`replicas` is): what it was last call
        for each replica nothing it reads has changed for, by identity, since last call.

        A replica's observation reads its own read, its pods, the allocation times of the
        claims they name and the node pools (`observed_replica`). Those that are the same
        objects as last call give the same observation, so only the others are looked at:
        a different read or pods tuple, or a claim whose time is not the same object.
        """
        last = self._replicas_call
        keys = last.keys if last is not None and last.replicas is replicas else sorted(replicas)
        node_pool = table.node_pool
        if (
            not self._keeps
            or last is None
            or not (last.node_pool is node_pool or last.node_pool == node_pool)
        ):
            dirty: set[tuple[str, str]] | None = None
        else:
            dirty = set()
            # Each input that is not last call's: the keys in which it differs, from the stage
            # that patched it from last call's when it did, else by looking at every key.
            if last.replicas is not replicas:
                held = last.replicas
                reads = self._replica_reads
                since = reads[5] if reads is not None and reads[1] is replicas else None
                if since is not None and since[0] is held:
                    dirty.update(since[1])
                else:
                    dirty.update(k for k in keys if held.get(k) is not replicas[k])
            if last.pods_of is not pods_of:
                held_pods = last.pods_of
                grouped = self._pods_of
                pods_since = grouped[5] if grouped is not None and grouped[1] is pods_of else None
                if pods_since is not None and pods_since[0] is held_pods:
                    dirty.update(k for k in pods_since[1] if k in replicas)
                else:
                    dirty.update(
                        k
                        for k in keys
                        if held_pods.get(k, _NO_PODS) is not pods_of.get(k, _NO_PODS)
                    )
            if last.claims is not claims:
                # Identity: a claim keeps the very time object while the clock holds it.
                before, after = last.claims.allocated, claims.allocated
                claims_since = self._claims_since
                if claims_since is not None and claims_since[0] is last.claims.allocated:
                    if claims_since[1] is after:
                        changed = claims_since[2]
                    else:
                        claims_since = None
                if claims_since is None:
                    changed = [k for k, t in after.items() if before.get(k) is not t]
                    changed.extend(k for k in before if k not in after)
                if changed:
                    claimed_by = self._claimed_by()
                    for claim_key in changed:
                        dirty.update(claimed_by.get(claim_key, ()))
        if dirty is not None and not dirty and last is not None and last.keys == keys:
            observed = last.observed
            self._next_replicas.update(self._replica_results)
        elif dirty is not None and last is not None and last.keys == keys:
            # The same replicas, a few of them to look at: last call's observations with
            # those replaced (in place: `keys` is sorted, so a key's place is found by halves).
            self._next_replicas.update(self._replica_results)
            out_at = list(last.observed)
            for key in dirty:
                i = bisect.bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    out_at[i] = self.observed_replica(
                        replicas[key], pods_of.get(key, _NO_PODS), claims, table
                    )
            observed = tuple(out_at)
        else:
            results = self._replica_results
            out: list[ObservedReplica] = []
            for key in keys:
                if dirty is not None and key not in dirty:
                    # Nothing it reads changed since it was last observed (a replica not
                    # observed last call is new here: its read is not the one held).
                    kept = results[key]
                    self._next_replicas[key] = kept
                    out.append(kept.replica)
                else:
                    out.append(
                        self.observed_replica(
                            replicas[key], pods_of.get(key, _NO_PODS), claims, table
                        )
                    )
            observed = tuple(out)
        if self._keeps:
            self._replicas_call = _ReplicasCall(
                replicas, pods_of, claims, node_pool, keys, observed
            )
        return observed

    def _claimed_by(self) -> Mapping[tuple[str, str], Mapping[tuple[str, str], int]]:
        """The replicas whose pods name each claim (of the pods last grouped)."""
        held = self._pods_of
        return held[3] if held is not None else {}

    def observed_replica(
        self, rep: _Replica, pods: Sequence[_PodInfo], claims: _ClaimsRead, table: _NodeTable
    ) -> ObservedReplica:
        """`_observed_replica` of the replica with its pods counted, or what it gave last
        call when the replica's read, its pods and their claims' times are as they were."""
        if not self._keeps:
            # Read for this call only: nobody else counts into it.
            _count_pods(rep, pods, claims.allocated, table.node_pool)
            return _observed_replica(rep)
        pods = tuple(pods)
        key = rep.key
        last = self._replica_results.get(key)
        node_pool = table.node_pool
        times = None
        if (
            last is not None
            and (last.rep is rep or last.rep == rep)
            and (last.pods is pods or last.pods == pods)
            and (last.node_pool is node_pool or last.node_pool == node_pool)
        ):
            if last.claims is not claims:
                times = _claim_times(rep.namespace, pods, claims.allocated)
                if times != last.times:
                    last = None
                else:
                    last = _ReplicaResult(rep, pods, claims, times, node_pool, last.replica)
        else:
            last = None
        if last is None:
            self.runs["replicas"] += 1
            counted = rep.fresh()
            _count_pods(counted, pods, claims.allocated, node_pool)
            if times is None:
                times = _claim_times(rep.namespace, pods, claims.allocated)
            observed = _observed_replica(counted)
            last = _ReplicaResult(rep, pods, claims, times, node_pool, observed)
        self._next_replicas[key] = last
        return last.replica

    def observed_nodes(
        self, per_pool: tuple[tuple[ObservedNode, ...], ...]
    ) -> tuple[ObservedNode, ...]:
        """Every pool's nodes, sorted by name (the same tuple as last call when no pool's
        nodes differ)."""
        held, nodes = self._nodes
        if not _same(held, per_pool):
            nodes = tuple(sorted((n for ns in per_pool for n in ns), key=lambda n: n.name))
            self._nodes = (per_pool, nodes)
        return nodes


#: The pods (held), each replica's pods read from them, the problems found reading them, the
#: replicas whose pods name each (namespace, claim name) with how many of their pods do,
#: whether the next call may patch this one (`_patched_pods`), for a patched call the
#: grouping it was patched from (held) and the replicas whose pods it changed, and what was
#: read of each pod by its (namespace, name).
_PodsCall = tuple[
    tuple[object, ...],
    Mapping[tuple[str, str], tuple[_PodInfo, ...]],
    _Problems,
    Mapping[tuple[str, str], Mapping[tuple[str, str], int]],
    bool,
    tuple[Mapping[tuple[str, str], tuple[_PodInfo, ...]], frozenset[tuple[str, str]]] | None,
    Mapping[tuple[str, str], _PodInfo],
]


@dataclass(frozen=True, slots=True, eq=False)
class _ClaimsCall:
    """One `_read_claims` call: its inputs (held) and its result."""

    objects: tuple[object, ...]
    inventory: _Inventory
    node_pool: Mapping[str, str]
    prev: Mapping[str, datetime]
    now: datetime
    read: _ClaimsRead
    #: What was read of each claim, and the claim, by (namespace, name).
    claims: Mapping[tuple[str, str], _ClaimInfo]
    kept: Mapping[tuple[str, str], RawObject]

    def is_valid(
        self,
        objects: tuple[object, ...],
        inv: _Inventory,
        node_pool: Mapping[str, str],
        prev: Mapping[str, datetime],
        now: datetime,
    ) -> bool:
        """Whether `_read_claims` would give `read` again for these inputs.

        The claims, the inventory and the node pools must be the same. Then with the same
        clock as before, the result is the same unless it used `now` and `now` moved. With
        the clock it returned (what the agent passes next), every allocated claim's time
        is the one it had, so only a claim without a uid (stamped `now`) can differ.
        """
        if not (
            _same(self.objects, objects)
            and self.inventory is inv
            and (self.node_pool is node_pool or self.node_pool == node_pool)
        ):
            return False
        read = self.read
        if read.clock.first_seen is prev or read.clock.first_seen == prev:
            return not read.has_uidless or now == self.now
        if self.prev is prev or self.prev == prev:
            return not read.uses_now or now == self.now
        return False


#: A replica without pods.
_NO_PODS: Final[tuple[_PodInfo, ...]] = ()

#: The replicas (held), each named one's read by key, the problems found reading them, the
#: pools they name, whether the next call may patch this one (`_patched_replica_reads`),
#: and for a patched call the reads it was patched from (held) and the keys that changed.
_ReplicaReads = tuple[
    tuple[object, ...],
    Mapping[tuple[str, str], _Replica],
    _Problems,
    frozenset[str],
    bool,
    tuple[Mapping[tuple[str, str], _Replica], frozenset[tuple[str, str]]] | None,
]

#: See `ObserveCache._claims_since`.
_ClaimsSince = tuple[
    Mapping[tuple[str, str], datetime], Mapping[tuple[str, str], datetime], list[tuple[str, str]]
]


@dataclass(frozen=True, slots=True, eq=False)
class _ReplicasCall:
    """One `observed_replicas` call: its inputs (held) and its result."""

    replicas: Mapping[tuple[str, str], _Replica]
    pods_of: Mapping[tuple[str, str], tuple[_PodInfo, ...]]
    claims: _ClaimsRead
    node_pool: Mapping[str, str]
    keys: list[tuple[str, str]]
    observed: tuple[ObservedReplica, ...]


@dataclass(slots=True, eq=False)
class _ClaimsAux:
    """What patching a plain claims read needs besides the read (`_patched_claims`)."""

    #: The read it goes with.
    read: _ClaimsRead
    #: Each claim (held), and its (namespace, name), by identity.
    by_id: dict[int, RawObject]
    key_of: dict[int, tuple[str, str]]
    #: Published device -> how many allocated claims name it (taken once however many).
    device_claims: dict[_DevKey, int]
    #: Node -> the allocation time of each (claim, device) held on it.
    node_times: dict[str, list[datetime]]

    @staticmethod
    def of(call: _ClaimsCall) -> _ClaimsAux | None:
        """For a read of the plain case, else None (see `_patched_claims`)."""
        read = call.read
        if read.problems or read.has_uidless or len(call.kept) != len(call.objects):
            return None
        device_node = read.inventory.device_node
        device_claims: dict[_DevKey, int] = defaultdict(int)
        node_times: dict[str, list[datetime]] = defaultdict(list)
        uids = 0
        for key, t in read.allocated.items():
            _, _, uid, keys = call.claims[key]
            if uid is None or keys is None:
                return None
            uids += 1
            for dk in keys:
                holder = device_node.get(dk)
                if holder is None:
                    return None
                device_claims[dk] += 1
                node_times[holder].append(t)
        if uids != len(read.clock):
            return None  # two claims with one uid
        by_id = {id(obj): obj for obj in call.kept.values()}
        key_of = {id(obj): key for key, obj in call.kept.items()}
        return _ClaimsAux(read, by_id, key_of, dict(device_claims), dict(node_times))


@dataclass(frozen=True, slots=True, eq=False)
class _ReplicaResult:
    """A replica's observation and what it was computed from (`observed_replica`)."""

    rep: _Replica
    pods: tuple[_PodInfo, ...]
    claims: _ClaimsRead
    #: Per pod, the allocation time of each claim it names (None: not allocated).
    times: tuple[tuple[datetime | None, ...], ...]
    node_pool: Mapping[str, str]
    replica: ObservedReplica


def _claim_times(
    namespace: str, pods: tuple[_PodInfo, ...], allocated: Mapping[tuple[str, str], datetime]
) -> tuple[tuple[datetime | None, ...], ...]:
    return tuple(tuple([allocated.get((namespace, c)) for c in pod[5]]) for pod in pods)


@dataclass(frozen=True, slots=True, eq=False)
class _PoolResult:
    """A pool's observation and what it was computed from (`ObserveCache.observed_pool`)."""

    table: _NodeTable
    claims: _ClaimsRead
    inputs: tuple[object, ...]
    problems: tuple[Problem, ...]
    max_buckets: int
    pool: ObservedPool
    nodes: tuple[ObservedNode, ...]


_first: Final = operator.itemgetter(0)
_key: Final = operator.attrgetter("key")


def _same(held: tuple[object, ...], objects: tuple[object, ...]) -> bool:
    """Whether two tuples hold the same objects, in order (identity, not equality)."""
    # `map(operator.is_)` compares in C: this runs over every object of a kind, every call.
    return len(held) == len(objects) and all(map(operator.is_, held, objects))


def _pool_inputs(pool: str, table: _NodeTable, claims: _ClaimsRead) -> tuple[object, ...]:
    """What `_observe_pool` reads of the claims and the inventory for one pool's nodes."""
    inv = claims.inventory
    members = table.pool_nodes.get(pool, ())
    taken, last = claims.taken, claims.node_last
    state = tuple([(taken.get(n), last.get(n)) for n in members])
    poisoned: tuple[object, ...] = ()
    if inv.poisoned or inv.poisoned_all:
        poisoned = tuple([(inv.poisoned.get(n), n in inv.poisoned_all) for n in members])
    return inv.published, state, poisoned


def _observe_pool(
    pool: str,
    table: _NodeTable,
    claims: _ClaimsRead,
    problems: tuple[Problem, ...],
    max_buckets: int,
) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
    """Per node free vectors and the pool's histogram."""
    inv = claims.inventory
    taken, node_last = claims.taken, claims.node_last
    members = table.pool_nodes.get(pool, ())
    unnamed = table.unnamed.get(pool, 0)
    drivers: set[str] = set()
    for n in members:
        drivers.update(inv.published.get(n, ()))
        drivers.update(inv.poisoned.get(n, ()))
    driver_order = sorted(drivers)
    counts: dict[tuple[int, ...], int] = defaultdict(int)
    excluded: dict[str, int] = defaultdict(int)
    if unnamed:
        excluded[str(ExclusionReason.NO_SLICES)] += unnamed
        counts[(0,) * len(driver_order)] += unnamed
    last: datetime | None = None
    observed_nodes: list[ObservedNode] = []
    for n in members:
        published = inv.published.get(n, {})
        reason = table.excluded[n]
        if reason is None and not published:
            reason = str(ExclusionReason.NO_SLICES)
        if reason is not None or n in inv.poisoned_all:
            vector = (0,) * len(driver_order)
        else:
            node_taken = taken.get(n, {})
            poisoned = inv.poisoned.get(n, ())
            vector = tuple(
                0 if d in poisoned else max(0, published.get(d, 0) - node_taken.get(d, 0))
                for d in driver_order
            )
        counts[vector] += 1
        if reason is not None:
            excluded[reason] += 1
        t = node_last.get(n)
        if t is not None and (last is None or t > last):
            last = t
        observed_nodes.append(
            ObservedNode(
                n,
                PoolName(pool),
                {DriverName(d): c for d, c in sorted(published.items())},
                {DriverName(d): v for d, v in zip(driver_order, vector, strict=True)},
                reason,
            )
        )
    buckets = tuple(
        Bucket({DriverName(d): v for d, v in zip(driver_order, vector, strict=True)}, c)
        for vector, c in sorted(counts.items())
    )
    observed = ObservedPool(
        name=PoolName(pool),
        observed_nodes=len(members) + unnamed,
        free_devices=buckets if len(buckets) <= max_buckets else None,
        last_allocation_time=last,
        excluded_nodes=dict(sorted(excluded.items())),
        extended_resources=dict(table.extended.get(pool, {})),
        bucket_count=len(buckets),
        problems=problems,
    )
    return observed, tuple(observed_nodes)


# --- observe ----------------------------------------------------------------------------


def observe(
    objects: ClusterObjects,
    clock: AllocationClock,
    config: ObserveConfig,
    now: datetime,
    cache: ObserveCache | None = None,
) -> tuple[ObservationResult, AllocationClock]:
    """Observe one workload cluster: pool and replica observations, and the new clock.

    Pure and deterministic: the result does not depend on the order of any input tuple, and
    bad input is reported in the result, never raised. `cache` (kept by the caller between
    calls) spares computing again what the objects seen last time gave; it never changes the
    result.
    """
    if cache is None:
        cache = ObserveCache(keeps=False)
    cache.begin_call(config)
    result = _observe(objects, clock, config, now, cache)
    cache.end_call()
    return result


def _observe(
    objects: ClusterObjects,
    clock: AllocationClock,
    config: ObserveConfig,
    now: datetime,
    cache: ObserveCache,
) -> tuple[ObservationResult, AllocationClock]:
    problems = _Problems()
    table = cache.node_table(objects.nodes, config)
    problems.merge(table.problems)

    # Replicas name pools too.
    replicas, replica_pools = cache.replica_reads(objects.replicas, problems)
    pool_names = table.pools | replica_pools

    # Slices and claims.
    inv = cache.inventory(objects.slices, table.node_pool, problems)
    claims = cache.claims_read(objects.claims, inv, table.node_pool, clock, now)
    problems.merge(claims.problems)

    # Per node free vectors, per pool histograms.
    observed_pools: list[ObservedPool] = []
    per_pool: list[tuple[ObservedNode, ...]] = []
    for pool in sorted(pool_names):
        observed, nodes = cache.observed_pool(
            pool, table, claims, problems.get(pool), config.max_histogram_buckets
        )
        observed_pools.append(observed)
        per_pool.append(nodes)

    # Pods, per replica.
    pods_of = cache.pods_of(objects.pods, problems)
    observed_replicas = cache.observed_replicas(replicas, pods_of, claims, table)

    result = ObservationResult(
        pools=tuple(observed_pools),
        replicas=observed_replicas,
        problems=problems.get(None),
        nodes=cache.observed_nodes(tuple(per_pool)),
    )
    return result, claims.clock
