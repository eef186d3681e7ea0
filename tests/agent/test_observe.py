"""Table-driven tests of the agent's observe core: whole results from raw Kubernetes objects.

Scenario numbers refer to /work/shared/reference/modelplane-model.md section 5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from observe_builders import (
    GPU,
    NIC,
    NS,
    T0,
    claim,
    member,
    node,
    pod,
    pool_obs,
    replica,
    rslice,
)

from gpufleet.agent.observe import (
    AllocationClock,
    ClusterObjects,
    ObserveConfig,
    ObservedPool,
    ObservedReplica,
    Problem,
    ProblemCode,
    observe,
    parse_count_quantity,
)
from gpufleet.core.model import (
    MemberPods,
    PoolName,
    ReplicaPoolStatus,
    Role,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

T1 = T0 + timedelta(minutes=5)
READY_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def objs(**kwargs: Any) -> ClusterObjects:
    return ClusterObjects(**{k: tuple(v) for k, v in kwargs.items()})


def problem(code: ProblemCode, *names: str) -> Problem:
    return Problem(code, f"{len(names)}: {', '.join(sorted(names))}", len(names))


@dataclass(frozen=True)
class Case:
    id: str
    objects: ClusterObjects
    pools: tuple[ObservedPool, ...]
    replicas: tuple[ObservedReplica, ...] = ()
    problems: tuple[Problem, ...] = ()
    clock: AllocationClock = field(default_factory=AllocationClock)
    config: ObserveConfig = field(default_factory=ObserveConfig)
    now: datetime = T0


def one_gpu_replica(
    name: str,
    *,
    last: datetime | None,
    live: int,
    allocated: int,
    scheduled: bool,
    generation: int = 1,
    pool: str = "h100",
) -> ObservedReplica:
    return ObservedReplica(
        NS,
        name,
        generation,
        scheduled,
        (
            ReplicaPoolStatus(
                PoolName(pool), last, (MemberPods("main", Role.STANDALONE, live, allocated),)
            ),
        ),
    )


POOL_CASES = [
    Case(
        "empty node: all devices free",
        objs(nodes=[node("n1")], slices=[rslice("n1", 4)]),
        (pool_obs("h100", 1, [({GPU: 4}, 1)]),),
    ),
    Case(
        "54 another tenant's DRA claim takes its GPU",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1", 4)],
            claims=[claim("foreign", [("n1", "gpu-0")], ns="other-team")],
        ),
        (pool_obs("h100", 1, [({GPU: 3}, 1)], last=T0),),
    ),
    Case(
        "55 cordoned node stays observed with nothing free",
        objs(nodes=[node("n1", cordoned=True), node("n2")], slices=[rslice("n1"), rslice("n2")]),
        (pool_obs("h100", 2, [({GPU: 0}, 1), ({GPU: 4}, 1)], excluded={"Cordoned": 1}),),
    ),
    Case(
        "55 uncordoned node restores its devices",
        objs(nodes=[node("n1"), node("n2")], slices=[rslice("n1"), rslice("n2")]),
        (pool_obs("h100", 2, [({GPU: 4}, 2)]),),
    ),
    Case(
        "56 remembered claim keeps its first-seen time",
        objs(nodes=[node("n1")], slices=[rslice("n1")], claims=[claim("a", [("n1", "gpu-0")])]),
        (pool_obs("h100", 1, [({GPU: 3}, 1)], last=T0),),
        clock=AllocationClock({"uid-ml-a": T0}),
        now=T1,
    ),
    Case(
        "56 restarted agent stamps what it sees now",
        objs(nodes=[node("n1")], slices=[rslice("n1")], claims=[claim("a", [("n1", "gpu-0")])]),
        (pool_obs("h100", 1, [({GPU: 3}, 1)], last=T1),),
        now=T1,
    ),
    Case(
        "64 one full node of a pool that may grow",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1", 4)],
            claims=[claim(f"c{i}", [("n1", f"gpu-{i}")]) for i in range(4)],
        ),
        (pool_obs("h100", 1, [({GPU: 0}, 1)], last=T0),),
    ),
    Case(
        "64 pool named by a replica but with no nodes yet",
        objs(replicas=[replica("r1", member(pool="a100"))]),
        (pool_obs("a100", 0, []),),
        (one_gpu_replica("r1", last=None, live=0, allocated=0, scheduled=False, pool="a100"),),
    ),
    Case(
        "65 over the bucket cap: no histogram for that pool only",
        objs(
            nodes=[node(f"n{i}") for i in range(3)] + [node("m1", "l4")],
            slices=[rslice(f"n{i}", i + 1) for i in range(3)] + [rslice("m1")],
        ),
        (
            pool_obs("h100", 3, None, bucket_count=3),
            pool_obs("l4", 1, [({GPU: 4}, 1)]),
        ),
        config=ObserveConfig(max_histogram_buckets=2),
    ),
    Case(
        "66 no allocated claim: no allocation time",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1")],
            claims=[claim("pending", allocated=False)],
        ),
        (pool_obs("h100", 1, [({GPU: 4}, 1)], last=None),),
    ),
    Case(
        "newest generation wins",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1", 8, generation=1), rslice("n1", 2, generation=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 2}, 1)]),),
    ),
    Case(
        "incomplete newest generation: unpublished, not the older one",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1", 8, generation=1), rslice("n1", 2, generation=2, count=2)],
        ),
        (
            pool_obs(
                "h100",
                1,
                [({GPU: 0}, 1)],
                excluded={"NoSlices": 1},
                problems=[problem(ProblemCode.INCOMPLETE_SLICE_GENERATION, f"{GPU}/n1")],
            ),
        ),
    ),
    Case(
        "generation complete across two slices",
        objs(
            nodes=[node("n1")],
            slices=[
                rslice("n1", ["gpu-0", "gpu-1"], count=2, name="s1"),
                rslice("n1", ["gpu-2"], count=2, name="s2"),
            ],
        ),
        (pool_obs("h100", 1, [({GPU: 3}, 1)]),),
    ),
    Case(
        "node whose driver has not published: NoSlices",
        objs(nodes=[node("n1"), node("n2")], slices=[rslice("n1")]),
        (pool_obs("h100", 2, [({GPU: 0}, 1), ({GPU: 4}, 1)], excluded={"NoSlices": 1}),),
    ),
    Case(
        "duplicate device names: the DRA pool is unusable",
        objs(
            nodes=[node("n1")],
            slices=[
                rslice("n1", ["gpu-0", "gpu-1"], count=2, name="s1"),
                rslice("n1", ["gpu-1"], count=2, name="s2"),
            ],
        ),
        (
            pool_obs(
                "h100",
                1,
                [({GPU: 0}, 1)],
                excluded={"NoSlices": 1},
                problems=[problem(ProblemCode.DUPLICATE_DEVICE, f"{GPU}/n1")],
            ),
        ),
    ),
    Case(
        "slice without a nodeName is not counted",
        objs(nodes=[node("n1")], slices=[rslice("n1", 2), rslice(None, 4, pool="fabric")]),
        (pool_obs("h100", 1, [({GPU: 2}, 1)]),),
        problems=(
            problem(
                ProblemCode.SLICE_NOT_NODE_LOCAL, f"slice shared-{GPU}-fabric-g1 ({GPU}/fabric)"
            ),
        ),
    ),
    Case(
        "claim naming an unknown device empties that driver on its node",
        objs(
            nodes=[node("n1"), node("n2")],
            slices=[rslice("n1"), rslice("n2")],
            claims=[claim("ghost", [("n1", "gpu-9")])],
        ),
        (
            pool_obs(
                "h100",
                2,
                [({GPU: 0}, 1), ({GPU: 4}, 1)],
                last=T0,
                problems=[problem(ProblemCode.UNKNOWN_DEVICE, f"claim ml/ghost: {GPU}/n1/gpu-9")],
            ),
        ),
    ),
    Case(
        "unknown DRA pool placed by the allocation's node selector",
        objs(
            nodes=[node("n1"), node("n2")],
            slices=[rslice("n1"), rslice("n2")],
            claims=[claim("ghost", [("gone", "gpu-0")], node_selector="n2")],
        ),
        (
            pool_obs(
                "h100",
                2,
                [({GPU: 0}, 1), ({GPU: 4}, 1)],
                last=T0,
                problems=[problem(ProblemCode.UNKNOWN_DEVICE, f"claim ml/ghost: {GPU}/gone/gpu-0")],
            ),
        ),
    ),
    Case(
        "unknown device nowhere to place: reported on the cluster",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1")],
            claims=[claim("ghost", [("gone", "gpu-0")])],
        ),
        (pool_obs("h100", 1, [({GPU: 4}, 1)]),),
        problems=(problem(ProblemCode.UNKNOWN_DEVICE, f"claim ml/ghost: {GPU}/gone/gpu-0"),),
    ),
    Case(
        "a device held by two claims is taken once",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1")],
            claims=[claim("a", [("n1", "gpu-0")]), claim("b", [("n1", "gpu-0")])],
        ),
        (pool_obs("h100", 1, [({GPU: 3}, 1)], last=T0),),
    ),
    Case(
        "exclusion reasons, one per node, first in order",
        objs(
            nodes=[
                node("a", cordoned=True, ready=False),
                node("b", ready=False, deleting=True),
                node("c", ready=None),
                node("d", deleting=True, taints=[{"key": "x", "effect": "NoSchedule"}]),
                node(
                    "e",
                    taints=[
                        {"key": "z", "effect": "NoExecute"},
                        {"key": "y", "effect": "NoSchedule"},
                    ],
                ),
                node("f"),
            ],
            slices=[rslice(n) for n in "abcdef"],
        ),
        (
            pool_obs(
                "h100",
                6,
                [({GPU: 0}, 5), ({GPU: 4}, 1)],
                excluded={"Cordoned": 1, "Deleting": 1, "NotReady": 2, "Tainted:y": 1},
            ),
        ),
    ),
    Case(
        "tolerated and non-repelling taints leave the node usable",
        objs(
            nodes=[
                node("n1", taints=[READY_TAINT]),
                node("n2", taints=[{"key": "spot", "effect": "PreferNoSchedule"}]),
                node("n3", taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]),
                node(
                    "n4", taints=[{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]
                ),
            ],
            slices=[rslice(f"n{i}") for i in range(1, 5)],
        ),
        (
            pool_obs(
                "h100",
                4,
                [({GPU: 0}, 2), ({GPU: 4}, 2)],
                excluded={"Tainted:ToBeDeletedByClusterAutoscaler": 1, "Tainted:nvidia.com/gpu": 1},
            ),
        ),
    ),
    Case(
        "configured Equal toleration needs the value",
        objs(
            nodes=[
                node("n1", taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}]),
                node("n2", taints=[{"key": "team", "value": "web", "effect": "NoSchedule"}]),
            ],
            slices=[rslice("n1"), rslice("n2")],
        ),
        (pool_obs("h100", 2, [({GPU: 0}, 1), ({GPU: 4}, 1)], excluded={"Tainted:team": 1}),),
        config=ObserveConfig(
            tolerations=(
                Toleration("team", TolerationOperator.EQUAL, "ml", TaintEffect.NO_SCHEDULE),
            )
        ),
    ),
    Case(
        "keyless Exists toleration tolerates every taint",
        objs(
            nodes=[node("n1", taints=[{"key": "anything", "effect": "NoExecute"}])],
            slices=[rslice("n1")],
        ),
        (pool_obs("h100", 1, [({GPU: 4}, 1)]),),
        config=ObserveConfig(tolerations=(Toleration(operator=TolerationOperator.EXISTS),)),
    ),
    Case(
        "two drivers: buckets keyed by every driver of the pool",
        objs(
            nodes=[node("n1"), node("n2")],
            slices=[rslice("n1", 4), rslice("n1", 2, driver=NIC), rslice("n2", 4)],
            claims=[claim("nic", [("n1", "gpu-0")], driver=NIC)],
        ),
        (pool_obs("h100", 2, [({GPU: 4, NIC: 0}, 1), ({GPU: 4, NIC: 1}, 1)], last=T0),),
    ),
    Case(
        "extended resources summed; hugepages and bare names ignored; bad quantity reported",
        objs(
            nodes=[
                node("n1", allocatable={"nvidia.com/gpu": "4", "cpu": "8", "hugepages-2Mi": "1Gi"}),
                node("n2", allocatable={"nvidia.com/gpu": "2", "example.com/fpga": "1k"}),
                node("n3", allocatable={"nvidia.com/gpu": "lots"}),
            ],
            slices=[rslice("n1"), rslice("n2"), rslice("n3")],
        ),
        (
            pool_obs(
                "h100",
                3,
                [({GPU: 4}, 3)],
                extended={"example.com/fpga": 1000, "nvidia.com/gpu": 6},
                problems=[problem(ProblemCode.MALFORMED_QUANTITY, "n3: nvidia.com/gpu='lots'")],
            ),
        ),
    ),
    Case(
        "nodes without the pool label are not observed; pools sorted by name",
        objs(
            nodes=[node("n1", "l4"), node("n2", None), node("n3", "a100")],
            slices=[rslice("n1"), rslice("n2"), rslice("n3", 8)],
        ),
        (pool_obs("a100", 1, [({GPU: 8}, 1)]), pool_obs("l4", 1, [({GPU: 4}, 1)])),
    ),
    Case(
        "terminating pod's claim stays taken",
        objs(
            nodes=[node("n1")],
            slices=[rslice("n1")],
            claims=[claim("a", [("n1", "gpu-0")])],
            pods=[pod("p", "r1", claims=["a"], deleting=True)],
            replicas=[replica("r1")],
        ),
        (pool_obs("h100", 1, [({GPU: 3}, 1)], last=T0),),
        (one_gpu_replica("r1", last=T0, live=0, allocated=0, scheduled=False),),
    ),
]


def pods_for(replica_name: str, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [
        pod(f"{replica_name}-{i}", replica_name, claims=[f"{replica_name}-{i}"], **kwargs)
        for i in range(n)
    ]


def claims_for(replica_name: str, n: int, node_name: str = "n1") -> list[dict[str, Any]]:
    return [claim(f"{replica_name}-{i}", [(node_name, f"gpu-{i}")]) for i in range(n)]


BASE_NODES = [node("n1")]
BASE_SLICES = [rslice("n1", 8)]

REPLICA_CASES = [
    Case(
        "all copies allocated: scheduled",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=claims_for("r1", 2),
            pods=pods_for("r1", 2),
            replicas=[replica("r1", copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 6}, 1)], last=T0),),
        (one_gpu_replica("r1", last=T0, live=2, allocated=2, scheduled=True),),
    ),
    Case(
        "one copy's claim not allocated yet: not scheduled",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=[*claims_for("r1", 1), claim("r1-1", allocated=False)],
            pods=pods_for("r1", 2),
            replicas=[replica("r1", copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 7}, 1)], last=T0),),
        (one_gpu_replica("r1", last=T0, live=2, allocated=1, scheduled=False),),
    ),
    Case(
        "67 finished pods never count",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=claims_for("r1", 2),
            pods=[
                pod("r1-0", "r1", claims=["r1-0"], phase="Succeeded"),
                pod("r1-1", "r1", claims=["r1-1"], phase="Failed"),
            ],
            replicas=[replica("r1", copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 6}, 1)], last=T0),),
        (one_gpu_replica("r1", last=T0, live=0, allocated=0, scheduled=False),),
    ),
    Case(
        "68 pods of an older generation do not count, but their claims' time does",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=claims_for("r1", 2),
            pods=[
                pod("r1-0", "r1", claims=["r1-0"], generation=2),
                pod("r1-1", "r1", claims=["r1-1"], generation=1),
            ],
            replicas=[replica("r1", copies=2, generation=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 6}, 1)], last=T1),),
        (one_gpu_replica("r1", last=T1, live=1, allocated=1, scheduled=False, generation=2),),
        clock=AllocationClock({"uid-ml-r1-0": T0}),
        now=T1,
    ),
    Case(
        "replica time is the latest over its claims",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=claims_for("r1", 2),
            pods=pods_for("r1", 2),
            replicas=[replica("r1", copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 6}, 1)], last=T1),),
        (one_gpu_replica("r1", last=T1, live=2, allocated=2, scheduled=True),),
        clock=AllocationClock({"uid-ml-r1-0": T0}),
        now=T1,
    ),
    Case(
        "a pod without claims or with a missing claim is live, not allocated",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            pods=[pod("r1-0", "r1"), pod("r1-1", "r1", claims=["nowhere"])],
            replicas=[replica("r1", copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 8}, 1)]),),
        (one_gpu_replica("r1", last=None, live=2, allocated=0, scheduled=False),),
    ),
    Case(
        "pods of other namespaces or replicas are not the replica's",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=[claim("x", [("n1", "gpu-0")], ns="other"), *claims_for("r2", 1)],
            pods=[pod("x", "r1", claims=["x"], ns="other"), *pods_for("r2", 1)],
            replicas=[replica("r1")],
        ),
        (pool_obs("h100", 1, [({GPU: 7}, 1)], last=T0),),
        (one_gpu_replica("r1", last=None, live=0, allocated=0, scheduled=False),),
    ),
    Case(
        "gang: copies x worker nodes; claimless leader needs no pods allocated",
        objs(
            nodes=[node("n1"), node("n2", "a100")],
            slices=[rslice("n1", 8), rslice("n2", 8)],
            claims=[claim(f"w{i}", [("n1", f"gpu-{i}")]) for i in range(4)],
            pods=[
                *[pod(f"w{i}", "g", role="Worker", claims=[f"w{i}"]) for i in range(4)],
                pod("l0", "g", role="Leader"),
            ],
            replicas=[
                replica(
                    "g",
                    member("Leader", "a100", gpus=0),
                    member("Worker", "h100", worker_nodes=2),
                    copies=2,
                )
            ],
        ),
        (
            pool_obs("a100", 1, [({GPU: 8}, 1)]),
            pool_obs("h100", 1, [({GPU: 4}, 1)], last=T0),
        ),
        (
            ObservedReplica(
                NS,
                "g",
                1,
                True,
                (
                    ReplicaPoolStatus(
                        PoolName("a100"), None, (MemberPods("main", Role.LEADER, 1, 0),)
                    ),
                    ReplicaPoolStatus(
                        PoolName("h100"), T0, (MemberPods("main", Role.WORKER, 4, 4),)
                    ),
                ),
            ),
        ),
    ),
    Case(
        "gang short of one worker: not scheduled",
        objs(
            nodes=BASE_NODES,
            slices=BASE_SLICES,
            claims=[claim(f"w{i}", [("n1", f"gpu-{i}")]) for i in range(3)],
            pods=[pod(f"w{i}", "g", role="Worker", claims=[f"w{i}"]) for i in range(3)],
            replicas=[replica("g", member("Worker", worker_nodes=2), copies=2)],
        ),
        (pool_obs("h100", 1, [({GPU: 5}, 1)], last=T0),),
        (
            ObservedReplica(
                NS,
                "g",
                1,
                False,
                (
                    ReplicaPoolStatus(
                        PoolName("h100"), T0, (MemberPods("main", Role.WORKER, 3, 3),)
                    ),
                ),
            ),
        ),
    ),
]

MALFORMED_CASES = [
    Case(
        "garbage objects and fields never crash",
        ClusterObjects(
            nodes=(
                None,  # type: ignore[arg-type]
                {"metadata": {"name": "n1", "labels": {"gpufleet.io/pool": "h100"}}, "spec": "x"},
                {"metadata": {"labels": {"gpufleet.io/pool": "h100"}}},
                {
                    "metadata": {"name": "n2", "labels": {"gpufleet.io/pool": "h100"}},
                    "spec": {"unschedulable": "yes", "taints": ["bad"]},
                    "status": {"conditions": 7},
                },
            ),
            slices=(
                "slice",  # type: ignore[arg-type]
                {"spec": {"driver": GPU}},
                {
                    "metadata": {"name": "s1"},
                    "spec": {
                        "driver": GPU,
                        "nodeName": "n1",
                        "pool": {"name": "n1", "generation": "x", "resourceSliceCount": 1},
                    },
                },
            ),
            claims=(
                {
                    "metadata": {"name": "c1", "namespace": NS},
                    "status": {"allocation": {"devices": {"results": "x"}}},
                },
                {
                    "metadata": {"name": "c2", "namespace": NS, "uid": "u2"},
                    "status": {"allocation": {"devices": {"results": [None]}}},
                },
                {"metadata": {"name": "c3", "namespace": NS, "uid": "u3"}, "status": 5},
            ),
            pods=(
                {
                    "metadata": {
                        "name": "p",
                        "namespace": NS,
                        "labels": {"gpufleet.io/replica": "r1"},
                    },
                    "spec": {"resourceClaims": "x"},
                },
                {"metadata": "p2"},
            ),
            replicas=(
                {
                    "metadata": {"name": "r1", "namespace": NS, "generation": 1},
                    "spec": {
                        "engines": [
                            {"name": "main", "copies": "two", "members": [{"role": "Boss"}]}
                        ]
                    },
                },
                {"metadata": {"namespace": NS}},
                42,  # type: ignore[arg-type]
            ),
        ),
        (
            pool_obs(
                "h100",
                3,
                [({GPU: 0}, 3)],
                excluded={"Cordoned": 1, "NoSlices": 1, "NotReady": 1},
                problems=[
                    problem(
                        ProblemCode.MALFORMED_NODE,
                        "<unnamed>: metadata.name",
                        "n2: spec.unschedulable",
                    ),
                    problem(ProblemCode.MALFORMED_SLICE, f"{GPU}/n1"),
                ],
            ),
        ),
        (
            ObservedReplica(
                NS,
                "r1",
                1,
                False,
                (),
                (
                    problem(
                        ProblemCode.MALFORMED_REPLICA,
                        "pod p: resourceClaims",
                        "spec.engines[0]",
                        "spec.engines[0].members[0].role",
                    ),
                ),
            ),
        ),
        (
            problem(ProblemCode.CLAIM_WITHOUT_UID, "claim ml/c1"),
            problem(ProblemCode.MALFORMED_CLAIM, "claim ml/c1", "claim ml/c2"),
            problem(ProblemCode.MALFORMED_NODE, "node that is a NoneType"),
            problem(
                ProblemCode.MALFORMED_REPLICA, "<unnamed>: metadata.name", "replica that is a int"
            ),
            problem(ProblemCode.MALFORMED_SLICE, "slice <unnamed>", "slice that is a str"),
        ),
    ),
]


@pytest.mark.parametrize("case", POOL_CASES + REPLICA_CASES + MALFORMED_CASES, ids=lambda c: c.id)
def test_observe(case: Case) -> None:
    result, _ = observe(case.objects, case.clock, case.config, case.now)
    assert (result.pools, result.replicas, result.problems) == (
        case.pools,
        case.replicas,
        case.problems,
    )


@dataclass(frozen=True)
class ClockCase:
    id: str
    claims: tuple[dict[str, Any], ...]
    clock: dict[str, datetime]
    expected: dict[str, datetime]


CLOCK_CASES = [
    ClockCase("new claims stamped now", (claim("a", [("n1", "gpu-0")]),), {}, {"uid-ml-a": T1}),
    ClockCase(
        "known claims keep their first-seen time",
        (claim("a", [("n1", "gpu-0")]),),
        {"uid-ml-a": T0},
        {"uid-ml-a": T0},
    ),
    ClockCase(
        "released and deleted claims are forgotten",
        (claim("a", allocated=False),),
        {"uid-ml-a": T0, "uid-ml-gone": T0},
        {},
    ),
    ClockCase(
        "a recreated claim (new uid) is new",
        (claim("a", [("n1", "gpu-0")], uid="second"),),
        {"uid-ml-a": T0},
        {"second": T1},
    ),
]


@pytest.mark.parametrize("case", CLOCK_CASES, ids=lambda c: c.id)
def test_allocation_clock(case: ClockCase) -> None:
    objects = ClusterObjects(nodes=(node("n1"),), slices=(rslice("n1"),), claims=case.claims)
    _, clock = observe(objects, AllocationClock(case.clock), ObserveConfig(), T1)
    assert clock == AllocationClock(case.expected)


def test_status_bodies_follow_the_shapes() -> None:
    objects = objs(
        nodes=[node("n1", allocatable={"nvidia.com/gpu": "0"}), node("n2", cordoned=True)],
        slices=[rslice("n1"), rslice("n2")],
        claims=claims_for("r1", 1),
        pods=pods_for("r1", 1),
        replicas=[replica("r1")],
    )
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    assert [p.to_status() for p in result.pools] == [
        {
            "observedNodes": 2,
            "freeDevices": [
                {"free": {GPU: 0}, "nodes": 1},
                {"free": {GPU: 3}, "nodes": 1},
            ],
            "lastAllocationTime": "2026-11-29T10:00:00Z",
            "excludedNodes": {"Cordoned": 1},
            "extendedResources": {"nvidia.com/gpu": 0},
            "conditions": [
                {
                    "type": "HistogramAvailable",
                    "status": "True",
                    "reason": "Observed",
                    "message": "2 buckets",
                }
            ],
        }
    ]
    assert [r.to_status() for r in result.replicas] == [
        {
            "observedGeneration": 1,
            "podsScheduled": True,
            "pools": [
                {
                    "name": "h100",
                    "lastAllocationTime": "2026-11-29T10:00:00Z",
                    "members": [
                        {"engine": "main", "role": "Standalone", "livePods": 1, "allocatedPods": 1}
                    ],
                }
            ],
        }
    ]


def test_over_the_cap_says_so_and_falls_back_in_core() -> None:
    objects = objs(nodes=[node("a"), node("b")], slices=[rslice("a", 1), rslice("b", 2)])
    result, _ = observe(objects, AllocationClock(), ObserveConfig(max_histogram_buckets=1), T0)
    (pool,) = result.pools
    assert "freeDevices" not in pool.to_status()
    assert pool.to_status()["conditions"][0] == {
        "type": "HistogramAvailable",
        "status": "False",
        "reason": "TooManyBuckets",
        "message": "2 buckets exceed the cap",
    }
    core = pool.to_core(observed_at=T0)
    assert (core.buckets, core.unusable_reason, core.observed_nodes) == (None, "TooManyBuckets", 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("0", 0),
        ("2k", 2000),
        ("1Ki", 1024),
        (4, 4),
        ("1.5", None),
        ("100m", None),
        ("", None),
        ("-1", None),
        (True, None),
        (None, None),
        ("1e3", None),
    ],
)
def test_count_quantities(text: object, expected: int | None) -> None:
    assert parse_count_quantity(text) == expected
