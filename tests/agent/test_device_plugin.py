"""Device-plugin GPUs (issue 27, section 1, not built): a pool whose nodes expose GPUs only as
an extended resource (`nvidia.com/gpu` from the NVIDIA device plugin) shows none free, and says
why (`DevicePluginNotCounted`); a pool with DRA devices does not. The table agrees."""

from __future__ import annotations

from observe_builders import T0, node, rslice

from gpufleet.agent.observe import AllocationClock, ClusterObjects, ObserveConfig, observe
from gpufleet.agent.table import TABLE_KINDS, FreeDeviceTable
from gpufleet.store.port import Change, ChangeType, kind_of


def test_a_device_plugin_pool_shows_none_free_and_says_why() -> None:
    gpus = {"cpu": "8", "nvidia.com/gpu": "8"}
    nodes = (
        node("n1", "plugin", allocatable=gpus),
        node("n2", "plugin", allocatable=gpus),
        node("n3", "dra", allocatable=gpus),
    )
    objects = ClusterObjects(nodes, (rslice("n3", 4),), (), (), ())
    config = ObserveConfig()
    result, _ = observe(objects, AllocationClock(), config, T0)
    dra, plugin = result.pools
    assert [(p.name, p.extended_resources) for p in result.pools] == [
        ("dra", {"nvidia.com/gpu": 8}),
        ("plugin", {"nvidia.com/gpu": 16}),
    ]
    assert dra.problems == ()
    (problem,) = plugin.problems
    assert (problem.code, problem.count) == ("DevicePluginNotCounted", 2)
    assert problem.message == (
        "nvidia.com/gpu: 16 on 2 node(s), from a device plugin: not counted (no DRA devices)"
    )
    assert plugin.free_devices is not None
    assert all(not any(b.free.values()) for b in plugin.free_devices)
    conditions = {c["type"] for c in plugin.to_status()["conditions"]}
    assert "DevicePluginNotCounted" in conditions
    table = FreeDeviceTable(config)
    table.apply(
        Change(i, ChangeType.ADDED, kind_of(o), o)
        for i, o in enumerate((*objects.nodes, *objects.slices))
        if kind_of(o) in TABLE_KINDS
    )
    assert table.snapshot([], T0).result == result
