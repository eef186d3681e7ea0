"""Oracle for the diagnosis reuse (core/reuse/diagnoser.py): a `Diagnoser` that answers a
deployment from the scan of an earlier one alike (selector, tolerations, engines), asking again
only on clusters whose ledger version moved, says what `PlainDiagnoser` (`FRESH`'s, core/
verdicts.py) says of the fleet now.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NOW, ago, cluster, deployment, observed
from gpufleet.core.derive import FRESH
from gpufleet.core.model import Cluster, ClusterName, Deployment, SchedulingConfig, Snapshot
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    commit,
    explain_profile,
    place_replica,
)
from gpufleet.core.reuse.diagnoser import Diagnoser
from gpufleet.core.schedule import _build_ledgers, schedule
from gpufleet.core.verdicts import PlainDiagnoser

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Cluster, ...]:
    out = []
    for c in range(draw(st.integers(1, 6))):
        b = cluster(f"c{c}").label("region", draw(st.sampled_from(["eu", "us"])))
        if draw(st.integers(0, 4)) == 0:
            b = b.taint("gpu", draw(st.sampled_from(["NoSchedule", "NoExecute"])))
        if draw(st.integers(0, 5)) == 0:
            b = b.not_ready()
        if draw(st.integers(0, 5)) == 0:
            b = b.no_gateway()
        age = draw(st.sampled_from([None, None, 30.0, 400.0, 4000.0]))
        if age is not None:
            b = b.reported(ago(age))
        for p in range(draw(st.integers(1, 2))):
            gpus = draw(st.sampled_from([4, 8]))
            nodes = draw(st.integers(0, 3))
            obs = None
            if draw(st.booleans()):
                obs = observed({gpus: draw(st.integers(0, nodes))}, observed_nodes=None)
            b = b.pool(f"p{p}", nodes=nodes, gpus=gpus, observation=obs)
        out.append(b.build())
    return tuple(out)


@st.composite
def alike(draw: st.DrawFn) -> tuple[Deployment, ...]:
    """Deployments in groups alike: the same selector, tolerations and engines, other keys."""
    out = []
    for g in range(draw(st.integers(1, 3))):
        d = deployment(f"ml/g{g}")
        if draw(st.booleans()):
            d = d.select(region=draw(st.sampled_from(["eu", "us"])))
        if draw(st.booleans()):
            d = d.tolerate("gpu")
        shape = draw(st.sampled_from(["one", "pd", "gang"]))
        if shape == "one":
            d = d.engine(gpus=draw(st.sampled_from([1, 2, 4, 8])), copies=draw(st.integers(1, 2)))
        elif shape == "pd":
            d = d.pd(draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([2, 4])))
        else:
            d = d.gang(leader_gpus=draw(st.sampled_from([0, 4])), worker_gpus=4)
        for i in range(draw(st.integers(1, 3))):
            out.append(replace(d, name=f"ml/g{g}x{i}").replicas(1 + i).build())
    return tuple(out)


def _ledgers(
    clusters: tuple[Cluster, ...],
) -> tuple[dict[ClusterName, ClusterLedger], PlacementMemo]:
    snapshot = Snapshot(clusters=clusters)
    _, call = FRESH.begin(snapshot)
    return _build_ledgers(snapshot, NOW, call, False), call.placement


@SETTINGS
@given(fleets(), alike(), st.data())
def test_a_reused_diagnosis_is_fresh_diagnosis(
    clusters: tuple[Cluster, ...], ds: tuple[Deployment, ...], data: st.DataObject
) -> None:
    ledgers, memo = _ledgers(clusters)
    diagnoser = Diagnoser(ledgers, memo, SchedulingConfig())
    for _ in range(3):  # diagnose all, place some replicas (versions move), again
        for d in ds:
            assert diagnoser.diagnose(d, {}) == PlainDiagnoser(
                ledgers, memo, SchedulingConfig()
            ).diagnose(d, {})
        for d in ds:
            if not data.draw(st.booleans()):
                continue
            for ledger in ledgers.values():
                fitted = place_replica(ledger, d, memo.on_cluster(d, ledger))
                if fitted.engines is not None:
                    commit(ledger, fitted)
                    break


def test_deployments_alike_share_verdicts_that_did_not_move() -> None:
    """The reuse is real: the second deployment gets the first's verdict objects on the
    clusters nothing was placed on, and a new verdict on the one that took a replica."""
    clusters = tuple(
        cluster(f"c{i}").pool(nodes=2, gpus=8, observation=observed({8: 2})).build()
        for i in range(3)
    )
    ledgers, memo = _ledgers(clusters)
    first = deployment("ml/a").engine(gpus=8).build()
    second = deployment("ml/b").engine(gpus=8).build()
    diagnoser = Diagnoser(ledgers, memo, SchedulingConfig())
    before = diagnoser.diagnose(first, {})
    ledger = ledgers[ClusterName("c1")]
    commit(ledger, place_replica(ledger, first, memo.on_cluster(first, ledger)))
    after = diagnoser.diagnose(second, {})
    assert after == PlainDiagnoser(ledgers, memo, SchedulingConfig()).diagnose(second, {})
    assert after.clusters[0] is before.clusters[0]
    assert after.clusters[2] is before.clusters[2]
    assert after.clusters[1] != before.clusters[1]


def test_schedule_diagnoses_deployments_alike_as_alone() -> None:
    """End to end: each of several deployments alike that fall short is diagnosed as if it
    were the only one asking (against the ledger at its own failure)."""
    clusters = tuple(
        cluster(f"c{i}").pool(nodes=2, gpus=8, observation=observed({8: 1, 4: 1})).build()
        for i in range(4)
    )
    ds = tuple(deployment(f"ml/d{i}").engine(gpus=8).replicas(3).build() for i in range(5))
    decision = schedule(Snapshot(deployments=ds, clusters=clusters), NOW)
    short = [d for d in decision.deployments if d.diagnosis is not None]
    assert short
    for d in short:
        assert d.diagnosis is not None
        assert d.diagnosis.summary() == "0/4 clusters fit: 4 InsufficientGPU"


@SETTINGS
@given(fleets(), alike())
def test_deployments_alike_share_what_each_would_compute(
    clusters: tuple[Cluster, ...], ds: tuple[Deployment, ...]
) -> None:
    """Within a call, deployments with equal engines share their per-shape matches and
    explain profile (placement.py): each is what a memo of its own computes, and two share a
    profile id exactly when their profiles are equal by value."""
    ledgers, memo = _ledgers(clusters)
    ids: dict[tuple[object, ...], int] = {}
    for d in ds:
        own_ledgers, own = _ledgers(clusters)
        for name, ledger in ledgers.items():
            on_shape = memo.on_shape(d, ledger)
            assert on_shape == own.on_shape(d, own_ledgers[name])
            profile = tuple(
                (e.name, tuple(m.role for m in e.members), s)
                for e, s in zip(d.engines, on_shape, strict=True)
            )
            got = explain_profile(ledger, d, memo)
            assert ids.setdefault(profile, got) == got
    assert len(set(ids.values())) == len(ids)


def test_clusters_a_selector_leaves_out_share_their_verdict() -> None:
    """A `ClusterNotSelected` verdict is a function of the cluster and the selector: two
    deployments with one selector and different engines get the same verdict object there."""
    clusters = (
        cluster("eu1").label("region", "eu").pool(nodes=1, gpus=8).build(),
        cluster("us1").label("region", "us").pool(nodes=1, gpus=8).build(),
    )
    ledgers, memo = _ledgers(clusters)
    diagnoser = Diagnoser(ledgers, memo, SchedulingConfig())
    small = deployment("ml/a").select(region="eu").engine(gpus=1).build()
    big = deployment("ml/b").select(region="eu").engine(gpus=8, copies=2).build()
    first, second = diagnoser.diagnose(small, {}), diagnoser.diagnose(big, {})
    assert second == PlainDiagnoser(ledgers, memo, SchedulingConfig()).diagnose(big, {})
    assert second.clusters[1] is first.clusters[1]
    assert second.clusters[1].reasons[0].code.value == "ClusterNotSelected"
