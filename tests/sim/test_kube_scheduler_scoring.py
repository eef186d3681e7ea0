"""Each default-profile score plugin of the emulated kube-scheduler against values worked by
hand from the real plugins' formulas (kubernetes/kubernetes
pkg/scheduler/framework/plugins/{tainttoleration,nodeaffinity,podtopologyspread,noderesources})."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet.sim.emulated import kube_scoring as ks
from gpufleet.store.port import Obj

GI = 1024**3
MI = 1024**2


def node(name: str = "n", labels: dict[str, str] | None = None, taints: Any = ()) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": "48", "memory": "192Gi"}},
    }


# --- requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestCase:
    id: str
    spec: dict[str, Any]
    non_zero: ks.Resources
    actual: ks.Resources


def c(**requests: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}} if requests else {"name": "c"}


@pytest.mark.parametrize(
    "case",
    [
        RequestCase("no-containers", {}, (0, 0), (0, 0)),
        RequestCase("best-effort", {"containers": [c()]}, (100, 200 * MI), (0, 0)),
        RequestCase(
            "one-set-one-default",
            {"containers": [c(cpu="1", memory="1Gi"), c()]},
            (1100, GI + 200 * MI),
            (1000, GI),
        ),
        # An explicit zero is a request: only an absent one takes the default.
        RequestCase("explicit-zero", {"containers": [c(cpu="0")]}, (0, 200 * MI), (0, 0)),
        RequestCase(
            "milli-and-nano",
            {"containers": [c(cpu="1500m"), c(cpu="1n")]},
            (1501, 400 * MI),
            (1501, 0),
        ),
        RequestCase(
            "init-container-larger",
            {"containers": [c(cpu="1")], "initContainers": [c(cpu="2", memory="1Gi")]},
            (2000, GI),
            (2000, GI),
        ),
        RequestCase(
            "overhead-added",
            {
                "containers": [c(cpu="1", memory="1Gi")],
                "overhead": {"cpu": "250m", "memory": "64Mi"},
            },
            (1250, GI + 64 * MI),
            (1250, GI + 64 * MI),
        ),
    ],
    ids=lambda case: case.id,
)
def test_pod_requests(case: RequestCase) -> None:
    got = (
        ks.pod_requests(case.spec, is_non_zero=True),
        ks.pod_requests(case.spec, is_non_zero=False),
    )
    assert got == (case.non_zero, case.actual)


# --- NodeResourcesFit LeastAllocated and BalancedAllocation --------------------------------


@dataclass(frozen=True)
class ResourceCase:
    id: str
    requested: ks.Resources
    allocatable: ks.Resources
    least: int
    balanced: int


@pytest.mark.parametrize(
    "case",
    [
        # cpu (4000-3000)*100//4000 = 25, memory (10000-5000)*100//10000 = 50, (25+50)//2 = 37;
        # fractions .75 and .5: std .125, int(87.5) = 87.
        ResourceCase("half-and-three-quarters", (3000, 5000), (4000, 10000), 37, 87),
        ResourceCase("empty", (0, 0), (4000, 10000), 100, 100),
        # Over capacity scores 0 on that resource; the fraction is capped at 1: std .25.
        ResourceCase("over-capacity", (5000, 5000), (4000, 10000), 25, 75),
        # One best-effort pod on a 48-CPU 192Gi node: 47900*100//48000 = 99 both ways.
        ResourceCase("one-default-pod", (100, 200 * MI), (48000, 192 * GI), 99, 99),
        # A resource the node has none of: 0 for LeastAllocated, left out of the balance.
        ResourceCase("no-cpu", (1000, 5000), (0, 10000), 25, 100),
    ],
    ids=lambda case: case.id,
)
def test_resource_scores(case: ResourceCase) -> None:
    got = (
        ks.least_allocated_score(case.requested, case.allocatable),
        ks.balanced_allocation_score(case.requested, case.allocatable),
    )
    assert got == (case.least, case.balanced)


def test_node_allocatable_reads_the_node_status() -> None:
    assert ks.node_allocatable(node()) == (48000, 192 * GI)
    assert ks.node_allocatable({"metadata": {"name": "x"}}) == (0, 0)


# --- TaintToleration and NodeAffinity ------------------------------------------------------

PREFER = "PreferNoSchedule"


@dataclass(frozen=True)
class TaintCase:
    id: str
    taints: list[dict[str, str]]
    tolerations: list[dict[str, str]]
    want: int


@pytest.mark.parametrize(
    "case",
    [
        TaintCase("none", [], [], 0),
        TaintCase(
            "two-untolerated",
            [{"key": "a", "effect": PREFER}, {"key": "b", "effect": PREFER}],
            [],
            2,
        ),
        TaintCase(
            "one-tolerated-by-exists",
            [{"key": "a", "effect": PREFER}, {"key": "b", "effect": PREFER}],
            [{"key": "a", "operator": "Exists"}],
            1,
        ),
        TaintCase("noschedule-not-counted", [{"key": "a", "effect": "NoSchedule"}], [], 0),
        TaintCase(
            "toleration-of-another-effect",
            [{"key": "a", "value": "x", "effect": PREFER}],
            [{"key": "a", "value": "x", "effect": "NoSchedule"}],
            1,
        ),
        TaintCase(
            "tolerate-everything", [{"key": "a", "effect": PREFER}], [{"operator": "Exists"}], 0
        ),
    ],
    ids=lambda case: case.id,
)
def test_intolerable_prefer_no_schedule(case: TaintCase) -> None:
    got = ks.intolerable_prefer_no_schedule(
        node(taints=case.taints), {"tolerations": case.tolerations}
    )
    assert got == case.want


def preferred(*terms: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": w, "preference": p} for w, p in terms
                ]
            }
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


@dataclass(frozen=True)
class AffinityCase:
    id: str
    spec: dict[str, Any]
    want: int
    labels: dict[str, str] = field(default_factory=lambda: {"zone": "a", "gen": "5"})


@pytest.mark.parametrize(
    "case",
    [
        AffinityCase("no-affinity", {}, 0),
        AffinityCase("in-matches", preferred((5, expr("zone", "In", "a", "b"))), 5),
        AffinityCase("in-misses", preferred((5, expr("zone", "In", "b"))), 0),
        AffinityCase(
            "weights-add", preferred((5, expr("zone", "In", "a")), (3, expr("gen", "Exists"))), 8
        ),
        AffinityCase("notin-absent-label", preferred((4, expr("rack", "NotIn", "r1"))), 4),
        AffinityCase("does-not-exist", preferred((4, expr("zone", "DoesNotExist"))), 0),
        AffinityCase("gt", preferred((2, expr("gen", "Gt", "4")), (7, expr("gen", "Lt", "5"))), 2),
        AffinityCase("gt-not-a-number", preferred((2, expr("zone", "Gt", "4"))), 0),
        AffinityCase("empty-term-matches-nothing", preferred((9, {})), 0),
        AffinityCase("zero-weight-skipped", preferred((0, expr("zone", "In", "a"))), 0),
        AffinityCase(
            "all-expressions-of-a-term",
            preferred(
                (
                    6,
                    {
                        "matchExpressions": [
                            *expr("zone", "In", "a")["matchExpressions"],
                            *expr("gen", "In", "6")["matchExpressions"],
                        ]
                    },
                )
            ),
            0,
        ),
        AffinityCase(
            "match-fields-name",
            preferred(
                (3, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]})
            ),
            3,
        ),
    ],
    ids=lambda case: case.id,
)
def test_preferred_affinity_weight(case: AffinityCase) -> None:
    assert ks.preferred_affinity_weight(node(labels=case.labels), case.spec) == case.want


@pytest.mark.parametrize(
    ("scores", "is_reversed", "want"),
    [
        ([0, 1, 2], False, [0, 50, 100]),
        ([0, 1, 2], True, [100, 50, 0]),
        ([3, 0, 1], False, [100, 0, 33]),
        ([0, 0], False, [0, 0]),
        ([0, 0], True, [100, 100]),
        ([], True, []),
    ],
)
def test_default_normalize(scores: list[int], is_reversed: bool, want: list[int]) -> None:
    assert ks.default_normalize(scores, is_reversed) == want


# --- PodTopologySpread ---------------------------------------------------------------------


def test_go_round_is_half_away_from_zero() -> None:
    assert [ks.go_round(x) for x in (2.5, 3.5, 2.49, 0.0)] == [3, 4, 2, 0]


def test_spread_raw_score_by_hand() -> None:
    # Three nodes, hostname only: weight log(3+2); maxSkew 3 adds 2.
    w = math.log(5)
    raw = [ks.spread_raw_score([count, None], (3, 5), (w, 1.0)) for count in (0, 1, 2)]
    assert raw == [2, 4, 5]  # round(2), round(3.609), round(5.219)
    # A node with both labels: 2 pods on it (log 5), 3 in its zone (log 4, maxSkew 5 adds 4).
    assert ks.spread_raw_score([2, 3], (3, 5), (w, math.log(4))) == round(
        2 * w + 2 + 3 * math.log(4) + 4
    )
    assert ks.spread_raw_score([None, None], (3, 5), (w, 1.0)) == 0


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ([2, 4, 5], [100, 60, 40]),  # 100*(5+2-s)//5
        ([0, 0], [100, 100]),
        ([3, 3], [100, 100]),
        ([0, 4], [100, 0]),
    ],
)
def test_spread_normalize(raw: list[int], want: list[int]) -> None:
    assert ks.spread_normalize(raw) == want


def pod(name: str, labels: dict[str, str], owner: str | None = "u1", phase: str = "Running") -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [
            {"uid": owner, "controller": True, "kind": "Deployment", "name": "d"}
        ]
    return {"metadata": meta, "spec": {"containers": [c()]}, "status": {"phase": phase}}


LWS = {"leaderworkerset.sigs.k8s.io/name": "g"}


@pytest.mark.parametrize(
    ("labels", "owner", "want"),
    [
        ({"pod-template-hash": "h1"}, "u1", ("ml", "u1", "h1")),
        ({}, None, None),
        (
            {
                **LWS,
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
                "leaderworkerset.sigs.k8s.io/group-index": "2",
            },
            "u1",
            ("ml", "u1", "leaders"),
        ),
        (
            {
                **LWS,
                "leaderworkerset.sigs.k8s.io/worker-index": "1",
                "leaderworkerset.sigs.k8s.io/group-index": "2",
            },
            "u1",
            ("ml", "u1", "group", "2"),
        ),
    ],
)
def test_spread_key(
    labels: dict[str, str], owner: str | None, want: tuple[str, ...] | None
) -> None:
    assert ks.spread_key(pod("p", labels, owner)) == want


def test_node_load_counts_requests_and_same_owner_pods() -> None:
    same = {"pod-template-hash": "h1"}
    pods = [
        pod("a", same),
        pod("b", {"pod-template-hash": "h0"}),  # an older ReplicaSet of the same owner
        pod("c", same, phase="Succeeded"),  # gone from the scheduler's cache
        {**pod("d", same), "metadata": {**pod("d", same)["metadata"], "deletionTimestamp": "x"}},
    ]
    load = ks.node_load(pods, ("ml", "u1", "h1"))
    # a, b and the terminating d still hold their requests; only a counts for spreading.
    assert load == ks.NodeLoad((300, 600 * MI), (0, 0), 1)


def test_spread_scores_skip_a_pod_without_owner_or_with_its_own_constraints() -> None:
    nodes = [node("x"), node("y")]
    loads = [ks.NodeLoad((0, 0), (0, 0), 0), ks.NodeLoad((0, 0), (0, 0), 2)]
    assert ks.spread_scores(pod("p", {}, owner=None), nodes, loads, {}) == [0, 0]
    own = pod("p", {"pod-template-hash": "h1"})
    own["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1}]
    assert ks.spread_scores(own, nodes, loads, {}) == [0, 0]
    # With the defaults: 2 nodes, weight log 4; raw round(2) = 2 and round(2*1.386 + 2) = 5.
    assert ks.spread_scores(pod("p", {"pod-template-hash": "h1"}), nodes, loads, {}) == [100, 40]


def test_spread_scores_use_the_zone_counts_of_zoned_nodes() -> None:
    nodes = [node("x", {ks.ZONE_KEY: "a"}), node("y", {ks.ZONE_KEY: "b"}), node("z")]
    loads = [ks.NodeLoad((0, 0), (0, 0), n) for n in (0, 0, 0)]
    # Hostname: 3 nodes, log 5, 0 pods each: 2. Zone: values {a, b, ""}: log 5; a has 2 pods:
    # round(2 + 2*1.609 + 4) = 9; b: round(2 + 4) = 6; z has no zone label: 2.
    scores = ks.spread_scores(pod("p", {"pod-template-hash": "h1"}), nodes, loads, {"a": 2})
    assert scores == [100 * (9 + 2 - 9) // 9, 100 * (9 + 2 - 6) // 9, 100 * (9 + 2 - 2) // 9]


def test_pick_best_is_the_highest_and_a_tie_is_stable_under_input_order() -> None:
    assert ks.pick_best("ml/p", ["a", "b", "c"], [10, 30, 20]) == "b"
    forward = ks.pick_best("ml/p", ["a", "b", "c"], [30, 30, 30])
    assert ks.pick_best("ml/p", ["c", "a", "b"], [30, 30, 30]) == forward
    # Different pods spread over the tied nodes rather than all taking the first.
    picks = {ks.pick_best(f"ml/p{i}", ["a", "b", "c"], [30, 30, 30]) for i in range(30)}
    assert picks == {"a", "b", "c"}
