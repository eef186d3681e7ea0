"""Reference section 5, scenarios 51-53, 58-65 and 68, plus DESIGN.md free-GPU semantics.

Each case compares whole outcomes of the named deployments and, where it matters, the final
free-device histogram of pool a/l4 as {free GPUs: nodes}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest

from builders import (
    GPU,
    NOW,
    ClusterBuilder,
    DeploymentBuilder,
    Outcome,
    ago,
    cluster,
    deployment,
    gpu,
    observed,
    outcome,
    settled,
    snapshot,
    stamp,
)
from gpufleet.core.decision import Accounting, Decision, ObservationState, ReasonCode
from gpufleet.core.model import Bucket, PoolObservation, Replica
from gpufleet.core.schedule import schedule

X = deployment("ml/x")
Y = deployment("ml/y")
FALSE = "False"


def l4(
    buckets: Mapping[int, int], *, nodes: int | None = None, name: str = "a", **kw: object
) -> ClusterBuilder:
    """Cluster `name` with one observed 4-GPU pool `l4`."""
    obs = observed(buckets, **kw)  # type: ignore[arg-type]
    size = nodes if nodes is not None else obs.observed_nodes
    return cluster(name).pool("l4", nodes=size, gpus=4, observation=obs)


def h100(
    buckets: Mapping[int, int],
    *,
    nodes: int | None = None,
    max_nodes: int | None = None,
    **kw: object,
) -> ClusterBuilder:
    obs = observed(buckets, **kw)  # type: ignore[arg-type]
    size = nodes if nodes is not None else obs.observed_nodes
    return cluster("a").pool("l4", nodes=size, gpus=8, max_nodes=max_nodes, observation=obs)


def histogram(decision: Decision, cluster_name: str = "a", pool: str = "l4") -> dict[int, int]:
    (state,) = [p for p in decision.pools if p.cluster == cluster_name and p.pool == pool]
    return {b.free[GPU]: b.nodes for b in state.histogram}


@dataclass(frozen=True)
class Case:
    id: str
    clusters: Sequence[ClusterBuilder]
    deployments: Sequence[DeploymentBuilder]
    expect: Mapping[str, Outcome]
    replicas: Sequence[Replica] = ()
    free: Mapping[int, int] | None = None
    check: Callable[[Decision], None] | None = field(default=None)
    pack: Sequence[str] = ()


def created(n: int, pool: str = "l4", cluster_name: str = "a") -> tuple[str, ...]:
    return tuple(f"{cluster_name}/{i}:{pool}" for i in range(n))


ONE_NODE = l4({4: 1})
FOUR_X = [stamp(X, ONE_NODE, i, "l4") for i in range(4)]
#: Y holds 2 GPUs of the one L4 node; the histogram already shows them taken.
Y2 = Y.engine(gpus=2)
Y_REPLICA = stamp(Y2, ONE_NODE, 0, "l4")
X2 = X.engine(gpus=2)
Y_KEPT = {"ml/y": Outcome(retained=("a/0:l4",))}


def _reason(code: ReasonCode, **numbers: int) -> Callable[[Decision], None]:
    """The deployment ml/x is refused with `code` on a/l4, with these numbers in details."""

    def check(decision: Decision) -> None:
        diag = decision.for_deployment(X.key).diagnosis
        assert diag is not None
        (verdict,) = diag.clusters
        (pool,) = verdict.pools
        (reason,) = [r for r in pool.reasons if r.code is code]
        assert {k: reason.details[k] for k in numbers} == numbers

    return check


def _accounting(**modes: Accounting) -> Callable[[Decision], None]:
    def check(decision: Decision) -> None:
        got = {p.pool: p.accounting for p in decision.pools}
        assert got == modes

    return check


def _fallback(pool: str, code: ReasonCode) -> Callable[[Decision], None]:
    def check(decision: Decision) -> None:
        (state,) = [p for p in decision.pools if p.pool == pool]
        assert [r.code for r in state.reasons] == [code]

    return check


MANY_BUCKETS = PoolObservation(
    observed_nodes=257,
    buckets=tuple(Bucket({GPU: i % 5}, 1) for i in range(257)),
    observed_at=NOW,
    last_allocation_time=NOW,
)

CASES = [
    Case(
        "51-four-share-one-node-fifth-refused",
        [ONE_NODE],
        [X.replicas(5)],
        {"ml/x": Outcome(created=created(4))},
        free={0: 1},
        check=_reason(ReasonCode.INSUFFICIENT_GPU, best_node_free=0, requested_devices=1),
    ),
    Case(
        "51-fifth-refused-while-report-lags",
        [ONE_NODE],
        [X.replicas(5)],
        {"ml/x": Outcome(retained=created(4))},
        replicas=FOUR_X,
        free={0: 1},
    ),
    Case(
        "51-fifth-refused-after-report",
        [l4({0: 1})],
        [X.replicas(5)],
        {"ml/x": Outcome(retained=created(4))},
        replicas=[settled(r) for r in FOUR_X],
        free={0: 1},
    ),
    Case(
        "52-one-free-two-requested",
        [l4({1: 1})],
        [X2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU"))},
        free={1: 1},
        check=_reason(ReasonCode.INSUFFICIENT_GPU, best_node_free=1, largest_pod_devices=2),
    ),
    Case("52-two-free", [l4({2: 1})], [X2], {"ml/x": Outcome(created=("a/0:l4",))}, free={0: 1}),
    Case(
        "53-scale-down-before-report",
        [l4({0: 1})],
        [X.replicas(3), Y],
        {
            "ml/x": Outcome(retained=created(3), dropped=("a/3:ScaledDown",)),
            "ml/y": Outcome(condition=(FALSE, "InsufficientGPU")),
        },
        replicas=[settled(r) for r in FOUR_X],
        free={0: 1},
    ),
    Case(
        "53-scale-down-after-report",
        [l4({1: 1})],
        [X.replicas(3), Y],
        {"ml/x": Outcome(retained=created(3)), "ml/y": Outcome(created=("a/0:l4",))},
        replicas=[settled(r) for r in FOUR_X[:3]],
        free={0: 1},
    ),
    Case(
        "58-mixed-cluster-uses-both",
        [
            cluster("a")
            .pool("l4", nodes=1, gpus=4, observation=observed({2: 1}))
            .pool("plain", nodes=1, gpus=4)
        ],
        [X.replicas(4)],
        {"ml/x": Outcome(created=("a/0:l4", "a/1:l4", "a/2:plain"))},
        free={0: 1},
        check=_accounting(l4=Accounting.FREE_GPU, plain=Accounting.WHOLE_NODE),
    ),
    Case(
        "59-not-settled-charged",
        [l4({2: 1})],
        [X2, Y2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU")), **Y_KEPT},
        replicas=[Y_REPLICA],
        free={0: 1},
    ),
    Case(
        "59-settled-before-pool-time-not-charged",
        [l4({2: 1})],
        [X2, Y2],
        {"ml/x": Outcome(created=("a/0:l4",)), **Y_KEPT},
        replicas=[settled(Y_REPLICA, ago(5))],
        free={0: 1},
    ),
    Case(
        "59-settled-after-pool-time-charged",
        [l4({2: 1}, last_allocation=ago(10))],
        [X2, Y2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU")), **Y_KEPT},
        replicas=[settled(Y_REPLICA, ago(5))],
        free={0: 1},
    ),
    Case(
        "59-pool-time-missing-charged",
        [l4({2: 1}, last_allocation=None)],
        [X2, Y2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU")), **Y_KEPT},
        replicas=[settled(Y_REPLICA, ago(5))],
        free={0: 1},
    ),
    Case(
        "59-other-generation-charged",
        [l4({2: 1})],
        [X2, Y2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU")), **Y_KEPT},
        replicas=[replace(settled(Y_REPLICA, ago(5)), generation=2)],
        free={0: 1},
    ),
    Case(
        "review-8-partly-scheduled-charged-for-the-rest",
        [l4({3: 1})],
        [X2, Y.engine(copies=2)],
        {"ml/x": Outcome(created=("a/0:l4",)), **Y_KEPT},
        replicas=[settled(stamp(Y.engine(copies=2), ONE_NODE, 0, "l4"), ago(5), allocated=1)],
        free={0: 1},
    ),
    Case(
        "review-8-deleted-deployment-still-charged",
        [l4({4: 1})],
        [X.engine(gpus=4)],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU"))},
        replicas=[stamp(deployment("ml/gone"), ONE_NODE, 0, "l4")],
        free={3: 1},
    ),
    Case(
        "60-four-l4-one-each-four-gpu-refused",
        [l4({3: 4})],
        [X.engine(gpus=4)],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU"))},
        free={3: 4},
        check=_reason(ReasonCode.INSUFFICIENT_GPU, best_node_free=3, free_devices=12, nodes=4),
    ),
    Case(
        "61-pods-1-then-4",
        [l4({4: 1, 1: 1})],
        [X.engine("p", gpus=1, phase="Prefill").engine("d", gpus=4, phase="Decode")],
        {"ml/x": Outcome(created=("a/0:l4+l4",))},
        free={0: 2},
    ),
    Case(
        "61-pods-4-then-1",
        [l4({4: 1, 1: 1})],
        [X.engine("p", gpus=4, phase="Prefill").engine("d", gpus=1, phase="Decode")],
        {"ml/x": Outcome(created=("a/0:l4+l4",))},
        free={0: 2},
    ),
    Case(
        "62-gang-needs-distinct-nodes",
        [h100({8: 1, 0: 3})],
        [X.gang(leader_gpus=4, worker_gpus=4)],
        {"ml/x": Outcome(condition=(FALSE, "GangNeedsDistinctNodes"))},
        free={8: 1, 0: 3},
        check=_reason(
            ReasonCode.GANG_NEEDS_DISTINCT_NODES, gang_pods=2, pod_devices=4, nodes_fitting_pod=1
        ),
    ),
    Case(
        "62-gang-on-two-nodes",
        [h100({8: 1, 4: 1})],
        [X.gang(leader_gpus=4, worker_gpus=4)],
        {"ml/x": Outcome(created=("a/0:l4",))},
        free={4: 1, 0: 1},
    ),
    Case(
        "63-pd-shares-one-node",
        [h100({8: 1})],
        [X.pd(4, 4)],
        {"ml/x": Outcome(created=("a/0:l4+l4",))},
        free={0: 1},
    ),
    Case(
        "64-growth-nodes-usable",
        [h100({0: 1}, nodes=1, max_nodes=3)],
        [X.engine(gpus=8).replicas(3)],
        {"ml/x": Outcome(created=created(2))},
        free={0: 3},
    ),
    Case(
        "64-growth-clamped-at-zero",
        [h100({8: 2}, nodes=1, max_nodes=1)],
        [X.engine(gpus=8).replicas(3)],
        {"ml/x": Outcome(created=created(2))},
        free={0: 2},
    ),
    Case(
        # Issue 14, section 4: a fixed pool declared at 3 nodes whose agent reports 1 (two
        # removed) has that one node, not two empty nodes of growth.
        "fixed-pool-missing-nodes-are-not-growth",
        [h100({0: 1}, nodes=3)],
        [X.engine(gpus=8).replicas(3)],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU"))},
        free={0: 1},
        check=_reason(ReasonCode.INSUFFICIENT_GPU, best_node_free=0, free_devices=0, nodes=1),
    ),
    Case(
        # Issue 14, section 3: an autoscaled pool at zero nodes is all growth.
        "zero-node-autoscaled-pool-grows-from-zero",
        [h100({}, nodes=0, max_nodes=2, observed_nodes=0)],
        [X.engine(gpus=8).replicas(3)],
        {"ml/x": Outcome(created=created(2))},
        free={0: 2},
    ),
    Case(
        "zero-node-fixed-pool-has-nothing",
        [h100({}, nodes=0, observed_nodes=0)],
        [X.engine(gpus=8)],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU"))},
        free={},
        check=_reason(ReasonCode.INSUFFICIENT_GPU, best_node_free=0, free_devices=0, nodes=0),
    ),
    Case(
        "65-too-many-buckets-falls-back",
        [
            cluster("a")
            .pool("big", nodes=2, gpus=4, observation=MANY_BUCKETS)
            .pool("l4", nodes=1, gpus=4, observation=observed({4: 1}))
        ],
        [X.replicas(7)],
        {"ml/x": Outcome(created=("a/0:big", "a/1:big", "a/2:l4", "a/3:l4", "a/4:l4", "a/5:l4"))},
        free={0: 1},
        check=_fallback("big", ReasonCode.HISTOGRAM_UNAVAILABLE),
    ),
    Case(
        "65-no-histogram-falls-back",
        [cluster("a").pool("l4", nodes=1, gpus=4, observation=observed(None, unusable="x"))],
        [X.replicas(2)],
        {"ml/x": Outcome(created=created(1))},
        check=_fallback("l4", ReasonCode.HISTOGRAM_UNAVAILABLE),
    ),
    Case(
        "ambiguous-driver-falls-back",
        [
            cluster("a").pool(
                "l4",
                nodes=1,
                devices=[gpu(2, name="g1"), gpu(2, name="g2")],
                observation=observed({4: 1}),
            )
        ],
        [X.replicas(2)],
        {"ml/x": Outcome(created=created(1))},
        check=_fallback("l4", ReasonCode.AMBIGUOUS_DRIVER),
    ),
    Case(
        "68-grown-settled-replica-charged-new-shape",
        [l4({3: 1})],
        [X2, Y2],
        {"ml/x": Outcome(condition=(FALSE, "InsufficientGPU")), **Y_KEPT},
        replicas=[settled(stamp(Y, ONE_NODE, 0, "l4"), ago(5))],
        free={1: 1},
    ),
    Case(
        "68-unchanged-settled-replica-not-charged",
        [l4({3: 1})],
        [X2, Y],
        {"ml/x": Outcome(created=("a/0:l4",)), **Y_KEPT},
        replicas=[settled(stamp(Y, ONE_NODE, 0, "l4"), ago(5))],
        free={1: 1},
    ),
    Case(
        "spread-strands-the-four",
        [l4({4: 1, 2: 1})],
        [X, Y.engine(gpus=4)],
        {
            "ml/x": Outcome(created=("a/0:l4",)),
            "ml/y": Outcome(condition=(FALSE, "InsufficientGPU")),
        },
        free={3: 1, 2: 1},
    ),
    Case(
        "pack-keeps-the-four",
        [l4({4: 1, 2: 1})],
        [X, Y.engine(gpus=4)],
        {"ml/x": Outcome(created=("a/0:l4",)), "ml/y": Outcome(created=("a/0:l4",))},
        free={1: 1, 0: 1},
        pack=["a"],
    ),
    Case(
        "round-robin-shares-a-full-pool",
        [l4({4: 1})],
        [X.replicas(4), Y.replicas(4)],
        {"ml/x": Outcome(created=created(2)), "ml/y": Outcome(created=created(2))},
        free={0: 1},
    ),
    Case(
        "expired-keeps-existing-adds-none",
        [l4({4: 1}).reported(ago(600))],
        [X.replicas(2)],
        {"ml/x": Outcome(retained=created(1))},
        replicas=[FOUR_X[0]],
        free={3: 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_free_gpu_scenario(case: Case) -> None:
    decision = schedule(
        snapshot(case.clusters, case.deployments, case.replicas, pack=case.pack), NOW
    )
    assert {name: outcome(decision, name) for name in case.expect} == case.expect
    if case.free is not None:
        assert histogram(decision) == case.free
    for d in decision.deployments:
        assert (d.shortfall > 0) == (d.diagnosis is not None and not d.diagnosis.is_empty())
    if case.check is not None:
        case.check(decision)


def test_expired_cluster_says_so_with_age() -> None:
    decision = schedule(snapshot([l4({4: 1}).reported(ago(600))], [X]), NOW)
    d = decision.deployments[0]
    assert d.condition.reason == "ObservationExpired"
    assert d.diagnosis is not None
    (verdict,) = d.diagnosis.clusters
    assert verdict.reasons[0].details == {"age_s": 600, "expire_after_s": 300}
    assert [p.observation for p in decision.pools] == [ObservationState.EXPIRED]


def test_stale_is_used_and_flagged() -> None:
    decision = schedule(snapshot([l4({4: 1}).reported(ago(120))], [X.replicas(5)]), NOW)
    d = decision.deployments[0]
    assert outcome(d) == Outcome(created=created(4))
    assert d.diagnosis is not None
    (verdict,) = d.diagnosis.clusters
    assert [r.code for r in verdict.reasons] == [
        ReasonCode.INSUFFICIENT_GPU,
        ReasonCode.OBSERVATION_STALE,
    ]
    assert d.diagnosis.summary() == "0/1 clusters fit: 1 InsufficientGPU"
    assert [p.observation for p in decision.pools] == [ObservationState.STALE]


def test_pool_observed_at_used_without_agent_time() -> None:
    decision = schedule(snapshot([l4({4: 1}, at=ago(600))], [X]), NOW)
    assert decision.deployments[0].condition.reason == "ObservationExpired"


def test_unobserved_cluster_never_expires() -> None:
    decision = schedule(snapshot([cluster("a").pool(nodes=1)], [X]), NOW)
    assert outcome(decision) == Outcome(created=("a/0:default",))
    assert [p.observation for p in decision.pools] == [ObservationState.NONE]


def test_excluded_nodes_are_in_the_reason() -> None:
    decision = schedule(snapshot([l4({0: 3}, excluded={"Cordoned": 3, "NotReady": 0})], [X]), NOW)
    diag = decision.deployments[0].diagnosis
    assert diag is not None
    (reason,) = diag.clusters[0].reasons
    assert reason.details["excluded.Cordoned"] == 3
    assert "excluded.NotReady" not in reason.details
    assert "nodes excluded: 3 Cordoned" in reason.message


def test_summary_rolls_up_and_sorts() -> None:
    clusters = [
        l4({0: 1}, name="a"),
        l4({0: 1}, name="b"),
        cluster("c").pool(nodes=1).taint("k"),
        cluster("d").pool(nodes=1, gpus=1).label("zone", "x"),
        cluster("e").pool(nodes=0),
    ]
    dep = X.engine(gpus=2)
    decision = schedule(snapshot(clusters, [dep]), NOW)
    d = decision.deployments[0]
    assert d.diagnosis is not None
    assert d.diagnosis.summary() == (
        "0/5 clusters fit: 2 InsufficientGPU, 1 InsufficientNodes, 1 NoMatchingPool, 1 Tainted"
    )
    assert (d.condition.status, d.condition.reason) == (FALSE, "InsufficientGPU")
    assert [v.cluster for v in d.diagnosis.clusters] == ["a", "b", "c", "d", "e"]


def test_pools_state_lists_every_pool() -> None:
    decision = schedule(
        snapshot([l4({4: 1}), cluster("b").pool("x", nodes=2).pool("w", nodes=3)], [X]), NOW
    )
    assert [(p.cluster, p.pool, p.accounting, p.free_nodes) for p in decision.pools] == [
        ("a", "l4", Accounting.FREE_GPU, None),
        ("b", "w", Accounting.WHOLE_NODE, 3),
        ("b", "x", Accounting.WHOLE_NODE, 2),
    ]
