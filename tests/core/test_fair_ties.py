"""Spread breaks ties between equal clusters fairly (issue 14, section 4): ties are dealt like
cards (each deployment starts where the previous one's pending replicas end, counting from the
replicas the fleet already has), not by cluster name, so equal clusters receive equal shares of
a fleet's replicas, in one call or call after call, deterministically."""

from __future__ import annotations

from collections import Counter

from builders import NOW, cluster, deployment, replica_from
from gpufleet.core.model import Deployment, Replica, Snapshot
from gpufleet.core.schedule import schedule

#: 20 equal clusters, 300 deployments of 2 one-GPU replicas: 30 replicas per cluster each.
CLUSTERS = tuple(cluster(f"c{i:02d}").pool(nodes=40, gpus=8).build() for i in range(20))
DEPLOYMENTS = tuple(
    deployment(f"team-{i % 7}/model-{i:03d}").replicas(2).engine(gpus=1).build() for i in range(300)
)


def _shares(deployments: tuple[Deployment, ...]) -> Counter[str]:
    decision = schedule(Snapshot(deployments=deployments, clusters=CLUSTERS[::-1]), NOW)
    return Counter(p.cluster for d in decision.deployments for p in d.created)


def test_equal_clusters_receive_equal_shares() -> None:
    shares = _shares(DEPLOYMENTS)
    assert sum(shares.values()) == 600
    assert set(shares) == {c.name for c in CLUSTERS}
    # Each cluster within 1 of the mean of 30. With ties by name, c00-c14 got 40 each (full)
    # and c15-c19 none: every deployment's replicas went to the first names with room.
    assert max(shares.values()) - min(shares.values()) <= 1, shares


def test_equal_shares_call_after_call() -> None:
    """Deployments arriving one call at a time (the hub controller's steady state): each
    call's new replicas continue the deal where the fleet's replicas end."""
    replicas: tuple[Replica, ...] = ()
    for i in range(0, 60, 3):
        snap = Snapshot(deployments=DEPLOYMENTS[: i + 3], clusters=CLUSTERS, replicas=replicas)
        decision = schedule(snap, NOW)
        replicas = tuple(replica_from(p) for d in decision.deployments for p in d.placements)
    shares = Counter(r.cluster for r in replicas)
    assert sum(shares.values()) == 120
    assert max(shares.values()) - min(shares.values()) <= 1, shares


def test_spread_still_puts_one_replica_per_cluster_before_a_second() -> None:
    decision = schedule(Snapshot(deployments=DEPLOYMENTS, clusters=CLUSTERS), NOW)
    for d in decision.deployments:
        assert len({p.cluster for p in d.created}) == 2


def test_ties_are_deterministic_whatever_the_input_order() -> None:
    assert _shares(DEPLOYMENTS) == _shares(tuple(reversed(DEPLOYMENTS)))
