"""Benchmark `gpufleet simulate` at fleet scale: 10 clusters x 4 pools x 50 nodes (2,000 nodes,
12,000 GPUs), 24 simulated hours, 1,000 deployments arriving and leaving.

    .venv/bin/python bench/bench_simulate.py                 # the full run
    .venv/bin/python bench/bench_simulate.py --hours 2 --deployments 100 --profile

Prints a table with wall time, simulated seconds per wall second, events and peak memory
(tracemalloc, Python allocations). `--profile` prints the top cProfile entries by cumulative
and own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time
import tracemalloc

from gpufleet.sim.cluster import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.fleet import FleetSpec
from gpufleet.sim.run import run_scenario
from gpufleet.sim.scenario import (
    Action,
    ActionKind,
    ControllerSettings,
    Scenario,
)

POOLS = (("l4", 4), ("a10g", 4), ("h100", 8), ("t4", 4))


def deployment(name: str, gpus: int, replicas: int, product: str) -> dict[str, object]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "engines": [
                        {
                            "name": "engine",
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": {
                                        "devices": [
                                            {
                                                "name": "gpu",
                                                "count": gpus,
                                                "selectors": [
                                                    {
                                                        "cel": "device.attributes"
                                                        f'["gpu.nvidia.com"].productName == "{product}"'
                                                    }
                                                ],
                                            }
                                        ]
                                    },
                                    "template": {
                                        "spec": {"containers": [{"name": "e", "image": "v"}]}
                                    },
                                }
                            ],
                        }
                    ]
                }
            },
        },
    }


def scenario(clusters: int, nodes: int, hours: float, deployments: int, seed: int) -> Scenario:
    rng = random.Random(seed)
    behaviour = ClusterBehaviour(report_interval_s=10.0, is_autoscaling=False)
    specs = []
    for c in range(clusters):
        pools = tuple(
            PoolSpec(
                name=name,
                devices=(
                    DeviceSpec(count=gpus, attributes={"productName": {"string": name.upper()}}),
                ),
                node_count=nodes,
                class_name=f"{name}-{gpus}x",
            )
            for name, gpus in POOLS
        )
        specs.append(
            ClusterSpec(f"c{c:02d}", pools, behaviour, {"gpufleet.io/region": f"r{c % 3}"})
        )
    end_s = hours * 3600
    timeline: list[Action] = []
    for i in range(deployments):
        pool, per_node = POOLS[rng.randrange(len(POOLS))]
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= per_node])
        arrive = rng.uniform(0, end_s * 0.8)
        leave = arrive + rng.uniform(end_s * 0.05, end_s * 0.5)
        body = deployment(f"d{i:04d}", gpus, rng.randint(1, 4), pool.upper())
        at = float(int(arrive))
        timeline.append(
            Action(at, ActionKind.APPLY, f"d{i}", manifest=body, deployment=f"ml/d{i:04d}")
        )
        if leave < end_s:
            timeline.append(
                Action(float(int(leave)), ActionKind.DELETE, f"d{i}-", deployment=f"ml/d{i:04d}")
            )
    timeline.sort(key=lambda a: a.at_s)
    return Scenario(
        name="bench",
        description="fleet-scale benchmark",
        seed=seed,
        end_s=end_s,
        fleet=FleetSpec(tuple(specs), controller_interval_s=10.0),
        controller=ControllerSettings(interval_s=10.0),
        manifests=(),
        timeline=tuple(timeline),
        checks=(),
        sample_interval_s=600.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=50, help="nodes per pool (4 pools)")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip tracemalloc (faster)")
    args = parser.parse_args()
    built = scenario(args.clusters, args.nodes, args.hours, args.deployments, args.seed)
    profiler = cProfile.Profile() if args.profile else None
    if not args.no_memory:
        tracemalloc.start()
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    result = run_scenario(built)
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] if not args.no_memory else 0
    placed = sum(d.placed for d in result.deployments)
    rows = [
        ("fleet", f"{args.clusters} clusters x 4 pools x {args.nodes} nodes"),
        ("simulated", f"{args.hours:g} h, {args.deployments} deployments"),
        ("wall time", f"{wall:.1f} s"),
        ("simulated/wall", f"{built.end_s / wall:,.0f}x"),
        ("events", f"{result.events_run:,}"),
        ("controller steps", f"{result.controller_steps:,}"),
        ("refusals", f"{len(result.refusals):,}"),
        ("replicas placed at end", f"{placed:,}"),
        ("peak memory (tracemalloc)", f"{peak / 2**20:,.0f} MiB" if peak else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
