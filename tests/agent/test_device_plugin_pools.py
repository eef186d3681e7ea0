"""Device-plugin pools (issue 27, section 1; `gpufleet.agent.device_plugin`): a pool the hub
declares `DevicePlugin` counts `allocatable[nvidia.com/gpu]` minus what every holding pod on the
node requests (other tenants' included), in the same histogram as DRA devices; its replicas'
pods count allocated while they hold, from the time first seen holding. The incremental
`Holds` and `FreeDeviceTable` agree with the plain computation (`observe`) on random pods."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from observe_builders import NS, T0, member, node, replica

from gpufleet.agent.device_plugin import (
    Holds,
    device_plugin_pools,
    hold_times,
    node_usage,
    plain_holds,
    pod_requests,
)
from gpufleet.agent.observe import AllocationClock, ClusterObjects, ObserveConfig, observe
from gpufleet.agent.table import TABLE_KINDS, FreeDeviceTable
from gpufleet.store.port import Change, ChangeType, kind_of

GPU = "nvidia.com/gpu"
DP = {"plugin": frozenset({GPU})}


def gpu_pod(
    name: str,
    node_name: str | None,
    gpus: object,
    *,
    phase: str = "Running",
    ns: str = "tenant",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if uid is not None:
        meta["uid"] = uid
    spec: dict[str, Any] = {"containers": [{"resources": {"limits": {GPU: gpus}}}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def _nodes() -> tuple[dict[str, Any], ...]:
    return (
        node("n1", "plugin", allocatable={GPU: "8"}),
        node("n2", "plugin", allocatable={GPU: "8"}),
        node("n3", "plugin", allocatable={}),
    )


def test_free_is_allocatable_minus_every_holding_pods_request() -> None:
    pods = (
        gpu_pod("a", "n1", "3", uid="ua"),
        gpu_pod("b", "n1", "2", uid="ub", ns="other-team"),
        gpu_pod("done", "n1", "8", phase="Succeeded", uid="ud"),  # terminated: holds nothing
        gpu_pod("pending", None, "8", uid="up"),  # unbound: holds nothing
        gpu_pod("c", "n2", "8", phase="Pending", uid="uc"),  # bound, not yet running: holds
    )
    objects = ClusterObjects(_nodes(), (), (), pods, (), device_plugin_pools=DP)
    result, clock = observe(objects, AllocationClock(), ObserveConfig(), T0)
    (pool,) = result.pools
    assert pool.free_devices is not None
    assert [(dict(b.free), b.nodes) for b in pool.free_devices] == [
        ({GPU: 0}, 2),  # n2 full, n3 publishes nothing (NoSlices)
        ({GPU: 3}, 1),
    ]
    assert pool.excluded_nodes == {"NoSlices": 1}
    assert pool.problems == ()  # counted: no DevicePluginNotCounted
    assert pool.last_allocation_time == T0
    assert dict(clock.first_seen) == {"ua": T0, "ub": T0, "uc": T0}
    # Undeclared, the same pool is not counted (as before).
    plain, _ = observe(
        ClusterObjects(_nodes(), (), (), pods, ()), AllocationClock(), ObserveConfig(), T0
    )
    assert plain.pools[0].problems[0].code == "DevicePluginNotCounted"


def test_a_replicas_pod_counts_allocated_from_the_time_first_seen_holding() -> None:
    rep = replica("r", member(pool="plugin"))
    labels = {
        "gpufleet.io/replica": "r",
        "gpufleet.io/engine": "main",
        "gpufleet.io/member": "Standalone",
        "gpufleet.io/replica-generation": "1",
    }
    unbound = gpu_pod("r-0", None, "1", ns=NS, uid="u0", labels=labels)
    bound = gpu_pod("r-0", "n1", "1", ns=NS, uid="u0", labels=labels)
    config = ObserveConfig()
    first, clock = observe(
        ClusterObjects(_nodes(), (), (), (unbound,), (rep,), device_plugin_pools=DP),
        AllocationClock(),
        config,
        T0,
    )
    assert not first.replicas[0].pods_scheduled
    later = T0 + timedelta(seconds=30)
    second, clock = observe(
        ClusterObjects(_nodes(), (), (), (bound,), (rep,), device_plugin_pools=DP),
        clock,
        config,
        later,
    )
    (observed,) = second.replicas
    assert observed.pods_scheduled
    assert observed.pools[0].last_allocation_time == later
    assert second.pools[0].last_allocation_time == later
    third, _ = observe(
        ClusterObjects(_nodes(), (), (), (bound,), (rep,), device_plugin_pools=DP),
        clock,
        config,
        later + timedelta(seconds=30),
    )
    assert third.replicas[0].pools[0].last_allocation_time == later  # first seen, kept


def test_pod_requests_follow_kube_schedulers_sum() -> None:
    pod = {
        "spec": {
            "initContainers": [
                {"resources": {"limits": {GPU: "4"}}},  # regular init: max with the rest
                {"restartPolicy": "Always", "resources": {"requests": {GPU: "1"}}},  # sidecar
            ],
            "containers": [
                {"resources": {"limits": {GPU: "1", "cpu": "2"}}},
                {"resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}},
            ],
        }
    }
    assert pod_requests(pod) == {GPU: 4}
    assert pod_requests({"spec": {"containers": [{"resources": {"limits": {GPU: "x"}}}]}}) == {
        GPU: 2**63 - 1  # malformed: all of the node's
    }


def test_the_pools_come_from_the_clusters_published_class_devices() -> None:
    cluster = {
        "status": {
            "gpuPools": [
                {"name": "dra", "devices": [{"claim": "DRA", "driver": "gpu.nvidia.com"}]},
                {"name": "plugin", "devices": [{"claim": "DevicePlugin", "resourceName": GPU}]},
                {"name": "bad", "devices": [{"claim": "DevicePlugin", "resourceName": "gpu"}]},
                "junk",
            ]
        }
    }
    assert device_plugin_pools(cluster) == DP
    assert device_plugin_pools(None) == {}


_pods = st.lists(
    st.tuples(
        st.sampled_from(["p0", "p1", "p2", "p3"]),
        st.sampled_from([None, "n1", "n2", "n9"]),
        st.sampled_from(["0", "1", "2", "5", "x"]),
        st.sampled_from(["Running", "Pending", "Succeeded"]),
        st.sampled_from([None, "u0", "u1", "u2"]),
    ),
    max_size=6,
)


def _objs(spec: list[tuple[str, str | None, str, str, str | None]]) -> dict[tuple[str, str], Any]:
    pods: dict[tuple[str, str], Any] = {}
    for name, n, gpus, phase, uid in spec:
        pods[("tenant", name)] = gpu_pod(name, n, gpus, phase=phase, uid=uid)
    return pods


@settings(max_examples=150, deadline=None)
@given(st.lists(_pods, min_size=1, max_size=5))
def test_holds_agree_with_the_plain_computation(steps: list[Any]) -> None:
    holds = Holds()
    clock: dict[str, Any] = {}
    held: dict[tuple[str, str], Any] = {}
    for i, step in enumerate(steps):
        now = T0 + timedelta(seconds=i)
        current = _objs(step)
        for key in held.keys() - current.keys():
            holds.note(key, None)
        for key, obj in current.items():
            holds.note(key, obj)
        held = current
        holds.settle(now, clock)
        plain = plain_holds(current)
        times, plain_clock = hold_times(plain, clock, now)
        usage = node_usage(plain, times)
        for n in ("n1", "n2", "n9"):
            assert holds.usage(n) == usage.get(n)
        assert dict(holds.clock()) == plain_clock
        clock = plain_clock


@settings(max_examples=100, deadline=None)
@given(st.lists(_pods, min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
def test_the_table_agrees_with_observe(steps: list[Any], declared: list[bool]) -> None:
    config = ObserveConfig()
    nodes = (
        node("n1", "plugin", allocatable={GPU: "4"}),
        node("n2", "plugin", allocatable={GPU: "2"}),
    )
    table = FreeDeviceTable(config)
    table.apply(Change(i, ChangeType.ADDED, kind_of(o), o) for i, o in enumerate(nodes))
    clock = AllocationClock()
    held: dict[tuple[str, str], Any] = {}
    for i, step in enumerate(steps):
        now = T0 + timedelta(seconds=i)
        pools = DP if declared[i % 4] else {}
        current = _objs(step)
        changes = [
            Change(0, ChangeType.DELETED, kind_of(held[k]), held[k])
            for k in held.keys() - current.keys()
        ] + [Change(0, ChangeType.MODIFIED, kind_of(o), o) for o in current.values()]
        assert all(c.kind in TABLE_KINDS for c in changes)
        table.apply(changes)
        held = current
        snap = table.snapshot([], now, device_plugin_pools=pools)
        objects = ClusterObjects(
            nodes, (), (), tuple(current.values()), (), device_plugin_pools=pools
        )
        expected, clock = observe(objects, clock, config, now)
        assert snap.result == expected
        assert snap.clock == clock
