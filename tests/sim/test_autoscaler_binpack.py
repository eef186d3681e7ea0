"""Issue 26, section 3: the emulated cluster-autoscaler adds what the pending pods need, as
cluster-autoscaler's binpacking estimator does: the claiming pods of one gang copy on distinct
new nodes, a claimless Leader in the first node it fits (not a node of its own)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.sim.emulated.autoscaler import (
    HOST_CPU,
    HOST_MEMORY,
    _distinct_group,
    _full,
    _nodes_needed,
)
from gpufleet.sim.emulated.cluster_spec import DeviceSpec, PoolSpec
from gpufleet.sim.emulated.objects import LWS_GROUP_KEY
from gpufleet.store.port import Obj

_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"gpufleet.io/claiming": "true"}},
                "matchLabelKeys": [LWS_GROUP_KEY],
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


def pod(name: str, group: str | None = None, claiming: bool = True) -> Obj:
    labels = {LWS_GROUP_KEY: group} if group is not None else {}
    spec = {"affinity": _ANTI} if claiming and group is not None else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


@dataclass(frozen=True)
class Case:
    id: str
    pods: list[tuple[Obj, dict[str, int]]]
    upcoming: int
    want: int


GPU = "gpu.nvidia.com"
CASES = [
    Case(
        "claimless-leader-rides-its-worker",
        [(pod("l", "g0", claiming=False), {}), (pod("w", "g0"), {GPU: 8})],
        0,
        1,
    ),
    Case(
        "two-workers-one-leader",
        [
            (pod("l", "g0", claiming=False), {}),
            (pod("w1", "g0"), {GPU: 4}),
            (pod("w2", "g0"), {GPU: 4}),
        ],
        0,
        2,
    ),
    Case(
        "claiming-leader-distinct", [(pod("l", "g0"), {GPU: 2}), (pod("w", "g0"), {GPU: 2})], 0, 2
    ),
    Case(
        "standalone-binpacked",
        [(pod("a"), {GPU: 4}), (pod("b"), {GPU: 4}), (pod("c"), {GPU: 2})],
        0,
        2,
    ),
    Case("onto-upcoming-first", [(pod("a"), {GPU: 4}), (pod("b"), {GPU: 4})], 1, 0),
    Case(
        "two-copies-share-nodes", [(pod("w0", "g0"), {GPU: 4}), (pod("w1", "g1"), {GPU: 4})], 0, 1
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_nodes_needed(case: Case) -> None:
    demands = [(_distinct_group(p), d, p) for p, d in case.pods]
    assert _nodes_needed(demands, {GPU: 8}, case.upcoming) == case.want


GIB = 2**30
#: An 8-GPU node with 48 cores and 192 GiB allocatable (the sim's default shape).
NODE = {GPU: 8, HOST_CPU: 48_000, HOST_MEMORY: 192 * GIB}
HOST_CASES = [
    Case(
        "leader-beside-worker-when-host-allows",
        [
            (pod("l", "g0", claiming=False), {HOST_CPU: 8_000, HOST_MEMORY: 32 * GIB}),
            (pod("w", "g0"), {GPU: 8, HOST_CPU: 40_000, HOST_MEMORY: 160 * GIB}),
        ],
        0,
        1,
    ),
    Case(
        "leader-own-node-when-cpu-full",
        [
            (pod("l", "g0", claiming=False), {HOST_CPU: 16_000}),
            (pod("w", "g0"), {GPU: 8, HOST_CPU: 40_000}),
        ],
        0,
        2,
    ),
    Case(
        "memory-splits-what-gpus-would-share",
        [
            (pod("a"), {GPU: 4, HOST_MEMORY: 100 * GIB}),
            (pod("b"), {GPU: 4, HOST_MEMORY: 100 * GIB}),
        ],
        0,
        2,
    ),
    Case(
        "proportional-pods-share",
        [
            (pod("a"), {GPU: 4, HOST_CPU: 24_000, HOST_MEMORY: 96 * GIB}),
            (pod("b"), {GPU: 4, HOST_CPU: 24_000, HOST_MEMORY: 96 * GIB}),
        ],
        0,
        1,
    ),
]


@pytest.mark.parametrize("case", HOST_CASES, ids=[c.id for c in HOST_CASES])
def test_nodes_needed_counts_cpu_and_memory(case: Case) -> None:
    demands = [(_distinct_group(p), d, p) for p, d in case.pods]
    assert _nodes_needed(demands, NODE, case.upcoming) == case.want


def test_full_is_the_pool_shape() -> None:
    shape = PoolSpec("p", devices=(DeviceSpec(count=8),), node_cpu="48", node_memory="192Gi")
    assert _full(shape) == NODE
