"""Property tests of the observe core's promises (hypothesis)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from observe_builders import GPU, NIC, T0, claim, member, node, pod, replica, rslice

from gpufleet.agent.observe import (
    AllocationClock,
    ClusterObjects,
    ObservationResult,
    ObserveConfig,
    observe,
)

NODE_NAMES = [f"n{i}" for i in range(6)]
CONFIG = ObserveConfig()


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterObjects, AllocationClock]:
    nodes = []
    slices = []
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=6)):
        flags = draw(
            st.sets(st.sampled_from(["cordoned", "not-ready", "deleting", "tainted", "plugin"]))
        )
        nodes.append(
            node(
                name,
                draw(st.sampled_from(["a", "b", None])),
                cordoned="cordoned" in flags,
                ready="not-ready" not in flags,
                deleting="deleting" in flags,
                taints=[{"key": "x", "effect": "NoExecute"}] if "tainted" in flags else [],
                # A device plugin's GPUs (extended resources): `DevicePluginNotCounted`.
                allocatable={"cpu": "8", "nvidia.com/gpu": "4"} if "plugin" in flags else None,
            )
        )
        for driver in draw(st.sets(st.sampled_from([GPU, NIC]))):
            generation = draw(st.integers(1, 2))
            count = draw(st.integers(1, 2))
            devices = draw(st.lists(st.sampled_from([f"gpu-{i}" for i in range(6)]), max_size=6))
            slices.append(rslice(name, devices, driver=driver, generation=generation, count=count))
            if draw(st.booleans()):  # an older generation lying around
                slices.append(rslice(name, 8, driver=driver, generation=generation - 1))
    device_ids = st.tuples(
        st.sampled_from(NODE_NAMES), st.sampled_from([f"gpu-{i}" for i in range(7)])
    )
    claims = [
        claim(
            f"c{i}",
            draw(st.lists(device_ids, max_size=3)),
            driver=draw(st.sampled_from([GPU, NIC])),
            allocated=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 8)))
    ]
    replicas = [
        replica(
            f"r{i}",
            member(pool=draw(st.sampled_from(["a", "b", "c"]))),
            copies=draw(st.integers(1, 3)),
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    pods = [
        pod(
            f"p{i}",
            f"r{draw(st.integers(0, 3))}",
            claims=draw(
                st.lists(st.sampled_from([f"c{j}" for j in range(9)]), max_size=2, unique=True)
            ),
            phase=draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed"])),
            deleting=draw(st.booleans()),
            generation=draw(st.sampled_from([1, 2, None])),
        )
        for i in range(draw(st.integers(0, 8)))
    ]
    clock = AllocationClock(
        {f"uid-ml-c{i}": T0 - timedelta(minutes=i) for i in draw(st.sets(st.integers(0, 8)))}
    )
    objects = ClusterObjects(
        tuple(nodes), tuple(slices), tuple(claims), tuple(pods), tuple(replicas)
    )
    return objects, clock


def run(
    objects: ClusterObjects, clock: AllocationClock
) -> tuple[ObservationResult, AllocationClock]:
    return observe(objects, clock, CONFIG, T0)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_free_never_exceeds_published(cluster: tuple[ClusterObjects, AllocationClock]) -> None:
    result, _ = run(*cluster)
    for n in result.nodes:
        for driver, free in n.free.items():
            assert 0 <= free <= n.published.get(driver, 0), n


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from(NODE_NAMES), st.integers(0, 6), st.sampled_from([GPU, NIC]))
def test_an_allocated_claim_never_frees_devices(
    cluster: tuple[ClusterObjects, AllocationClock], node_name: str, device: int, driver: str
) -> None:
    objects, clock = cluster
    before, _ = run(objects, clock)
    extra = claim("extra", [(node_name, f"gpu-{device}")], driver=driver)
    after, _ = run(
        ClusterObjects(
            objects.nodes, objects.slices, (*objects.claims, extra), objects.pods, objects.replicas
        ),
        clock,
    )
    free_before = {n.name: n.free for n in before.nodes}
    for n in after.nodes:
        for d, free in n.free.items():
            assert free <= free_before[n.name].get(d, 0)
    for pool_before, pool_after in zip(before.pools, after.pools, strict=True):
        assert sum(b.nodes * sum(b.free.values()) for b in pool_after.free_devices or ()) <= sum(
            b.nodes * sum(b.free.values()) for b in pool_before.free_devices or ()
        )


def _shuffled(objects: ClusterObjects, data: st.DataObject) -> ClusterObjects:
    """Every list permuted: the object lists and the lists inside objects that matter."""

    def permute(items: Any) -> Any:
        return data.draw(st.permutations(list(items)))

    slices = copy.deepcopy(objects.slices)
    for s in slices:
        s["spec"]["devices"] = permute(s["spec"]["devices"])
    claims = copy.deepcopy(objects.claims)
    for c in claims:
        results = c["status"].get("allocation", {}).get("devices", {}).get("results")
        if results is not None:
            c["status"]["allocation"]["devices"]["results"] = permute(results)
    nodes = copy.deepcopy(objects.nodes)
    for n in nodes:
        n["spec"]["taints"] = permute(n["spec"]["taints"])
        n["status"]["conditions"] = permute(n["status"]["conditions"])
    return ClusterObjects(
        tuple(permute(nodes)),
        tuple(permute(slices)),
        tuple(permute(claims)),
        tuple(permute(objects.pods)),
        tuple(permute(objects.replicas)),
    )


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_input_order_does_not_matter(
    cluster: tuple[ClusterObjects, AllocationClock], data: st.DataObject
) -> None:
    objects, clock = cluster
    assert run(_shuffled(objects, data), clock) == run(objects, clock)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_deterministic_and_idempotent(cluster: tuple[ClusterObjects, AllocationClock]) -> None:
    objects, clock = cluster
    first = run(objects, clock)
    assert run(objects, clock) == first
    # Observing again at the same instant with the clock it returned changes nothing.
    assert run(objects, first[1]) == first
