"""Capacity: what each pool of the fleet has free, as one ledger for one `schedule` call.

Model.
- A pool with a usable observation is counted by *free GPU*: a histogram from free-device
  vector to node count. A vector holds, per DRA driver of the pool's class (sorted by driver
  name), the devices one node has free. The histogram is the agent's buckets plus the pool's
  *growth* (`growth_nodes`): for an autoscaled pool (`max_node_count` set),
  `max(0, max_node_count - observed_nodes)` empty nodes at the class's full count per driver
  (the autoscaler ceiling, trusted as at Modelplane HEAD; ScaleUpBlocked is ignored). Growth is
  what an autoscaler can add: a fixed-size pool (no `max_node_count`) has no growth, so an
  observed fixed pool has exactly the nodes its agent reports (a removed node is not counted
  back as an empty one; issue 14, section 4). A pool observed at zero nodes is no exception:
  an autoscaled one is all growth (scale from zero), a fixed one has nothing.
  Nodes are never listed one by one, so every operation costs O(buckets), not O(nodes).
- A pool without an observation, or whose observation has no histogram (`buckets is None`),
  more buckets than `max_histogram_buckets`, or a class whose two DRA device kinds share a
  driver (a histogram keyed by driver cannot tell them apart), is counted by *whole node*:
  `free_nodes = nodes` minus one node per claiming pod (Modelplane HEAD). The fallback carries a
  Reason (HistogramUnavailable / AmbiguousDriver); other pools keep their histograms.
- Freshness is per cluster: the last report is `agent_observed_at`, else the newest pool
  `observed_at`. Older than `expire_after_s` at `now` is Expired (no new replicas), older than
  `stale_after_s` is Stale (still used). A cluster with no report at all is `None` and never
  expires. A cluster with observations but no time at all is treated as Stale (used, flagged,
  never expired): there is no age to expire it by.
- Node choice predicts where the cluster's own scheduler binds a DRA pod, as a swappable
  `NodeChoicePolicy`: `Spread` (the node with the most free devices that fits, since
  kube-scheduler does not pack DRA devices) or `Pack` (the fullest node that fits). Ties break
  on the free vector, so the choice is deterministic. A cluster whose agent steers (the
  default, `Cluster.steering`) is predicted `Pack`: its agent picks each claiming pod's node by
  the same best fit and steers kube-scheduler there; one that does not is predicted by its
  `SchedulingConfig.node_choice` (default Spread).

Which way it errs. Growth up to an autoscaled pool's ceiling is trusted (may over-promise
during stockouts); a fixed pool's declared size is not (a node its agent does not report is
not counted, which errs toward full while a node is briefly unlisted).
Unknown bucket drivers are ignored and missing ones read 0 free (errs toward full). Negative
counts read 0. Naive datetimes are read as UTC.

The ledger is the one mutable structure of the core; it lives inside one `schedule` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from gpufleet.core.decision import (
    Accounting,
    FreeBucket,
    ObservationState,
    PoolState,
    Reason,
    ReasonCode,
)
from gpufleet.core.model import (
    Bucket,
    ClaimMode,
    Cluster,
    ClusterName,
    Device,
    DriverName,
    NodeChoice,
    Pool,
    PoolObservation,
    SchedulingConfig,
    Steering,
)

#: Free devices of one node, per driver of the pool (aligned to `PoolLedger.drivers`).
Vector = tuple[int, ...]


def fits(free: Vector, pod: Vector) -> bool:
    return all(f >= d for f, d in zip(free, pod, strict=True))


def subtract(free: Vector, pod: Vector) -> Vector:
    return tuple(f - d for f, d in zip(free, pod, strict=True))


class NodeChoicePolicy(Protocol):
    """Predicts which node (by free vector) the cluster's scheduler gives a pod, or None."""

    @property
    def name(self) -> str: ...

    def choose(self, free: Mapping[Vector, int], pod: Vector) -> Vector | None: ...


@dataclass(frozen=True, slots=True)
class Spread:
    """The node with the most free devices that fits (ties: the larger vector)."""

    name: str = "Spread"

    def choose(self, free: Mapping[Vector, int], pod: Vector) -> Vector | None:
        if len(pod) == 1:
            return _largest_one(free, pod[0])
        best: Vector | None = None
        best_key: tuple[int, Vector] | None = None
        for vector, nodes in free.items():
            if nodes <= 0 or not fits(vector, pod):
                continue
            key = (sum(vector), vector)
            if best_key is None or key > best_key:
                best, best_key = vector, key
        return best


@dataclass(frozen=True, slots=True)
class Pack:
    """The fullest node that fits: the fewest free devices (ties: the smaller vector)."""

    name: str = "Pack"

    def choose(self, free: Mapping[Vector, int], pod: Vector) -> Vector | None:
        if len(pod) == 1:
            return _smallest_one(free, pod[0])
        best: Vector | None = None
        best_key: tuple[int, Vector] | None = None
        for vector, nodes in free.items():
            if nodes <= 0 or not fits(vector, pod):
                continue
            key = (sum(vector), vector)
            if best_key is None or key < best_key:
                best, best_key = vector, key
        return best


#: What a node reads for CPU or memory when its agent did not say (an older agent): no limit.
UNLIMITED = 2**63 - 1


@dataclass(frozen=True, slots=True)
class HostChoice:
    """`Spread` or `Pack` on a pool whose vectors end in free (millicores, memory bytes)
    (`PoolLedger.host`): a node fits when every component does; nodes are ordered by their
    free devices (the first `devices` components), ties by the whole vector (Pack: the
    smaller, so among nodes with as many devices free the one with the least CPU left)."""

    name: str
    devices: int
    largest: bool

    def choose(self, free: Mapping[Vector, int], pod: Vector) -> Vector | None:
        n = self.devices
        best: Vector | None = None
        best_key: tuple[int, Vector] | None = None
        for vector, nodes in free.items():
            if nodes <= 0 or not fits(vector, pod):
                continue
            key = (sum(vector[:n]), vector)
            if best_key is None or (key > best_key if self.largest else key < best_key):
                best, best_key = vector, key
        return best


_HOST_CHOICES: dict[tuple[str, int], HostChoice] = {}


def host_choice(policy: NodeChoicePolicy, devices: int) -> HostChoice:
    """`policy` on vectors of `devices` device components and then CPU and memory."""
    key = (policy.name, devices)
    found = _HOST_CHOICES.get(key)
    if found is None:
        found = _HOST_CHOICES[key] = HostChoice(policy.name, devices, policy.name != "Pack")
    return found


# One driver (the common case): a vector's sum is its one count, so ordering by (sum,
# vector) is ordering by the count; the same choice as the general loop, without a
# generator per node kind.


def _largest_one(free: Mapping[Vector, int], need: int) -> Vector | None:
    best: Vector | None = None
    for vector, nodes in free.items():
        if nodes > 0 and vector[0] >= need and (best is None or vector[0] > best[0]):
            best = vector
    return best


def _smallest_one(free: Mapping[Vector, int], need: int) -> Vector | None:
    best: Vector | None = None
    for vector, nodes in free.items():
        if nodes > 0 and vector[0] >= need and (best is None or vector[0] < best[0]):
            best = vector
    return best


_POLICIES: Mapping[NodeChoice, NodeChoicePolicy] = {
    NodeChoice.SPREAD: Spread(),
    NodeChoice.PACK: Pack(),
}


def policy_for(cluster: Cluster, config: SchedulingConfig) -> NodeChoicePolicy:
    """The prediction for `cluster`: `Pack` when its agent steers pods to the nodes it chose
    by best fit (the fullest that fits, which is what `Pack` predicts); otherwise how its own
    scheduler chooses (`config.node_choice`, default Spread)."""
    if cluster.steering is not Steering.OFF:
        return _POLICIES[NodeChoice.PACK]
    return _POLICIES[config.node_choice.get(cluster.name, NodeChoice.SPREAD)]


def as_utc(moment: datetime) -> datetime:
    """`moment` as UTC: naive read as UTC, aware converted (the same instant).

    Converted rather than left in its own zone because the core compares these times often
    (charge windows on every call, charging.py): two datetimes that share a tzinfo object
    compare in C, while any other pair calls both tzinfos' `utcoffset` (pydantic gives each
    parsed time its own `TzInfo`). Comparisons and differences are by instant, so the result
    is the same either way; a tzinfo without an offset is left alone, as it always was.
    """
    tzinfo = moment.tzinfo
    if tzinfo is UTC:
        return moment
    if tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment if moment.utcoffset() is None else moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Freshness:
    state: ObservationState
    #: Seconds since the cluster's last report at `now`; None when unknown.
    age_s: float | None = None


def cluster_freshness(cluster: Cluster, now: datetime, config: SchedulingConfig) -> Freshness:
    observations = [p.observation for p in cluster.pools if p.observation is not None]
    if cluster.agent_observed_at is None and not observations:
        return Freshness(ObservationState.NONE)
    last = cluster.agent_observed_at
    if last is None:
        times = [as_utc(o.observed_at) for o in observations if o.observed_at is not None]
        last = max(times) if times else None
    if last is None:
        return Freshness(ObservationState.STALE)
    age_s = (as_utc(now) - as_utc(last)).total_seconds()
    if age_s > config.expire_after_s:
        return Freshness(ObservationState.EXPIRED, age_s)
    if age_s > config.stale_after_s:
        return Freshness(ObservationState.STALE, age_s)
    return Freshness(ObservationState.FRESH, age_s)


def growth_nodes(pool: Pool, observation: PoolObservation) -> int:
    """Empty nodes an observed pool may still gain: what its autoscaler can add up to
    `max_node_count` beyond the nodes the agent reports; 0 for a fixed-size pool, whose
    declared `node_count` is no promise of nodes that are not there."""
    if pool.max_node_count is None:
        return 0
    return max(0, pool.max_node_count - max(0, observation.observed_nodes))


@dataclass(frozen=True, slots=True)
class ClassFacts:
    """What a ledger reads of its pool's devices alone, the same for every pool of a class
    (`class_facts`): the DRA drivers (sorted), the full vector (devices per driver on an empty
    node) and, when two DRA devices share a driver, that driver and the first two names."""

    drivers: tuple[DriverName, ...]
    full: Vector
    shared: tuple[DriverName, str, str] | None
    #: With one driver: the vectors (0,), (1,), ... (full,), one object each, shared by
    #: every histogram of the class. Fewer objects for the garbage collector to follow: a
    #: dict whose keys are all shared, untracked tuples is not tracked itself.
    ones: tuple[Vector, ...] = ()


def driver_index(
    drivers: tuple[DriverName, ...],
    devices: Sequence[Device],
    driver: DriverName,
    device_class_name: str,
) -> int | None:
    """Where a resolved request's devices count in the vectors of a pool with these devices
    and (DRA) drivers: its driver's place; for a request stamped without a driver, by its
    device class; an unknown driver counts against the first (errs toward full); None when
    the pool has no DRA driver at all."""
    if driver in drivers:
        return drivers.index(driver)
    for device in devices:
        if (
            device.claim is ClaimMode.DRA
            and device.device_class_name == device_class_name
            and device.driver in drivers
        ):
            return drivers.index(device.driver)
    return 0 if drivers else None


def class_facts(devices: Sequence[Device]) -> ClassFacts:
    full: dict[DriverName, int] = {}
    seen: dict[DriverName, str] = {}
    shared: tuple[DriverName, str, str] | None = None
    for device in devices:
        if not device.is_counted:
            continue
        key = device.key
        full[key] = full.get(key, 0) + max(0, device.count or 0)
        if shared is None and key in seen:
            shared = (key, seen[key], device.name)
        seen.setdefault(key, device.name)
    drivers = tuple(sorted(full))
    vector = tuple(full[d] for d in drivers)
    ones = tuple((n,) for n in range(vector[0] + 1)) if len(drivers) == 1 else ()
    return ClassFacts(drivers, vector, shared, ones)


def _fallback_reason(pool: Pool, config: SchedulingConfig, facts: ClassFacts) -> Reason | None:
    observation = pool.observation
    if observation is None:
        return None
    if observation.buckets is None:
        why = observation.unusable_reason or "NoHistogram"
        return Reason(
            ReasonCode.HISTOGRAM_UNAVAILABLE,
            f"pool {pool.name} has no free-device histogram ({why}): whole-node accounting",
            {"cause": why},
        )
    if len(observation.buckets) > config.max_histogram_buckets:
        return Reason(
            ReasonCode.HISTOGRAM_UNAVAILABLE,
            f"pool {pool.name} reports {len(observation.buckets)} buckets, over the cap of "
            f"{config.max_histogram_buckets}: whole-node accounting",
            {
                "cause": "TooManyBuckets",
                "buckets": len(observation.buckets),
                "max_buckets": config.max_histogram_buckets,
            },
        )
    if facts.shared is not None:
        driver, first, second = facts.shared
        return Reason(
            ReasonCode.AMBIGUOUS_DRIVER,
            f"devices {first} and {second} of pool {pool.name} share "
            f"driver {driver}: whole-node accounting",
            {"driver": driver, "devices": f"{first},{second}"},
        )
    return None


def host_histogram(
    buckets: Sequence[Bucket], drivers: tuple[DriverName, ...], full: Vector, pool: Pool
) -> dict[Vector, int]:
    """The histogram of a pool whose agent reports CPU and memory: each vector is a bucket's
    free devices and then a point's (millicores, memory bytes), counting the point's nodes.

    Never optimistic: a bucket's points are taken smallest first up to its node count, and
    nodes no point covers read 0 free; a bucket without points reads `UNLIMITED` (its agent
    did not say). Growth nodes (`growth_nodes`) get the class's full devices and the largest
    CPU and the largest memory any point of the pool reports (a node the autoscaler adds has
    the same allocatable and DaemonSets as those and no other tenant's pods yet), or
    `UNLIMITED` when the pool reports none (scale from zero)."""
    free: dict[Vector, int] = {}
    cpu_best = memory_best = -1
    for bucket in buckets:
        nodes = bucket.nodes
        if nodes <= 0:
            continue
        devices = tuple(max(0, bucket.free.get(d, 0)) for d in drivers)
        if bucket.host is None:
            vector = (*devices, UNLIMITED, UNLIMITED)
            free[vector] = free.get(vector, 0) + nodes
            continue
        points = sorted((max(0, p.milli_cpu), max(0, p.memory), p.nodes) for p in bucket.host)
        for cpu, memory, count in points:
            taken = min(nodes, max(0, count))
            if taken:
                vector = (*devices, cpu, memory)
                free[vector] = free.get(vector, 0) + taken
                nodes -= taken
            cpu_best, memory_best = max(cpu_best, cpu), max(memory_best, memory)
        if nodes:
            vector = (*devices, 0, 0)
            free[vector] = free.get(vector, 0) + nodes
    growth = growth_nodes(pool, pool.observation) if pool.observation is not None else 0
    if growth:
        vector = (
            *full,
            UNLIMITED if cpu_best < 0 else cpu_best,
            UNLIMITED if memory_best < 0 else memory_best,
        )
        free[vector] = free.get(vector, 0) + growth
    return free


class PoolLedger:
    """What one pool has free right now, in the pool's accounting mode.

    FreeGPU: `free` maps a free vector to its node count (never negative, zero entries removed).
    WholeNode: `free_nodes` may go negative when existing replicas overcommit the pool.
    `log`, when enabled, records every pod taken from the histogram (for tests and explain).
    `origin` is the ledger this one is a `copy` of (None: built from the pool).
    """

    __slots__ = (
        "_summary",
        "accounting",
        "allocated_at",
        "class_id",
        "cluster",
        "drivers",
        "free",
        "free_nodes",
        "full",
        "host",
        "log",
        "memo",
        "observation",
        "origin",
        "pool",
        "reasons",
        "version",
    )

    def __init__(
        self,
        cluster: ClusterName,
        pool: Pool,
        class_id: int,
        config: SchedulingConfig,
        *,
        record: bool = False,
        facts: ClassFacts | None = None,
    ) -> None:
        """`facts`: `class_facts(pool.devices)`, when the caller has it for the class."""
        self.cluster = cluster
        self.pool = pool
        self.class_id = class_id
        observation = self.observation = pool.observation
        if facts is None:
            facts = class_facts(pool.devices)
        drivers = self.drivers = facts.drivers
        self.full = facts.full
        fallback = _fallback_reason(pool, config, facts)
        self.reasons: tuple[Reason, ...] = (fallback,) if fallback else ()
        free: dict[Vector, int] = {}
        self.free = free
        self.free_nodes = max(0, pool.nodes)
        self.version = 0
        self.log: list[object] | None = [] if record else None
        #: Results computed from the current state (fits, reasons); cleared on change.
        self.memo: dict[object, object] = {}
        #: `summary()` of the current state (a slot, not in `memo`: a pool asked only for
        #: its summary keeps an empty memo, which the garbage collector does not follow).
        self._summary: Mapping[str, int] | None = None
        self.origin: PoolLedger | None = None
        #: The observation's `last_allocation_time` as UTC, read once per ledger built (a
        #: kept ledger's copies share it): charging reads it for every pool on every call.
        allocated = observation.last_allocation_time if observation is not None else None
        self.allocated_at = as_utc(allocated) if allocated is not None else None
        #: Whether the vectors end in free (millicores, memory bytes): the agent reported
        #: its nodes' CPU and memory (`Bucket.host`).
        self.host = False
        if observation is None or fallback is not None or observation.buckets is None:
            self.accounting = Accounting.WHOLE_NODE
            return
        self.accounting = Accounting.FREE_GPU
        if any(b.host is not None for b in observation.buckets):
            self.host = True
            self.free = host_histogram(observation.buckets, drivers, self.full, pool)
            return
        if len(drivers) == 1:  # the common case, without a generator per bucket
            driver, ones = drivers[0], facts.ones
            for bucket in observation.buckets:
                nodes = bucket.nodes
                if nodes > 0:
                    count = bucket.free.get(driver, 0)
                    if count < 0:
                        count = 0
                    one = ones[count] if type(count) is int and count < len(ones) else (count,)
                    free[one] = free.get(one, 0) + nodes
        else:
            for bucket in observation.buckets:
                nodes = bucket.nodes
                if nodes > 0:
                    vector = tuple(max(0, bucket.free.get(d, 0)) for d in drivers)
                    free[vector] = free.get(vector, 0) + nodes
        growth = growth_nodes(pool, observation)
        if growth:
            free[self.full] = free.get(self.full, 0) + growth

    def copy(self, *, record: bool = False) -> PoolLedger:
        """A new ledger in this one's state, with its own histogram, memo and log; everything
        else (the pool, its drivers and reasons) is immutable and shared. Copying an unused
        ledger is the same as building one again from the same pool and config, for less
        (no devices or buckets to read)."""
        copied = PoolLedger.__new__(PoolLedger)
        copied.cluster = self.cluster
        copied.pool = self.pool
        copied.class_id = self.class_id
        copied.observation = self.observation
        copied.allocated_at = self.allocated_at
        copied.drivers = self.drivers
        copied.full = self.full
        copied.host = self.host
        copied.reasons = self.reasons
        copied.free = dict(self.free)
        copied.free_nodes = self.free_nodes
        copied.version = self.version
        copied.log = [] if record else None
        copied.memo = {}
        copied._summary = None
        copied.origin = self
        copied.accounting = self.accounting
        return copied

    @property
    def is_free_gpu(self) -> bool:
        return self.accounting is Accounting.FREE_GPU

    def choice(self, policy: NodeChoicePolicy) -> NodeChoicePolicy:
        """`policy` as it reads this pool's vectors (`host_choice` when they hold CPU and
        memory)."""
        return host_choice(policy, len(self.drivers)) if self.host else policy

    def driver_index(self, driver: DriverName, device_class_name: str) -> int | None:
        """Where a resolved request's devices count in this pool's vectors.

        A request stamped without a driver is mapped by its device class; None when the pool
        has no DRA driver at all.
        """
        return driver_index(self.drivers, self.pool.devices, driver, device_class_name)

    def set_free(self, free: dict[Vector, int]) -> None:
        self.free = free
        self.version += 1
        self.memo.clear()
        self._summary = None

    def take_nodes(self, nodes: int) -> None:
        self.free_nodes -= nodes
        self.version += 1
        self.memo.clear()
        self._summary = None

    def summary(self) -> Mapping[str, int]:
        """Numbers for a verdict's `free` field (shared while the pool does not change)."""
        found = self._summary
        if found is not None:
            return found
        if not self.is_free_gpu:
            summary = {"nodes": max(0, self.pool.nodes), "free_nodes": self.free_nodes}
        else:
            nodes = free_devices = best = 0
            width = len(self.drivers)
            for vector, n in self.free.items():  # one pass: a verdict per pool asks for it
                devices = sum(vector[:width]) if self.host else sum(vector)
                nodes += n
                free_devices += devices * n
                if n > 0 and devices > best:
                    best = devices
            summary = {"nodes": nodes, "free_devices": free_devices, "best_node_free": best}
        self._summary = summary
        return summary

    def state(
        self,
        observation: ObservationState,
        buckets: dict[tuple[DriverName, ...], dict[Vector, dict[int, FreeBucket]]] | None = None,
    ) -> PoolState:
        """The pool's state for a decision; `buckets`, when given, shares equal `FreeBucket`s
        (frozen values) between the pools of one decision, by drivers, vector and nodes
        (nested: no key object per bucket, for the garbage collector's sake)."""
        drivers = self.drivers
        by_vector = buckets.setdefault(drivers, {}) if buckets is not None else None
        single = drivers[0] if len(drivers) == 1 else None
        histogram: list[FreeBucket] = []
        items = self.free.items()
        if self.host:  # by free devices, CPU and memory aside
            merged: dict[Vector, int] = {}
            for vector, nodes in items:
                devices = vector[: len(drivers)]
                merged[devices] = merged.get(devices, 0) + nodes
            items = merged.items()
        # Largest free first (vectors are unique: sorting the items sorts by vector).
        for vector, nodes in sorted(items, reverse=True):
            if nodes <= 0:
                continue
            by_nodes = None
            if by_vector is not None:
                by_nodes = by_vector.get(vector)
                if by_nodes is None:
                    by_nodes = by_vector[vector] = {}
                bucket = by_nodes.get(nodes)
                if bucket is not None:
                    histogram.append(bucket)
                    continue
            if single is not None:
                bucket = FreeBucket({single: vector[0]}, nodes)
            else:
                bucket = FreeBucket(dict(zip(drivers, vector, strict=True)), nodes)
            if by_nodes is not None:
                by_nodes[nodes] = bucket
            histogram.append(bucket)
        return PoolState(
            cluster=self.cluster,
            pool=self.pool.name,
            accounting=self.accounting,
            observation=observation if self.observation is not None else ObservationState.NONE,
            nodes=max(0, self.pool.nodes),
            histogram=tuple(histogram),
            free_nodes=None if self.is_free_gpu else self.free_nodes,
            reasons=self.reasons,
        )
