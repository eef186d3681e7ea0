"""The observe model's pieces: what each object says, and what a pool's nodes add up to.

Every function here is pure and reads one object (a Node, a ResourceSlice, a ResourceClaim, a Pod,
a ModelReplica), one DRA pool's slices, or one pool's nodes. `observe` (the specification)
composes them over every object at once; `FreeDeviceTable` (the incremental table) calls the
same pieces for the objects that changed. That both compute with the same pieces is what keeps
them equal; the property test checks it.

A problem an object causes is a `Found`: on a fixed scope (a pool, or None for the cluster), or
on the pools of some nodes (`nodes`), which are resolved when the problems are collected, since a
node's pool is what the Node objects say at that time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.agent.counters import SET_UNIT, Published, UnitKey, account
from gpufleet.agent.model import (
    EMPTY,
    WITHHOLDING,
    ExclusionReason,
    Found,
    ObserveConfig,
    ObservedNode,
    ObservedPool,
    Problem,
    ProblemCode,
    RawObject,
    as_int,
    as_list,
    as_map,
    as_str,
    parse_count_quantity,
)
from gpufleet.core.model import (
    Bucket,
    DriverName,
    PoolName,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

#: The most pools the agent takes from its InferenceCluster (the API allows 8 nodePools).
MAX_DECLARED_POOLS = 8
#: The longest pool name the agent takes from it (the API allows 40 characters).
MAX_DECLARED_POOL_CHARS = 63

#: (driver, DRA pool, device name): a published device.
DevKey = tuple[str, str, str]
#: (driver, DRA pool).
DraKey = tuple[str, str]


# --- declared pools ---------------------------------------------------------------------


def declared_pools(cluster: RawObject | None) -> frozenset[str]:
    """The pool names the hub declares for this cluster: its InferenceCluster's
    `spec.nodePools[].name` (none when there is no InferenceCluster).

    The agent reports every one of them, observed at zero nodes when it sees none, so that a
    cluster whose pools are all at zero nodes reports (and becomes Ready) and its autoscaled
    pools count their growth (issue 14, section 3). The object is read as untrusted: entries
    that are not mappings, names that are not non-empty strings of at most
    `MAX_DECLARED_POOL_CHARS`, and entries past the first `MAX_DECLARED_POOLS` are left out
    (a pool left out is observed only when nodes or a replica name it, as before).
    """
    if cluster is None:
        return frozenset()
    pools = as_list(as_map(as_map(cluster).get("spec")).get("nodePools"))
    names = (as_str(as_map(p).get("name")) for p in pools[:MAX_DECLARED_POOLS])
    return frozenset(n for n in names if 0 < len(n) <= MAX_DECLARED_POOL_CHARS)


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


def _is_ready(node: RawObject) -> bool:
    for cond in as_list(as_map(node.get("status")).get("conditions")):
        cond = as_map(cond)
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _untolerated(
    spec: Mapping[str, Any], name: str, config: ObserveConfig, found: list[Found], pool: str
) -> list[str]:
    """The keys of the NoSchedule/NoExecute taints the fleet's pods do not tolerate."""
    untolerated: list[str] = []
    for taint in as_list(spec.get("taints")):
        if not (type(taint) is dict or isinstance(taint, Mapping)) or not isinstance(
            taint.get("key"), str
        ):
            found.append(Found(ProblemCode.MALFORMED_NODE, f"{name}: spec.taints", scope=pool))
            untolerated.append(as_str(as_map(taint).get("key")))
            continue
        effect = taint.get("effect")
        if effect not in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE):
            continue  # PreferNoSchedule does not repel
        key = taint["key"]
        if not _tolerated(key, as_str(taint.get("value")), effect, config.tolerations):
            untolerated.append(key)
    return untolerated


def _exclusion(
    node: RawObject, name: str, config: ObserveConfig, found: list[Found], pool: str
) -> str | None:
    """The first exclusion reason that applies, ignoring NoSlices (decided after slices)."""
    spec = as_map(node.get("spec"))
    unschedulable = spec.get("unschedulable")
    if unschedulable is True:
        return str(ExclusionReason.CORDONED)
    if unschedulable not in (None, False):
        found.append(Found(ProblemCode.MALFORMED_NODE, f"{name}: spec.unschedulable", scope=pool))
        return str(ExclusionReason.CORDONED)
    if not _is_ready(node):
        return str(ExclusionReason.NOT_READY)
    if as_map(node.get("metadata")).get("deletionTimestamp") is not None:
        return str(ExclusionReason.DELETING)
    untolerated = _untolerated(spec, name, config, found, pool)
    if untolerated:
        return f"{ExclusionReason.TAINTED}:{min(untolerated)}"
    return None


def _extended_resources(
    node: RawObject, name: str, found: list[Found], pool: str
) -> dict[str, int]:
    totals: dict[str, int] = {}
    allocatable = as_map(as_map(node.get("status")).get("allocatable"))
    for key, value in allocatable.items():
        if not isinstance(key, str) or "/" not in key or key.startswith("hugepages-"):
            continue
        count = parse_count_quantity(value)
        if count is None:
            found.append(
                Found(ProblemCode.MALFORMED_QUANTITY, f"{name}: {key}={value!r}", scope=pool)
            )
            continue
        totals[key] = totals.get(key, 0) + count
    return totals


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What one pooled Node says."""

    pool: str
    #: "" when the node has no name (it counts, but nothing can be published for it).
    name: str
    #: The exclusion reason, ignoring NoSlices (decided after slices).
    excluded: str | None
    extended: Mapping[str, int]
    #: The node's own problems (on its pool).
    found: tuple[Found, ...] = ()


def cordoned_nodes(infos: Mapping[str, NodeInfo | None]) -> frozenset[str]:
    """The named nodes marked unschedulable (cordoned, or being drained)."""
    cordoned = str(ExclusionReason.CORDONED)
    return frozenset(n for n, i in infos.items() if i is not None and i.excluded == cordoned)


def read_node(node: RawObject, config: ObserveConfig) -> NodeInfo | None:
    """The node's pool, exclusion and extended resources; None when it is in no pool."""
    meta = as_map(node.get("metadata"))
    pool = as_map(meta.get("labels")).get(config.pool_label)
    if not isinstance(pool, str) or not pool:
        return None
    name = as_str(meta.get("name"))
    if not name:
        return NodeInfo(pool, "", None, {})
    found: list[Found] = []
    excluded = _exclusion(node, name, config, found, pool)
    extended = _extended_resources(node, name, found, pool)
    return NodeInfo(pool, name, excluded, extended, tuple(found))


# --- slices -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """What one ResourceSlice says about where it belongs."""

    #: metadata.name, or "<unnamed>".
    name: str
    #: Its (driver, DRA pool); None when either is missing or ill-typed.
    key: DraKey | None
    #: spec.pool.generation and resourceSliceCount; None when unreadable.
    generation: int | None
    count: int | None
    obj: RawObject


def _slice_nodes(spec: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(nodeName, perDeviceNodeSelection) of a slice."""
    node = spec.get("nodeName")
    per_device = spec.get("perDeviceNodeSelection") is True
    return (node if isinstance(node, str) and node else None), per_device


def read_slice(s: RawObject) -> SliceInfo:
    spec = as_map(s.get("spec"))
    name = as_str(as_map(s.get("metadata")).get("name")) or "<unnamed>"
    driver = spec.get("driver")
    pool = as_map(spec.get("pool"))
    pool_name = pool.get("name")
    key: DraKey | None = None
    if isinstance(driver, str) and driver and isinstance(pool_name, str):
        key = (driver, pool_name)
    generation = as_int(pool.get("generation"))
    return SliceInfo(name, key, generation, as_int(pool.get("resourceSliceCount")), s)


def keyless_slice_found(info: SliceInfo) -> Found:
    """The problem of a slice without a (driver, DRA pool): on its node's pool, if any."""
    node, _ = _slice_nodes(as_map(info.obj.get("spec")))
    return Found(ProblemCode.MALFORMED_SLICE, f"slice {info.name}", nodes=(node,) if node else ())


@dataclass(frozen=True, slots=True)
class DraPool:
    """One (driver, DRA pool): its newest slices' devices, when usable."""

    key: DraKey
    is_usable: bool
    #: The nodes its newest slices (or their devices) name.
    nodes: frozenset[str]
    #: Usable: each node-local device's node.
    device_node: Mapping[DevKey, str]
    #: Usable: node -> how many units (whole devices: `gpufleet.agent.counters`) it publishes.
    published: Mapping[str, int]
    found: tuple[Found, ...]
    #: Usable: the units an allocation of each device takes, where they are not the device
    #: itself (`counters.Accounting.units`).
    units: Mapping[DevKey, tuple[UnitKey, ...]] = field(default_factory=dict)
    #: Usable: node -> how many of its units are blocked (tainted: never free).
    blocked: Mapping[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Newest:
    """The slices of one (driver, DRA pool) at its newest generation."""

    generation: int
    slices: list[SliceInfo] = field(default_factory=list)
    slice_counts: set[int] = field(default_factory=set)
    is_malformed: bool = False


def _newest(slices: Iterable[SliceInfo]) -> _Newest:
    """The newest generation's slices; any slice with an unreadable generation might be the
    newest, so it makes the DRA pool unusable (its nodes get nothing free)."""
    newest: _Newest | None = None
    unreadable: list[SliceInfo] = []
    for s in slices:
        if s.generation is None:
            unreadable.append(s)
            continue
        if newest is None or s.generation > newest.generation:
            newest = _Newest(s.generation)
        elif s.generation < newest.generation:
            continue
        newest.slices.append(s)
        if s.count is None or s.count < 1:
            newest.is_malformed = True
        else:
            newest.slice_counts.add(s.count)
    if unreadable:
        newest = newest or _Newest(-1)
        newest.slices.extend(unreadable)
        newest.is_malformed = True
    assert newest is not None
    return newest


def _slice_devices(
    s: SliceInfo, label: str, nodes: set[str], found: list[Found]
) -> tuple[list[Published], bool]:
    """The slice's (device name, node, device) triples (node "" for a device that is not
    node-local), and whether every device is named. A slice that only defines counter sets
    is not reported for lacking a node."""
    spec = as_map(s.obj.get("spec"))
    node, per_device = _slice_nodes(spec)
    devices = as_list(spec.get("devices"))
    if node is not None:
        nodes.add(node)
    elif not per_device and (devices or spec.get("sharedCounters") is None):
        found.append(Found(ProblemCode.SLICE_NOT_NODE_LOCAL, f"slice {s.name} ({label})"))
    local: list[Published] = []
    is_named = True
    for dev in devices:
        dev_name = dev.get("name") if type(dev) is dict else as_map(dev).get("name")
        if type(dev_name) is not str or not dev_name or dev_name.startswith(SET_UNIT):
            is_named = False
            continue
        dev_node = node
        if per_device:
            dn = as_map(dev).get("nodeName")
            dev_node = dn if isinstance(dn, str) and dn else None
            if dev_node is None:
                found.append(
                    Found(
                        ProblemCode.SLICE_NOT_NODE_LOCAL,
                        f"slice {s.name} ({label}) device {dev_name}",
                    )
                )
            else:
                nodes.add(dev_node)
        local.append((dev_name, dev_node or "", dev))
    return local, is_named


def _pool_problem(newest: _Newest, local: list[Published]) -> ProblemCode | None:
    """Why a DRA pool whose names are readable is unusable (None: it is usable)."""
    names = {s.name for s in newest.slices}
    if len(newest.slice_counts) != 1 or len(names) != next(iter(newest.slice_counts)):
        return ProblemCode.INCOMPLETE_SLICE_GENERATION
    device_names = [dev_name for dev_name, _, _ in local]
    if len(set(device_names)) != len(device_names):
        return ProblemCode.DUPLICATE_DEVICE
    return None


def read_dra_pool(
    key: DraKey, slices: Iterable[SliceInfo], tolerations: Sequence[Toleration] = ()
) -> DraPool:
    """What the slices of one (driver, DRA pool) publish (every slice of that key, any
    generation): the newest complete generation's node-local devices, counted in units
    (`gpufleet.agent.counters`, with the device taints `tolerations` tolerate), or nothing
    when it is incomplete, lists a device twice, is malformed or its counters cannot be
    accounted (its nodes then get nothing free)."""
    newest = _newest(slices)
    driver, pool_name = key
    label = f"{driver}/{pool_name}"
    found: list[Found] = []
    nodes: set[str] = set()
    local: list[Published] = []
    is_named = True
    for s in newest.slices:
        devices, named = _slice_devices(s, label, nodes, found)
        local.extend(devices)
        is_named = is_named and named
    problem: ProblemCode | None = ProblemCode.MALFORMED_SLICE
    if is_named and not newest.is_malformed:
        problem = _pool_problem(newest, local)
    accounting = None
    if problem is None:
        specs = [as_map(s.obj.get("spec")) for s in newest.slices]
        accounting = account(key, specs, local, tolerations)
        if accounting.unaccounted:
            found.append(
                Found(
                    ProblemCode.PARTITIONABLE_DEVICES_UNACCOUNTED,
                    accounting.unaccounted,
                    nodes=tuple(sorted(nodes)),
                )
            )
            return DraPool(key, False, frozenset(nodes), {}, {}, tuple(found))
    if problem is not None or accounting is None:
        found.append(
            Found(problem or ProblemCode.MALFORMED_SLICE, label, nodes=tuple(sorted(nodes)))
        )
        return DraPool(key, False, frozenset(nodes), {}, {}, tuple(found))
    device_node: dict[DevKey, str] = {}
    for dev_name, dev_node, _ in local:
        if dev_node:  # else not node-local: not counted
            device_node[(driver, pool_name, dev_name)] = dev_node
    found.extend(accounting.found)
    return DraPool(
        key,
        True,
        frozenset(nodes),
        device_node,
        accounting.published,
        tuple(found),
        accounting.units,
        accounting.blocked,
    )


class Inventory:
    """Published devices by node, from the DRA pools added (and removed) one by one: what the
    claims read to find a device's node, and the pools read for each node's devices."""

    def __init__(self) -> None:
        self.pools: dict[DraKey, DraPool] = {}
        #: (driver, DRA pool, device) -> node, over the usable pools.
        self.device_node: dict[DevKey, str] = {}
        #: node -> driver -> published unit count, and how many of them are blocked.
        self.published: dict[str, dict[str, int]] = {}
        self.blocked: dict[str, dict[str, int]] = {}
        #: The units of the devices whose units are not themselves (`DraPool.units`).
        self.device_units: dict[DevKey, tuple[UnitKey, ...]] = {}
        #: node -> driver -> how many unusable DRA pools of that driver name the node.
        self.poisoned: dict[str, dict[str, int]] = {}

    def add(self, pool: DraPool) -> Iterable[str]:
        """Add a DRA pool (none of its key held); the nodes whose devices it changes."""
        self.pools[pool.key] = pool
        return self._count(pool, 1)

    def remove(self, key: DraKey) -> Iterable[str]:
        """Remove the DRA pool of `key` (if held); the nodes whose devices it changes."""
        pool = self.pools.pop(key, None)
        return () if pool is None else self._count(pool, -1)

    def _count(self, pool: DraPool, by: int) -> Iterable[str]:
        driver = pool.key[0]
        if not pool.is_usable:
            for node in pool.nodes:
                _bump(self.poisoned, node, driver, by)
            return pool.nodes
        if by > 0:
            self.device_node.update(pool.device_node)
            self.device_units.update(pool.units)
        else:
            for dev in pool.device_node:
                del self.device_node[dev]
            for dev in pool.units:
                del self.device_units[dev]
        for node, count in pool.published.items():
            _bump(self.published, node, driver, by * count)
        for node, count in pool.blocked.items():
            _bump(self.blocked, node, driver, by * count)
        return pool.published.keys()

    def node_of(self, dev: DevKey) -> str | None:
        return self.device_node.get(dev)

    def units_of(self, dev: DevKey) -> tuple[UnitKey, ...]:
        """The units an allocation of the (published) device takes."""
        return self.device_units.get(dev, (dev,))

    def is_unusable(self, key: DraKey) -> bool:
        pool = self.pools.get(key)
        return pool is not None and not pool.is_usable

    def nodes_of(self, key: DraKey) -> frozenset[str]:
        pool = self.pools.get(key)
        return pool.nodes if pool is not None else frozenset()


def _bump(counts: dict[str, dict[str, int]], node: str, driver: str, by: int) -> None:
    """Add `by` to counts[node][driver], dropping what reaches zero."""
    per_driver = counts.setdefault(node, {})
    n = per_driver.get(driver, 0) + by
    if n:
        per_driver[driver] = n
    else:
        per_driver.pop(driver, None)
        if not per_driver:
            del counts[node]


def group_slices(
    slices: Iterable[SliceInfo],
) -> tuple[dict[DraKey, list[SliceInfo]], list[Found]]:
    """Slices by (driver, DRA pool), and the problems of those without one."""
    groups: dict[DraKey, list[SliceInfo]] = defaultdict(list)
    found: list[Found] = []
    for s in slices:
        if s.key is None:
            found.append(keyless_slice_found(s))
        else:
            groups[s.key].append(s)
    return groups, found


# --- claims -----------------------------------------------------------------------------


def _selector_node(allocation: Mapping[str, Any]) -> str | None:
    """The node an allocation's node selector pins to (matchFields metadata.name In [node])."""
    for term in as_list(as_map(allocation.get("nodeSelector")).get("nodeSelectorTerms")):
        for req in as_list(as_map(term).get("matchFields")):
            req = as_map(req)
            values = as_list(req.get("values"))
            if (
                req.get("key") == "metadata.name"
                and req.get("operator") == "In"
                and len(values) == 1
                and isinstance(values[0], str)
            ):
                return values[0]
    return None


#: A ResourceClaim, read: `(key, is_allocated, uid, keys, waiting)`: its (namespace, name);
#: whether it is allocated; its uid (None when missing or not a string); every result's
#: (driver, DRA pool, device) when all are well-formed, else None (the claim is then read
#: again, in full, from the object); and why its allocation is not yet usable by its pods
#: (`claim_waiting`), None when it is. A plain tuple of plain values, which the garbage
#: collector stops tracking: 40,000 claims must not leave 40,000 more objects for it to scan.
ClaimInfo = tuple[tuple[str, str], bool, str | None, tuple[DevKey, ...] | None, str | None]


def read_claim(claim: RawObject) -> ClaimInfo:
    meta = as_map(claim.get("metadata"))
    ns, name = meta.get("namespace"), meta.get("name")
    key = (ns if type(ns) is str else as_str(ns)), (name if type(name) is str else as_str(name))
    allocation = _allocation(claim)
    if allocation is None:
        return key, False, None, None, None
    uid = meta.get("uid")
    if not (type(uid) is str and uid):
        uid = None
    results = as_map(allocation.get("devices")).get("results", ())
    status = claim["status"]  # a mapping: the claim is allocated
    if type(results) is list and len(results) == 1 and type(results[0]) is dict:
        # The common case (one device, no binding conditions, no device status), without
        # the general loop.
        result = results[0]
        waiting = None
        if "devices" in status or "bindingConditions" in result:
            waiting = claim_waiting(results, status.get("devices"))
        elif "bindingFailureConditions" in result:
            waiting = claim_waiting(results, None)
        driver, dra_pool, device = result.get("driver"), result.get("pool"), result.get("device")
        if type(driver) is str and type(dra_pool) is str and type(device) is str:
            return key, True, uid, ((driver, dra_pool, device),), waiting
    waiting = None
    if status.get("devices") is not None or _has_binding_conditions(results):
        waiting = claim_waiting(results, status.get("devices"))
    return key, True, uid, _device_keys(results), waiting


def _has_binding_conditions(results: object) -> bool:
    if not isinstance(results, list | tuple):
        return False
    return any(
        isinstance(r, Mapping) and (r.get("bindingConditions") or r.get("bindingFailureConditions"))
        for r in results
    )


def _conditions(entry: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """A `status.devices[]` entry's conditions: type -> (status, reason)."""
    out: dict[str, tuple[str, str]] = {}
    for cond in as_list(entry.get("conditions")):
        cond = as_map(cond)
        kind = cond.get("type")
        if isinstance(kind, str):
            out[kind] = (as_str(cond.get("status")), as_str(cond.get("reason")))
    return out


def claim_waiting(results: object, devices: object) -> str | None:
    """Why an allocation is not yet usable by its pods (None: it is), from its results and the
    claim's `status.devices` (`resource.k8s.io/v1` AllocatedDeviceStatus, matched by driver,
    pool, device and shareID):

    - `DeviceUnhealthy:<device>`: a device's conditions say `Healthy` False, or `Ready` False
      with reason `Unhealthy` (KEP-4680's health, as a driver reports it on the claim);
    - `BindingFailed:<device>`: one of a result's `bindingFailureConditions` is True;
    - `BindingPending:<device>`: one of a result's `bindingConditions` (KEP-5007) is not True
      yet (or the device has no status at all).

    Unreadable status entries are skipped: a result with binding conditions and no readable
    status is pending. Errs toward waiting: a waiting claim's pods are charged in full."""
    by_device: dict[tuple[str, str, str, str], dict[str, tuple[str, str]]] = {}
    for entry in as_list(devices):
        entry = as_map(entry)
        ident = tuple(as_str(entry.get(f)) for f in ("driver", "pool", "device", "shareID"))
        by_device[(ident[0], ident[1], ident[2], ident[3])] = _conditions(entry)
    waiting: list[str] = []
    for result in as_list(results):
        result = as_map(result)
        ident = tuple(as_str(result.get(f)) for f in ("driver", "pool", "device", "shareID"))
        conds = by_device.get((ident[0], ident[1], ident[2], ident[3]), {})
        label = "/".join(ident[:3])
        ready = conds.get("Ready", ("", ""))
        if conds.get("Healthy", ("",))[0] == "False" or ready == ("False", "Unhealthy"):
            waiting.append(f"DeviceUnhealthy:{label}")
        elif any(
            conds.get(as_str(c), ("",))[0] == "True"
            for c in as_list(result.get("bindingFailureConditions"))
        ):
            waiting.append(f"BindingFailed:{label}")
        elif any(
            conds.get(as_str(c), ("",))[0] != "True"
            for c in as_list(result.get("bindingConditions"))
        ):
            waiting.append(f"BindingPending:{label}")
    return min(waiting) if waiting else None


def _device_keys(results: object) -> tuple[DevKey, ...] | None:
    """Every result's (driver, DRA pool, device); None when one is malformed."""
    if not isinstance(results, list | tuple):
        return None
    found: list[DevKey] = []
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
    return None if allocation is None else as_map(allocation)


@dataclass(frozen=True, slots=True)
class ClaimEffect:
    """What one allocated claim does to the nodes, given the inventory."""

    #: The units (`gpufleet.agent.counters`) of the published devices it takes, each with its
    #: node.
    devices: tuple[tuple[UnitKey, str], ...]
    #: The nodes whose latest allocation time it raises (to its own).
    touched: tuple[str, ...]
    #: (node, driver) it leaves with nothing free of that driver; driver None: of any.
    poison: tuple[tuple[str, str | None], ...] = ()
    found: tuple[Found, ...] = ()


def claim_effect(info: ClaimInfo, obj: RawObject, inv: Inventory) -> ClaimEffect:
    """The effect of an allocated claim (`info` read from `obj`) on the inventory's nodes."""
    key, _, uid, keys, waiting = info
    extra: tuple[Found, ...] = () if uid is not None else (_uidless_found(key),)
    if keys is not None:
        device_node = inv.device_node
        if all(k in device_node for k in keys):
            # The common case (every device known), without the general bookkeeping.
            holders = tuple([device_node[k] for k in keys])
            if waiting is not None:
                extra = (*extra, _waiting_found(key, waiting, holders))
            units = inv.device_units
            if units and any(k in units for k in keys):
                taken = tuple((u, device_node[k]) for k in keys for u in inv.units_of(k))
                return ClaimEffect(taken, holders, (), extra)
            return ClaimEffect(tuple(zip(keys, holders, strict=True)), holders, (), extra)
    effect = _irregular_effect(key, obj, inv)
    if waiting is not None:
        extra = (*extra, _waiting_found(key, waiting, effect.touched))
    if extra:
        effect = ClaimEffect(effect.devices, effect.touched, effect.poison, (*effect.found, *extra))
    return effect


def _waiting_found(key: tuple[str, str], waiting: str, nodes: Sequence[str]) -> Found:
    """The problem of a claim whose allocation its pods cannot use yet (`claim_waiting`)."""
    code = (
        ProblemCode.DEVICE_UNHEALTHY
        if waiting.startswith("DeviceUnhealthy")
        else ProblemCode.DEVICE_BINDING_PENDING
    )
    ns, name = key
    return Found(code, f"claim {ns}/{name} ({waiting})", nodes=tuple(sorted(set(nodes))))


def _uidless_found(key: tuple[str, str]) -> Found:
    ns, name = key
    return Found(ProblemCode.CLAIM_WITHOUT_UID, f"claim {ns}/{name}", scope=None)


def claim_pools(info: ClaimInfo) -> frozenset[DraKey] | None:
    """The DRA pools whose slices a claim's effect reads; None when it cannot be told (a
    claim whose results are malformed: its effect may read any)."""
    keys = info[3]
    if keys is None:
        return None
    return frozenset((driver, pool) for driver, pool, _ in keys)


def _irregular_effect(key: tuple[str, str], obj: RawObject, inv: Inventory) -> ClaimEffect:
    """A claim that names a device no usable slice publishes, or results that cannot be read:
    what it takes, and which nodes it leaves with nothing free (and says so)."""
    label = "/".join(key)
    allocation = _allocation(obj) or EMPTY
    results = as_map(allocation.get("devices")).get("results", ())
    if not isinstance(results, list | tuple):
        node = _selector_node(allocation)
        nodes = (node,) if node is not None else ()
        found = Found(ProblemCode.MALFORMED_CLAIM, f"claim {label}", nodes=nodes)
        return ClaimEffect((), nodes, tuple((n, None) for n in nodes), (found,))
    devices: list[tuple[UnitKey, str]] = []
    touched: list[str] = []
    poison: list[tuple[str, str | None]] = []
    found_all: list[Found] = []
    for result in results:
        _result_effect(result, label, allocation, inv, (devices, touched, poison, found_all))
    return ClaimEffect(tuple(devices), tuple(touched), tuple(poison), tuple(found_all))


def _result_effect(
    result: object,
    label: str,
    allocation: Mapping[str, Any],
    inv: Inventory,
    into: tuple[list[tuple[UnitKey, str]], list[str], list[tuple[str, str | None]], list[Found]],
) -> None:
    """One allocation result's part of `_irregular_effect`, added to `into`."""
    devices, touched, poison, found = into
    result = as_map(result) if type(result) is not dict else result
    driver, dra_pool, device = result.get("driver"), result.get("pool"), result.get("device")
    if isinstance(driver, str) and isinstance(dra_pool, str) and isinstance(device, str):
        holder = inv.node_of((driver, dra_pool, device))
        if holder is not None:
            devices.extend((u, holder) for u in inv.units_of((driver, dra_pool, device)))
            touched.append(holder)
            return
        if inv.is_unusable((driver, dra_pool)):
            # Its nodes already have nothing free of this driver.
            touched.extend(inv.nodes_of((driver, dra_pool)))
            return
        code = ProblemCode.UNKNOWN_DEVICE
        msg = f"claim {label}: {driver}/{dra_pool}/{device}"
    else:
        driver = driver if isinstance(driver, str) else None
        dra_pool = dra_pool if isinstance(dra_pool, str) else None
        code, msg = ProblemCode.MALFORMED_CLAIM, f"claim {label}"
    # Attribute to nodes: the DRA pool's nodes, else the allocation's node selector.
    nodes: frozenset[str] = frozenset()
    if driver is not None and dra_pool is not None:
        nodes = inv.nodes_of((driver, dra_pool))
    if not nodes:
        sel = _selector_node(allocation)
        nodes = frozenset((sel,)) if sel is not None else frozenset()
    for n in nodes:
        poison.append((n, driver))
        touched.append(n)
    found.append(Found(code, msg, nodes=tuple(sorted(nodes))))


# --- pools ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeState:
    """One named pooled node's inputs to its pool's histogram."""

    name: str
    #: The Node's exclusion reason (NoSlices aside).
    excluded: str | None
    #: driver -> published units (whole devices).
    published: Mapping[str, int]
    #: Drivers of which the node has nothing free (unusable DRA pools, bad claims).
    poisoned: frozenset[str]
    #: Whether the node has nothing free of any driver (a claim whose driver is unknown).
    is_poisoned_all: bool
    #: driver -> devices taken by allocated claims.
    taken: Mapping[str, int]
    #: The latest allocation time of a claim holding devices on it.
    last: datetime | None
    #: driver -> published units that are blocked (tainted devices: never free).
    blocked: Mapping[str, int] = field(default_factory=dict)

    @property
    def drivers(self) -> frozenset[str]:
        """The drivers the node adds to its pool's histogram."""
        return frozenset(self.published) | self.poisoned


def observe_pool(
    pool: str,
    nodes: Sequence[NodeState],
    unnamed: int,
    extended: Mapping[str, int],
    problems: tuple[Problem, ...],
    max_buckets: int,
) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
    """Per node free vectors and the pool's histogram (`nodes` sorted by name): each node by
    `observe_node` over the pool's drivers (`pool_drivers`), summed up by `pool_of_nodes`."""
    driver_order = pool_drivers(n.drivers for n in nodes)
    return pool_of_nodes(
        pool,
        [observe_node(pool, n, driver_order) for n in nodes],
        [n.last for n in nodes],
        driver_order,
        (unnamed, extended, problems, max_buckets),
    )


def pool_drivers(drivers: Iterable[frozenset[str]]) -> tuple[str, ...]:
    """The drivers of a pool's histogram: every driver its nodes publish or are poisoned of
    (each node's `NodeState.drivers`), sorted."""
    found: set[str] = set()
    for d in drivers:
        found |= d
    return tuple(sorted(found))


#: One node's part of its pool's histogram: its free vector over the pool's drivers, and its
#: observation (its exclusion reason is the observation's).
NodeView = tuple[tuple[int, ...], ObservedNode]


def observe_node(pool: str, n: NodeState, driver_order: Sequence[str]) -> NodeView:
    """The node's free vector over `driver_order` (all zero when it is excluded or has nothing
    free of any driver) and its observation."""
    reason = n.excluded
    if reason is None and not n.published:
        reason = str(ExclusionReason.NO_SLICES)
    if reason is not None or n.is_poisoned_all:
        vector: tuple[int, ...] = (0,) * len(driver_order)
    else:
        vector = _free_vector(n, driver_order)
    observed = ObservedNode(
        n.name,
        PoolName(pool),
        {DriverName(d): c for d, c in sorted(n.published.items())},
        {DriverName(d): v for d, v in zip(driver_order, vector, strict=True)},
        reason,
    )
    return vector, observed


def pool_of_nodes(
    pool: str,
    views: Sequence[NodeView],
    lasts: Iterable[datetime | None],
    driver_order: Sequence[str],
    rest: tuple[int, Mapping[str, int], tuple[Problem, ...], int],
) -> tuple[ObservedPool, tuple[ObservedNode, ...]]:
    """The pool's observation from its named nodes' views (sorted by name) and their latest
    allocation times; `rest`: the unnamed nodes, extended resources, problems and the cap on
    buckets."""
    unnamed, extended, problems, max_buckets = rest
    counts: dict[tuple[int, ...], int] = defaultdict(int)
    excluded: dict[str, int] = defaultdict(int)
    if unnamed:
        excluded[str(ExclusionReason.NO_SLICES)] += unnamed
        counts[(0,) * len(driver_order)] += unnamed
    for vector, observed_node in views:
        counts[vector] += 1
        if observed_node.excluded is not None:
            excluded[observed_node.excluded] += 1
    if extended and not any(v[1].published for v in views):
        problems = _with_device_plugin(problems, extended, len(views))
    present = [t for t in lasts if t is not None]
    buckets = tuple(
        Bucket({DriverName(d): v for d, v in zip(driver_order, vector, strict=True)}, c)
        for vector, c in sorted(counts.items())
    )
    withheld = len(buckets) > max_buckets or any(p.code in WITHHOLDING for p in problems)
    observed = ObservedPool(
        name=PoolName(pool),
        observed_nodes=len(views) + unnamed,
        free_devices=None if withheld else buckets,
        last_allocation_time=max(present) if present else None,
        excluded_nodes=dict(sorted(excluded.items())),
        extended_resources=dict(extended),
        bucket_count=len(buckets),
        problems=problems,
    )
    return observed, tuple(v[1] for v in views)


def _with_device_plugin(
    problems: tuple[Problem, ...], extended: Mapping[str, int], nodes: int
) -> tuple[Problem, ...]:
    """The pool's problems and `DevicePluginNotCounted`: its nodes' GPUs are a device
    plugin's extended resources, which the agent does not count (they show as none free)."""
    held = ", ".join(f"{k}: {v}" for k, v in sorted(extended.items()))
    found = Problem(
        ProblemCode.DEVICE_PLUGIN_NOT_COUNTED,
        f"{held} on {nodes} node(s), from a device plugin: not counted (no DRA devices)",
        nodes,
    )
    return tuple(sorted((*problems, found), key=lambda p: p.code))


def _free_vector(n: NodeState, driver_order: Sequence[str]) -> tuple[int, ...]:
    blocked = n.blocked
    return tuple(
        0
        if d in n.poisoned
        else max(0, n.published.get(d, 0) - blocked.get(d, 0) - n.taken.get(d, 0))
        for d in driver_order
    )
