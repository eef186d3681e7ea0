"""bench/fingerprint.py with the controller's `schedule` given one kept `ScheduleMemo`.

    .venv/bin/python bench/fingerprint_memo.py

Until the controller passes a memo itself, this wraps the controller's `schedule` from the
script (library code is untouched) with one memo kept for the whole run, across every
scenario: a memo may be reused across any sequence of snapshots. Every line must equal the
plain fingerprint's: a kept memo changes how long `schedule` takes, never what it decides.

Measured (2 cores, shared, 2026-11-29): every hash and the total equal the plain run
(total 9f00078ba1198b0f); the memo held 17 entries at the end.
"""

from __future__ import annotations

import functools
import runpy
import sys
from pathlib import Path

from gpufleet.controller import loop
from gpufleet.core.schedule import ScheduleMemo, schedule

if __name__ == "__main__":
    memo = ScheduleMemo()
    loop.schedule = functools.partial(schedule, memo=memo)  # type: ignore[assignment]
    sys.argv = [str(Path(__file__).with_name("fingerprint.py"))]
    runpy.run_path(sys.argv[0], run_name="__main__")
    print(f"memo entries at the end: {memo.size()}")
