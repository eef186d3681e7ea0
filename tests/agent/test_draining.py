"""A replica's pods on a cordoned node (`drainingPods`): what the hub rolls first (issue 25
item 7), the same from `observe` and from `FreeDeviceTable` after the cordon comes and goes."""

from __future__ import annotations

from observe_builders import T0, node, pod, replica

from gpufleet.agent.model import ClusterObjects
from gpufleet.agent.observe import AllocationClock, ObserveConfig, observe
from gpufleet.agent.table import FreeDeviceTable
from gpufleet.store.port import Change, ChangeType, kind_of


def _objects(*, cordoned: bool) -> ClusterObjects:
    return ClusterObjects(
        nodes=(node("n1", "h100", cordoned=cordoned), node("n2", "h100")),
        pods=(pod("r-0", "r", node_name="n1"), pod("r-1", "r", node_name="n2")),
        replicas=(replica("r", copies=2),),
    )


def _draining(objects: ClusterObjects) -> list[int]:
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    return [p.draining_pods for p in result.replicas[0].pools]


def test_pods_on_a_cordoned_node_are_reported_draining() -> None:
    assert _draining(_objects(cordoned=False)) == [0]
    assert _draining(_objects(cordoned=True)) == [1]
    result, _ = observe(_objects(cordoned=True), AllocationClock(), ObserveConfig(), T0)
    assert result.replicas[0].to_status()["pools"][0]["drainingPods"] == 1


def test_the_table_recounts_replicas_when_a_node_is_cordoned_and_uncordoned() -> None:
    table = FreeDeviceTable(ObserveConfig())
    first = _objects(cordoned=False)
    added = (*first.nodes, *first.pods, *first.replicas)
    table.apply([Change(i, ChangeType.ADDED, kind_of(o), o) for i, o in enumerate(added)])
    for version, cordoned in enumerate((False, True, False), start=10):
        objects = _objects(cordoned=cordoned)
        n1 = objects.nodes[0]
        table.apply([Change(version, ChangeType.MODIFIED, kind_of(n1), n1)])
        got = table.snapshot(list(objects.replicas), T0, frozenset())
        want, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
        assert got.result.replicas == want.replicas
        assert [p.draining_pods for p in got.result.replicas[0].pools] == [int(cordoned)]
