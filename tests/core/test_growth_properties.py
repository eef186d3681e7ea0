"""Growth is what an autoscaler can add (issue 14, sections 3 and 4).

- an observed fixed-size pool (no `max_node_count`) has exactly the nodes its agent reports:
  its declared `node_count` adds no empty nodes, so nothing is placed into a removed node;
- an observed autoscaled pool has the reported nodes plus `max_node_count - observed` empty
  ones, also when it is observed at zero nodes (scale from zero).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NOW, cluster, deployment, observed
from gpufleet.core.capacity import PoolLedger, growth_nodes
from gpufleet.core.model import ClusterName, SchedulingConfig, Snapshot
from gpufleet.core.schedule import plan

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def observed_pools(draw: st.DrawFn) -> tuple[int, int, int | None, dict[int, int]]:
    """(gpus per node, declared node_count, max_node_count or None, histogram free -> nodes)
    of a pool whose agent reports at most its ceiling of nodes."""
    gpus = draw(st.sampled_from([4, 8]))
    node_count = draw(st.integers(0, 4))
    max_nodes = draw(st.one_of(st.none(), st.integers(node_count, 6)))
    ceiling = max_nodes if max_nodes is not None else node_count
    buckets: dict[int, int] = {}
    for free in draw(st.lists(st.integers(0, gpus), max_size=3, unique=True)):
        buckets[free] = draw(st.integers(1, 2))
    while sum(buckets.values()) > ceiling:
        free = max(buckets)
        buckets[free] -= 1
        if not buckets[free]:
            del buckets[free]
    return gpus, node_count, max_nodes, buckets


@SETTINGS
@given(observed_pools())
def test_growth_is_only_what_an_autoscaler_can_add(
    drawn: tuple[int, int, int | None, dict[int, int]],
) -> None:
    gpus, node_count, max_nodes, buckets = drawn
    obs = observed(buckets, observed_nodes=sum(buckets.values()))
    built = (
        cluster("a").pool("p", nodes=node_count, gpus=gpus, max_nodes=max_nodes, observation=obs)
    ).build()
    (pool,) = built.pools
    ledger = PoolLedger(ClusterName("a"), pool, 0, SchedulingConfig())
    reported = sum(buckets.values())
    expected_growth = 0 if max_nodes is None else max_nodes - reported
    assert growth_nodes(pool, obs) == expected_growth
    assert sum(ledger.free.values()) == reported + expected_growth
    # The reported buckets are all there, growth (if any) on top at the full count.
    for free, nodes in buckets.items():
        extra = expected_growth if free == gpus else 0
        assert ledger.free.get((free,), 0) == nodes + extra


@SETTINGS
@given(observed_pools(), st.sampled_from([1, 2, 4, 8]), st.integers(1, 8))
def test_nothing_is_placed_into_a_node_a_fixed_pool_does_not_report(
    drawn: tuple[int, int, int | None, dict[int, int]], pod_gpus: int, replicas: int
) -> None:
    gpus, node_count, _, buckets = drawn
    # A fixed pool declared at `node_count` whose agent reports fewer nodes or as many.
    obs = observed(buckets, observed_nodes=sum(buckets.values()))
    fleet = (cluster("a").pool("p", nodes=node_count, gpus=gpus, observation=obs).build(),)
    deps = (deployment("ml/d").engine(gpus=pod_gpus).replicas(replicas).build(),)
    result = plan(Snapshot(deployments=deps, clusters=fleet), NOW, record=True)
    trace = result.traces[(ClusterName("a"), "p")]  # type: ignore[index]
    assert dict(trace.initial) == {(free,): n for free, n in buckets.items()}
    # Replayed node by node on the reported nodes only: every pod fits where it was put.
    nodes = [free for free, n in sorted(buckets.items()) for _ in range(n)]
    for a in trace.assignments:
        index = next(i for i, free in enumerate(nodes) if (free,) == a.node)
        assert a.pod[0] <= nodes[index]
        nodes[index] -= a.pod[0]
    placed = sum(len(d.created) for d in result.decision.deployments)
    assert placed * pod_gpus <= sum(free * n for free, n in buckets.items())
