"""A quiet controller step costs what changed, not the fleet: its time at 10 to 2,000 clusters.

    .venv/bin/python bench/bench_quiet.py                    # 10, 100, 1,000, 2,000 clusters
    .venv/bin/python bench/bench_quiet.py --sizes 10,100 --steps 50

Builds a hub (a MemoryStore) whose clusters each have 4 observed pools (the B4 fleet's
classes) and 10 single-replica deployments per cluster, and runs the real `Controller` with the
simulator's settings (it owns each cluster's `Ready` condition and gives every cluster a
gateway) until every deployment is placed and a step writes nothing. It then times steps at
later times with nothing changed on the hub (a *quiet* step: nothing dirty, nothing scheduled)
and steps after which every pool observation heartbeated (only `observedAt` moved: O(clusters)
work, nothing scheduled). The fleet grows to each size in turn (10, 100, 1,000, 2,000 clusters).

Prints one JSON line per size: `clusters`, `deployments`, `replicas_placed` (ModelReplicas on
the hub; the benchmark fails unless it equals the replicas asked for), `quiet_step_us` and
`heartbeat_step_us` (CPU microseconds, median over the size's steps; gc frozen after the
settle, as a long-running controller's old generation is), and `rss_mib` (the process's
resident set after the size's steps: the hub store and the controller). No agent runs, so
replicas stay NotObserved; times stay inside one freshness state, so no status falls due.
Results and the command are in docs/performance.md ("Quiet steps").
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpufleet.bench.simulate import POOLS, deployment
from gpufleet.controller import Controller, ControllerConfig
from gpufleet.controller.config import observation_namespace
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import MODEL_REPLICA, POOL_OBSERVATION, Obj

T0 = datetime(2026, 1, 1, tzinfo=UTC)
API = "gpufleet.io/v1alpha1"
DEPLOYMENTS_PER_CLUSTER = 10


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


def _grow(hub: MemoryStore, clusters: range, nodes: int, at: datetime) -> None:
    for c in clusters:
        name = f"c{c:04d}"
        hub.create(_cluster(name, nodes))
        for pool, gpus in POOLS:
            hub.create(_pool_obs(name, pool, gpus, nodes, at))
        for d in range(c * DEPLOYMENTS_PER_CLUSTER, (c + 1) * DEPLOYMENTS_PER_CLUSTER):
            hub.create(deployment(f"d{d:05d}", 1 + d % 4, 1, None))


def _heartbeat(hub: MemoryStore, at: datetime) -> None:
    stamp = {"observedAt": format_time(at)}
    for obj in hub.view(POOL_OBSERVATION):
        meta = obj["metadata"]
        hub.patch_status(POOL_OBSERVATION, meta["name"], meta["namespace"], stamp, None)


def _settle(controller: Controller, now: datetime) -> datetime:
    for _ in range(30):
        now += timedelta(seconds=1)
        if controller.step(now).write_count == 0:
            return now
    raise SystemExit("the fleet did not settle in 30 steps")


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
        assert result.is_quiet and result.write_count == 0, result
        _heartbeat(hub, now)
        now += timedelta(milliseconds=100)
        started = time.process_time()
        result = controller.step(now)
        beat.append(time.process_time() - started)
        assert result.is_quiet, result
    gc.unfreeze()
    return statistics.median(quiet) * 1e6, statistics.median(beat) * 1e6, now


def _rss_mib() -> float:
    """The resident set now (Linux's /proc), else the peak (`getrusage`)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1000,2000", help="cluster counts, growing")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=40, help="timed steps of each kind")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    for name, gpus in POOLS:
        hub.create(_class(name, gpus))
    config = ControllerConfig(
        stale_after_s=3600,
        expire_after_s=7200,
        status_refresh_s=7200,
        manages_ready=True,
        default_gateway_address="{cluster}.gateway.example",
    )
    controller = Controller(hub, config, "bench")
    now, built = T0, 0
    for size in sizes:
        _grow(hub, range(built, size), args.nodes, now)
        built = size
        now = _settle(controller, now)
        asked = size * DEPLOYMENTS_PER_CLUSTER
        placed = len(hub.view(MODEL_REPLICA))
        if placed != asked:
            raise SystemExit(f"{size} clusters: {placed} replicas placed of {asked} asked")
        quiet, beat, now = _time_steps(controller, hub, now, args.steps)
        row = {
            "clusters": size,
            "deployments": asked,
            "replicas_placed": placed,
            "quiet_step_us": round(quiet),
            "heartbeat_step_us": round(beat),
            "rss_mib": round(_rss_mib()),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
