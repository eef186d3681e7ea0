"""The API server's rules for updating a Pod's spec (scheduling gates, KEP-3521; mutable
scheduling directives while gated, KEP-3838), as the simulator's
cluster store (`SimStore`) enforces them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.store.port import POD, Invalid, Obj

GATE = [{"name": "gpufleet.io/steer"}, {"name": "example.com/other"}]
HOST = "kubernetes.io/hostname"


def req(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


def expr(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


@dataclass(frozen=True)
class Case:
    id: str
    old: dict[str, Any]
    new: dict[str, Any]
    #: A fragment of the error; None: allowed.
    error: str | None


BASE = {"containers": [{"name": "c", "image": "a"}], "nodeSelector": {"gpufleet.io/pool": "h100"}}
CASES = [
    Case(
        "lift-one-gate",
        {**BASE, "schedulingGates": GATE},
        {**BASE, "schedulingGates": GATE[1:]},
        None,
    ),
    Case("lift-all-gates", {**BASE, "schedulingGates": GATE}, BASE, None),
    Case("add-a-gate", BASE, {**BASE, "schedulingGates": GATE[:1]}, "schedulingGates"),
    Case(
        "rename-a-gate",
        {**BASE, "schedulingGates": GATE[:1]},
        {**BASE, "schedulingGates": [{"name": "x"}]},
        "schedulingGates",
    ),
    Case(
        "gated-add-affinity",
        {**BASE, "schedulingGates": GATE},
        {**BASE, "affinity": req([expr(HOST, "n1")])},
        None,
    ),
    Case(
        "gated-add-selector-entry",
        {**BASE, "schedulingGates": GATE},
        {**BASE, "schedulingGates": GATE, "nodeSelector": {**BASE["nodeSelector"], HOST: "n1"}},
        None,
    ),
    Case(
        "gated-change-selector-entry",
        {**BASE, "schedulingGates": GATE},
        {**BASE, "schedulingGates": GATE, "nodeSelector": {"gpufleet.io/pool": "a10g"}},
        "nodeSelector",
    ),
    Case(
        "gated-add-requirement",
        {**BASE, "schedulingGates": GATE, "affinity": req([expr("z", "1")])},
        {**BASE, "affinity": req([expr("z", "1"), expr(HOST, "n1")])},
        None,
    ),
    Case(
        "gated-widen-requirement",
        {**BASE, "schedulingGates": GATE, "affinity": req([expr(HOST, "n1")])},
        {**BASE, "affinity": req([expr(HOST, "n1", "n2")])},
        "only additions",
    ),
    Case(
        "gated-add-term",
        {**BASE, "schedulingGates": GATE, "affinity": req([expr("z", "1")])},
        {**BASE, "affinity": req([expr("z", "1")], [expr(HOST, "n1")])},
        "number of terms",
    ),
    Case(
        "ungated-add-affinity",
        BASE,
        {**BASE, "affinity": req([expr(HOST, "n1")])},
        "scheduling gates",
    ),
    Case("ungated-change-image", BASE, {**BASE, "containers": [{"name": "c", "image": "b"}]}, None),
    Case(
        "ungated-change-env",
        BASE,
        {**BASE, "containers": [{"name": "c", "image": "a", "env": []}]},
        "containers",
    ),
    Case("bind-ungated", BASE, {**BASE, "nodeName": "n1"}, None),
    Case(
        "bind-gated",
        {**BASE, "schedulingGates": GATE},
        {**BASE, "schedulingGates": GATE, "nodeName": "n1"},
        "nodeName",
    ),
    Case("rebind", {**BASE, "nodeName": "n1"}, {**BASE, "nodeName": "n2"}, "nodeName"),
    Case("other-field", BASE, {**BASE, "hostNetwork": True}, "spec.hostNetwork"),
]


def pod(spec: dict[str, Any]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": spec,
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pod_spec_updates(case: Case) -> None:
    store = SimStore()
    created = store.create(pod(case.old))
    changed = {**created, "spec": case.new}
    if case.error is None:
        assert store.update(changed)["spec"] == case.new
        return
    with pytest.raises(Invalid, match=case.error):
        store.update(changed)
    stored = store.get(POD, "p", "ml")
    assert stored is not None and stored["spec"] == case.old  # nothing half-applied
