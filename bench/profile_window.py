"""Profile the simulator in its steady state: run the B4 fleet (bench_simulate.py's) without
the profiler up to `--start` hours, then profile the next `--window` hours.

    .venv/bin/python bench/profile_window.py --start 6 --window 0.5          # the real day
    .venv/bin/python bench/profile_window.py --hours 2 --start 1 --window 0.1  # same load, sooner

Deployments arrive over the first 80% of `--hours` and live 5-50% of it, so the number alive
at once is about a third of `--deployments` whatever `--hours` is: a 2-hour window with 1,000
deployments reaches the day's steady state (about 600 replicas) after an hour, with 12x the
arrival rate. `--no-profile` times the window without the profiler's overhead. The window's
CPU time (`time.process_time`) is printed beside its wall time: on a shared machine compare
CPU times, of runs made side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from gpufleet.bench.simulate import fleet_scenario
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import Accounting
from gpufleet.store.port import MODEL_REPLICA


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", type=float, default=6.0)
    parser.add_argument("--window", type=float, default=0.5)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--no-profile", action="store_true", help="time the window only")
    args = parser.parse_args()
    scenario = fleet_scenario(args.clusters, 50, args.hours * 3600, args.deployments, args.seed)
    fleet, hub_step = build_fleet(scenario, Accounting.FREE_GPU)
    run_to = timeline_runner(fleet, scenario)

    started = time.perf_counter()
    run_to(args.start * 3600)
    warm = time.perf_counter()
    replicas = len(fleet.hub.view(MODEL_REPLICA))
    print(f"warm-up to {args.start:g} h: {warm - started:.1f} s, {replicas} replicas on the hub")
    profiler = cProfile.Profile()
    steps = hub_step.steps
    cpu = time.process_time()
    if not args.no_profile:
        profiler.enable()
    run_to((args.start + args.window) * 3600)
    profiler.disable()
    wall = time.perf_counter() - warm
    cpu = time.process_time() - cpu
    how = "not profiled" if args.no_profile else "profiled"
    print(
        f"window {args.window:g} h: {wall:.1f} s, {cpu:.2f} s CPU ({how}), "
        f"{hub_step.steps - steps} steps"
    )
    if not args.no_profile:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
