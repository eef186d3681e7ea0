"""B1: benchmark `gpufleet.core.schedule.schedule` on a large synthetic fleet (not a test).

A thin wrapper over the benchmark runner (`gpufleet.bench.speed`); the same as
`gpufleet bench --only B1`.

    .venv/bin/python bench/bench_schedule.py            # the full tables
    .venv/bin/python bench/bench_schedule.py --quick    # tiny sizes
"""

from __future__ import annotations

import sys

from gpufleet.bench.runner import plain_text, run_benchmarks

if __name__ == "__main__":
    for section in run_benchmarks(["B1"], quick="--quick" in sys.argv[1:]):
        print(plain_text(section))
