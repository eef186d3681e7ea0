"""B1: benchmark `gpufleet.core.schedule.schedule` on a large synthetic fleet (not a test).

A thin wrapper over the benchmark runner (`gpufleet.bench.speed`); the same as
`gpufleet bench --only B1`.

    .venv/bin/python bench/bench_schedule.py            # the full tables
    .venv/bin/python bench/bench_schedule.py --quick    # tiny sizes
    .venv/bin/python bench/bench_schedule.py --cpu      # user CPU, median of 5 calls per row
    .venv/bin/python bench/bench_schedule.py --flat     # B1c in user CPU: 1,000 and 3,000 clusters

`--cpu` is for a shared machine, where wall time measures the neighbours: it times each call
with `time.process_time()`. To compare with another checkout, run it again with
`PYTHONPATH=<checkout>/src`.
"""

from __future__ import annotations

import gc
import random
import sys
import time

from gpufleet.bench.runner import plain_text, run_benchmarks
from gpufleet.bench.speed import NOW, SEED, deployments, fleet, whole_node
from gpufleet.core.model import Snapshot
from gpufleet.core.reuse import SHARED
from gpufleet.core.schedule import schedule

ROWS = (
    (False, 10, 1000),
    (False, 100, 1000),
    (False, 1000, 1000),
    (False, 100, 100),
    (False, 100, 10_000),
    (True, 10, 1000),
    (True, 100, 1000),
    (True, 1000, 1000),
)


FLAT_ROWS = ((False, 1000, 1000), (False, 3000, 1000))


def cpu_rows(rows: tuple[tuple[bool, int, int], ...] = ROWS, repeats: int = 5) -> list[float]:
    """Per row, the median user CPU of `repeats` calls (inputs collected and frozen first)."""
    medians = []
    for is_whole_node, clusters, nodes in rows:
        rng = random.Random(SEED)
        deploys = deployments(1000, rng)
        built = fleet(clusters, nodes, 9, rng)
        snap = Snapshot(deployments=deploys, clusters=whole_node(built) if is_whole_node else built)
        gc.collect()
        gc.freeze()
        times = []
        for _ in range(repeats):
            started = time.process_time()
            decision = schedule(snap, NOW, derive=SHARED)
            times.append(time.process_time() - started)
        placed = sum(len(d.created) for d in decision.deployments)
        median = sorted(times)[len(times) // 2]
        mode = "whole-node" if is_whole_node else "free-GPU"
        print(
            f"{mode:<10} {clusters:>5}c {nodes:>6}n placed={placed} "
            f"cpu_median={median:.3f}s placed/s={placed / median:,.0f}",
            flush=True,
        )
        gc.unfreeze()
        medians.append(median)
    return medians


if __name__ == "__main__":
    if "--flat" in sys.argv[1:]:
        small, large = cpu_rows(FLAT_ROWS)
        print(f"3,000 / 1,000 clusters: {large / small:.2f}x (goal: at most 1.3x)")
    elif "--cpu" in sys.argv[1:]:
        cpu_rows()
    else:
        for section in run_benchmarks(["B1"], quick="--quick" in sys.argv[1:]):
            print(plain_text(section))
