"""A quiet controller step costs what changed, not the fleet: the step time at N and at 2N.

    .venv/bin/python bench/bench_quiet.py                  # 10 clusters, 500 deployments
    .venv/bin/python bench/bench_quiet.py --clusters 20 --deployments 1000 --steps 200

Builds a hub (a MemoryStore) with C clusters of 4 observed pools (the B4 fleet's classes) and D
single-replica deployments, runs the real `Controller` until it has placed them and a step
writes nothing, then times steps at later times with nothing changed on the hub (a *quiet*
step: nothing dirty, nothing scheduled), and steps after which every pool observation
heartbeated (only `observedAt` moved: O(clusters) work, nothing scheduled). Then doubles the
fleet (2C clusters, 2D deployments), settles it, and times the same steps again. Prints CPU
microseconds per step (median over --steps) and the Python function calls of a quiet step
(deterministic), at both sizes: the quiet step should not grow with the fleet. Measured on
the shared 2-core machine (2026-12-01): 10 clusters / 500 deployments and 20 / 1,000 both
take 247 calls per quiet step, ~80-240 us CPU (noise of the shared machine; gc frozen). No agent runs, so replicas stay NotObserved; times stay inside one freshness
state, so no status falls due.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import statistics
import time
from datetime import UTC, datetime, timedelta

from gpufleet.bench.simulate import POOLS, deployment
from gpufleet.controller import Controller, ControllerConfig
from gpufleet.controller.config import observation_namespace
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import POOL_OBSERVATION, Obj

T0 = datetime(2026, 1, 1, tzinfo=UTC)
API = "gpufleet.io/v1alpha1"


def _class(name: str, gpus: int) -> Obj:
    device = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "claim": "DRA",
        "deviceClassName": "gpu.nvidia.com",
        "count": gpus,
        "attributes": {"productName": {"string": name.upper()}},
    }
    return {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {"devices": [device]},
    }


def _cluster(name: str, nodes: int) -> Obj:
    pools = [{"name": p, "className": p, "nodeCount": nodes} for p, _ in POOLS]
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": {"gpufleet.io/region": "r1"}},
        "spec": {"nodePools": pools},
    }


def _pool_obs(cluster: str, pool: str, gpus: int, nodes: int, at: datetime) -> Obj:
    return {
        "apiVersion": API,
        "kind": "PoolObservation",
        "metadata": {"name": pool, "namespace": observation_namespace(cluster)},
        "spec": {"clusterName": cluster, "poolName": pool},
        "status": {
            "agent": {"identity": f"agent-{cluster}", "leaseEpoch": 1},
            "observedAt": format_time(at),
            "observedNodes": nodes,
            "freeDevices": [{"free": {"gpu.nvidia.com": gpus}, "nodes": nodes}],
            "excludedNodes": {},
            "extendedResources": {},
            "conditions": [{"type": "HistogramAvailable", "status": "True"}],
        },
    }


def _grow(hub: MemoryStore, clusters: range, deployments: range, nodes: int) -> None:
    for c in clusters:
        name = f"c{c:03d}"
        hub.create(_cluster(name, nodes))
        for pool, gpus in POOLS:
            hub.create(_pool_obs(name, pool, gpus, nodes, T0))
    for d in deployments:
        hub.create(deployment(f"d{d:04d}", 1 + d % 4, 1, None))


def _heartbeat(hub: MemoryStore, at: datetime) -> None:
    for obj in hub.view(POOL_OBSERVATION):
        meta = obj["metadata"]
        stamp = {"observedAt": format_time(at)}
        hub.patch_status(POOL_OBSERVATION, meta["name"], meta["namespace"], stamp, None)


def _settle(controller: Controller, now: datetime) -> datetime:
    for _ in range(20):
        now += timedelta(seconds=1)
        if controller.step(now).write_count == 0:
            return now
    raise SystemExit("the fleet did not settle in 20 steps")


def _time_steps(
    controller: Controller, hub: MemoryStore, now: datetime, steps: int
) -> tuple[float, float, datetime]:
    quiet: list[float] = []
    beat: list[float] = []
    gc.collect()
    gc.freeze()  # the fleet built so far is not collected again and again while timing
    for _ in range(steps):
        now += timedelta(milliseconds=100)
        started = time.process_time()
        result = controller.step(now)
        quiet.append(time.process_time() - started)
        assert result.is_quiet and result.write_count == 0
        _heartbeat(hub, now)
        now += timedelta(milliseconds=100)
        started = time.process_time()
        result = controller.step(now)
        beat.append(time.process_time() - started)
        assert result.is_quiet
    return statistics.median(quiet) * 1e6, statistics.median(beat) * 1e6, now


def _calls_per_quiet_step(
    controller: Controller, now: datetime, steps: int
) -> tuple[int, datetime]:
    """Python function calls of a quiet step (deterministic, unlike its time)."""
    profile = cProfile.Profile()
    for _ in range(steps):
        now += timedelta(milliseconds=100)
        profile.runcall(controller.step, now)
    calls = sum(entry.callcount for entry in profile.getstats())
    return calls // steps, now


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    for name, gpus in POOLS:
        hub.create(_class(name, gpus))
    config = ControllerConfig(stale_after_s=3600, expire_after_s=7200, status_refresh_s=7200)
    controller = Controller(hub, config, "bench")
    c, d = args.clusters, args.deployments
    header = f"{'clusters':>8} {'deploys':>8} {'revision':>8} {'quiet step us':>14}"
    print(f"{header} {'calls/quiet step':>17} {'heartbeat us':>13}")
    now = T0
    for size in (1, 2):
        _grow(hub, range((size - 1) * c, size * c), range((size - 1) * d, size * d), args.nodes)
        now = _settle(controller, now)
        quiet, beat, now = _time_steps(controller, hub, now, args.steps)
        calls, now = _calls_per_quiet_step(controller, now, 20)
        revision = hub.revision  # the hub's writes so far
        row = f"{size * c:>8} {size * d:>8} {revision:>8} {quiet:>14.0f}"
        print(f"{row} {calls:>17} {beat:>13.0f}")


if __name__ == "__main__":
    main()
