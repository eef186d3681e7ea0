"""The fleet's capacity metrics: the pure function on built objects, its promises, and the
exporter's text over HTTP (read through a KubeStore of the emulated API server)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from gpufleet.cli.controller import ControllerDaemon
from gpufleet.kube.daemon import DaemonLoop, LoopConfig, Trigger, Watch, endpoints
from gpufleet.kube.fleet_metrics import (
    DriverCapacity,
    FleetCapacity,
    PoolCapacity,
    fleet_capacity,
    read_fleet,
)
from gpufleet.kube.metrics import CONTENT_TYPE_LATEST, ControllerMetrics, fleet_families, render
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import INFERENCE_CLUSTER, Kind, Obj, kind_of

pytestmark = pytest.mark.timeout(60)

API = "gpufleet.io/v1alpha1"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
GPU = "gpu.nvidia.com"
NIC = "nic.example.com"


def cluster(name: str, *pools: Obj) -> Obj:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {"nodePools": [{"name": p["name"], "className": "c"} for p in pools]},
        "status": {"gpuPools": list(pools)},
    }


def pool(
    name: str,
    *,
    nodes: int = 4,
    devices: list[Obj] | None = None,
    observed_nodes: int | None = None,
    buckets: list[tuple[dict[str, int], int]] | None = None,
    excluded: dict[str, int] | None = None,
    age_s: float = 5.0,
) -> Obj:
    """A published pool; `observed_nodes=None` means no observation at all."""
    body: Obj = {"name": name, "nodes": nodes}
    if devices is not None:
        body["devices"] = devices
    if observed_nodes is not None:
        observation: Obj = {
            "observedAt": (T0 - timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z"),
            "observedNodes": observed_nodes,
            "excludedNodes": excluded or {},
        }
        if buckets is not None:
            observation["freeDevices"] = [{"free": f, "nodes": n} for f, n in buckets]
        body["observation"] = observation
    return body


def gpus(count: int, driver: str = GPU, name: str = "gpu") -> Obj:
    return {"name": name, "driver": driver, "count": count}


def replica(name: str, cluster: str, pods_scheduled: str | None) -> Obj:
    body: Obj = {
        "apiVersion": API,
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"clusterName": cluster},
    }
    if pods_scheduled is not None:
        body["status"] = {
            "conditions": [{"type": "ModelPodsScheduled", "status": pods_scheduled, "reason": "R"}]
        }
    return body


def deployment(name: str, replicas: int, reason: str | None) -> Obj:
    status = "True" if reason is None else "False"
    return {
        "apiVersion": API,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicas": replicas},
        "status": {
            "conditions": [
                {"type": "ReplicasScheduled", "status": status, "reason": reason or "Scheduled"}
            ]
        },
    }


@dataclass(frozen=True)
class Case:
    id: str
    pool: Obj
    want: PoolCapacity


POOL_CASES = [
    Case(
        "observed: 4 nodes of 8, one cordoned, a histogram",
        pool(
            "h100",
            nodes=6,
            devices=[gpus(8)],
            observed_nodes=4,
            buckets=[({GPU: 8}, 1), ({GPU: 3}, 1), ({GPU: 0}, 2)],
            excluded={"Cordoned": 1, "NotReady": 0},
        ),
        PoolCapacity(
            "a",
            "h100",
            max_nodes=6,
            observed_nodes=4,
            age_s=5.0,
            excluded_nodes=(("Cordoned", 1),),
            drivers=(
                DriverCapacity(
                    GPU,
                    devices_per_node=8,
                    devices=32,
                    free=11,
                    allocated=13,  # 32 - 11 free - 8 on the cordoned node
                    unavailable=8,
                    largest_free_block=8,
                    nodes_by_free=(
                        (0, 2),
                        (1, 0),
                        (2, 0),
                        (3, 1),
                        (4, 0),
                        (5, 0),
                        (6, 0),
                        (7, 0),
                        (8, 1),
                    ),
                ),
            ),
        ),
    ),
    Case(
        "two drivers: each projected on its own",
        pool(
            "mixed",
            nodes=2,
            devices=[gpus(2), gpus(1, NIC, "nic")],
            observed_nodes=2,
            buckets=[({GPU: 2, NIC: 1}, 1), ({GPU: 1, NIC: 0}, 1)],
        ),
        PoolCapacity(
            "a",
            "mixed",
            max_nodes=2,
            observed_nodes=2,
            age_s=5.0,
            excluded_nodes=(),
            drivers=(
                DriverCapacity(GPU, 2, 4, 3, 1, 0, 2, ((0, 0), (1, 1), (2, 1))),
                DriverCapacity(NIC, 1, 2, 1, 1, 0, 1, ((0, 1), (1, 1))),
            ),
        ),
    ),
    Case(
        "no histogram (over the bucket cap): totals only",
        pool("big", devices=[gpus(4)], observed_nodes=3),
        PoolCapacity(
            "a",
            "big",
            max_nodes=4,
            observed_nodes=3,
            age_s=5.0,
            excluded_nodes=(),
            drivers=(DriverCapacity(GPU, 4, 12, None, None, 0, None, ()),),
        ),
    ),
    Case(
        "no devices published (unknown class): free numbers only",
        pool("l4", observed_nodes=1, buckets=[({GPU: 3}, 1)]),
        PoolCapacity(
            "a",
            "l4",
            max_nodes=4,
            observed_nodes=1,
            age_s=5.0,
            excluded_nodes=(),
            drivers=(DriverCapacity(GPU, None, None, 3, None, None, 3, ((3, 1),)),),
        ),
    ),
    Case(
        "no observation: only the ceiling",
        pool("cold", nodes=3, devices=[gpus(4)]),
        PoolCapacity("a", "cold", 3, None, None, (), ()),
    ),
    Case(
        "malformed numbers count as absent",
        {
            "name": "bad",
            "nodes": "many",
            "devices": [{"driver": GPU, "count": -1}, "junk"],
            "observation": {
                "observedAt": "yesterday",
                "observedNodes": True,
                "freeDevices": [{"free": {GPU: "x"}, "nodes": 1}],
                "excludedNodes": {"Cordoned": -3},
            },
        },
        PoolCapacity(
            "a",
            "bad",
            None,
            None,
            None,
            (),
            (),
        ),
    ),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=[c.id for c in POOL_CASES])
def test_pool_capacity(case: Case) -> None:
    fleet = fleet_capacity([cluster("a", case.pool)], [], [], T0)
    assert fleet.pools == (case.want,)


def test_replicas_and_deployments() -> None:
    fleet = fleet_capacity(
        [cluster("a"), cluster("b"), cluster("idle")],
        [
            replica("r0", "a", "True"),
            replica("r1", "a", "False"),
            replica("r2", "b", None),  # not observed yet: placed, not running
            replica("r3", "gone", "True"),  # a cluster that no longer exists still counts
            replica("r4", "", "True"),  # no cluster: not placed
        ],
        [
            deployment("d0", 3, None),
            deployment("d1", 2, "InsufficientGPU"),
            deployment("d2", 1, "InsufficientGPU"),
            deployment("d3", 4, "Tainted"),
        ],
        T0,
    )
    assert fleet == FleetCapacity(
        pools=(),
        replicas=(("a", 2, 1), ("b", 1, 0), ("gone", 1, 1), ("idle", 0, 0)),
        replicas_desired=10,
        unscheduled_deployments=(("InsufficientGPU", 2), ("Tainted", 1)),
    )


def test_deployments_short_of_running_replicas_are_counted_by_reason() -> None:
    def short(name: str, reason: str | None) -> Obj:
        obj = deployment(name, 2, None)
        status = "True" if reason is None else "False"
        running = {"type": "ReplicasRunning", "status": status, "reason": reason or "All"}
        obj["status"]["conditions"].append(running)
        return obj

    deployments = [short("d0", "BackingOff"), short("d1", "BackingOff"), short("d2", None)]
    fleet = fleet_capacity([], [], [*deployments, short("d3", "NoRoomForSurge")], T0)
    assert fleet.short_deployments == (("BackingOff", 2), ("NoRoomForSurge", 1))
    assert fleet.unscheduled_deployments == ()


@st.composite
def consistent_pools(draw: st.DrawFn) -> tuple[Obj, int]:
    """A pool as an agent reports it (excluded nodes have nothing free), and its node count."""
    per_node = draw(st.integers(1, 16))
    free_counts = draw(st.lists(st.integers(0, per_node), min_size=0, max_size=12))
    excluded = draw(st.integers(0, 6))
    histogram: dict[int, int] = {}
    for free in [*free_counts, *([0] * excluded)]:
        histogram[free] = histogram.get(free, 0) + 1
    nodes = len(free_counts) + excluded
    body = pool(
        "p",
        nodes=max(1, nodes),
        devices=[gpus(per_node)],
        observed_nodes=nodes,
        buckets=[({GPU: free}, n) for free, n in sorted(histogram.items())],
        excluded={"Cordoned": excluded},
    )
    return body, nodes


@settings(max_examples=200, deadline=None)
@given(consistent_pools())
def test_devices_split_into_free_allocated_unavailable(drawn: tuple[Obj, int]) -> None:
    body, nodes = drawn
    (found,) = fleet_capacity([cluster("a", body)], [], [], T0).pools
    (driver,) = found.drivers
    assert driver.devices is not None and driver.free is not None
    assert driver.allocated is not None and driver.unavailable is not None
    assert driver.devices == driver.free + driver.allocated + driver.unavailable
    assert sum(n for _, n in driver.nodes_by_free) == nodes
    frees = [f for f, n in driver.nodes_by_free if n > 0]
    assert driver.largest_free_block == max(frees, default=0)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), JSON), max_size=3),
    st.lists(JSON, max_size=3),
)
def test_malformed_objects_never_raise(clusters: list[Any], statuses: list[Any]) -> None:
    objs = [
        *clusters,
        *({"metadata": {"name": "x"}, "status": {"gpuPools": [s]}} for s in statuses),
    ]
    fleet = fleet_capacity(objs, objs, objs, T0)
    render_registry = CollectorRegistry()
    ControllerMetrics(render_registry, lambda: T0, lambda _now: fleet)
    render(render_registry)  # every value it produced can be exported


# --- over HTTP ------------------------------------------------------------------------------


def create(store: KubeStore, body: Obj) -> None:
    status = body.pop("status", None)
    created = store.create(body)
    if status is not None:
        meta = created["metadata"]
        store.patch_status(kind_of(created), meta["name"], meta.get("namespace"), status)


def samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def scrape(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


def test_exported_over_http_from_the_store(make_store: Callable[..., KubeStore]) -> None:
    store = make_store()
    create(
        store,
        cluster(
            "a",
            pool(
                "h100",
                nodes=2,
                devices=[gpus(8)],
                observed_nodes=2,
                buckets=[({GPU: 6}, 1), ({GPU: 0}, 1)],
                excluded={"Cordoned": 1},
            ),
        ),
    )
    create(store, replica("r0", "a", "True"))
    create(store, deployment("d0", 3, "InsufficientGPU"))
    clock = [T0]
    registry = CollectorRegistry()
    ControllerMetrics(registry, lambda: clock[0], lambda now: read_fleet(store, now))
    loop = DaemonLoop(
        "controller", [Watch(store, INFERENCE_CLUSTER)], lambda _e: _noop, lambda: clock[0]
    )
    servers = endpoints(
        loop,
        lambda: (200, CONTENT_TYPE_LATEST, render(registry)),
        metrics_address="127.0.0.1:0",
        health_address="0",
    )
    try:
        content_type, text = scrape(servers[0].port)
        assert content_type == CONTENT_TYPE_LATEST
        fleet_prefixes = (
            "gpufleet_pool_",
            "gpufleet_observation_",
            "gpufleet_replicas_",
            "gpufleet_unscheduled_",
        )
        found = {k: v for k, v in samples(text).items() if k.startswith(fleet_prefixes)}
        # (the exposition sorts labels by name)
        pool_labels = 'cluster="a",pool="h100"'
        driver_labels = f'cluster="a",driver="{GPU}",pool="h100"'
        by_free = f'cluster="a",driver="{GPU}",free="{{}}",pool="h100"'
        assert found == {
            f"gpufleet_pool_nodes{{{pool_labels}}}": 2,
            f"gpufleet_pool_max_nodes{{{pool_labels}}}": 2,
            'gpufleet_pool_excluded_nodes{cluster="a",pool="h100",reason="Cordoned"}': 1,
            f"gpufleet_observation_age_seconds{{{pool_labels}}}": 5,
            f"gpufleet_pool_devices{{{driver_labels}}}": 16,
            f"gpufleet_pool_free_devices{{{driver_labels}}}": 6,
            f"gpufleet_pool_allocated_devices{{{driver_labels}}}": 2,
            f"gpufleet_pool_unavailable_devices{{{driver_labels}}}": 8,
            f"gpufleet_pool_largest_free_block_devices{{{driver_labels}}}": 6,
            **{
                "gpufleet_pool_nodes_by_free_devices{" + by_free.format(n) + "}": (
                    1 if n in (0, 6) else 0
                )
                for n in range(9)
            },
            'gpufleet_replicas_placed{cluster="a"}': 1,
            'gpufleet_replicas_running{cluster="a"}': 1,
            "gpufleet_replicas_desired": 3,
            'gpufleet_unscheduled_deployments{reason="InsufficientGPU"}': 1,
        }
        clock[0] += timedelta(seconds=10)  # computed at scrape time
        assert (
            samples(scrape(servers[0].port)[1])[
                f"gpufleet_observation_age_seconds{{{pool_labels}}}"
            ]
            == 15
        )
    finally:
        for server in servers:
            server.close()


def _noop(_now: datetime, _trigger: Trigger) -> datetime | None:
    return None


def until_cached(store: KubeStore, kind: Kind, name: str, timeout_s: float = 10.0) -> Obj:
    """Wait (bounded) until the store's watch cache holds the API server's current version of
    `name`, and return it: what a reader of the cache (`view`) sees from then on."""
    current = store.get(kind, name)
    assert current is not None
    version = current["metadata"]["resourceVersion"]
    deadline = time.monotonic() + timeout_s
    while True:
        cursor = store.cursor  # before looking: a change after the look moves it on
        cached = {o["metadata"]["name"]: o for o in store.view(kind)}.get(name)
        if cached is not None and cached["metadata"]["resourceVersion"] == version:
            return cached
        remaining_s = deadline - time.monotonic()
        assert remaining_s > 0, f"the watch cache never caught up with {kind.kind} {name}"
        store.wait_for_changes(cursor, remaining_s)


def test_only_the_leader_exports_the_fleet(make_store: Callable[..., KubeStore]) -> None:
    store = make_store()
    device = gpus(8) | {"claim": "DRA", "deviceClassName": GPU}
    store.create(
        {
            "apiVersion": API,
            "kind": "InferenceClass",
            "metadata": {"name": "c"},
            "spec": {"devices": [device]},
        }
    )
    body = cluster("a", pool("h100", nodes=2))
    body["spec"]["nodePools"][0]["maxNodeCount"] = 2  # what the controller publishes as nodes
    create(store, body)
    daemon = ControllerDaemon(
        store, "ctl-0", lambda: T0, leader=None, loop_config=LoopConfig(resync_period_s=60.0)
    )
    assert daemon.loop.sync()
    # The cache holds the pool: a standby leaves it out because it does not lead.
    assert until_cached(store, INFERENCE_CLUSTER, "a")["status"]["gpuPools"][0]["nodes"] == 2
    before = render(daemon.registry).decode()
    assert "gpufleet_pool_max_nodes{" not in before
    assert "gpufleet_leader" in before  # the daemon's own metrics are there either way
    daemon.loop.tick()  # without an elector the first tick starts a term: it leads
    assert daemon.loop.is_leading()
    assert daemon.last_result is not None and daemon.last_result.errors == []
    # The metrics read the watch cache: wait until it holds what the leader's step wrote (the
    # pool as the controller publishes it), then the leader exports it.
    published = until_cached(store, INFERENCE_CLUSTER, "a")["status"]
    assert published["gpuPools"] == [{"name": "h100", "nodes": 2, "devices": [device]}]
    after = samples(render(daemon.registry).decode())
    assert after['gpufleet_pool_max_nodes{cluster="a",pool="h100"}'] == 2
    assert after['gpufleet_replicas_placed{cluster="a"}'] == 0


def test_the_leader_exports_what_its_step_left_on_the_hub(
    make_store: Callable[..., KubeStore],
) -> None:
    """A pool whose InferenceClass is missing is unpublished by the leader's first step
    (docs/controller.md): once the watch cache holds that write, the pool's metrics are gone.
    (The earlier form of the test above had no class, and passed only when it scraped before
    the watch delivered this write.)"""
    store = make_store()
    create(store, cluster("a", pool("h100", nodes=2)))
    daemon = ControllerDaemon(
        store, "ctl-0", lambda: T0, leader=None, loop_config=LoopConfig(resync_period_s=60.0)
    )
    daemon.loop.tick()
    assert daemon.loop.is_leading()
    status = until_cached(store, INFERENCE_CLUSTER, "a")["status"]
    assert status["gpuPools"] == []
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("Ready", "AgentNotReporting"),  # the hub manages Ready by default (docs/controller.md)
        ("PoolsPublished", "ClassNotFound"),
    ]
    after = samples(render(daemon.registry).decode())
    assert not any(k.startswith("gpufleet_pool_") for k in after)
    assert after['gpufleet_replicas_placed{cluster="a"}'] == 0


def test_docs_list_every_metric_the_controller_exports(
    make_store: Callable[..., KubeStore],
) -> None:
    from pathlib import Path

    store = make_store()
    create(
        store,
        cluster("a", pool("h100", devices=[gpus(8)], observed_nodes=1, buckets=[({GPU: 8}, 1)])),
    )
    create(store, deployment("d0", 1, "InsufficientGPU"))
    daemon = ControllerDaemon(store, "ctl-0", lambda: T0, leader=None)
    daemon.loop.tick()
    daemon.metrics.record_step({"a": 1}, {"InsufficientGPU": 1}, 1, 0.01, 1)
    exported = {
        line.split()[2]
        for line in render(daemon.registry).decode().splitlines()
        # (`*_created` series are left out by the daemons: `disable_created_series`)
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }
    assert len(exported) > 20
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Metrics") : docs.index("## Logs")]
    missing = [name for name in sorted(exported) if f"`{name}`" not in section]
    assert not missing


def _series(fleet: FleetCapacity) -> int:
    return sum(len(family.samples) for family in fleet_families(fleet))


def test_an_agents_report_cannot_grow_the_series_beyond_the_declared_classes() -> None:
    """Issue 30.4: 500 drivers and 500 exclusion reasons the class does not declare add no
    series (they added 3 series per driver)."""
    honest = pool("l4", devices=[gpus(4)], observed_nodes=2, buckets=[({GPU: 3}, 2)])
    baseline = _series(fleet_capacity([cluster("a", honest)], [], [], T0))
    invented = {f"x{i}.example.com": 0 for i in range(500)}
    hostile = pool(
        "l4",
        devices=[gpus(4)],
        observed_nodes=2,
        buckets=[({GPU: 3, **invented}, 1), ({GPU: 3, **{d: 1 for d in invented}}, 1)],
    )
    assert _series(fleet_capacity([cluster("a", hostile)], [], [], T0)) == baseline
    # A pool whose class is unknown: drivers at 0 free add nothing, the others are capped.
    unknown = pool("l4", observed_nodes=2, buckets=[({GPU: 3, **invented}, 2)])
    (capacity,) = fleet_capacity([cluster("a", unknown)], [], [], T0).pools
    assert [d.driver for d in capacity.drivers] == [GPU]
    flood = pool("l4", observed_nodes=1, buckets=[({d: 1 for d in invented}, 1)])
    (capacity,) = fleet_capacity([cluster("a", flood)], [], [], T0).pools
    assert len(capacity.drivers) == 4
    # Exclusion reasons: the known ones as they are, 8 taint keys, the rest folded.
    reasons = {
        "Cordoned": 1,
        **{f"Tainted:k{i}": 1 for i in range(100)},
        **{f"Bogus{i}": 1 for i in range(100)},
    }
    excluded = pool("l4", devices=[gpus(4)], observed_nodes=201, excluded=reasons)
    (capacity,) = fleet_capacity([cluster("a", excluded)], [], [], T0).pools
    got = dict(capacity.excluded_nodes)
    assert len(got) == 1 + 8 + 2
    assert got["Cordoned"] == 1 and got["Other"] == 100 and got["Tainted:other"] == 92
    assert sum(got.values()) == 201
