"""Oracles for the fill index (core/reuse/fill_index.py) and the explain cache
(core/placement.py).

- `FillIndex.place` places where `PlainFill` (`FRESH`'s: every candidate tried in fill order
  with `place_replica`) does, replica after replica, and leaves the ledgers alike;
- `explain_cluster` and `ungated_verdict` (kept per explain profile and cluster version) say what
  `place_replica(explain=True)` says on the cluster as it is now, also after commits.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NOW, cluster, deployment, observed
from gpufleet.core.decision import ClusterVerdict
from gpufleet.core.derive import FRESH
from gpufleet.core.fill_order import PlainFill
from gpufleet.core.model import Cluster, ClusterName, Deployment, Snapshot
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    can_ever_host,
    commit,
    explain_cluster,
    place_replica,
    ungated_verdict,
)
from gpufleet.core.reuse.fill_index import FillIndex
from gpufleet.core.schedule import _build_ledgers

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Cluster, ...]:
    out = []
    for c in range(draw(st.integers(1, 6))):
        b = cluster(f"c{c}")
        for p in range(draw(st.integers(1, 2))):
            gpus = draw(st.sampled_from([4, 8]))
            nodes = draw(st.integers(0, 3))
            obs = None
            if draw(st.booleans()):
                obs = observed({gpus: draw(st.integers(0, nodes))}, observed_nodes=None)
                if obs.observed_nodes == 0:
                    obs = observed([], observed_nodes=0)
            b = b.pool(f"p{p}", nodes=nodes, gpus=gpus, observation=obs)
        out.append(b.build())
    return tuple(out)


@st.composite
def demands(draw: st.DrawFn) -> tuple[Deployment, ...]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        d = deployment(f"ml/d{i}").replicas(4)
        shape = draw(st.sampled_from(["one", "one", "pd", "gang"]))
        if shape == "one":
            d = d.engine(gpus=draw(st.sampled_from([1, 2, 4, 8])), copies=draw(st.integers(1, 2)))
        elif shape == "pd":
            d = d.pd(draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4])))
        else:
            d = d.gang(leader_gpus=draw(st.sampled_from([0, 4])), worker_gpus=4)
        out.append(d.build())
    return tuple(out)


def _ledgers(
    clusters: tuple[Cluster, ...],
) -> tuple[dict[ClusterName, ClusterLedger], PlacementMemo]:
    snapshot = Snapshot(clusters=clusters)
    _, call = FRESH.begin(snapshot)
    return _build_ledgers(snapshot, NOW, call, False), call.placement


def _candidates(
    ledgers: dict[ClusterName, ClusterLedger], d: Deployment, memo: PlacementMemo
) -> tuple[ClusterName, ...]:
    return tuple(sorted(n for n, lg in ledgers.items() if can_ever_host(lg, d, memo)))


def _state(ledgers: dict[ClusterName, ClusterLedger]) -> list[object]:
    return [(p.free, p.free_nodes) for lg in ledgers.values() for p in lg.pools]


@SETTINGS
@given(fleets(), demands(), st.integers(0, 7), st.data())
def test_the_fill_index_places_as_fresh_fills(
    clusters: tuple[Cluster, ...], ds: tuple[Deployment, ...], offset: int, data: st.DataObject
) -> None:
    fast, fast_memo = _ledgers(clusters)
    plain, plain_memo = _ledgers(clusters)
    orders = {}
    plains = {}
    for d in ds:
        names = _candidates(fast, d, fast_memo)
        start = {n: data.draw(st.integers(0, 1)) for n in names}
        ranks = {n: i for i, n in enumerate(names)}
        orders[d.key.name] = FillIndex(names, ranks, start, offset)
        plains[d.key.name] = PlainFill(names, ranks, start, offset)
    # Round-robin, as the scheduler does, until every deployment fails once.
    active = list(ds)
    while active:
        for d in list(active):
            got = orders[d.key.name].place(fast, d, fast_memo, lambda c: str(c))
            want = plains[d.key.name].place(plain, d, plain_memo, lambda c: str(c))
            assert (got[0] if got else None) == (want[0] if want else None)
            assert _state(fast) == _state(plain)
            if got is None:
                active.remove(d)


@SETTINGS
@given(fleets(), demands())
def test_explain_cluster_is_place_replica_explained(
    clusters: tuple[Cluster, ...], ds: tuple[Deployment, ...]
) -> None:
    ledgers, memo = _ledgers(clusters)
    for _ in range(3):  # explain, commit a replica of each deployment somewhere, again
        for d in ds:
            for ledger in ledgers.values():
                plain = place_replica(ledger, d, memo.on_cluster(d, ledger), explain=True)
                want = (plain.engines is not None, plain.reasons, plain.verdicts)
                assert explain_cluster(ledger, d, memo) == want
                verdict = ungated_verdict(ledger, d, memo, {}, ())
                assert verdict == ClusterVerdict(ledger.cluster.name, *want)
        for d in ds:
            for ledger in ledgers.values():
                fitted = place_replica(ledger, d, memo.on_cluster(d, ledger))
                if fitted.engines is not None:
                    commit(ledger, fitted)
                    break
