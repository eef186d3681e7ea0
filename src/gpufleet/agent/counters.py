"""What one usable DRA pool's devices count for: whole devices, shared counters and taints.

A `resource.k8s.io/v1` DRA pool may publish counter sets (`spec.sharedCounters`, KEP-4815
partitionable devices, the shape of MIG) that its devices draw on (`consumesCounters`). One GPU
then appears as a whole-GPU device *and* as partitions, all drawing on one counter set, so
counting devices by name overcounts. The agent counts in **units** instead:

- a device that consumes no counters is one unit (itself);
- a counter set is one unit when some *whole* device draws on it: a device that consumes, from
  exactly one counter set, every counter of that set at its full value (a set with at least one
  positive counter). Every other device that consumes counters is a *partition*: it is never a
  unit of its own;
- an allocated device takes its own unit (a plain device), or every counter-set unit it consumes
  a positive amount of (a whole device or a partition). So a GPU one of whose partitions is
  allocated has no whole device free, and a free whole GPU is a counter set nothing draws on:
  exactly what an exhaustive allocation of whole devices finds (the property test checks it).

A unit is **blocked** (published, never free) when the fleet's claims cannot use it: a plain
device with a NoSchedule or NoExecute device taint (KEP-5055) that `ObserveConfig.device_tolerations`
does not tolerate (a malformed taint is untolerated), or a counter set all of whose whole devices
are so tainted. Effect `None` is informational. A device that allows multiple allocations
(KEP-5075, consumable capacity) is counted taken after its first allocation and said so.

Where the counters cannot be accounted exactly (a malformed or duplicate counter set, a device
drawing on a set or counter its pool does not define, a quantity that is not a whole number, one
set drawn on from more than one node), the DRA pool is unusable and its nodes' pool is reported
unobservable (`PartitionableDevicesUnaccounted`): it errs toward full, never free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.agent.model import (
    Found,
    ProblemCode,
    as_list,
    as_map,
    parse_count_quantity,
)
from gpufleet.core.model import TaintEffect, Toleration, TolerationOperator

#: (driver, DRA pool, device name), or (driver, DRA pool, `SET_UNIT` + counter set): what
#: one free whole device stands for.
UnitKey = tuple[str, str, str]
#: The prefix of a counter set's unit name; a device name starting with it is malformed.
SET_UNIT: Final = "\x00set:"

#: One published device of a DRA pool's newest generation: (name, node or "", its object).
Published = tuple[str, str, Any]


@dataclass(frozen=True, slots=True)
class Accounting:
    """What a usable DRA pool's devices count for (see the module docstring)."""

    #: Device -> the units an allocation of it takes, for the devices whose units are not
    #: just themselves (tainted plain devices, devices that consume counters).
    units: Mapping[tuple[str, str, str], tuple[UnitKey, ...]] = field(default_factory=dict)
    #: node -> how many units it publishes (plain devices and counter sets with a whole device).
    published: Mapping[str, int] = field(default_factory=dict)
    #: node -> how many of them are blocked (tainted).
    blocked: Mapping[str, int] = field(default_factory=dict)
    found: tuple[Found, ...] = ()
    #: Why the counters cannot be accounted ("" when they can).
    unaccounted: str = ""


class _Unaccounted(Exception):
    pass


def _quantities(value: object, what: str) -> dict[str, int]:
    """A `counters` map: counter name -> whole-number value."""
    if not isinstance(value, Mapping) or not value:
        raise _Unaccounted(f"{what}: counters")
    out: dict[str, int] = {}
    for name, counter in value.items():
        n = parse_count_quantity(as_map(counter).get("value"))
        if not isinstance(name, str) or not name or n is None:
            raise _Unaccounted(f"{what}: counter {name!r}")
        out[name] = n
    return out


def _counter_sets(specs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Every counter set the pool's slices define, by name."""
    sets: dict[str, dict[str, int]] = {}
    for spec in specs:
        raw = spec.get("sharedCounters")
        if raw is None:
            continue
        if not isinstance(raw, list | tuple):
            raise _Unaccounted("sharedCounters")
        for entry in raw:
            entry = as_map(entry)
            name = entry.get("name")
            if not isinstance(name, str) or not name or name in sets:
                raise _Unaccounted(f"counter set {name!r}")
            sets[name] = _quantities(entry.get("counters"), f"counter set {name}")
    return sets


def _consumption(
    dev: Mapping[str, Any], name: str, sets: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """counter set -> counter -> what the device consumes of it."""
    raw = dev.get("consumesCounters")
    if raw is None:
        return {}
    if not isinstance(raw, list | tuple):
        raise _Unaccounted(f"device {name}: consumesCounters")
    out: dict[str, dict[str, int]] = {}
    for entry in raw:
        entry = as_map(entry)
        set_name = entry.get("counterSet")
        if not isinstance(set_name, str) or set_name not in sets or set_name in out:
            raise _Unaccounted(f"device {name}: counter set {set_name!r}")
        used = _quantities(entry.get("counters"), f"device {name}")
        if not used.keys() <= sets[set_name].keys():
            raise _Unaccounted(f"device {name}: a counter set {set_name} does not define")
        out[set_name] = used
    return out


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Toleration]) -> bool:
    key, value, effect = taint.get("key"), taint.get("value", ""), taint.get("effect")
    if effect not in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE):
        return effect == "None"  # informational; anything else is malformed: untolerated
    if not isinstance(key, str) or not isinstance(value, str):
        return False
    for t in tolerations:
        if t.effect is not None and t.effect != effect:
            continue
        if t.operator is TolerationOperator.EXISTS:
            if t.key in ("", key):
                return True
        elif t.key == key and t.value == value:
            return True
    return False


def untolerated_taint(dev: Mapping[str, Any], tolerations: Sequence[Toleration]) -> str | None:
    """The first device taint (`key=effect`) the fleet's claims do not tolerate, if any."""
    taints = dev.get("taints")
    if taints is None:
        return None
    for taint in as_list(taints) if isinstance(taints, list | tuple) else (None,):
        if not isinstance(taint, Mapping):
            return "<malformed>"
        if not _tolerated(taint, tolerations):
            return f"{taint.get('key')}={taint.get('effect')}"
    return None


def account(
    key: tuple[str, str],
    specs: Sequence[Mapping[str, Any]],
    devices: Sequence[Published],
    tolerations: Sequence[Toleration],
) -> Accounting:
    """What the devices of one usable DRA pool (`key`; its newest slices' specs and devices)
    count for."""
    driver, pool = key
    label = f"{driver}/{pool}"
    try:
        sets = _counter_sets(specs)
        consumed = [_consumption(as_map(obj), name, sets) for name, _, obj in devices]
    except _Unaccounted as e:
        return Accounting(unaccounted=f"{label}: {e}")
    found: list[Found] = []
    tainted: list[str | None] = []
    for name, node, obj in devices:
        dev = as_map(obj)
        taint = untolerated_taint(dev, tolerations)
        tainted.append(taint)
        if taint is not None and node:
            found.append(
                Found(ProblemCode.TAINTED_DEVICE, f"{label}/{name} ({taint})", nodes=(node,))
            )
        if dev.get("allowMultipleAllocations") is True and node:
            found.append(
                Found(
                    ProblemCode.CONSUMABLE_CAPACITY_COUNTED_WHOLE, f"{label}/{name}", nodes=(node,)
                )
            )
    if not sets and not any(consumed):
        return _plain(driver, pool, devices, tainted, found)
    try:
        return _with_counters(key, sets, devices, consumed, tainted, found)
    except _Unaccounted as e:
        return Accounting(unaccounted=f"{label}: {e}")


def _plain(
    driver: str,
    pool: str,
    devices: Sequence[Published],
    tainted: Sequence[str | None],
    found: list[Found],
) -> Accounting:
    published: dict[str, int] = {}
    blocked: dict[str, int] = {}
    units: dict[tuple[str, str, str], tuple[UnitKey, ...]] = {}
    for (name, node, _), taint in zip(devices, tainted, strict=True):
        if not node:
            continue
        published[node] = published.get(node, 0) + 1
        if taint is not None:
            blocked[node] = blocked.get(node, 0) + 1
            units[(driver, pool, name)] = ()
    return Accounting(units, published, blocked, tuple(found))


def _with_counters(
    key: tuple[str, str],
    sets: Mapping[str, Mapping[str, int]],
    devices: Sequence[Published],
    consumed: Sequence[Mapping[str, Mapping[str, int]]],
    tainted: Sequence[str | None],
    found: list[Found],
) -> Accounting:
    driver, pool = key
    set_node: dict[str, str] = {}
    #: counter set -> whether some untainted whole device draws on it.
    whole_sets: dict[str, bool] = {}
    for (_, node, _), uses, taint in zip(devices, consumed, tainted, strict=True):
        for set_name, counters in uses.items():
            if any(counters.values()) and set_node.setdefault(set_name, node) != node:
                raise _Unaccounted(f"counter set {set_name} drawn on from two nodes")
        if _is_whole(uses, sets) and node:
            (set_name,) = uses
            whole_sets[set_name] = whole_sets.get(set_name, False) or taint is None
    published: dict[str, int] = {}
    blocked: dict[str, int] = {}
    units: dict[tuple[str, str, str], tuple[UnitKey, ...]] = {}
    for set_name, is_free in whole_sets.items():
        node = set_node[set_name]
        published[node] = published.get(node, 0) + 1
        if not is_free:
            blocked[node] = blocked.get(node, 0) + 1
    for (name, node, _), uses, taint in zip(devices, consumed, tainted, strict=True):
        if not node:
            continue
        dev = (driver, pool, name)
        if not uses:
            published[node] = published.get(node, 0) + 1
            if taint is not None:
                blocked[node] = blocked.get(node, 0) + 1
                units[dev] = ()
            continue
        units[dev] = tuple(
            (driver, pool, SET_UNIT + s)
            for s in sorted(uses)
            if any(uses[s].values()) and whole_sets.get(s) is True
        )
    return Accounting(units, published, blocked, tuple(found))


def _is_whole(uses: Mapping[str, Mapping[str, int]], sets: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether a device consuming `uses` is a whole device: all of exactly one counter set."""
    if len(uses) != 1:
        return False
    ((set_name, counters),) = uses.items()
    total = sets[set_name]
    return dict(counters) == dict(total) and any(total.values())
