"""B6's benchmark script still measures: one run of `bench/bench_b6.py` (the real daemons over
HTTP against two emulated API servers) finishes, with every part of the path timed.

Not a speed assertion (speed is the benchmark's to report, docs/performance.md): the script
exits non-zero when a step it waits for never comes (it once waited for a label the agent no
longer wrote, and nothing noticed), which is what this test guards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_run_of_b6_times_every_part() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_b6.py"),
            "--runs",
            "1",
            "--seed",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("\n{") :])
    assert summary["runs"] == 1
    for part in ("freed GPU to ModelReplica", "agent report", "controller step", "materialize"):
        assert summary[part]["median_s"] > 0, part
        assert summary[part]["worst_s"] >= summary[part]["median_s"], part
