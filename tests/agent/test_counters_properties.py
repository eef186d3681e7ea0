"""Partitionable devices (KEP-4815 shared counters) and device taints (KEP-5055) against an
exhaustive allocation (issue 27, "Done when"): on random small ResourceSlices with counter sets,
whole devices, partitions, plain devices, taints and feasible allocations, the agent never
reports more free whole devices on a node than the largest set of whole devices that can still be
allocated together there, and never fewer when it reports the pool at all.

The oracle knows nothing of the agent's units: it takes the objects as the allocator does
(remaining counters = the set's counters minus what allocated devices consume; a device
allocated once is gone; an untolerated NoSchedule/NoExecute taint excludes a device) and
searches every subset of the node's whole-device candidates for the largest one that fits. A
*whole device* is a whole-GPU request's device: one that consumes no counters, or every counter
of exactly one counter set at its full value.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from observe_builders import GPU, T0, claim, node

from gpufleet.agent.observe import (
    AllocationClock,
    ClusterObjects,
    ObserveConfig,
    ProblemCode,
    observe,
)
from gpufleet.core.model import Toleration, TolerationOperator

#: The fleet's claims tolerate the device taint `fleet-ok`.
CONFIG = ObserveConfig(
    device_tolerations=(Toleration(key="fleet-ok", operator=TolerationOperator.EXISTS),)
)
Obj = dict[str, Any]
#: Each GPU's counter set: memory slices and compute slices (a MIG-like 7 x 8 shape, small).
FULL = {"memory": 4, "compute": 2}


def _counters(values: Mapping[str, int | str]) -> Obj:
    return {k: {"value": str(v)} for k, v in values.items()}


@st.composite
def partitioned_slices(
    draw: st.DrawFn, node_name: str, dra_pool: str | None = None
) -> tuple[Obj, list[tuple[str, Obj]]]:
    """One node's ResourceSlice: `gpus` counter sets, each with zero or more whole devices and
    partitions (some drawing on two sets), plain devices, and taints here and there."""
    gpus = draw(st.integers(0, 3))
    sets = [{"name": f"{node_name}-gpu-{g}", "counters": _counters(FULL)} for g in range(gpus)]
    devices: list[Obj] = []
    taint = st.sampled_from(
        [None, None, None, "NoSchedule", "NoExecute", "None", "tolerated"],
    )
    for g in range(gpus):
        set_name = f"{node_name}-gpu-{g}"
        for w in range(draw(st.integers(0, 2))):
            devices.append(
                {
                    "name": f"gpu-{g}-whole-{w}",
                    "consumesCounters": [{"counterSet": set_name, "counters": _counters(FULL)}],
                }
            )
        for p in range(draw(st.integers(0, 3))):
            memory = draw(st.integers(0, 3))
            compute = draw(st.integers(0, 2))
            uses = [{"counterSet": set_name, "counters": _counters({"memory": memory})}]
            if compute:
                uses[0]["counters"]["compute"] = {"value": str(compute)}
            if g + 1 < gpus and draw(st.booleans()):  # a partition drawing on two GPUs
                uses.append(
                    {"counterSet": f"{node_name}-gpu-{g + 1}", "counters": _counters({"memory": 1})}
                )
            devices.append({"name": f"gpu-{g}-part-{p}", "consumesCounters": uses})
    for i in range(draw(st.integers(0, 2))):
        devices.append({"name": f"plain-{i}"})
    for dev in devices:
        effect = draw(taint)
        if effect == "tolerated":
            dev["taints"] = [{"key": "fleet-ok", "effect": "NoSchedule"}]
        elif effect is not None:
            dev["taints"] = [{"key": "health", "value": "bad", "effect": effect}]
    spec: Obj = {
        "driver": GPU,
        "pool": {"name": dra_pool or node_name, "generation": 1, "resourceSliceCount": 1},
        "nodeName": node_name,
        "devices": devices,
    }
    if sets:
        spec["sharedCounters"] = sets
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{dra_pool or node_name}-slice"},
        "spec": spec,
    }
    return obj, [(d["name"], d) for d in devices]


def _consumes(dev: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return {
        u["counterSet"]: {k: int(v["value"]) for k, v in u["counters"].items()}
        for u in dev.get("consumesCounters", ())
    }


def _fits(uses: Mapping[str, Mapping[str, int]], left: Mapping[str, dict[str, int]]) -> bool:
    return all(left[s][c] >= n for s, counters in uses.items() for c, n in counters.items())


def _take(uses: Mapping[str, Mapping[str, int]], left: Mapping[str, dict[str, int]]) -> None:
    for s, counters in uses.items():
        for c, n in counters.items():
            left[s][c] -= n


def _is_whole(uses: Mapping[str, Mapping[str, int]]) -> bool:
    return not uses or (len(uses) == 1 and next(iter(uses.values())) == FULL)


def _untolerated(dev: Mapping[str, Any]) -> bool:
    return any(
        t["effect"] in ("NoSchedule", "NoExecute") and t["key"] != "fleet-ok"
        for t in dev.get("taints", ())
    )


def _allocate(
    devices: Sequence[tuple[str, Obj]], picks: Sequence[int], sets: Sequence[str]
) -> tuple[list[str], dict[str, dict[str, int]]]:
    """A feasible allocation (what kube-scheduler could have done, taints aside: a taint added
    after allocation does not evict a NoSchedule-tainted device): the picked devices, in order,
    each allocated when its counters still fit; and the counters left."""
    left = {s: dict(FULL) for s in sets}
    allocated: list[str] = []
    for i in picks:
        name, dev = devices[i % len(devices)]
        uses = _consumes(dev)
        if name not in allocated and _fits(uses, left):
            allocated.append(name)
            _take(uses, left)
    return allocated, left


def _exhaustive(
    devices: Sequence[tuple[str, Obj]], allocated: Sequence[str], left: Mapping[str, dict[str, int]]
) -> int:
    """The most whole devices that can still be allocated together."""
    candidates = [
        _consumes(dev)
        for name, dev in devices
        if name not in allocated and not _untolerated(dev) and _is_whole(_consumes(dev))
    ]
    for size in range(len(candidates), 0, -1):
        for subset in itertools.combinations(candidates, size):
            trial = {s: dict(c) for s, c in left.items()}
            if all(_fits(u, trial) and (_take(u, trial) or True) for u in subset):
                return size
    return 0


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_free_whole_devices_are_what_an_exhaustive_allocation_finds(data: st.DataObject) -> None:
    nodes, slices, claims = [], [], []
    want: dict[str, int] = {}
    for node_name in ("n1", "n2"):
        obj, devices = data.draw(partitioned_slices(node_name))
        sets = [s["name"] for s in obj["spec"].get("sharedCounters", ())]
        picks = data.draw(st.lists(st.integers(0, 20), max_size=4)) if devices else []
        allocated, left = _allocate(devices, picks, sets)
        nodes.append(node(node_name, "a"))
        slices.append(obj)
        for i, name in enumerate(allocated):
            claims.append(claim(f"{node_name}-c{i}", [(node_name, name)]))
        want[node_name] = _exhaustive(devices, allocated, left)
    result, _ = observe(
        ClusterObjects(tuple(nodes), tuple(slices), tuple(claims), (), ()),
        AllocationClock(),
        CONFIG,
        T0,
    )
    (pool,) = result.pools
    assert pool.free_devices is not None, pool.problems
    got = {n.name: n.free.get(GPU, 0) for n in result.nodes}
    assert got == want, (got, want, slices, claims)


@st.composite
def unaccountable(draw: st.DrawFn) -> tuple[Obj, ...]:
    """Slices whose counters cannot be accounted exactly, each in one way."""
    way = draw(
        st.sampled_from(
            ["fraction", "unknown-set", "unknown-counter", "two-nodes", "duplicate-set"]
        )
    )
    counters = _counters({"memory": "1.5" if way == "fraction" else 4})
    sets = [{"name": "gpu-0", "counters": counters}]
    if way == "duplicate-set":
        sets.append({"name": "gpu-0", "counters": counters})
    uses: Obj = {
        "counterSet": "gpu-9" if way == "unknown-set" else "gpu-0",
        "counters": _counters({"memory": 1}),
    }
    if way == "unknown-counter":
        uses["counters"] = _counters({"sm": 1})
    count = 2 if way == "two-nodes" else 1

    def one(node_name: str, devices: list[Obj], with_sets: bool) -> Obj:
        spec: Obj = {
            "driver": GPU,
            "pool": {"name": "shared", "generation": 1, "resourceSliceCount": count},
            "nodeName": node_name,
            "devices": devices,
        }
        if with_sets:
            spec["sharedCounters"] = sets
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-slice"},
            "spec": spec,
        }

    first = one("n1", [{"name": "part-a", "consumesCounters": [uses]}], True)
    if way != "two-nodes":
        return (first,)
    return first, one("n2", [{"name": "part-b", "consumesCounters": [uses]}], False)


@settings(max_examples=50, deadline=None)
@given(unaccountable())
def test_unaccountable_counters_withhold_the_pool_with_the_reason(slices: tuple[Obj, ...]) -> None:
    nodes = (node("n1", "a"), node("n2", "a"))
    result, _ = observe(ClusterObjects(nodes, slices, (), (), ()), AllocationClock(), CONFIG, T0)
    (pool,) = result.pools
    assert pool.free_devices is None
    assert ProblemCode.PARTITIONABLE_DEVICES_UNACCOUNTED in {p.code for p in pool.problems}
    assert all(not any(n.free.values()) for n in result.nodes)


def test_consumable_capacity_is_taken_after_one_allocation_and_the_pool_says_so() -> None:
    """KEP-5075: the conservative rule, shown where the pool is (its status conditions)."""
    shared = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "80Gi"}},
    }
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-slice"},
        "spec": {
            "driver": GPU,
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": [shared, {"name": "gpu-1"}],
        },
    }
    result, _ = observe(
        ClusterObjects((node("n1", "a"),), (obj,), (claim("c1", [("n1", "gpu-0")]),), (), ()),
        AllocationClock(),
        CONFIG,
        T0,
    )
    (pool,) = result.pools
    assert [n.free for n in result.nodes] == [{GPU: 1}]
    conditions = {c["type"]: c for c in pool.to_status()["conditions"]}
    found = conditions["ConsumableCapacityCountedWhole"]
    assert (found["status"], found["reason"]) == ("True", "ConsumableCapacityCountedWhole")
    assert "gpu.nvidia.com/n1/gpu-0" in found["message"]
