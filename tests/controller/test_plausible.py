"""Agent numbers are not trusted blindly (issue 17, point 3): a pool report that cannot be true
of its declared pool and class is refused, said on the cluster's status and in an Event, and
its pool is counted whole-node."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest
from controller_builders import SIM, at, cluster, deployment, gpu_class, hub, pool_obs
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.models import INT64_MAX
from gpufleet.controller import Controller
from gpufleet.controller.plausible import check_pool_report, devices_per_node, pool_ceiling
from gpufleet.controller.status import cluster_status, judge, parse_report, pool_verdicts
from gpufleet.store import Obj
from gpufleet.store.port import EVENT, INFERENCE_CLUSTER, MODEL_REPLICA

FIXED: Obj = {"name": "l4", "className": "l4-4x", "nodeCount": 2}
AUTOSCALED: Obj = {"name": "l4", "className": "l4-4x", "nodeCount": 1, "maxNodeCount": 5}
GPU = "gpu.nvidia.com"


def _status(
    observed: int,
    buckets: list[tuple[dict[str, int], int]] | None,
    excluded: dict[str, int] | None = None,
    extended: dict[str, int] | None = None,
) -> Obj:
    status: Obj = {
        "observedAt": "2026-11-29T10:00:00Z",
        "observedNodes": observed,
        "excludedNodes": excluded or {},
        "extendedResources": extended or {},
    }
    if buckets is not None:
        status["freeDevices"] = [{"free": f, "nodes": n} for f, n in buckets]
    return status


@dataclass(frozen=True)
class Case:
    id: str
    status: Obj
    pool: Obj
    rule: str | None
    numbers: dict[str, Any] | None = None


CASES = [
    Case("plausible", _status(2, [({GPU: 4}, 1), ({GPU: 0}, 1)]), FIXED, None),
    Case("no-histogram", _status(2, None), FIXED, None),
    Case("autoscaled-up-to-max", _status(5, [({GPU: 4}, 5)]), AUTOSCALED, None),
    Case("empty-pool", _status(0, []), FIXED, None),
    Case(
        "nodes-over-node-count",
        _status(3, [({GPU: 4}, 3)]),
        FIXED,
        "ObservedNodesOverCeiling",
        {"observedNodes": 3, "ceiling": 2},
    ),
    Case(
        "nodes-over-max-node-count",
        _status(6, [({GPU: 4}, 6)]),
        AUTOSCALED,
        "ObservedNodesOverCeiling",
        {"observedNodes": 6, "ceiling": 5},
    ),
    Case(
        "2^62-nodes-without-histogram",
        _status(2**62, None),
        FIXED,
        "ObservedNodesOverCeiling",
        {"observedNodes": 2**62, "ceiling": 2},
    ),
    Case(
        "2^40-free",
        _status(1, [({GPU: 2**40}, 1)]),
        FIXED,
        "FreeOverDevicesPerNode",
        {"bucket": 0, "driver": GPU, "free": 2**40, "devicesPerNode": 4},
    ),
    Case(
        "free-of-an-undeclared-driver",
        _status(1, [({GPU: 1, "tpu.google.com": 1}, 1)]),
        FIXED,
        "FreeOverDevicesPerNode",
        {"bucket": 0, "driver": "tpu.google.com", "free": 1, "devicesPerNode": 0},
    ),
    Case(
        "buckets-over-observed",
        _status(1, [({GPU: 4}, 2)]),
        FIXED,
        "BucketNodesMismatch",
        {"bucketNodes": 2, "observedNodes": 1},
    ),
    Case(
        "buckets-under-observed",
        _status(2, [({GPU: 4}, 1)]),
        FIXED,
        "BucketNodesMismatch",
        {"bucketNodes": 1, "observedNodes": 2},
    ),
    Case(
        "excluded-over-observed",
        _status(1, [({GPU: 0}, 1)], excluded={"Cordoned": 1, "NotReady": 1}),
        FIXED,
        "ExcludedOverObserved",
        {"excludedNodes": 2, "observedNodes": 1},
    ),
    Case(
        "extended-resource-beyond-int64",
        _status(1, [({GPU: 4}, 1)], extended={"example.com/fpga": 2**64}),
        FIXED,
        "ValueOutOfRange",
        {"field": "extendedResources.example.com/fpga", "value": str(2**64), "max": INT64_MAX},
    ),
    Case(
        "negative-count",
        _status(1, [({GPU: -1}, 1)]),
        FIXED,
        "ValueOutOfRange",
        {"field": f"freeDevices[0].free.{GPU}", "value": "-1", "max": INT64_MAX},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_rule_refuses_with_its_numbers(case: Case) -> None:
    found = check_pool_report(case.status, case.pool, gpu_class())
    if case.rule is None:
        assert found is None
        return
    assert found is not None
    assert (found.rule, dict(found.numbers)) == (case.rule, case.numbers)
    assert found.message.startswith(f"{case.rule}: ")


@st.composite
def _plausible(draw: st.DrawFn) -> tuple[Obj, Obj, Obj]:
    """A class, a pool of it, and a report an honest agent could send about that pool."""
    drivers = draw(st.lists(st.sampled_from(["a.io", "b.io", "c.io"]), min_size=1, max_size=4))
    devices = [
        {"name": f"d{i}", "driver": d, "claim": "DRA", "deviceClassName": d, "count": c}
        for i, (d, c) in enumerate(
            zip(drivers, draw(st.lists(st.integers(1, 64), min_size=len(drivers))), strict=False)
        )
    ]
    klass: Obj = {"metadata": {"name": "k"}, "spec": {"devices": devices}}
    node_count = draw(st.integers(0, 10_000))
    pool: Obj = {"name": "p", "className": "k", "nodeCount": node_count}
    if draw(st.booleans()):
        pool["maxNodeCount"] = draw(st.integers(max(1, node_count), 10_000))
    per_node = devices_per_node(klass)
    observed = draw(st.integers(0, pool_ceiling(pool)))
    excluded = draw(st.integers(0, observed))
    vector = st.fixed_dictionaries({d: st.integers(0, n) for d, n in per_node.items()})
    buckets: list[tuple[dict[str, int], int]] | None = None
    if draw(st.booleans()):
        buckets, left = [], observed
        while left:
            nodes = draw(st.integers(1, left))
            buckets.append((draw(vector), nodes))
            left -= nodes
    extended = draw(st.dictionaries(st.sampled_from(["x/y", "z/w"]), st.integers(0, INT64_MAX)))
    status = _status(observed, buckets, {"Cordoned": excluded}, extended)
    return status, pool, klass


@given(_plausible())
def test_a_plausible_report_always_passes(case: tuple[Obj, Obj, Obj]) -> None:
    status, pool, klass = case
    assert check_pool_report(status, pool, klass) is None


# --- through the controller ---------------------------------------------------------------


def _step(free: list[tuple[int, int]], observed: int | None = None) -> Any:
    """One cluster, pool l4 of 1 node x 4 GPUs; its agent reports `free`; a deployment asks
    for 1,000 one-GPU replicas. Three controller steps."""
    store = hub(
        gpu_class(),
        cluster(),
        pool_obs(free=free, observed_nodes=observed),
        deployment(replicas=1000, gpus=1),
    )
    controller = Controller(store, SIM, "ctl")
    for t in (1, 2, 3):
        result = controller.step(at(t))
        assert result.errors == []
    return store


def test_a_plausible_report_fills_the_node() -> None:
    store = _step([(4, 1)])
    assert len(list(store.list(MODEL_REPLICA))) == 4  # the pool's 4 GPUs, one each
    assert not [e for e in store.list(EVENT) if e["reason"] == "ImplausibleReport"]


@pytest.mark.parametrize(
    ("free", "observed", "rule"),
    [
        ([(2**40, 1)], None, "FreeOverDevicesPerNode"),
        ([(4, 1)], 2**62, "ObservedNodesOverCeiling"),
        ([(4, 2**62)], None, "ObservedNodesOverCeiling"),
        ([(4, 1)], 0, "BucketNodesMismatch"),
    ],
    ids=["2^40-free", "2^62-observed", "2^62-in-a-bucket", "buckets-beyond-observed"],
)
def test_an_implausible_report_draws_no_more_than_whole_node_accounting(
    free: list[tuple[int, int]], observed: int | None, rule: str
) -> None:
    store = _step(free, observed)
    # Whole-node accounting of a 1-node pool: one replica on the one node.
    assert len(list(store.list(MODEL_REPLICA))) == 1
    status = store.get(INFERENCE_CLUSTER, "a")["status"]  # type: ignore[index]
    (pool,) = status["gpuPools"]
    observation = pool["observation"]
    assert "freeDevices" not in observation
    assert observation["observedNodes"] <= 1
    (histogram,) = observation["conditions"]
    assert (histogram["type"], histogram["status"], histogram["reason"]) == (
        "HistogramAvailable",
        "False",
        "ImplausibleReport",
    )
    assert histogram["message"].startswith(f"{rule}: ")
    (event,) = [e for e in store.list(EVENT) if e["reason"] == "ImplausibleReport"]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "InferenceCluster"
    assert event["count"] == 1  # once per situation, not every step
    assert rule in event["message"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_status_given_the_verdicts_is_the_status_that_checks_them(case: Case) -> None:
    """`cluster_status` given `pool_verdicts` (checked once per publish, for the events too)
    is the status that checks each report itself."""
    body = pool_obs(free=((4, 1),))
    counts = ("freeDevices", "observedNodes", "excludedNodes", "extendedResources")
    base = {k: v for k, v in body["status"].items() if k not in counts}
    report = parse_report(body)
    assert report is not None
    # The numbers as they are (the API bounds them; the check reads them raw, as here).
    report = dataclasses.replace(report, body={**body, "status": {**base, **case.status}})
    trust = judge([report], None)
    obj = cluster(pools=[case.pool])
    classes = {"l4-4x": gpu_class()}
    verdicts = pool_verdicts(obj, classes, trust)
    assert (verdicts["l4"] is None) == (case.rule is None)
    assert cluster_status(obj, classes, trust, at(5), SIM, verdicts) == cluster_status(
        obj, classes, trust, at(5), SIM
    )
