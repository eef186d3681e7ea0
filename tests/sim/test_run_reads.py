"""Oracles for what a run reads of the fleet at each instant through a cache or an index
(issue 13, B4): each against the plain computation, at every instant of a few scenarios.

- `SimStore.unschedulable_pods` (an index kept as pods are written) against a scan of every
  pod with `is_unschedulable`, and `SimStore.nodes_with_pods` (the scheduler takes any other
  node's load as that of no pod) against the nodes the pods name.
- `FleetState.truth`, kept across instants by the revisions of what `pool_truth` reads
  (`KeptTruth`), and `pool_truth` itself (from the cached `published_keys`), against the
  plain count over every node's published devices.
"""

from __future__ import annotations

from collections import Counter

import pytest

from gpufleet.core import labels
from gpufleet.sim.emulated.cluster import WorkloadCluster
from gpufleet.sim.emulated.objects import is_unschedulable
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.run.state import FleetState, KeptTruth, PoolTruth, pool_truth
from gpufleet.sim.scenario.load import load_scenario
from gpufleet.store.port import NODE, POD


def _plain_truth(cluster: WorkloadCluster) -> dict[str, PoolTruth]:
    published, taken = cluster.store.published(), cluster.store.taken()
    nodes: dict[str, list[tuple[int, int]]] = {p: [] for p in cluster.pools}
    for node in cluster.store.list(NODE):
        pool = (node["metadata"].get("labels") or {}).get(labels.POOL, "")
        if pool in nodes:
            devices = published.get(node["metadata"]["name"], [])
            nodes[pool].append((len(devices), sum(1 for d in devices if d.key in taken)))
    return {
        pool: PoolTruth(
            len(held),
            sum(t for t, _ in held),
            sum(u for _, u in held),
            dict(Counter(t - u for t, u in held)),
        )
        for pool, held in nodes.items()
    }


#: Scenarios with pods left Unschedulable (the autoscaler's: waiting for nodes) and nodes
#: that come and go, so both caches see their inputs move and stand still; and two without.
WITH_UNSCHEDULABLE = ["autoscale", "autoscale-quiet"]
NAMES = [*WITH_UNSCHEDULABLE, "eks-foreign-cordon", "race"]


@pytest.mark.parametrize("name", NAMES)
def test_cached_reads_equal_the_plain_ones_at_every_instant(name: str) -> None:
    scenario = load_scenario(name)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    run_to = timeline_runner(fleet, scenario)
    truths: dict[str, KeptTruth] = {}
    seen_unschedulable = seen_bound = 0
    at_s = 0.0
    while at_s <= scenario.end_s:
        run_to(at_s)
        state = FleetState(fleet, truths)
        for cluster_name, cluster in sorted(fleet.clusters.items()):
            bound = {
                p["spec"]["nodeName"] for p in cluster.store.peek(POD) if p["spec"].get("nodeName")
            }
            assert cluster.store.nodes_with_pods() == bound
            seen_bound += len(bound)
            scanned = [p for p in cluster.store.peek(POD) if is_unschedulable(p)]
            assert cluster.store.unschedulable_pods() == scanned
            seen_unschedulable += len(scanned)
            assert state.truth(cluster_name) == pool_truth(cluster) == _plain_truth(cluster)
        at_s += 7.0
    # The index held something, at least once, where pods wait for nodes.
    assert seen_unschedulable > 0 or name not in WITH_UNSCHEDULABLE
    assert seen_bound > 0
