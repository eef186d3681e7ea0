"""Reference section 5, scenarios 1-41 and 43: Modelplane HEAD semantics (whole-node pools).

Each case compares the whole outcome for deployment ml/x: retained, created and dropped
replicas as `cluster/index:pool` (dropped with their reason code) and the condition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from builders import (
    IS_GPU,
    IS_NIC,
    NOW,
    ClusterBuilder,
    DeploymentBuilder,
    Outcome,
    arch,
    cluster,
    deployment,
    gpu,
    gpus,
    leader,
    nic,
    outcome,
    req,
    snapshot,
    stamp,
    standalone,
    worker,
)
from gpufleet.core.decision import Decision
from gpufleet.core.model import Replica
from gpufleet.core.schedule import schedule


@dataclass(frozen=True)
class Case:
    id: str
    clusters: Sequence[ClusterBuilder]
    deployments: Sequence[DeploymentBuilder]
    expect: Outcome
    replicas: Sequence[Replica] = ()
    check: Callable[[Decision], None] | None = field(default=None)


X = deployment("ml/x")
Y = deployment("ml/y")
A1 = cluster("a").pool(nodes=1)
A2 = cluster("a").pool(nodes=2)
A4 = cluster("a").pool(nodes=4)
B1 = cluster("b").pool(nodes=1)
B2 = cluster("b").pool(nodes=2)
B4 = cluster("b").pool(nodes=4)
GANG2 = X.gang(leader_gpus=8, worker_gpus=8, workers=1)
GANG4 = X.gang(leader_gpus=8, worker_gpus=8, workers=3)
FALSE = "False"


def _gateway_empty(decision: Decision) -> None:
    (placement,) = decision.deployments[0].retained or decision.deployments[0].created
    assert placement.gateway_address == ""


def _requests(*names: str) -> Callable[[Decision], None]:
    def check(decision: Decision) -> None:
        (placement,) = decision.deployments[0].created
        got = tuple(r.name for r in placement.engines[0].members[0].requests)
        assert got == names

    return check


def _leader_claimless(decision: Decision) -> None:
    (placement,) = decision.deployments[0].created
    lead, work = placement.engines[0].members
    assert (lead.requests, lead.pool) == ((), work.pool)
    assert [r.driver for r in work.requests] == ["gpu.nvidia.com"]


def _kept_smaller_name(decision: Decision) -> None:
    assert [p.name for p in decision.deployments[0].retained] == ["x-aaaaa"]
    assert [r.name for r in decision.deployments[0].dropped] == ["x-bbbbb"]


def _summary(text: str) -> Callable[[Decision], None]:
    def check(decision: Decision) -> None:
        d = decision.deployments[0]
        assert d.diagnosis is not None
        assert d.diagnosis.summary() == text
        assert text in d.condition.message

    return check


TWO_ARCH = (
    cluster("a").pool("ampere", nodes=2, arch="Ampere").pool("hopper", nodes=2, arch="Hopper")
)
NIC_FIRST = (nic(8), gpu(8))
GPU_FIRST = (gpu(8), nic(8))
ANY = "true"

CASES = [
    Case("01-no-clusters", [], [X], Outcome(condition=(FALSE, "NoClusters"))),
    Case("02-one-ready-cluster", [A1], [X], Outcome(created=("a/0:default",))),
    Case(
        "03-not-ready",
        [A1.not_ready()],
        [X],
        Outcome(condition=(FALSE, "ClusterNotReady")),
        check=_summary("0/1 clusters fit: 1 ClusterNotReady"),
    ),
    # A gateway is optional: a cluster without one takes replicas (their gateway is empty).
    Case(
        "03-no-gateway-places",
        [A1.no_gateway()],
        [X],
        Outcome(created=("a/0:default",)),
        check=_gateway_empty,
    ),
    Case(
        "04-gang-of-4-on-2-nodes",
        [A2],
        [X.gang(workers=3)],
        Outcome(condition=(FALSE, "InsufficientNodes")),
        check=_summary("0/1 clusters fit: 1 InsufficientNodes"),
    ),
    Case(
        "05-existing-stays",
        [A4, B4],
        [X],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "06-degraded-pinned-retained",
        [A1.not_ready().no_gateway()],
        [X],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A1, 0)],
        check=_gateway_empty,
    ),
    Case(
        "07-pinned-cluster-deleted",
        [B1],
        [X],
        Outcome(created=("b/0:default",), dropped=("gone/0:ClusterMissing",)),
        replicas=[stamp(X, cluster("gone").pool(nodes=1), 0)],
    ),
    Case(
        "08-grow-with-a-full",
        [A1],
        [X.replicas(2)],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A1, 0)],
    ),
    Case(
        "09-one-cluster-two", [A2], [X.replicas(2)], Outcome(created=("a/0:default", "a/1:default"))
    ),
    Case(
        "10-spread-two-clusters",
        [A2, B2],
        [X.replicas(2)],
        Outcome(created=("a/0:default", "b/0:default")),
    ),
    Case(
        "11-spread-then-pack",
        [A4, B4],
        [X.replicas(3)],
        Outcome(created=("a/0:default", "a/1:default", "b/0:default")),
    ),
    Case(
        "12-small-b-gets-one",
        [A4, B1],
        [X.replicas(3)],
        Outcome(created=("a/0:default", "a/1:default", "b/0:default")),
    ),
    Case(
        "13-new-goes-to-empty-b",
        [A4, B4],
        [X.replicas(2)],
        Outcome(retained=("a/0:default",), created=("b/0:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "14-index-gap-reused",
        [A4],
        [X.replicas(3)],
        Outcome(retained=("a/0:default", "a/2:default"), created=("a/1:default",)),
        replicas=[stamp(X, A4, 0), stamp(X, A4, 2)],
    ),
    Case(
        "15-scale-down-most-loaded",
        [A4, B4],
        [X.replicas(2)],
        Outcome(retained=("a/0:default", "b/0:default"), dropped=("a/1:ScaledDown",)),
        replicas=[stamp(X, A4, 0), stamp(X, A4, 1), stamp(X, B4, 0)],
    ),
    Case(
        "16-load-beats-index",
        [A4, B4],
        [X.replicas(2)],
        Outcome(retained=("a/0:default", "b/3:default"), dropped=("a/1:ScaledDown",)),
        replicas=[stamp(X, A4, 0), stamp(X, A4, 1), stamp(X, B4, 3)],
    ),
    Case(
        "17-name-tiebreak",
        [A4, B4],
        [X.replicas(1)],
        Outcome(retained=("a/0:default",), dropped=("b/0:ScaledDown",)),
        replicas=[stamp(X, A4, 0), stamp(X, B4, 0)],
    ),
    Case(
        "18-retained-charged-at-stamped-cost",
        [cluster("a").pool(nodes=6)],
        [GANG4.replicas(2)],
        Outcome(retained=("a/0:default",), created=("a/1:default",)),
        replicas=[stamp(GANG2, cluster("a").pool(nodes=6), 0)],
    ),
    Case(
        "19-other-deployment-fills-pool",
        [A1],
        [X, Y],
        Outcome(condition=(FALSE, "InsufficientNodes")),
        replicas=[stamp(Y, A1, 0)],
    ),
    Case(
        "20-own-replica-not-charged-against-itself",
        [A1],
        [X],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A1, 0)],
    ),
    Case(
        "21-other-pinned-to-deleted-pool",
        [A1],
        [X],
        Outcome(created=("a/0:default",)),
        replicas=[stamp(Y, A1.pool("old", nodes=1), 0, "old")],
    ),
    Case(
        "22-collision-smaller-name-wins",
        [A4],
        [X],
        Outcome(retained=("a/0:default",), dropped=("a/0:DuplicateIdentity",)),
        replicas=[stamp(X, A4, 0, name="x-bbbbb"), stamp(X, A4, 0, name="x-aaaaa")],
        check=_kept_smaller_name,
    ),
    Case(
        "23-fill-false-retains-only",
        [A4],
        [X.replicas(3).no_fill()],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "23-fill-false-nothing",
        [A4],
        [X.no_fill()],
        Outcome(condition=(FALSE, "FillDisabled")),
    ),
    Case(
        "24-eight-on-four",
        [cluster("a").pool(gpus=4)],
        [X.engine(gpus=8)],
        Outcome(condition=(FALSE, "NoMatchingPool")),
    ),
    Case(
        "24-pinned-to-the-pool-with-eight",
        [cluster("a").pool("small", gpus=4).pool("big", gpus=8)],
        [X.engine(gpus=8)],
        Outcome(created=("a/0:big",)),
    ),
    Case(
        "25-device-count-zero",
        [cluster("a").pool(gpus=0)],
        [X],
        Outcome(condition=(FALSE, "NoMatchingPool")),
    ),
    Case(
        "25-pool-with-zero-nodes",
        [cluster("a").pool(nodes=0)],
        [X],
        Outcome(condition=(FALSE, "InsufficientNodes")),
    ),
    Case(
        "26-synthetic-dropped-from-requests",
        [cluster("a").pool(devices=GPU_FIRST)],
        [X.engine(members=[standalone((req(1, IS_GPU), req(1, IS_NIC, name="nic")))])],
        Outcome(created=("a/0:default",)),
        check=_requests("gpu"),
    ),
    Case(
        "27-two-requests-one-device",
        [cluster("a").pool(gpus=1)],
        [X.engine(members=[standalone((req(1, IS_GPU, name="a"), req(1, IS_GPU, name="b")))])],
        Outcome(condition=(FALSE, "NoMatchingPool")),
    ),
    Case(
        "27-five-plus-five-on-eight",
        [A4],
        [X.engine(members=[standalone((req(5, IS_GPU, name="a"), req(5, IS_GPU, name="b")))])],
        Outcome(condition=(FALSE, "NoMatchingPool")),
    ),
    Case(
        "27-four-plus-four-on-eight",
        [A4],
        [X.engine(members=[standalone((req(4, IS_GPU, name="a"), req(4, IS_GPU, name="b")))])],
        Outcome(created=("a/0:default",)),
        check=_requests("a", "b"),
    ),
    Case(
        "28-synthetic-only-match",
        [cluster("a").pool(devices=GPU_FIRST)],
        [X.engine(members=[standalone((req(1, IS_NIC, name="nic"),))])],
        Outcome(condition=(FALSE, "EngineCannotClaim")),
    ),
    Case(
        "29-selector-edit-re-placed",
        [TWO_ARCH],
        [X.engine(cel=[arch("Hopper")])],
        Outcome(created=("a/0:hopper",), dropped=("a/0:NoMatchingPool",)),
        replicas=[stamp(X.engine(cel=[arch("Ampere")]), TWO_ARCH, 0, "ampere")],
    ),
    Case(
        "29-attribute-drift-still-matching-stays",
        [cluster("a").pool(devices=[gpu(8, memory="80Gi")])],
        [X],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, cluster("a").pool(devices=[gpu(8, memory="40Gi")]), 0)],
    ),
    Case(
        "30-no-pool-matches-anymore",
        [TWO_ARCH],
        [X.engine(cel=[arch("Blackwell")])],
        Outcome(dropped=("a/0:NoMatchingPool",), condition=(FALSE, "NoMatchingPool")),
        replicas=[stamp(X, TWO_ARCH, 0, "hopper")],
    ),
    Case(
        "31-vanished-pool-re-placed-at-index-1",
        [cluster("a").pool("frontier", nodes=2)],
        [X.replicas(2)],
        Outcome(
            retained=("a/0:frontier",),
            created=("a/1:frontier",),
            dropped=("a/1:PoolMissing",),
        ),
        replicas=[
            stamp(X, cluster("a").pool("frontier", nodes=2), 0, "frontier"),
            stamp(X, cluster("a").pool("gone", nodes=2), 1, "gone"),
        ],
    ),
    Case(
        "32-engine-on-the-pool-every-member-matches",
        [cluster("a").pool("small", gpus=4).pool("big", gpus=8)],
        [X.engine(members=[leader(gpus(1)), worker(gpus(8))])],
        Outcome(created=("a/0:big",)),
    ),
    Case(
        "33-never-split-across-pools",
        [TWO_ARCH],
        [X.engine(members=[leader(gpus(1, arch("Hopper"))), worker(gpus(1, arch("Ampere")))])],
        Outcome(condition=(FALSE, "NoMatchingPool")),
    ),
    Case(
        "34-gang-needs-two-free-nodes",
        [A2, B2],
        [GANG2, Y],
        Outcome(created=("b/0:default",)),
        replicas=[stamp(Y, A2, 0)],
    ),
    Case(
        "35-leader-not-stranded-on-synthetic",
        [cluster("a").pool("pool-a", devices=NIC_FIRST).pool("pool-b", devices=GPU_FIRST)],
        [X.engine(members=[leader((req(1, ANY),)), worker(gpus(8))])],
        Outcome(created=("a/0:pool-b",)),
    ),
    Case(
        "36-synthetic-only-leader-rides-claimless",
        [cluster("a").pool(nodes=1, devices=GPU_FIRST)],
        [X.engine(members=[leader((req(1, IS_NIC, name="nic"),)), worker(gpus(8))])],
        Outcome(created=("a/0:default",)),
        check=_leader_claimless,
    ),
    Case(
        "37-claimless-leader-costs-nothing",
        [A1],
        [X.engine(members=[leader(), worker(gpus(8))])],
        Outcome(created=("a/0:default",)),
    ),
    Case(
        "38-standalone-to-gang-re-placed",
        [A4],
        [GANG2],
        Outcome(created=("a/0:default",), dropped=("a/0:ShapeChanged",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "39-noschedule-keeps-existing-adds-none",
        [A4.taint("maintenance")],
        [X.replicas(2)],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "39-noschedule-tolerated",
        [A4.taint("maintenance")],
        [X.replicas(2).tolerate("maintenance", "NoSchedule")],
        Outcome(retained=("a/0:default",), created=("a/1:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "40-noexecute-drains-and-refills",
        [A4.taint("evict", "NoExecute"), B4],
        [X],
        Outcome(created=("b/0:default",), dropped=("a/0:Tainted",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "40-noexecute-nowhere-else",
        [A4.taint("evict", "NoExecute")],
        [X],
        Outcome(dropped=("a/0:Tainted",), condition=(FALSE, "Tainted")),
        replicas=[stamp(X, A4, 0)],
        check=_summary("0/1 clusters fit: 1 Tainted"),
    ),
    Case(
        "41-noschedule-toleration-does-not-cover-noexecute",
        [A4.taint("k", "NoExecute")],
        [X.tolerate("k", "NoSchedule")],
        Outcome(dropped=("a/0:Tainted",), condition=(FALSE, "Tainted")),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "41-one-of-two-taints-tolerated",
        [A4.taint("k1").taint("k2")],
        [X.tolerate("k1")],
        Outcome(condition=(FALSE, "Tainted")),
    ),
    Case(
        "41-equal-needs-value",
        [A4.taint("k", value="v1")],
        [X.tolerate("k", operator="Equal", value="v2")],
        Outcome(condition=(FALSE, "Tainted")),
    ),
    Case(
        "41-equal-value-matches",
        [A4.taint("k", value="v1")],
        [X.tolerate("k", operator="Equal", value="v1")],
        Outcome(created=("a/0:default",)),
    ),
    Case(
        "41-keyless-exists-tolerates-all",
        [A4.taint("k1").taint("k2", "NoExecute")],
        [X.tolerate()],
        Outcome(retained=("a/0:default",)),
        replicas=[stamp(X, A4, 0)],
    ),
    Case(
        "43-partial-is-true",
        [A1],
        [X.replicas(3)],
        Outcome(created=("a/0:default",)),
        check=_summary("0/1 clusters fit: 1 InsufficientNodes"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_head_scenario(case: Case) -> None:
    decision = schedule(snapshot(case.clusters, case.deployments, case.replicas), NOW)
    assert outcome(decision) == case.expect
    d = decision.for_deployment(X.key)
    assert (d.shortfall > 0) == (d.diagnosis is not None)
    if d.shortfall:
        assert not d.diagnosis.is_empty()
    if case.check is not None:
        case.check(decision)


def test_partial_condition_message() -> None:
    decision = schedule(snapshot([A1], [X.replicas(3)]), NOW)
    condition = decision.deployments[0].condition
    assert condition.message == "Scheduled 1 of 3: 0/1 clusters fit: 1 InsufficientNodes"


def test_no_clusters_message() -> None:
    d = schedule(snapshot([], [X]), NOW).deployments[0]
    assert d.condition.message == (
        "0 of 1 replicas scheduled: NoClusters: no cluster of 0 in the fleet is selected; "
        "0/0 clusters fit"
    )
