"""Controller memory and first-step cost with many deployments on a few clusters (issue 30, §4).

    .venv/bin/python bench/bench_scale.py                          # 50,000 deployments, 20 clusters
    .venv/bin/python bench/bench_scale.py --deployments 5000,10000,20000

Builds a hub (a MemoryStore) of `--clusters` Ready clusters with gateways, each with the four
observed pools of the B4 fleet's classes, large enough for every replica, and `--deployments`
single-replica deployments of 1-4 GPUs spread over them; then starts a new `Controller` (the
simulator's settings) and runs steps until one writes nothing. The garbage collector runs
as in the controller process (`tune_collector`; `--collector default`: CPython's thresholds). Each size runs in a fresh
process (`--deployments` lists several: one child process each), so one size's memory does not
carry into the next.

Prints one JSON line per size: `deployments`, `clusters`, `replicas_placed` (ModelReplicas on
the hub; the benchmark fails unless it equals the replicas asked for), `first_step_s` (CPU
seconds of the controller's first step, which places every replica), `settle_s` (CPU seconds of
all steps until one writes nothing), `hub_mib` (resident set after the hub was built, before the
controller) and `rss_mib` (resident set after the fleet settled: the hub store with its change
feed, and the controller). Results and the command are in docs/performance.md ("Many
deployments").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from bench_quiet import _class, _cluster, _pool_obs, _rss_mib

from gpufleet.bench.simulate import POOLS, deployment
from gpufleet.cli.controller import tune_collector
from gpufleet.controller import Controller, ControllerConfig
from gpufleet.store import MemoryStore
from gpufleet.store.port import MODEL_REPLICA

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _build(deployments: int, clusters: int) -> MemoryStore:
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    for name, gpus in POOLS:
        hub.create(_class(name, gpus))
    nodes = max(50, deployments // clusters)  # each pool alone could hold its cluster's share
    for c in range(clusters):
        name = f"c{c:04d}"
        hub.create(_cluster(name, nodes))
        for pool, gpus in POOLS:
            hub.create(_pool_obs(name, pool, gpus, nodes, T0))
    for d in range(deployments):
        hub.create(deployment(f"d{d:05d}", 1 + d % 4, 1, None))
    return hub


def run_one(deployments: int, clusters: int, collector: str = "daemon") -> dict[str, float]:
    if collector == "daemon":
        tune_collector()  # as `gpufleet controller` runs
    hub = _build(deployments, clusters)
    hub_mib = _rss_mib()
    config = ControllerConfig(
        stale_after_s=3600,
        expire_after_s=7200,
        status_refresh_s=7200,
        manages_ready=True,
        default_gateway_address="{cluster}.gateway.example",
    )
    controller = Controller(hub, config, "bench")
    now = T0 + timedelta(seconds=1)
    started = time.process_time()
    controller.step(now)
    first = time.process_time() - started
    for _ in range(30):
        now += timedelta(seconds=1)
        if controller.step(now).write_count == 0:
            break
    else:
        raise SystemExit("the fleet did not settle in 30 steps")
    settle = time.process_time() - started
    placed = len(hub.view(MODEL_REPLICA))
    if placed != deployments:
        raise SystemExit(f"{deployments} deployments: {placed} replicas placed")
    return {
        "deployments": deployments,
        "clusters": clusters,
        "collector": collector,
        "replicas_placed": placed,
        "first_step_s": round(first, 2),
        "settle_s": round(settle, 2),
        "hub_mib": round(hub_mib),
        "rss_mib": round(_rss_mib()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deployments", default="50000", help="deployment counts, one run each")
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument(
        "--collector",
        choices=("daemon", "default"),
        default="daemon",
        help="the garbage collector's thresholds: the controller process's, or CPython's",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.deployments.split(",")]
    if args.one:
        print(json.dumps(run_one(sizes[0], args.clusters, args.collector)), flush=True)
        return
    for size in sizes:
        argv = [sys.executable, __file__, "--one", "--deployments", str(size)]
        argv += ["--clusters", str(args.clusters), "--collector", args.collector]
        done = subprocess.run(argv, check=False)
        if done.returncode != 0:
            raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
