"""`compile_deployment(deployment, classes)`: what a deployment matches, computed once.

Model (Kueue's `workload.Info`: a workload's per-pod-set totals, computed once and kept with
it). Matching a deployment against the fleet is a function of its definition and of the
*classes* of pool (a class is everything matching reads of a pool's devices, by value:
`Matcher.class_of`), never of capacity. `compile_deployment` matches every member of every
engine against every class given (`match_member`, the CEL selectors included) and derives
each engine's demand there: the units a free-GPU pool's fit needs (`engine_units` of the
engine stamped with its matches, in the canonical order) and the nodes a whole-node pool's
count needs (`node_cost`): accounting.py's own functions, so there is no second computation
to hold equal.
`CompiledDeployment.on_shape` combines them for a cluster's shape (its pools' classes in
published order): per pool whether the engine may use it (every member matches, and no member
that claims somewhere on the cluster resolves only synthetic devices there), per member
whether it claims somewhere on the cluster.

Reuse. A compiled deployment is a function of the deployment's definition and the classes'
devices only: a caller that schedules again and again keeps it by the deployment's declared
signature (`Deployment.signature`: uid and generation) and asks again when the fleet has a
class it does not cover (`covers`). `schedule`'s memo does exactly that (placement.py,
`PlacementMemo.compiled`). Equal engines (by value: selectors compare by expression) match a
class alike, so a caller may pass one `engines` dictionary to every call: it is read and
filled, keyed by (engine, class id), and never changes a result.

Mutable: only the `engines` dictionary a caller passes. Everything returned is frozen.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.accounting import engine_units, node_cost
from gpufleet.core.capacity import driver_index
from gpufleet.core.fit import Unit, order_units
from gpufleet.core.matching import MemberMatch, match_member
from gpufleet.core.model import (
    Deployment,
    Device,
    DriverName,
    Engine,
    PoolName,
    ReplicaEngine,
    ReplicaMember,
    ResolvedRequest,
)
from gpufleet.core.pod_requests import proportional_requests


@dataclass(frozen=True, slots=True)
class PoolClass:
    """A class of pool: its id (`Matcher.class_of`: by value, never given to another class)
    and the devices of a pool of the class (equal for every pool of it, as matching sees)."""

    id: int
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class EngineOnClass:
    """One engine against one class of pool, capacity aside (shared by pools of the class):
    per member its match; whether every member matches; per member whether it matches and
    claims a DRA device; the units one replica's pods of the engine need from a free-GPU
    pool of the class; the nodes they take from a whole-node one."""

    matches: tuple[MemberMatch, ...]
    is_match: bool
    claiming: tuple[bool, ...]
    units: tuple[Unit, ...]
    node_cost: int
    #: `units` on a pool whose vectors end in free CPU and memory (`PoolLedger.host`): each
    #: pod's vector ends in its (millicores, memory bytes) requests; only when some member
    #: requests CPU or memory (`requests_host`), else `units_on` pads `units` with zeros.
    host_units: tuple[Unit, ...] = ()
    requests_host: bool = False
    #: Per member, (devices each pod claims, of the node's devices of those drivers) when it
    #: asks for proportional requests and claims, else None; empty when no member does. Then
    #: `stamp` is the engine stamped on the class and `devices` the class's devices (not
    #: compared: the matches, units and fractions above already differ where they would).
    proportional: tuple[tuple[int, int] | None, ...] = ()
    stamp: ReplicaEngine | None = None
    devices: tuple[Device, ...] = field(default=(), compare=False)

    def sized(self, shareable: tuple[int, int] | None, pool: PoolName) -> ReplicaEngine | None:
        """The engine stamped for `pool`, its proportional members' requests sized on a
        node's `shareable` room (`proportional_requests`); None when no member asks."""
        if self.stamp is None or shareable is None:
            return None
        members = []
        for member, fraction in zip(self.stamp.members, self.proportional, strict=True):
            cpu, memory = member.milli_cpu, member.memory
            if fraction is not None:
                cpu, memory = proportional_requests(shareable, *fraction, (cpu, memory))
            members.append(replace(member, pool=pool, milli_cpu=cpu, memory=memory))
        return replace(self.stamp, members=tuple(members))

    def units_on(self, is_host: bool, shareable: tuple[int, int] | None = None) -> tuple[Unit, ...]:
        """The units a pool of the class needs, as its vectors read (`PoolLedger.host`);
        `shareable`: the pool's (`PoolObservation.shareable`), for proportional requests."""
        if not is_host:
            return self.units
        sized = self.sized(shareable, _ANY_POOL)
        if sized is not None:
            drivers = _ClassDrivers(self.devices, host=True)
            return tuple(order_units(engine_units(sized, _ANY_POOL, drivers)))
        if self.requests_host:
            return self.host_units
        # Zeros appended keep the canonical order (sums and comparisons are unchanged).
        return tuple(tuple((*pod, 0, 0) for pod in unit) for unit in self.units)


@dataclass(frozen=True, slots=True)
class EngineOnShape:
    """One engine against a cluster's pools (by shape), capacity aside: per pool its
    `EngineOnClass` and whether the engine may use it; per member whether it claims on some
    pool (claimable anywhere); whether some pool matches every member."""

    shapes: tuple[EngineOnClass, ...]
    usable: tuple[bool, ...]
    claimable: tuple[bool, ...]
    is_matched: bool


@dataclass(frozen=True, slots=True)
class CompiledDeployment:
    """A deployment's matches and demand per class of pool (`compile_deployment`)."""

    deployment: Deployment
    #: Per class id: per engine (deployment order), the engine against that class.
    classes: Mapping[int, tuple[EngineOnClass, ...]]

    def covers(self, class_ids: Sequence[int]) -> bool:
        """Whether every class named was compiled (else compile again with them)."""
        return all(c in self.classes for c in class_ids)

    def on_shape(self, class_ids: Sequence[int]) -> tuple[EngineOnShape, ...]:
        """Per engine, the engine against a cluster whose pools have these classes (in
        published order); every class must be covered."""
        out = []
        for i, engine in enumerate(self.deployment.engines):
            shapes = tuple(self.classes[c][i] for c in class_ids)
            claimable = tuple(
                any(shape.claiming[j] for shape in shapes) for j in range(len(engine.members))
            )
            usable = tuple(
                shape.is_match
                and all(
                    has or not wants for has, wants in zip(shape.claiming, claimable, strict=True)
                )
                for shape in shapes
            )
            out.append(EngineOnShape(shapes, usable, claimable, any(s.is_match for s in shapes)))
        return tuple(out)

    def can_host(self, class_ids: Sequence[int]) -> bool:
        """Whether every engine has a pool it could use if the pool were empty."""
        return all(any(s.claimable) and any(s.usable) for s in self.on_shape(class_ids))


def compile_deployment(
    deployment: Deployment,
    classes: Sequence[PoolClass],
    *,
    engines: MutableMapping[tuple[Engine, int], EngineOnClass] | None = None,
) -> CompiledDeployment:
    """Match the deployment against every class (see the module docstring). `engines`, when
    given, is read and filled: what an equal engine matched on a class before."""
    compiled: dict[int, tuple[EngineOnClass, ...]] = {}
    for pool_class in classes:
        per_engine = []
        for engine in deployment.engines:
            key = (engine, pool_class.id)
            found = engines.get(key) if engines is not None else None
            if found is None:
                found = engine_on_class(engine, pool_class.devices)
                if engines is not None:
                    engines[key] = found
            per_engine.append(found)
        compiled[pool_class.id] = tuple(per_engine)
    return CompiledDeployment(deployment, compiled)


def engine_on_class(engine: Engine, devices: Sequence[Device]) -> EngineOnClass:
    """One engine against a class of pool with these devices (pure): each member's
    `match_member`, and the units and node cost of the engine stamped with those matches on a
    pool of the class (`accounting.engine_units`, `accounting.node_cost`)."""
    matches = tuple(match_member(m, devices) for m in engine.members)
    stamp = ReplicaEngine(
        engine.name,
        tuple(
            ReplicaMember(
                m.role,
                _ANY_POOL,
                m.worker_nodes,
                match.resolved,
                m.milli_cpu,
                m.memory,
                m.proportional and match.is_claiming,
            )
            for m, match in zip(engine.members, matches, strict=True)
        ),
        engine.copies,
        engine.phase,
    )
    requests_host = any(m.milli_cpu > 0 or m.memory > 0 for m in engine.members)
    proportional = tuple(
        _fraction(match.resolved, devices) if m.proportional and match.is_claiming else None
        for m, match in zip(engine.members, matches, strict=True)
    )
    is_proportional = any(f is not None for f in proportional)
    return EngineOnClass(
        matches,
        all(m.is_match for m in matches),
        tuple(m.is_match and m.is_claiming for m in matches),
        tuple(order_units(engine_units(stamp, _ANY_POOL, _ClassDrivers(devices)))),
        node_cost((stamp,), _ANY_POOL),
        tuple(order_units(engine_units(stamp, _ANY_POOL, _ClassDrivers(devices, host=True))))
        if requests_host
        else (),
        requests_host,
        proportional if is_proportional else (),
        stamp if is_proportional else None,
        tuple(devices) if is_proportional else (),
    )


def _fraction(resolved: Sequence[ResolvedRequest], devices: Sequence[Device]) -> tuple[int, int]:
    """(devices each pod claims, devices a node of the class has of the drivers claimed, by
    `Device.key`: DRA drivers and device plugins alike):
    the share of a node's room a proportional pod asks."""
    drivers = {r.driver for r in resolved}
    per_node = sum(d.count for d in devices if d.is_counted and d.key in drivers)
    return (sum(r.count for r in resolved), per_node)


#: The pool name an engine is stamped with to be accounted on a class (any pool of it).
_ANY_POOL = PoolName("")


class _ClassDrivers:
    """`accounting.Drivers` of a pool of the class: what `PoolLedger` reads of its devices."""

    __slots__ = ("devices", "drivers", "host")

    def __init__(self, devices: Sequence[Device], *, host: bool = False) -> None:
        self.devices = devices
        #: Whether each pod's vector ends in its CPU and memory requests (`PoolLedger.host`).
        self.host = host
        self.drivers = tuple(sorted({d.key for d in devices if d.is_counted}))

    def driver_index(self, driver: DriverName, device_class_name: str) -> int | None:
        return driver_index(self.drivers, self.devices, driver, device_class_name)
