"""The core's promises, checked with hypothesis on small fleets (bounded so they run in seconds).

- permuting any input list changes nothing;
- an accurately observed pool is never overcommitted (replayed node by node);
- applying a decision and scheduling again keeps everything and adds nothing;
- adding an empty cluster never places fewer replicas;
- every deployment with a shortfall has a non-empty diagnosis;
- when observations show only the fleet's own pods, whole-node accounting never places more
  than free-GPU accounting.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NOW, ago, cluster, deployment, observed, replica_from
from gpufleet.core.decision import Accounting, Decision
from gpufleet.core.model import (
    Bucket,
    Cluster,
    Deployment,
    DriverName,
    PoolObservation,
    Replica,
    Snapshot,
)
from gpufleet.core.schedule import plan, schedule

GPU = DriverName("gpu.nvidia.com")
SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def clusters(draw: st.DrawFn, *, observe: bool | None = None) -> tuple[Cluster, ...]:
    names = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    out = []
    for name in sorted(names):
        b = cluster(name).label("zone", draw(st.sampled_from(["x", "y"])))
        for p in range(draw(st.integers(1, 2))):
            gpus = draw(st.sampled_from([4, 8]))
            nodes = draw(st.integers(0, 3))
            is_observed = draw(st.booleans()) if observe is None else observe
            obs = (
                observed({gpus: draw(st.integers(0, nodes))}, observed_nodes=None)
                if is_observed
                else None
            )
            if obs is not None and obs.observed_nodes == 0:
                obs = observed([], observed_nodes=0)
            b = b.pool(f"p{p}", nodes=nodes, gpus=gpus, observation=obs)
        out.append(b.build())
    return tuple(out)


@st.composite
def deployments(draw: st.DrawFn) -> tuple[Deployment, ...]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        d = deployment(f"ml/d{i}").replicas(draw(st.integers(0, 4)))
        shape = draw(st.sampled_from(["one", "pd", "gang"]))
        if shape == "one":
            d = d.engine(gpus=draw(st.sampled_from([1, 2, 4, 8])), copies=draw(st.integers(1, 2)))
        elif shape == "pd":
            d = d.pd(draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4])))
        else:
            d = d.gang(leader_gpus=draw(st.sampled_from([0, 4])), worker_gpus=4)
        if draw(st.booleans()):
            d = d.select(zone="x")
        out.append(d.build())
    return tuple(out)


def placed(decision: Decision) -> int:
    return sum(len(d.retained) + len(d.created) for d in decision.deployments)


def apply(snap: Snapshot, decision: Decision) -> Snapshot:
    """The fleet after the decision settles: replicas exist and are allocated, pools report
    the histogram the decision predicted (so only the fleet's own pods are in it)."""
    replicas: list[Replica] = [
        replica_from(p, ago(1)) for d in decision.deployments for p in d.placements
    ]
    states = {(p.cluster, p.pool): p for p in decision.pools}
    clusters = []
    for c in snap.clusters:
        pools = []
        for pool in c.pools:
            state = states[(c.name, pool.name)]
            if state.accounting is Accounting.FREE_GPU:
                buckets = tuple(Bucket(dict(b.free), b.nodes) for b in state.histogram)
                obs = PoolObservation(
                    observed_nodes=sum(b.nodes for b in buckets),
                    buckets=buckets,
                    observed_at=NOW,
                    last_allocation_time=NOW,
                )
                pool = replace(pool, observation=obs)
            pools.append(pool)
        clusters.append(replace(c, pools=tuple(pools)))
    return replace(snap, clusters=tuple(clusters), replicas=tuple(replicas))


def assert_diagnosed(decision: Decision) -> None:
    for d in decision.deployments:
        if d.shortfall > 0:
            assert d.diagnosis is not None and not d.diagnosis.is_empty()
            assert d.diagnosis.summary()
        else:
            assert d.diagnosis is None


@SETTINGS
@given(clusters(), deployments(), st.randoms(use_true_random=False))
def test_permuting_inputs_changes_nothing(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...], rnd: object
) -> None:
    snap = Snapshot(deployments=deps, clusters=fleet)
    first = schedule(snap, NOW)
    assert_diagnosed(first)
    # Existing replicas too: half of them not yet accounted for by the pools.
    settled = apply(snap, first)
    mixed = replace(
        settled,
        replicas=tuple(
            r if i % 2 else replace(r, status=replace(r.status, observed_generation=None))
            for i, r in enumerate(settled.replicas)
        ),
    )
    for base in (snap, mixed):
        expected = schedule(base, NOW)
        lists = [list(base.deployments), list(base.clusters), list(base.replicas)]
        for items in lists:
            rnd.shuffle(items)  # type: ignore[attr-defined]
        shuffled = replace(
            base, deployments=tuple(lists[0]), clusters=tuple(lists[1]), replicas=tuple(lists[2])
        )
        assert schedule(shuffled, NOW) == expected


@SETTINGS
@given(clusters(observe=True), deployments())
def test_accurately_observed_pool_is_never_overcommitted(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...]
) -> None:
    result = plan(Snapshot(deployments=deps, clusters=fleet), NOW, record=True)
    for trace in result.traces.values():
        nodes = [list(v) for v, n in sorted(trace.initial.items()) for _ in range(n)]
        in_unit: dict[tuple[str, int], set[int]] = {}
        for a in trace.assignments:
            assert not a.is_charge  # nothing existed before
            used = in_unit.setdefault((a.owner, a.unit), set())
            index = next(i for i, v in enumerate(nodes) if tuple(v) == a.node and i not in used)
            assert all(d <= f for d, f in zip(a.pod, nodes[index], strict=True))
            nodes[index] = [f - d for f, d in zip(nodes[index], a.pod, strict=True)]
            used.add(index)
        assert all(f >= 0 for v in nodes for f in v)


@SETTINGS
@given(clusters(), deployments())
def test_applying_a_decision_is_a_fixed_point(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...]
) -> None:
    snap = Snapshot(deployments=deps, clusters=fleet)
    first = schedule(snap, NOW)
    second = schedule(apply(snap, first), NOW)
    for before, after in zip(first.deployments, second.deployments, strict=True):
        assert after.created == ()
        assert after.dropped == ()
        assert [p.name for p in after.retained] == [p.name for p in before.placements]
        assert after.shortfall == before.shortfall
    assert_diagnosed(second)


@SETTINGS
@given(clusters(), deployments(), st.sampled_from([4, 8]), st.integers(0, 3), st.booleans())
def test_adding_an_empty_cluster_never_places_fewer_of_one_deployment(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...], gpus: int, nodes: int, obs: bool
) -> None:
    """Alone, a deployment's replicas are alike and each cluster takes what it can of them, so
    more clusters never place fewer. Among several deployments this does not hold: the fill is
    greedy and ties are dealt from an offset that counts the candidates, so a new cluster can
    move another deployment's replica onto the nodes this one needed
    (`test_more_clusters_can_place_fewer_among_several`)."""
    deps = deps[:1]
    extra = (
        cluster("z")
        .label("zone", "x")
        .pool("p0", nodes=nodes, gpus=gpus, observation=observed({gpus: nodes}) if obs else None)
    )
    before = schedule(Snapshot(deployments=deps, clusters=fleet), NOW)
    after = schedule(Snapshot(deployments=deps, clusters=(*fleet, extra.build())), NOW)
    assert placed(after) >= placed(before)
    assert_diagnosed(after)


@SETTINGS
@given(clusters(observe=True), deployments())
def test_whole_node_never_places_more_than_free_gpu(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...]
) -> None:
    # Observations of empty pools: they show only the fleet's own pods (none yet).
    full = tuple(
        replace(
            c,
            pools=tuple(
                replace(
                    p,
                    observation=PoolObservation(
                        observed_nodes=p.nodes,
                        buckets=(Bucket({GPU: p.devices[0].count}, p.nodes),) if p.nodes else (),
                        observed_at=NOW,
                        last_allocation_time=NOW,
                    ),
                )
                for p in c.pools
            ),
        )
        for c in fleet
    )
    blind = tuple(
        replace(c, pools=tuple(replace(p, observation=None) for p in c.pools)) for c in fleet
    )
    free_gpu = schedule(Snapshot(deployments=deps, clusters=full), NOW)
    whole = schedule(Snapshot(deployments=deps, clusters=blind), NOW)
    assert placed(whole) <= placed(free_gpu)
    assert_diagnosed(free_gpu)
    assert_diagnosed(whole)


@SETTINGS
@given(clusters(), deployments())
def test_explaining_changes_no_decision_and_answers_for_every_satisfied_deployment(
    fleet: tuple[Cluster, ...], deps: tuple[Deployment, ...]
) -> None:
    snap = Snapshot(deployments=deps, clusters=fleet)
    keys = frozenset(d.key for d in deps)
    explained = plan(snap, NOW, explain=keys)
    assert explained.decision == schedule(snap, NOW)
    satisfied = {d.key for d in explained.decision.deployments if d.shortfall == 0}
    assert set(explained.one_more) == satisfied
    for key in satisfied:
        assert len(explained.one_more[key].clusters) == len(fleet)


def test_more_clusters_can_place_fewer_among_several() -> None:
    """The greedy fill's known trade (docs/scheduling.md, Fill), pinned so that a change to it
    is seen: with clusters a (3 whole nodes) and b (2), a two-node gang places twice and a
    one-GPU replica takes a's third node; add a cluster of no nodes and the deal starts the
    one-GPU replica on b, where the gang's second replica needed both nodes."""
    a = cluster("a").pool("p0", nodes=3, gpus=4).build()
    b = cluster("b").pool("p0", nodes=2, gpus=4).build()
    z = cluster("z").pool("p0", nodes=0, gpus=4).build()
    gang = deployment("ml/d0").replicas(4).gang(leader_gpus=4, worker_gpus=4).build()
    one = deployment("ml/d2").replicas(1).engine(gpus=1, copies=1).build()
    before = schedule(Snapshot(deployments=(gang, one), clusters=(a, b)), NOW)
    after = schedule(Snapshot(deployments=(gang, one), clusters=(a, b, z)), NOW)
    assert (placed(before), placed(after)) == (3, 2)
    assert [p.cluster for p in after.deployments[1].placements] == ["b"]
