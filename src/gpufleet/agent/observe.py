"""The cluster agent's observation core: from DRA objects to pool and replica observations.

`observe(objects, clock, config, now) -> (ObservationResult, clock)` is a pure, deterministic
function of the workload cluster's objects as the Kubernetes API returns them (plain camelCase
dicts), the previous allocation clock, the configuration and the time. It does no I/O, reads no
clock and imports only the standard library and `gpufleet.core`. It is the specification: the
agent observes through `gpufleet.agent.table.FreeDeviceTable`, which computes the same result
from the changes of the objects, and a property test holds the two equal.

What is modelled
----------------
- **Pools** are the distinct values of the pool label (`gpufleet.io/pool`) over Nodes, plus every
  pool a fleet ModelReplica pins a member to, plus every pool the hub declares for the cluster
  (`ClusterObjects.declared_pools`, its InferenceCluster's `spec.nodePools`). A pool with no
  nodes is observed as empty: zero nodes, an empty histogram. So a cluster whose pools are all
  at zero nodes still reports each of them, and the hub counts an autoscaled one's growth.
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
Partition requests fitted by counters (shared counters are read, `gpufleet.agent.counters`, but a
pool is a number of whole devices per node); remaining consumable capacity (a device that
allows multiple allocations is taken after its first); DeviceClass selectors (every published
device of a driver counts); device-plugin allocations of an undeclared pool (only visible as
`extendedResources`; a pool the hub declares `DevicePlugin` counts them,
`gpufleet.agent.device_plugin`);
`ScaleUpBlocked` (not derivable from these objects).

Counted in units (`gpufleet.agent.counters`): shared counters (KEP-4815), device taints
(KEP-5055). An allocated claim waiting on binding conditions (KEP-5007) or reporting an
unhealthy device (`reads.claim_waiting`) takes its devices but is not counted allocated for its
pods.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

from gpufleet.agent.counters import UnitKey
from gpufleet.agent.device_plugin import (
    hold_times,
    node_usage,
    plain_holds,
    pseudo_claim,
    with_device_plugin,
)
from gpufleet.agent.model import (
    AllocationClock,
    ClusterObjects,
    ConditionStatus,
    ExclusionReason,
    Found,
    ObservationResult,
    ObserveConfig,
    ObservedNode,
    ObservedPool,
    ObservedReplica,
    Problem,
    ProblemCode,
    Problems,
    RawObject,
    canonical,
    format_time,
    parse_count_quantity,
)
from gpufleet.agent.pods import (
    PodInfo,
    Replica,
    count_pods,
    observed_replica,
    read_pod,
    read_replica,
)
from gpufleet.agent.reads import (
    ClaimInfo,
    Inventory,
    NodeInfo,
    NodeState,
    claim_effect,
    cordoned_nodes,
    group_slices,
    observe_pool,
    read_claim,
    read_dra_pool,
    read_node,
    read_slice,
)

__all__ = [
    "AllocationClock",
    "ClusterObjects",
    "ConditionStatus",
    "ExclusionReason",
    "ObservationResult",
    "ObserveConfig",
    "ObservedNode",
    "ObservedPool",
    "ObservedReplica",
    "Problem",
    "ProblemCode",
    "format_time",
    "observe",
    "parse_count_quantity",
]

_R = TypeVar("_R")

_MALFORMED = {
    "node": ProblemCode.MALFORMED_NODE,
    "slice": ProblemCode.MALFORMED_SLICE,
    "claim": ProblemCode.MALFORMED_CLAIM,
    "pod": ProblemCode.MALFORMED_POD,
    "replica": ProblemCode.MALFORMED_REPLICA,
}


def _read_each(
    objects: Iterable[object],
    kind: str,
    problems: Problems,
    read: Callable[[RawObject], _R],
    key_of: Callable[[_R], Any],
) -> tuple[dict[Any, _R], dict[Any, RawObject]]:
    """What `read` makes of each object that is a mapping (anything else is reported and
    dropped), by the key `key_of` finds in it, and the object by key. Of two objects with one
    key, the one with the smallest canonical JSON is kept (and the duplicate reported)."""
    infos: dict[Any, _R] = {}
    kept: dict[Any, RawObject] = {}
    for obj in objects:
        if not (type(obj) is dict or isinstance(obj, Mapping)):
            problems.add(None, _MALFORMED[kind], f"{kind} that is a {type(obj).__name__}")
            continue
        info = read(obj)
        k = key_of(info)
        prev = kept.get(k)
        if prev is not None:
            problems.add(None, ProblemCode.DUPLICATE_OBJECT, f"{kind} {k}")
            if canonical(obj) >= canonical(prev):
                continue
        infos[k], kept[k] = info, obj
    return infos, kept


@dataclass(frozen=True, slots=True)
class _Nodes:
    """The cluster's pooled nodes as the Node objects say (everything but the slices)."""

    #: Named pooled node -> what it says, sorted by name.
    infos: Mapping[str, NodeInfo]
    #: Named pooled node -> its pool.
    node_pool: Mapping[str, str]
    #: Pool -> how many of its nodes have no name.
    unnamed: Mapping[str, int]
    #: Every pool a node is in (named or not).
    pools: frozenset[str]


def _read_nodes(objects: Iterable[object], config: ObserveConfig, problems: Problems) -> _Nodes:
    """Pool membership, exclusions (except NoSlices) and extended resources. A pooled node
    without a name still counts: nothing can be published for it."""
    pools: set[str] = set()
    unnamed: dict[str, int] = defaultdict(int)
    named: dict[str, tuple[RawObject, NodeInfo]] = {}
    for node in objects:
        if not (type(node) is dict or isinstance(node, Mapping)):
            problems.add(None, ProblemCode.MALFORMED_NODE, f"node that is a {type(node).__name__}")
            continue
        info = read_node(node, config)
        if info is None:
            continue
        pools.add(info.pool)
        if not info.name:
            unnamed[info.pool] += 1
            problems.add(info.pool, ProblemCode.MALFORMED_NODE, "<unnamed>: metadata.name")
            continue
        prev = named.get(info.name)
        if prev is not None:
            problems.add(None, ProblemCode.DUPLICATE_OBJECT, f"node {info.name}")
            if canonical(node) >= canonical(prev[0]):
                continue
        named[info.name] = (node, info)
    infos = {name: named[name][1] for name in sorted(named)}
    for info in infos.values():
        for f in info.found:
            problems.add_found(f, {})
    node_pool = {name: info.pool for name, info in infos.items()}
    return _Nodes(infos, node_pool, dict(unnamed), frozenset(pools))


def _read_inventory(
    objects: Iterable[object], config: ObserveConfig, problems: Problems, found: list[Found]
) -> Inventory:
    """The DRA inventory of the slices (of two slices with one name, one is kept)."""
    slices, _ = _read_each(
        objects,
        "slice",
        problems,
        read_slice,
        lambda s: s.name if s.name != "<unnamed>" else canonical(s.obj),
    )
    groups, keyless = group_slices(slices.values())
    found.extend(keyless)
    inv = Inventory()
    for key, infos in groups.items():
        pool = read_dra_pool(key, infos, config.device_tolerations)
        found.extend(pool.found)
        inv.add(pool)
    return inv


@dataclass(slots=True)
class _Claims:
    """What the allocated claims say, given the inventory."""

    #: (namespace, name) of each allocated claim -> its allocation time.
    allocated: dict[tuple[str, str], datetime]
    #: The new allocation clock: uid -> first seen allocated.
    clock: dict[str, datetime]
    #: The units (`gpufleet.agent.counters`) some allocated claim takes, with their nodes.
    taken: dict[UnitKey, str]
    #: node -> latest allocation time of a claim holding devices on it.
    node_last: dict[str, datetime]
    #: node -> drivers it has nothing free of (because of a claim); None: of any driver.
    poison: dict[str, set[str | None]]


def _read_claims(
    objects: Iterable[object],
    inv: Inventory,
    prev: Mapping[str, datetime],
    now: datetime,
    problems: Problems,
    found: list[Found],
) -> _Claims:
    """Allocated claims' times, the new clock, the devices they take and what they do to nodes."""
    claims, kept = _read_each(objects, "claim", problems, read_claim, _first)
    read = _Claims({}, {}, {}, {}, defaultdict(set))
    for key, info in claims.items():
        if info[1]:
            _add_claim(read, info, kept[key], inv, prev, now, found)
    return read


def _add_claim(
    read: _Claims,
    info: ClaimInfo,
    obj: RawObject,
    inv: Inventory,
    prev: Mapping[str, datetime],
    now: datetime,
    found: list[Found],
) -> None:
    key, _, uid, _, waiting = info
    t = now
    if uid is not None:
        t = prev.get(uid, now)
        read.clock[uid] = t
    if waiting is None:  # else its pods cannot use it yet: not counted allocated
        read.allocated[key] = t
    effect = claim_effect(info, obj, inv)
    found.extend(effect.found)
    read.taken.update(effect.devices)
    node_last = read.node_last
    for n in effect.touched:
        last = node_last.get(n)
        if last is None or t > last:
            node_last[n] = t
    for n, driver in effect.poison:
        read.poison[n].add(driver)


def _first(info: Any) -> Any:
    return info[0]


def read_replicas(
    objects: Iterable[object], problems: Problems
) -> tuple[dict[tuple[str, str], Replica], frozenset[str]]:
    """Each named replica's read by (namespace, name), sorted, and the pools they name."""
    reads, _ = _read_each(objects, "replica", problems, read_replica, _key)
    replicas: dict[tuple[str, str], Replica] = {}
    pools: set[str] = set()
    for key in sorted(reads):
        if not key[1]:
            problems.add(None, ProblemCode.MALFORMED_REPLICA, "<unnamed>: metadata.name")
            continue
        replicas[key] = reads[key]
        pools |= reads[key].pools
    return replicas, frozenset(pools)


def _key(rep: Replica) -> tuple[str, str]:
    return rep.key


def _pods_of(
    objects: Iterable[object], problems: Problems
) -> tuple[dict[tuple[str, str], list[PodInfo]], dict[tuple[str, str], RawObject]]:
    """The pods of each replica, by (namespace, replica label), and every pod by key."""
    pods, kept = _read_each(objects, "pod", problems, read_pod, _first)
    grouped: dict[tuple[str, str], list[PodInfo]] = defaultdict(list)
    for (ns, _), pod in pods.items():
        if pod[1] is not None:
            grouped[(ns, pod[1])].append(pod)
    return grouped, kept


def node_states(
    names: Iterable[str],
    nodes: Mapping[str, NodeInfo],
    inv: Inventory,
    claims: _Claims,
) -> list[NodeState]:
    """The inputs of `observe_pool` for the named nodes."""
    taken: dict[str, dict[str, int]] = defaultdict(dict)
    for unit, holder in claims.taken.items():
        per_driver = taken[holder]
        per_driver[unit[0]] = per_driver.get(unit[0], 0) + 1
    out = []
    for n in names:
        poison = claims.poison.get(n, set())
        drivers = {d for d in poison if d is not None} | inv.poisoned.get(n, {}).keys()
        out.append(
            NodeState(
                n,
                nodes[n].excluded,
                inv.published.get(n, {}),
                frozenset(drivers),
                None in poison,
                taken.get(n, {}),
                claims.node_last.get(n),
                inv.blocked.get(n, {}),
            )
        )
    return out


def pool_extended(infos: Iterable[NodeInfo]) -> dict[str, int]:
    """A pool's extended resources: the sum over its named nodes, sorted by name."""
    totals: dict[str, int] = {}
    for info in infos:
        for key, count in info.extended.items():
            totals[key] = totals.get(key, 0) + count
    return dict(sorted(totals.items()))


def observe(
    objects: ClusterObjects, clock: AllocationClock, config: ObserveConfig, now: datetime
) -> tuple[ObservationResult, AllocationClock]:
    """Observe one workload cluster: pool and replica observations, and the new clock.

    Pure and deterministic: the result does not depend on the order of any input tuple, and
    bad input is reported in the result, never raised.
    """
    problems = Problems()
    nodes = _read_nodes(objects.nodes, config, problems)
    replicas, replica_pools = read_replicas(objects.replicas, problems)
    found: list[Found] = []
    inv = _read_inventory(objects.slices, config, problems, found)
    claims = _read_claims(objects.claims, inv, clock.first_seen, now, problems, found)
    pods_of, pods = _pods_of(objects.pods, problems)
    holds = plain_holds(pods)
    hold_at, hold_clock = hold_times(holds, clock.first_seen, now)
    usage = node_usage(holds, hold_at)
    for f in found:
        problems.add_found(f, nodes.node_pool)

    members: dict[str, list[str]] = defaultdict(list)
    for name, pool in nodes.node_pool.items():
        members[pool].append(name)
    states = {s.name: s for s in node_states(nodes.infos, nodes.infos, inv, claims)}
    for name, pool in nodes.node_pool.items():  # device-plugin pools count their resources
        if pool in objects.device_plugin_pools:
            resources = objects.device_plugin_pools[pool]
            states[name] = with_device_plugin(
                states[name], nodes.infos[name], resources, usage.get(name)
            )
    observed_pools: list[ObservedPool] = []
    observed_nodes: list[ObservedNode] = []
    for pool in sorted(nodes.pools | replica_pools | objects.declared_pools):
        names = members.get(pool, [])
        observed, pool_nodes = observe_pool(
            pool,
            [states[n] for n in names],
            nodes.unnamed.get(pool, 0),
            pool_extended(nodes.infos[n] for n in names),
            problems.get(pool),
            config.max_histogram_buckets,
        )
        observed_pools.append(observed)
        observed_nodes.extend(pool_nodes)

    allocated = claims.allocated
    allocated.update({(k[0], pseudo_claim(k[1])): t for k, t in hold_at.items()})
    cordoned = cordoned_nodes(nodes.infos)
    observed_replicas = []
    for key, rep in replicas.items():
        count_pods(rep, pods_of.get(key, ()), allocated, nodes.node_pool, cordoned)
        observed_replicas.append(observed_replica(rep))
    result = ObservationResult(
        pools=tuple(observed_pools),
        replicas=tuple(observed_replicas),
        problems=problems.get(None),
        nodes=tuple(sorted(observed_nodes, key=lambda n: n.name)),
    )
    merged = {**hold_clock, **claims.clock}
    new_clock = AllocationClock(MappingProxyType(dict(sorted(merged.items()))))
    return result, new_clock
