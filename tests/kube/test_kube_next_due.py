"""`gpufleet controller` wakes at the controller's next time-driven change
(`Controller.next_due`), not only on its resync: a cluster whose agent fell silent shows
Stale within a step of `stale_after_s`, with the resync far away. Over HTTP to the emulated
API server, on an injected clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.cli.controller import ControllerDaemon
from gpufleet.controller import ControllerConfig, observation_namespace
from gpufleet.kube.daemon import LoopConfig, Trigger
from gpufleet.kube.store import KubeStore
from gpufleet.store import format_time
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION, Obj

pytestmark = pytest.mark.timeout(30)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
API = "gpufleet.io/v1alpha1"
STALE_AFTER_S = 20.0
LOOP = LoopConfig(debounce_s=0.0, resync_period_s=600.0)
CONFIG = ControllerConfig(
    stale_after_s=STALE_AFTER_S,
    expire_after_s=100,
    manages_ready=True,
    default_gateway_address="{cluster}.gw",
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _objects() -> list[Obj]:
    device = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "claim": "DRA",
        "deviceClassName": "gpu.nvidia.com",
        "count": 4,
    }
    klass = {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": "l4-4x"},
        "spec": {"devices": [device]},
    }
    cluster = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": "a", "labels": {"gpufleet.io/region": "r1"}},
        "spec": {"nodePools": [{"name": "l4", "className": "l4-4x", "nodeCount": 1}]},
    }
    observation = {
        "apiVersion": API,
        "kind": "PoolObservation",
        "metadata": {"name": "l4", "namespace": observation_namespace("a")},
        "spec": {"clusterName": "a", "poolName": "l4"},
    }
    return [klass, cluster, observation]


def _report(store: KubeStore) -> None:
    status = {
        "agent": {"identity": "agent-a", "leaseEpoch": 1},
        "observedAt": format_time(T0),
        "observedNodes": 1,
        "freeDevices": [{"free": {"gpu.nvidia.com": 4}, "nodes": 1}],
        "excludedNodes": {},
        "extendedResources": {},
        "conditions": [{"type": "HistogramAvailable", "status": "True"}],
    }
    store.patch_status(POOL_OBSERVATION, "l4", observation_namespace("a"), status)


def _state(store: KubeStore) -> str:
    """The freshness the cluster's status publishes of its pool's report (a GET)."""
    obj = store.get(INFERENCE_CLUSTER, "a")
    assert obj is not None
    return str(obj["status"]["gpuPools"][0]["observation"]["state"])


def _settle(daemon: ControllerDaemon) -> None:
    """Tick until the controller's own status writes have all come back over the watch: three
    ticks in a row with nothing due (the echoes arrive on the watch's thread, not in order with
    the ticks, so a fixed count of ticks is not enough on a loaded machine)."""
    quiet = 0
    deadline = time.monotonic() + 10.0
    while quiet < 3:
        assert time.monotonic() < deadline, "the controller's writes never stopped echoing"
        quiet = quiet + 1 if daemon.loop.tick() is None else 0
        time.sleep(0.05)


def test_the_daemon_steps_when_a_cluster_turns_stale_not_on_its_resync(
    make_store: Callable[..., KubeStore],
) -> None:
    hub = make_store()
    for obj in _objects():
        hub.create(obj)
    _report(hub)
    clock = Clock()
    daemon = ControllerDaemon(
        make_store(), "ctl", clock, leader=None, loop_config=LOOP, config=CONFIG
    )
    assert daemon.loop.tick() is Trigger.START
    for _ in range(10):  # the controller's own status writes come back as changes
        clock.now += timedelta(seconds=1)
        daemon.loop.tick()
    _settle(daemon)
    assert _state(hub) == "Fresh"
    assert daemon.controller is not None
    due = daemon.controller.next_due(clock.now)
    assert due is not None and T0 + timedelta(seconds=STALE_AFTER_S) < due
    assert due <= T0 + timedelta(seconds=STALE_AFTER_S, milliseconds=1)
    clock.now = due - timedelta(milliseconds=10)
    assert daemon.loop.tick() is None
    assert _state(hub) == "Fresh"
    clock.now = due
    assert daemon.loop.tick() is Trigger.REQUESTED
    result = daemon.last_result
    assert result is not None and result.count("InferenceCluster", "patch_status") == 1
    assert _state(hub) == "Stale"  # at the crossing, with the resync 600 s away
