"""Issue 30, 1 at its source: a deployment with a deep or mistyped selector gets a condition
saying why, and an honest deployment created beside it is placed in the same step (the deep
selector used to raise RecursionError out of `Controller.step`)."""

from __future__ import annotations

import pytest
from controller_builders import (
    SIM,
    at,
    brief,
    cluster,
    condition_of,
    deployment,
    gpu_class,
    hub,
    pool_obs,
)

from gpufleet.cel.syntax import MAX_DEPTH
from gpufleet.controller import Controller
from gpufleet.store.port import MODEL_DEPLOYMENT, MODEL_REPLICA

PATH = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
BAD = {
    "250-plus": (" + ".join(["1"] * 250) + " > 0", f"limit {MAX_DEPTH}"),
    "300-selections": ("device.attributes" + ".a" * 300 + " == 1", f"limit {MAX_DEPTH}"),
    "quantity-vs-int": (
        'device.capacity["gpu.nvidia.com"].memory > 5',
        "found no matching overload for '_>_' applied to '(kubernetes.Quantity, int)'",
    ),
}


@pytest.mark.parametrize("shape", sorted(BAD))
def test_a_bad_selector_gets_a_condition_and_its_neighbour_is_placed(shape: str) -> None:
    expression, words = BAD[shape]
    store = hub(
        gpu_class(),
        cluster(),
        pool_obs(free=((4, 1),)),
        deployment("bad", cel=expression),
        deployment("honest"),
    )
    result = Controller(store, SIM, "ctl").step(at(1))

    assert result.errors == []
    replicas = store.list(MODEL_REPLICA)
    assert [r["spec"]["deploymentName"] for r in replicas] == ["honest"]
    bad = store.get(MODEL_DEPLOYMENT, "bad", "ml")
    scheduled = condition_of(bad, "ReplicasScheduled")
    assert brief(scheduled) == ("False", "InvalidNodeSelector")
    assert scheduled is not None
    assert PATH in scheduled["message"] and words in scheduled["message"]
    honest = condition_of(store.get(MODEL_DEPLOYMENT, "honest", "ml"), "ReplicasScheduled")
    assert brief(honest) == ("True", "ReplicasCreated")
    assert result.refusals == {"InvalidNodeSelector": 1}
