"""B3: benchmark the agent's observe core on a large synthetic cluster (not a test).

A thin wrapper over the benchmark runner (`gpufleet.bench.observe`); the same as
`gpufleet bench --only B3`.

    .venv/bin/python bench/bench_observe.py            # 1,250 / 2,500 / 5,000 / 10,000 nodes
    .venv/bin/python bench/bench_observe.py --quick    # tiny sizes
"""

from __future__ import annotations

import sys

from gpufleet.bench.runner import plain_text, run_benchmarks

if __name__ == "__main__":
    for section in run_benchmarks(["B3"], quick="--quick" in sys.argv[1:]):
        print(plain_text(section))
