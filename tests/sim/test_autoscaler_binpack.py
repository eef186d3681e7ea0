"""Issue 26, section 3: the emulated cluster-autoscaler adds what the pending pods need, as
cluster-autoscaler's binpacking estimator does: the claiming pods of one gang copy on distinct
new nodes, a claimless Leader in the first node it fits (not a node of its own)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.sim.emulated.autoscaler import _distinct_group, _nodes_needed
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
