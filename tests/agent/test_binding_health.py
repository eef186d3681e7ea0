"""Binding conditions (KEP-5007) and device health (KEP-4680) on allocated claims (issue 27):
the devices stay taken, the claim's pods are not counted allocated (so the hub charges them in
full), and the pool says why; the incremental table agrees with `observe`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from observe_builders import GPU, T0, claim, node, pod, replica, rslice

from gpufleet.agent.observe import AllocationClock, ClusterObjects, ObserveConfig, observe
from gpufleet.agent.table import TABLE_KINDS, FreeDeviceTable
from gpufleet.store.port import Change, ChangeType, kind_of

Obj = dict[str, Any]


def _bound(
    obj: Obj,
    *,
    binding: tuple[str, ...] = (),
    failure: tuple[str, ...] = (),
    conditions: dict[str, tuple[str, str]] | None = None,
) -> Obj:
    """The claim with binding conditions on its result, and a `status.devices` entry with
    `conditions` (type -> (status, reason)) when given."""
    (result,) = obj["status"]["allocation"]["devices"]["results"]
    if binding:
        result["bindingConditions"] = list(binding)
    if failure:
        result["bindingFailureConditions"] = list(failure)
    if conditions is not None:
        obj["status"]["devices"] = [
            {
                "driver": result["driver"],
                "pool": result["pool"],
                "device": result["device"],
                "conditions": [
                    {"type": t, "status": s, "reason": r} for t, (s, r) in conditions.items()
                ],
            }
        ]
    return obj


@dataclass(frozen=True)
class Case:
    name: str
    claim: Obj
    #: The problem code on the pool (None: none), and whether the pod counts allocated.
    code: str | None
    is_allocated: bool


CASES = [
    Case("no binding conditions", claim("c1", [("n1", "gpu-0")]), None, True),
    Case(
        "binding conditions not reported yet",
        _bound(claim("c1", [("n1", "gpu-0")]), binding=("Attached",)),
        "DeviceBindingPending",
        False,
    ),
    Case(
        "binding condition False",
        _bound(
            claim("c1", [("n1", "gpu-0")]),
            binding=("Attached",),
            conditions={"Attached": ("False", "Attaching")},
        ),
        "DeviceBindingPending",
        False,
    ),
    Case(
        "binding conditions met",
        _bound(
            claim("c1", [("n1", "gpu-0")]),
            binding=("Attached",),
            failure=("AttachFailed",),
            conditions={"Attached": ("True", ""), "AttachFailed": ("False", "")},
        ),
        None,
        True,
    ),
    Case(
        "binding failed",
        _bound(
            claim("c1", [("n1", "gpu-0")]),
            binding=("Attached",),
            failure=("AttachFailed",),
            conditions={"Attached": ("True", ""), "AttachFailed": ("True", "Timeout")},
        ),
        "DeviceBindingPending",
        False,
    ),
    Case(
        "device reported unhealthy",
        _bound(claim("c1", [("n1", "gpu-0")]), conditions={"Healthy": ("False", "XID79")}),
        "DeviceUnhealthy",
        False,
    ),
    Case(
        "device not ready because unhealthy",
        _bound(claim("c1", [("n1", "gpu-0")]), conditions={"Ready": ("False", "Unhealthy")}),
        "DeviceUnhealthy",
        False,
    ),
    Case(
        "device ready",
        _bound(claim("c1", [("n1", "gpu-0")]), conditions={"Ready": ("True", "")}),
        None,
        True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_allocation_its_pods_cannot_use_yet_stays_taken_and_is_charged(case: Case) -> None:
    objects = ClusterObjects(
        (node("n1", "a"),),
        (rslice("n1", 2),),
        (case.claim,),
        (pod("p1", "r1", claims=["c1"], node_name="n1"),),
        (replica("r1"),),
    )
    config = ObserveConfig()
    result, _ = observe(objects, AllocationClock(), config, T0)
    (pool,) = [p for p in result.pools if p.name == "a"]
    (n1,) = result.nodes
    assert n1.free == {GPU: 1}  # the device stays taken either way
    codes = {p.code for p in pool.problems}
    assert codes == ({case.code} if case.code else set())
    (rep,) = result.replicas
    allocated = sum(m.allocated_pods for p in rep.pools for m in p.members)
    assert allocated == (1 if case.is_allocated else 0)
    assert rep.pods_scheduled is case.is_allocated
    # The incremental table gives the same.
    table = FreeDeviceTable(config)
    table.apply(
        Change(i, ChangeType.ADDED, kind_of(o), o)
        for i, o in enumerate((*objects.nodes, *objects.slices, *objects.claims, *objects.pods))
        if kind_of(o) in TABLE_KINDS
    )
    assert table.snapshot(list(objects.replicas), T0).result == result


def test_a_binding_condition_met_later_counts_the_pod_at_the_next_snapshot() -> None:
    """A status write that meets the binding condition (the allocation itself unchanged) is
    read again by the table: the pod counts allocated from then on."""
    waiting = _bound(claim("c1", [("n1", "gpu-0")]), binding=("Attached",))
    objs = [node("n1", "a"), rslice("n1", 2), waiting, pod("p1", "r1", claims=["c1"])]
    table = FreeDeviceTable(ObserveConfig())
    table.apply(Change(i, ChangeType.ADDED, kind_of(o), o) for i, o in enumerate(objs))
    first = table.snapshot([replica("r1")], T0)
    assert not first.result.replicas[0].pods_scheduled
    met = _bound(
        claim("c1", [("n1", "gpu-0")]), binding=("Attached",), conditions={"Attached": ("True", "")}
    )
    table.apply([Change(9, ChangeType.MODIFIED, kind_of(met), met)])
    second = table.snapshot([replica("r1")], T0)
    assert second.result.replicas[0].pods_scheduled
    assert second.result.pools[0].problems == ()
