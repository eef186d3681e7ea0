"""CPU and memory in the fit (issue 26 §2): a pool whose agent reports its nodes' free CPU and
memory per free-device bucket (`Bucket.host`) fits each pod's CPU and memory requests with its
devices, in the pool's vectors (`PoolLedger.host`).

- examples: a pod whose CPU does not fit is refused `InsufficientCPU` with its numbers, one
  whose memory does not fit `InsufficientMemory`; the same pods fit an older agent's report
  (no host points: no limit);
- charges carry CPU and memory: an unaccounted replica's CPU is taken from its node;
- property: whatever `schedule` places on a small pool, an exhaustive search finds an
  assignment of those pods to the real nodes (never optimistic), and with requests of zero
  the decision is the one without host points (outcomes move only where CPU/memory bind).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import GPU, NOW, cluster, deployment, gpus, leader, stamp, standalone, worker
from gpufleet.core.decision import ReasonCode
from gpufleet.core.model import (
    Bucket,
    Cluster,
    Deployment,
    HostRoom,
    Member,
    PoolObservation,
    Replica,
    Snapshot,
)
from gpufleet.core.schedule import plan, schedule

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
GI = 2**30

#: A node: (free GPUs, free millicores, free memory bytes).
Node = tuple[int, int, int]


def pool_of(nodes: Sequence[Node], *, host: bool = True, max_nodes: int | None = None) -> Cluster:
    """Cluster `a`, one 8-GPU pool `p` with exactly these nodes (exact points per bucket)."""
    by_gpus: dict[int, dict[tuple[int, int], int]] = {}
    for free, cpu, memory in nodes:
        points = by_gpus.setdefault(free, {})
        points[(cpu, memory)] = points.get((cpu, memory), 0) + 1
    buckets = tuple(
        Bucket(
            {GPU: free},
            sum(points.values()),
            tuple(HostRoom(c, m, n) for (c, m), n in sorted(points.items())) if host else None,
        )
        for free, points in sorted(by_gpus.items())
    )
    observation = PoolObservation(
        observed_nodes=len(nodes), buckets=buckets, observed_at=NOW, last_allocation_time=NOW
    )
    return (
        cluster("a")
        .pool("p", nodes=len(nodes), gpus=8, max_nodes=max_nodes, observation=observation)
        .build()
    )


def wants(name: str, gpus_each: int, copies: int, cpu: int, memory: int = 0) -> Deployment:
    member = replace(standalone(gpus(gpus_each)), milli_cpu=cpu, memory=memory)
    return deployment(name).engine("e", copies=copies, members=(member,)).build()


def decide(c: Cluster, *ds: Deployment, replicas: Sequence[Replica] = ()) -> Snapshot:
    return Snapshot(deployments=ds, clusters=(c,), replicas=tuple(replicas))


def test_a_pod_whose_cpu_does_not_fit_is_refused_with_its_numbers() -> None:
    # Two nodes with 4 GPUs free; the best has 6 cores free, the pod needs 24.
    c = pool_of([(4, 6000, 64 * GI), (4, 2000, 64 * GI)])
    decision = schedule(decide(c, wants("ml/x", 4, 1, 24000)), NOW)
    d = decision.deployments[0]
    assert d.created == () and d.diagnosis is not None
    (verdict,) = d.diagnosis.clusters[0].pools
    (reason,) = verdict.reasons
    assert reason.code is ReasonCode.INSUFFICIENT_CPU
    assert "needs 24 cores, best node with 4 free devices has 6 free" in reason.message
    assert reason.details["pod_milli_cpu"] == 24000
    assert reason.details["best_node_milli_cpu"] == 6000
    assert reason.details["best_node_devices"] == 4
    assert reason.details["nodes_fitting_devices"] == 2
    assert d.condition.reason == "InsufficientCPU"
    # An older agent's report (no points): no CPU limit, the same pod fits.
    old = pool_of([(4, 6000, 64 * GI), (4, 2000, 64 * GI)], host=False)
    assert len(schedule(decide(old, wants("ml/x", 4, 1, 24000)), NOW).deployments[0].created) == 1


def test_memory_binds_with_its_numbers() -> None:
    c = pool_of([(8, 64000, 16 * GI)])
    d = schedule(decide(c, wants("ml/x", 2, 1, 1000, 32 * GI)), NOW).deployments[0]
    assert d.diagnosis is not None
    (reason,) = d.diagnosis.clusters[0].pools[0].reasons
    assert reason.code is ReasonCode.INSUFFICIENT_MEMORY
    assert "needs 32Gi of memory, best node with 8 free devices has 16Gi free" in reason.message
    assert (reason.details["pod_memory"], reason.details["best_node_memory"]) == (32 * GI, 16 * GI)


def test_cpu_moves_pods_to_the_node_that_has_it() -> None:
    # Pack would take the 4-GPU node; its CPU is short, so the pod goes to the 8-GPU one.
    c = replace(pool_of([(4, 1000, GI), (8, 32000, 64 * GI)]))
    recorded = plan(decide(c, wants("ml/x", 2, 1, 8000)), NOW, record=True)
    assert len(recorded.decision.deployments[0].created) == 1
    (trace,) = recorded.traces.values()
    (assignment,) = trace.assignments
    assert assignment.node == (8, 32000, 64 * GI)
    assert assignment.pod == (2, 8000, 0)


def test_charges_carry_cpu_and_memory() -> None:
    # An existing replica whose pods the report does not hold yet takes its CPU too: a second
    # replica that fits the devices left does not fit the CPU left.
    c = pool_of([(8, 16000, 64 * GI)])
    first = wants("ml/x", 2, 1, 12000)
    existing = stamp(first, c, 0, "p")
    existing = replace(
        existing,
        engines=tuple(
            replace(e, members=tuple(replace(m, milli_cpu=12000) for m in e.members))
            for e in existing.engines
        ),
    )
    second = wants("ml/y", 2, 1, 8000)
    d = schedule(decide(c, first, second, replicas=[existing]), NOW).for_deployment(second.key)
    assert d.created == () and d.diagnosis is not None
    assert d.diagnosis.clusters[0].pools[0].reasons[0].code is ReasonCode.INSUFFICIENT_CPU


def test_growth_nodes_take_the_largest_room_reported() -> None:
    c = pool_of([(0, 30000, 64 * GI)], max_nodes=3)
    d = schedule(decide(c, wants("ml/x", 8, 2, 24000)), NOW).deployments[0]
    assert len(d.created) == 1  # one replica of two 8-GPU pods, on the two growth nodes
    c_small = pool_of([(0, 20000, 64 * GI)], max_nodes=3)
    assert schedule(decide(c_small, wants("ml/x", 8, 2, 24000)), NOW).deployments[0].created == ()


# --- never optimistic ---------------------------------------------------------------------


def _exists(nodes: list[Node], pods: list[Node]) -> bool:
    """Whether the pods go onto the nodes, each pod on one node (exhaustive)."""
    if not pods:
        return True
    pod, rest = pods[0], pods[1:]
    for i, node in enumerate(nodes):
        if all(f >= d for f, d in zip(node, pod, strict=True)):
            left = tuple(f - d for f, d in zip(node, pod, strict=True))
            if _exists([*nodes[:i], left, *nodes[i + 1 :]], rest):  # type: ignore[list-item]
                return True
    return False


nodes_st = st.lists(
    st.tuples(
        st.integers(0, 8), st.sampled_from([0, 2000, 8000, 16000]), st.sampled_from([0, 8, 64])
    ).map(lambda t: (t[0], t[1], t[2] * GI)),
    min_size=1,
    max_size=5,
)
demand_st = st.tuples(
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 3),
    st.sampled_from([0, 1000, 4000, 8000, 16000]),
    st.sampled_from([0, 8, 32]),
)


@SETTINGS
@given(nodes_st, st.lists(demand_st, min_size=1, max_size=3))
def test_never_places_where_no_node_has_room(
    nodes: list[Node], demands: list[tuple[int, int, int, int]]
) -> None:
    ds = [
        wants(f"ml/d{i}", g, copies, cpu, memory * GI)
        for i, (g, copies, cpu, memory) in enumerate(demands)
    ]
    decision = schedule(decide(pool_of(nodes), *ds), NOW)
    placed: list[Node] = []
    for d, (g, copies, cpu, memory) in zip(ds, demands, strict=True):
        made = decision.for_deployment(d.key).created
        placed.extend((g, cpu, memory * GI) for _ in range(copies * len(made)))
    assert _exists(list(nodes), sorted(placed, reverse=True))


@SETTINGS
@given(nodes_st, st.lists(demand_st, min_size=1, max_size=3))
def test_without_requests_host_points_change_nothing(
    nodes: list[Node], demands: list[tuple[int, int, int, int]]
) -> None:
    ds = [wants(f"ml/d{i}", g, copies, 0) for i, (g, copies, _, _) in enumerate(demands)]
    with_host = schedule(decide(pool_of(nodes), *ds), NOW)
    without = schedule(decide(pool_of(nodes, host=False), *ds), NOW)
    assert [d.created for d in with_host.deployments] == [d.created for d in without.deployments]
    assert with_host.pools == without.pools


def test_member_default_requests_nothing() -> None:
    assert (Member().milli_cpu, Member().memory) == (0, 0)


def _exists_gang(nodes: list[Node], pods: list[Node]) -> bool:
    """Whether the gang's pods go onto distinct nodes (exhaustive)."""
    return any(
        all(
            all(f >= d for f, d in zip(nodes[i], pod, strict=True))
            for i, pod in zip(pick, pods, strict=True)
        )
        for pick in itertools.permutations(range(len(nodes)), len(pods))
    )


@SETTINGS
@given(nodes_st, st.sampled_from([1, 2, 4]), st.integers(1, 3), st.sampled_from([0, 4000, 16000]))
def test_gangs_never_land_where_no_distinct_nodes_have_room(
    nodes: list[Node], gpus_each: int, workers: int, cpu: int
) -> None:
    member = replace(worker(gpus(gpus_each), nodes=workers), milli_cpu=cpu)
    lead = replace(leader(gpus(gpus_each)), milli_cpu=cpu)
    d = deployment("ml/g").engine("e", members=(lead, member)).build()
    decision = schedule(decide(pool_of(nodes), d), NOW)
    made = decision.deployments[0]
    if made.created:
        assert _exists_gang(list(nodes), [(gpus_each, cpu, 0)] * (workers + 1))
    else:
        assert made.diagnosis is not None  # refused with a reason, never a crash
