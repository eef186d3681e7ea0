"""The observe model's types: what the agent reads, what it reports, and its small readers.

`gpufleet.agent.observe` says what the numbers mean (its docstring is the design); this module
holds the shapes both ways of computing them share: the inputs (`ClusterObjects`,
`ObserveConfig`, `AllocationClock`), the outputs (`ObservationResult` and its parts), the problem
codes, and the readers of untrusted dicts. Pure: standard library and `gpufleet.core` only.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from gpufleet.core import labels
from gpufleet.core.model import (
    MAX_HISTOGRAM_BUCKETS,
    Bucket,
    PoolName,
    PoolObservation,
    ReplicaPoolStatus,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from gpufleet.core.model import DriverName as DriverName

#: A raw Kubernetes object as the API returns it (camelCase, possibly malformed).
RawObject = Mapping[str, Any]

POOL_LABEL: Final = labels.POOL
REPLICA_LABEL: Final = labels.REPLICA
ENGINE_LABEL: Final = labels.ENGINE
MEMBER_LABEL: Final = labels.MEMBER
REPLICA_GENERATION_LABEL: Final = labels.REPLICA_GENERATION

#: How many object names a problem's message lists; the count says how many there are.
MAX_NAMES_IN_MESSAGE: Final = 5


# --- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """The workload cluster's objects as listed from the API, plus the fleet replicas for it."""

    nodes: tuple[RawObject, ...] = ()
    slices: tuple[RawObject, ...] = ()
    claims: tuple[RawObject, ...] = ()
    pods: tuple[RawObject, ...] = ()
    replicas: tuple[RawObject, ...] = ()
    #: The pools the hub declares for the cluster (`reads.declared_pools`): each is observed,
    #: at zero nodes when none of its nodes is seen.
    declared_pools: frozenset[str] = frozenset()
    #: Device-plugin pools -> the extended resources counted as their devices
    #: (`device_plugin.device_plugin_pools`).
    device_plugin_pools: Mapping[str, frozenset[str]] = field(default_factory=dict)


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
    #: The device taints (KEP-5055) the fleet's claims tolerate; a device with any other
    #: NoSchedule/NoExecute taint is not free. The fleet's claims carry none by default.
    device_tolerations: tuple[Toleration, ...] = ()


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
    #: A DRA pool's shared counters (KEP-4815 partitionable devices) cannot be accounted
    #: exactly: the DRA pool is unusable and the pool reports no histogram (whole-node
    #: accounting; `HistogramAvailable` False with this reason).
    PARTITIONABLE_DEVICES_UNACCOUNTED = "PartitionableDevicesUnaccounted"
    #: A device carries a NoSchedule/NoExecute device taint (KEP-5055) the fleet's claims do
    #: not tolerate: published, never free.
    TAINTED_DEVICE = "TaintedDevice"
    #: A device that allows multiple allocations (KEP-5075 consumable capacity): counted taken
    #: after its first allocation, whatever capacity it has left.
    CONSUMABLE_CAPACITY_COUNTED_WHOLE = "ConsumableCapacityCountedWhole"
    #: An allocated claim whose devices wait on binding conditions (KEP-5007) or failed one:
    #: its devices are taken, but its pods are not counted allocated (charged in full).
    DEVICE_BINDING_PENDING = "DeviceBindingPending"
    #: An allocated claim whose driver reports a device unhealthy (`status.devices[]`
    #: condition `Healthy` False, or `Ready` False with reason `Unhealthy`): its devices are
    #: taken, and its pods are not counted allocated.
    DEVICE_UNHEALTHY = "DeviceUnhealthy"
    #: A pool whose nodes have extended resources (a device plugin's `nvidia.com/gpu`) and no
    #: DRA device: the agent does not count device-plugin GPUs, so the pool shows none free.
    DEVICE_PLUGIN_NOT_COUNTED = "DevicePluginNotCounted"


#: The problems that withhold a pool's histogram (the reason of `HistogramAvailable` False).
WITHHOLDING: Final = frozenset({ProblemCode.PARTITIONABLE_DEVICES_UNACCOUNTED})


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


#: The API's bounds on a shareable room (`ShareableRoom`): larger rooms read as these.
MAX_SHARED_MILLI_CPU: Final = 10**9
MAX_SHARED_MEMORY: Final = 2**50


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
    #: The least (millicores, memory bytes) a node of the pool shares (allocatable less its
    #: DaemonSets' requests, `agent/hostroom.py`); None: not known.
    shareable: tuple[int, int] | None = None

    @property
    def withheld_reason(self) -> str:
        """Why the histogram is withheld: a withholding problem's code, else TooManyBuckets."""
        for p in self.problems:
            if p.code in WITHHOLDING:
                return str(p.code)
        return REASON_TOO_MANY_BUCKETS

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """HistogramAvailable, then one True condition per problem code (type = code)."""
        if self.free_devices is None:
            reason = self.withheld_reason
            available = Condition(
                HISTOGRAM_AVAILABLE,
                ConditionStatus.FALSE,
                reason,
                f"{self.bucket_count} buckets exceed the cap"
                if reason == REASON_TOO_MANY_BUCKETS
                else "shared counters cannot be accounted exactly: whole-node accounting",
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
            unusable_reason="" if self.free_devices is not None else self.withheld_reason,
            shareable=self.shareable,
        )

    def to_status(self) -> dict[str, Any]:
        """The PoolObservation `status` body (docs/design/shapes.md), minus agent/observedAt."""
        status: dict[str, Any] = {"observedNodes": self.observed_nodes}
        if self.free_devices is not None:
            status["freeDevices"] = [_bucket_body(b) for b in self.free_devices]
        if self.last_allocation_time is not None:
            status["lastAllocationTime"] = format_time(self.last_allocation_time)
        status["excludedNodes"] = dict(self.excluded_nodes)
        status["extendedResources"] = dict(self.extended_resources)
        status["conditions"] = [_condition_body(c) for c in self.conditions]
        if self.shareable is not None:
            status["shareableRoom"] = {
                "milliCpu": min(self.shareable[0], MAX_SHARED_MILLI_CPU),
                "memory": min(self.shareable[1], MAX_SHARED_MEMORY),
            }
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
    #: (pool, pod name) of each unschedulable claiming pod (`agent.scaleup` reads their
    #: Events; not pushed as such: the pools carry the counts).
    unschedulable: tuple[tuple[str, str], ...] = ()

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
            if p.ready_pods:
                body["readyPods"] = p.ready_pods
            if p.draining_pods:
                body["drainingPods"] = p.draining_pods
            if p.unschedulable_pods:
                body["unschedulablePods"] = p.unschedulable_pods
                if p.unschedulable_since is not None:
                    body["unschedulableSince"] = format_time(p.unschedulable_since)
                if p.scale_up is not None:
                    body["scaleUp"] = str(p.scale_up)
                if p.scale_up_at is not None:
                    body["scaleUpTime"] = format_time(p.scale_up_at)
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


def _bucket_body(b: Bucket) -> dict[str, Any]:
    """A bucket of `freeDevices`, with its `hostRoom` points when it has them."""
    body: dict[str, Any] = {"free": dict(b.free), "nodes": b.nodes}
    if b.host is not None:
        body["hostRoom"] = [
            {"milliCpu": p.milli_cpu, "memory": p.memory, "nodes": p.nodes} for p in b.host
        ]
    return body


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as Kubernetes writes times."""
    text = t.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _problem_condition(p: Problem) -> Condition:
    return Condition(str(p.code), ConditionStatus.TRUE, str(p.code), p.message)


def _condition_body(c: Condition) -> dict[str, str]:
    return {"type": c.type, "status": str(c.status), "reason": c.reason, "message": c.message}


# --- small readers for untrusted dicts --------------------------------------------------


def as_map(value: object) -> Mapping[str, Any]:
    # `type(...) is dict` first: the ABC check is slow and almost every value is a dict.
    return value if type(value) is dict or isinstance(value, Mapping) else EMPTY


def as_list(value: object) -> list[Any] | tuple[Any, ...]:
    return value if isinstance(value, list | tuple) else ()


def as_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: object) -> int | None:
    """An int that is not a bool, or a decimal string of one; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})

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


_METADATA: Final = operator.itemgetter("metadata")
_RESOURCE_VERSION: Final = operator.itemgetter("resourceVersion")


def versions_of(objects: Sequence[Mapping[str, Any]]) -> list[object] | None:
    """Each object's resourceVersion, in order (read in C); None when one has none. Versions
    are unique within a store (each write gets the next one), so two equal lists are the
    same objects in the same order."""
    try:
        return list(map(_RESOURCE_VERSION, map(_METADATA, objects)))
    except (KeyError, TypeError):
        return None


_NAMESPACE: Final = operator.itemgetter("namespace")
_NAME: Final = operator.itemgetter("name")


def keys_and_versions(
    objects: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[str, str]], list[object]] | None:
    """Each namespaced object's (namespace, name) and resourceVersion, in order (read in C);
    None when one lacks any of them."""
    try:
        metas = list(map(_METADATA, objects))
        keys = list(zip(map(_NAMESPACE, metas), map(_NAME, metas), strict=True))
        return keys, list(map(_RESOURCE_VERSION, metas))
    except (KeyError, TypeError):
        return None


def moved_keys(
    keys: Sequence[Hashable],
    versions: Sequence[object],
    last_keys: Sequence[Hashable],
    last_versions: Sequence[object],
) -> set[Any]:
    """The keys that came, went or whose version differs between the last listing and this one
    (each listing's keys distinct, as `keys_and_versions` reads them from a store; a key whose
    version is None now always counts as moved). Compared in C: pair by pair when the keys are
    the same in the same order, as between most reads; else as sets of pairs."""
    if keys == last_keys and None not in versions:
        ne = map(operator.ne, versions, last_versions)
        return set(map(keys.__getitem__, itertools.compress(range(len(keys)), ne)))
    now = dict(zip(keys, versions, strict=True))
    before = dict(zip(last_keys, last_versions, strict=True))
    moved = {key for key, _ in now.items() ^ before.items()}
    moved.update(key for key, version in now.items() if version is None)
    return moved


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


def canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def ns_name(obj: RawObject) -> tuple[str, str]:
    meta = as_map(obj.get("metadata"))
    ns = meta.get("namespace")
    name = meta.get("name")
    return (ns if type(ns) is str else as_str(ns)), (name if type(name) is str else as_str(name))


# --- problem collection -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Found:
    """One problem an object caused: on the pools of `nodes` (on the cluster when none of them
    is in a pool), or, with `nodes` None, on `scope` (a pool; None: the cluster)."""

    code: ProblemCode
    name: str
    nodes: tuple[str, ...] | None = None
    scope: str | None = None


class Problems:
    """Collects problems by scope (a pool, or None for the whole cluster) and code."""

    def __init__(self) -> None:
        self._by_scope: dict[str | None, dict[ProblemCode, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )

    def __bool__(self) -> bool:
        return bool(self._by_scope)

    def add(self, scope: str | None, code: ProblemCode, name: str) -> None:
        self._by_scope[scope][code].add(name)

    def add_found(self, found: Found, node_pool: Mapping[str, str]) -> None:
        """Report `found`: on its scope, or on the pools of its nodes (`node_pool`)."""
        if found.nodes is None:
            self.add(found.scope, found.code, found.name)
        else:
            pools = {node_pool[n] for n in found.nodes if n in node_pool}
            self.add_for_pools(pools, found.code, found.name)

    def add_for_pools(self, pools: Iterable[str], code: ProblemCode, name: str) -> None:
        """Report on each pool in `pools`, or on the cluster when there are none."""
        any_pool = False
        for pool in pools:
            any_pool = True
            self.add(pool, code, name)
        if not any_pool:
            self.add(None, code, name)

    def scopes(self) -> list[str | None]:
        """Every scope with a problem."""
        return list(self._by_scope)

    def records(self) -> list[Found]:
        """Every problem held, one `Found` per object named (on its scope)."""
        return [
            Found(code, name, scope=scope)
            for scope, by_code in self._by_scope.items()
            for code, names in by_code.items()
            for name in names
        ]

    def get(self, scope: str | None) -> tuple[Problem, ...]:
        by_code = self._by_scope.get(scope)
        if not by_code:
            return ()
        out = []
        for code in sorted(by_code):
            names = sorted(by_code[code])
            shown = ", ".join(names[:MAX_NAMES_IN_MESSAGE])
            more = len(names) - MAX_NAMES_IN_MESSAGE
            suffix = f" and {more} more" if more > 0 else ""
            out.append(Problem(code, f"{len(names)}: {shown}{suffix}", len(names)))
        return tuple(out)
