"""The fleet's capacity as metrics, computed from what the hub holds (a pure function).

`fleet_capacity(clusters, replicas, deployments, now)` reads plain API objects, as the Store
port hands them out, and returns what an SRE graphs first (docs/operations.md, "Metrics"):

- **per cluster, pool and DRA driver**, from each InferenceCluster's `status.gpuPools` (what
  the controller published from the agent's last accepted report): the devices on the observed
  nodes (observed nodes times the devices of that driver one node offers, as the pool's
  InferenceClass declares), and how they split: `free` (the histogram's free devices),
  `unavailable` (the devices of nodes the agent excluded: cordoned, NotReady, deleting,
  tainted, no published slices; they have nothing free) and `allocated` (the rest). Nodes by
  their number of free devices (the histogram projected on the driver), and the largest free
  block (most free devices on one node);
- **per pool**: observed nodes, the nodes it may reach (`maxNodeCount`, else `nodeCount`),
  excluded nodes by reason, and the observation's age at `now`;
- **per cluster**: replicas placed (ModelReplicas pinned to it) and running (their
  `ModelPodsScheduled` condition is True: every live pod of the replica's current generation has
  its devices allocated);
- **fleet-wide**: replicas desired (the deployments' `spec.replicas`), deployments whose
  `ReplicasScheduled` condition is False, by reason, and deployments short of running
  replicas (`ReplicasRunning` False), by reason.

What is not known is left out rather than guessed: a pool without a published observation has
no device or age numbers; one without a histogram (over the bucket cap) has no free, allocated,
by-bucket or largest-block numbers; one whose InferenceClass is unknown (no `devices` in its
status) has no device totals. The series are bounded by what is declared, never by what an agent
reports: drivers are the pool's InferenceClass's (a pool without one: at most
`MAX_UNDECLARED_DRIVERS` drivers with free devices), exclusion reasons the agent's known ones
(`Tainted:<key>` at most `MAX_TAINT_REASONS` per pool; anything else counts as `Other`). Malformed values (a status written by hand) count as absent;
nothing here raises on bad data. `devices == free + allocated + unavailable` whenever all four
are present and the observation is consistent (allocated is clamped at zero otherwise).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.api.times import parse_time
from gpufleet.store.port import INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA, Store

__all__ = [
    "DriverCapacity",
    "FleetCapacity",
    "PoolCapacity",
    "fleet_capacity",
    "read_fleet",
]

ReadObj = Mapping[str, Any]

MODEL_PODS_SCHEDULED = "ModelPodsScheduled"
REPLICAS_SCHEDULED = "ReplicasScheduled"
REPLICAS_RUNNING = "ReplicasRunning"


@dataclass(frozen=True, slots=True)
class DriverCapacity:
    """One DRA driver's devices in one pool. None: not known (see the module docstring)."""

    driver: str
    #: Devices of this driver one node offers (its InferenceClass); None if not published.
    devices_per_node: int | None
    devices: int | None
    free: int | None
    allocated: int | None
    unavailable: int | None
    largest_free_block: int | None
    #: (free devices on a node, nodes with exactly that many), by free devices; every value
    #: from 0 to `devices_per_node` is present (0 nodes when none), so a graph has no gaps.
    nodes_by_free: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    cluster: str
    pool: str
    #: The nodes the pool may reach (`status.gpuPools[].nodes`).
    max_nodes: int | None
    observed_nodes: int | None
    age_s: float | None
    excluded_nodes: tuple[tuple[str, int], ...]
    drivers: tuple[DriverCapacity, ...]


@dataclass(frozen=True, slots=True)
class FleetCapacity:
    pools: tuple[PoolCapacity, ...]
    #: (cluster, replicas placed, replicas running), by cluster.
    replicas: tuple[tuple[str, int, int], ...]
    replicas_desired: int
    #: (reason, deployments whose ReplicasScheduled is False with it), by reason.
    unscheduled_deployments: tuple[tuple[str, int], ...]
    #: (reason, deployments whose ReplicasRunning is False with it), by reason: short of
    #: running replicas (BackingOff, Replaced, NoRoomForSurge, PodsUnschedulable...).
    short_deployments: tuple[tuple[str, int], ...] = ()


def _count(value: object) -> int | None:
    """A non-negative integer field; None when absent or malformed."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _condition(obj: ReadObj, type_: str) -> Mapping[str, Any] | None:
    for c in _sequence(_mapping(obj.get("status")).get("conditions")):
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c
    return None


def _per_node(devices: Sequence[Any]) -> dict[str, int]:
    """Devices one node offers, by driver (two device kinds of one driver add up)."""
    per_node: Counter[str] = Counter()
    for device in devices:
        device = _mapping(device)
        driver, count = device.get("driver"), _count(device.get("count", 1))
        if isinstance(driver, str) and driver and count is not None:
            per_node[driver] += count
    return dict(per_node)


def _histogram(observation: Mapping[str, Any]) -> list[tuple[dict[str, int], int]] | None:
    """The observation's buckets as (free by driver, nodes); None without a usable histogram."""
    buckets = observation.get("freeDevices")
    if not isinstance(buckets, list):
        return None
    histogram: list[tuple[dict[str, int], int]] = []
    for bucket in buckets:
        bucket = _mapping(bucket)
        nodes = _count(bucket.get("nodes"))
        free = {str(d): n for d, n in _mapping(bucket.get("free")).items() if _count(n) is not None}
        if nodes is None:
            return None
        histogram.append((free, nodes))
    return histogram


def _driver(
    driver: str,
    per_node: int | None,
    observed_nodes: int | None,
    excluded: int,
    histogram: list[tuple[dict[str, int], int]] | None,
) -> DriverCapacity:
    devices: int | None = None
    unavailable: int | None = None
    if per_node is not None and observed_nodes is not None:
        devices = per_node * observed_nodes
        unavailable = per_node * min(excluded, observed_nodes)
    free: int | None = None
    largest: int | None = None
    by_free: Counter[int] = Counter({n: 0 for n in range(per_node + 1)} if per_node else {})
    if histogram is not None:
        free = sum(bucket.get(driver, 0) * nodes for bucket, nodes in histogram)
        largest = max((b.get(driver, 0) for b, nodes in histogram if nodes > 0), default=0)
        for bucket, nodes in histogram:
            by_free[bucket.get(driver, 0)] += nodes
    allocated = (
        max(0, devices - free - unavailable)
        if devices is not None and free is not None and unavailable is not None
        else None
    )
    return DriverCapacity(
        driver=driver,
        devices_per_node=per_node,
        devices=devices,
        free=free,
        allocated=allocated,
        unavailable=unavailable,
        largest_free_block=largest,
        nodes_by_free=tuple(sorted(by_free.items())) if histogram is not None else (),
    )


#: A pool whose InferenceClass is unknown exports its free numbers for at most this many
#: drivers (those with the most free devices; a driver at 0 free everywhere adds none).
MAX_UNDECLARED_DRIVERS = 4


def _undeclared_drivers(histogram: list[tuple[dict[str, int], int]] | None) -> set[str]:
    """The drivers of a pool without a declared class that get series: see above. Under a
    declared class only its drivers do: a driver named only by the agent's report adds none."""
    free: Counter[str] = Counter()
    for bucket, nodes in histogram or ():
        for driver, count in bucket.items():
            if count > 0 and nodes > 0:
                free[driver] += count * nodes
    ranked = sorted(free.items(), key=lambda kv: (-kv[1], kv[0]))
    return {driver for driver, _ in ranked[:MAX_UNDECLARED_DRIVERS]}


#: Exclusion reasons exported as they are (`gpufleet.agent.model.ExclusionReason`); any other
#: key an agent reports counts under `Other`, so a report cannot add series.
EXCLUSION_REASONS = frozenset({"Cordoned", "NotReady", "Deleting", "NoSlices"})
#: At most this many `Tainted:<key>` reasons per pool (by most nodes, then key); the rest
#: count under `Tainted:other`.
MAX_TAINT_REASONS = 8


def _excluded(reported: Mapping[str, Any]) -> dict[str, int]:
    """Excluded nodes by reason, with the reasons bounded (see `EXCLUSION_REASONS`)."""
    excluded: Counter[str] = Counter()
    tainted: Counter[str] = Counter()
    for reason, value in reported.items():
        nodes = _count(value)
        if not nodes:
            continue
        key = str(reason)
        if key in EXCLUSION_REASONS:
            excluded[key] += nodes
        elif key.startswith("Tainted:") and len(key) <= 8 + 316:  # a taint key's longest
            tainted[key] += nodes
        else:
            excluded["Other"] += nodes
    ranked = sorted(tainted.items(), key=lambda kv: (-kv[1], kv[0]))
    for key, nodes in ranked[:MAX_TAINT_REASONS]:
        excluded[key] += nodes
    rest = sum(nodes for _, nodes in ranked[MAX_TAINT_REASONS:])
    if rest:
        excluded["Tainted:other"] += rest
    return dict(excluded)


def _pool(cluster: str, status: Mapping[str, Any], now: datetime) -> PoolCapacity:
    observation = _mapping(status.get("observation"))
    observed_nodes = _count(observation.get("observedNodes"))
    observed_at = parse_time(observation.get("observedAt"))
    excluded = _excluded(_mapping(observation.get("excludedNodes")))
    histogram = _histogram(observation) if observation else None
    per_node = _per_node(_sequence(status.get("devices")))
    drivers = set(per_node) if per_node else _undeclared_drivers(histogram)
    return PoolCapacity(
        cluster=cluster,
        pool=str(status.get("name")),
        max_nodes=_count(status.get("nodes")),
        observed_nodes=observed_nodes,
        age_s=max(0.0, (now - observed_at).total_seconds()) if observed_at else None,
        excluded_nodes=tuple(sorted(excluded.items())),
        drivers=tuple(
            _driver(
                d,
                per_node.get(d) if per_node else None,
                observed_nodes,
                sum(excluded.values()),
                histogram,
            )
            for d in sorted(drivers)
        )
        if observation
        else (),
    )


def _replicas(
    clusters: Iterable[str], replicas: Iterable[ReadObj]
) -> tuple[tuple[str, int, int], ...]:
    placed: Counter[str] = Counter({c: 0 for c in clusters})
    running: Counter[str] = Counter()
    for replica in replicas:
        cluster = _mapping(replica.get("spec")).get("clusterName")
        if not isinstance(cluster, str) or not cluster:
            continue
        placed[cluster] += 1
        scheduled = _condition(replica, MODEL_PODS_SCHEDULED)
        if scheduled is not None and scheduled.get("status") == "True":
            running[cluster] += 1
    return tuple((c, placed[c], running[c]) for c in sorted(placed))


def fleet_capacity(
    clusters: Iterable[ReadObj],
    replicas: Iterable[ReadObj],
    deployments: Iterable[ReadObj],
    now: datetime,
) -> FleetCapacity:
    """The fleet's capacity metrics at `now` (see the module docstring)."""
    pools: list[PoolCapacity] = []
    names: list[str] = []
    for cluster in clusters:
        name = _mapping(cluster.get("metadata")).get("name")
        if not isinstance(name, str):
            continue
        names.append(name)
        for status in _sequence(_mapping(cluster.get("status")).get("gpuPools")):
            if isinstance(status, Mapping) and isinstance(status.get("name"), str):
                pools.append(_pool(name, status, now))
    desired = 0
    unscheduled: Counter[str] = Counter()
    short: Counter[str] = Counter()
    for deployment in deployments:
        desired += _count(_mapping(deployment.get("spec")).get("replicas", 1)) or 0
        scheduled = _condition(deployment, REPLICAS_SCHEDULED)
        if scheduled is not None and scheduled.get("status") == "False":
            unscheduled[str(scheduled.get("reason") or "Unknown")] += 1
        running = _condition(deployment, REPLICAS_RUNNING)
        if running is not None and running.get("status") == "False":
            short[str(running.get("reason") or "Unknown")] += 1
    return FleetCapacity(
        pools=tuple(sorted(pools, key=lambda p: (p.cluster, p.pool))),
        replicas=_replicas(names, replicas),
        replicas_desired=desired,
        unscheduled_deployments=tuple(sorted(unscheduled.items())),
        short_deployments=tuple(sorted(short.items())),
    )


def read_fleet(store: Store, now: datetime) -> FleetCapacity:
    """`fleet_capacity` of what `store` holds (raises StoreError when it cannot be read)."""
    return fleet_capacity(
        store.view(INFERENCE_CLUSTER),
        store.view(MODEL_REPLICA),
        store.view(MODEL_DEPLOYMENT),
        now,
    )
