"""Benchmark `gpufleet simulate` at fleet scale (the fleet of `gpufleet.bench.simulate`, which B4
of `gpufleet bench` measures over a short window): 10 clusters x 4 pools x 50 nodes (2,000 nodes,
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
import time
import tracemalloc

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.sim.run.runner import run_scenario


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
    built = fleet_scenario(
        args.clusters, args.nodes, args.hours * 3600, args.deployments, args.seed
    )
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
