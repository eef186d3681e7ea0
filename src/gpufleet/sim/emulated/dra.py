"""DRA structured-parameters allocation, as the emulated kube-scheduler does it.

A device is (driver, DRA pool, device name) from `resource.k8s.io/v1` ResourceSlices; our DRA
driver publishes one slice per node and driver whose DRA pool is named after the node. A device
is taken when any ResourceClaim's `status.allocation.devices.results` names it (any tenant).

Allocation is first-fit per request over the node's published devices in device-name order
(natural: `gpu-2` before `gpu-10`), skipping taken devices, devices of another driver than the
request's DeviceClass, and devices any of the request's CEL selectors rejects (through
`gpufleet.cel.compile_selector`; a selector that does not compile matches nothing). A
request's devices are never shared with another request of the same claim. Unlike the real
allocator there is no backtracking across requests: a claim with two requests whose selectors
overlap may be refused where a smarter order would succeed (the fleet's own fit has the same
greedy limit). `allocationMode: All` and admin access are not modelled.

Partitionable devices (KEP-4815) and device taints (KEP-5055), as far as the fleet needs them:
a pool may publish MIG-shaped GPUs (`node_devices`): per GPU a counter set, a whole device that
consumes all of it and partitions that consume a part. The emulated allocator gives requests
whole devices only (the fleet asks for whole GPUs; a partition is allocated by naming it, as a
foreign tenant's claim does), never a whole device any taken device draws on (a positive
amount of one of its counter sets), and never a device with a NoSchedule/NoExecute taint (the
fleet's claims tolerate none). Counter arithmetic beyond that is not modelled: a partition
named by a claim is not checked against what is left of its set.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property, lru_cache
from typing import Any, Final

from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.core.model import Attribute, AttributeKind, Device, DriverName, Selector
from gpufleet.sim.emulated.cluster_spec import PoolSpec

DeviceKey = tuple[str, str, str]  # (driver, DRA pool, device name)


@dataclass(frozen=True)
class PublishedDevice:
    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Any]
    #: The counter sets it consumes a positive amount of (KEP-4815).
    consumes: tuple[str, ...] = ()
    #: False for a partition: a device that consumes counters but not all of one set.
    is_whole: bool = True
    #: Whether it carries a NoSchedule/NoExecute device taint (KEP-5055).
    is_tainted: bool = False

    @property
    def is_plain(self) -> bool:
        """Neither draws on counters nor is tainted: first fit by count is exact for it."""
        return not self.consumes and not self.is_tainted

    # Published devices are kept while the ResourceSlices stay the same, and the scheduler
    # looks at the same ones for every pod it places: what it asks of them is made once (no
    # slots, so that it can be cached on the instance).

    @cached_property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    @cached_property
    def core(self) -> Device:
        """`to_core_device(self)`."""
        return to_core_device(self)

    @cached_property
    def _matched(self) -> dict[str, bool]:
        return {}

    def matches(self, expression: str) -> bool:
        """Whether the CEL selector `expression` accepts the device (False when it does not
        compile), remembered per expression."""
        found = self._matched.get(expression)
        if found is None:
            compiled = _compiled(expression)
            found = self._matched[expression] = compiled is not None and compiled.matches(self.core)
        return found


@dataclass(frozen=True, slots=True)
class Request:
    """One `exactly` request of a claim: `count` devices of `driver` passing `selectors`."""

    name: str
    driver: str
    count: int
    selectors: tuple[str, ...]


@lru_cache(maxsize=8192)
def natural_key(name: str) -> tuple[Any, ...]:
    """`gpu-10` after `gpu-2` (remembered: the scheduler sorts the same node names per pod)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def published_devices(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[PublishedDevice]]:
    """Per node, the devices of its slices' newest generation, in device-name order."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver")), str(pool.get("name")))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation", 0)))
    out: dict[str, list[PublishedDevice]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        driver, pool_name = str(spec.get("driver")), str(pool.get("name"))
        node = spec.get("nodeName")
        if not node or int(pool.get("generation", 0)) != newest[(driver, pool_name)]:
            continue
        sets = {
            str(c.get("name")): _values(c.get("counters")) for c in spec.get("sharedCounters") or []
        }
        for d in spec.get("devices") or []:
            uses = {
                str(u.get("counterSet")): _values(u.get("counters"))
                for u in d.get("consumesCounters") or []
            }
            out.setdefault(str(node), []).append(
                PublishedDevice(
                    driver,
                    pool_name,
                    str(d["name"]),
                    str(node),
                    d.get("attributes") or {},
                    d.get("capacity") or {},
                    tuple(sorted(k for k, v in uses.items() if any(q != "0" for q in v.values()))),
                    not uses
                    or (len(uses) == 1 and [*uses.values()] == [sets.get(next(iter(uses)))]),
                    any(
                        t.get("effect") in ("NoSchedule", "NoExecute")
                        for t in d.get("taints") or []
                    ),
                )
            )
    for devices in out.values():
        devices.sort(key=lambda d: (d.driver, natural_key(d.name)))
    return out


def _values(counters: object) -> dict[str, str]:
    """A `counters` map as counter name -> quantity text."""
    if not isinstance(counters, Mapping):
        return {}
    return {str(k): str((v or {}).get("value")) for k, v in counters.items()}


#: The taint a scenario's unhealthy device carries (`node_devices`).
UNHEALTHY_TAINT: Final = {"key": "gpu.nvidia.com/unhealthy", "effect": "NoSchedule"}


def node_devices(
    name: str, count: int, partitions: int, counter: str, tainted: Iterable[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The devices `name-0..count-1` a node's slice publishes for one InferenceClass device
    entry, and its counter sets: with `partitions`, each GPU is a counter set (`memory`:
    `partitions` x `counter`), a whole device that consumes all of it, and `partitions`
    partitions (`name-i-mig-k`) that consume `counter` each; the devices named in `tainted`
    carry `UNHEALTHY_TAINT`. `counter` is published as written: a quantity that is not a whole
    number is one the agent cannot account."""
    tainted = set(tainted)
    devices: list[dict[str, Any]] = []
    sets: list[dict[str, Any]] = []
    for i in range(count):
        whole: dict[str, Any] = {"name": f"{name}-{i}"}
        devices.append(whole)
        if not partitions:
            continue
        total = counter if partitions == 1 else _times(counter, partitions)
        sets.append({"name": f"{name}-{i}", "counters": {"memory": {"value": total}}})
        whole["consumesCounters"] = [
            {"counterSet": f"{name}-{i}", "counters": {"memory": {"value": total}}}
        ]
        for k in range(partitions):
            devices.append(
                {
                    "name": f"{name}-{i}-mig-{k}",
                    "consumesCounters": [
                        {"counterSet": f"{name}-{i}", "counters": {"memory": {"value": counter}}}
                    ],
                }
            )
    for d in devices:
        if d["name"] in tainted:
            d["taints"] = [dict(UNHEALTHY_TAINT)]
    return devices, sets


def slice_specs(node_name: str, pool: PoolSpec) -> list[tuple[str, dict[str, Any]]]:
    """(driver, ResourceSlice spec) of each driver of the node's pool: its DRA devices
    (`node_devices`, with the attributes and capacity of the pool's class), sorted by driver."""
    by_driver: dict[str, list[dict[str, Any]]] = {}
    counter_sets: dict[str, list[dict[str, Any]]] = {}
    for d in pool.devices:
        if d.claim != "DRA":
            continue
        made, sets = node_devices(
            d.name, d.count, pool.partitions, pool.partition_counter, pool.tainted_devices
        )
        for device in made:
            if d.attributes:
                device["attributes"] = {k: dict(v) for k, v in d.attributes.items()}
            if d.capacity and "-mig-" not in device["name"]:
                device["capacity"] = {k: {"value": v} for k, v in d.capacity.items()}
        by_driver.setdefault(d.driver, []).extend(made)
        counter_sets.setdefault(d.driver, []).extend(sets)
    out: list[tuple[str, dict[str, Any]]] = []
    for driver, devices in sorted(by_driver.items()):
        spec: dict[str, Any] = {
            "driver": driver,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": devices,
        }
        if counter_sets[driver]:
            spec["sharedCounters"] = counter_sets[driver]
        out.append((driver, spec))
    return out


def _times(counter: str, n: int) -> str:
    """`n` x the quantity `counter`: a whole number times n, else the text repeated as a
    decimal product (enough for a scenario's fractional counters)."""
    if counter.isdigit():
        return str(int(counter) * n)
    return str(Decimal(counter) * n) if _is_decimal(counter) else counter


def _is_decimal(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True


def units(devices: Sequence[PublishedDevice], taken: Container[DeviceKey]) -> tuple[int, int]:
    """(whole GPUs, taken ones) of a node's devices as a whole-device request sees them: a
    device that draws on no counters is one; a counter set some whole device draws on is one,
    taken when any taken device draws on it; partitions are none."""
    sets = {d.consumes[0] for d in devices if d.is_whole and len(d.consumes) == 1}
    drawn = {s for d in devices if d.key in taken for s in d.consumes}
    plain = [d for d in devices if not d.consumes]
    return len(plain) + len(sets), sum(d.key in taken for d in plain) + len(sets & drawn)


def is_plain(devices: Iterable[PublishedDevice]) -> bool:
    """Whether no device draws on counters or is tainted (a count of free devices is then
    exactly what first fit can take)."""
    return all(d.is_plain for d in devices)


def taken_devices(claims: Iterable[Mapping[str, Any]]) -> set[DeviceKey]:
    taken: set[DeviceKey] = set()
    for c in claims:
        allocation = (c.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            taken.add((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))))
    return taken


def claim_requests(claim: Mapping[str, Any], class_drivers: Mapping[str, str]) -> list[Request]:
    """The claim's requests; an unknown DeviceClass gets driver "" (matches nothing)."""
    out: list[Request] = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exactly = r.get("exactly") or {}
        out.append(
            Request(
                name=str(r.get("name")),
                driver=class_drivers.get(str(exactly.get("deviceClassName")), ""),
                count=int(exactly.get("count", 1)),
                selectors=tuple(
                    str((s.get("cel") or {}).get("expression", ""))
                    for s in exactly.get("selectors") or []
                ),
            )
        )
    return out


def to_core_device(d: PublishedDevice) -> Device:
    """A published device as the CEL layer reads it."""
    attributes: dict[str, Attribute] = {}
    for name, value in d.attributes.items():
        for kind in AttributeKind:
            if isinstance(value, Mapping) and kind.value in value:
                attributes[name] = Attribute(kind, value[kind.value])
                break
    capacity = {
        name: str(v.get("value")) if isinstance(v, Mapping) else str(v)
        for name, v in d.capacity.items()
    }
    return Device(
        name=d.name, driver=DriverName(d.driver), attributes=attributes, capacity=capacity
    )


@lru_cache(maxsize=1024)
def _compiled(expression: str) -> Selector | None:
    try:
        return compile_selector(expression)
    except CelCompileError:
        return None


def selectors_match(selectors: Iterable[str], device: PublishedDevice) -> bool:
    return all(device.matches(expression) for expression in selectors)


def allocate(
    requests: Iterable[Request],
    devices: Iterable[PublishedDevice],
    taken: set[DeviceKey],
) -> list[dict[str, str]] | None:
    """First-fit results (`{request, driver, pool, device}`) for every request, or None."""
    devices = list(devices)
    drawn = {s for d in devices if d.key in taken for s in d.consumes}
    available = [d for d in devices if d.key not in taken and d.is_whole and not d.is_tainted]
    used: set[DeviceKey] = set()
    results: list[dict[str, str]] = []
    for req in requests:
        picked = 0
        for d in available:
            if picked == req.count:
                break
            if d.key in used or d.driver != req.driver or not drawn.isdisjoint(d.consumes):
                continue
            if not selectors_match(req.selectors, d):
                continue
            used.add(d.key)
            drawn.update(d.consumes)
            picked += 1
            results.append(
                {"request": req.name, "driver": d.driver, "pool": d.pool, "device": d.name}
            )
        if picked < req.count:
            return None
    return results
