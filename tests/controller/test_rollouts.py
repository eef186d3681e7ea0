"""`Progressing` and its progress deadline (controller/rollouts.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpufleet.controller.rollouts import RolloutClock
from gpufleet.core.decision import Condition, RolloutProgress

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ml", "llm")


def _progress(updated: int, old: int, reason: str = "RollingOut") -> RolloutProgress:
    status = "False" if reason == "NoRoomForSurge" else "True"
    return RolloutProgress("r2", 4, updated, old, 0, Condition("Progressing", status, reason, "m"))


def test_no_progress_past_the_deadline_reads_progress_deadline_exceeded() -> None:
    clock = RolloutClock()
    first = clock.condition(KEY, _progress(1, 4), "r2", 1, 600, T0)
    assert (first["status"], first["reason"]) == ("True", "RollingOut")
    same = clock.condition(KEY, _progress(1, 4), "r2", 1, 600, T0 + timedelta(seconds=600))
    assert same["reason"] == "RollingOut"  # not past it yet
    late = clock.condition(KEY, _progress(1, 4), "r2", 1, 600, T0 + timedelta(seconds=601))
    assert (late["status"], late["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert late["message"].startswith("no progress for 601s (progressDeadlineSeconds 600)")
    # Progress (an old replica went) starts the clock again.
    moved = clock.condition(KEY, _progress(1, 3), "r2", 1, 600, T0 + timedelta(seconds=700))
    assert moved["reason"] == "RollingOut"


def test_waiting_for_room_says_so_past_the_deadline_too() -> None:
    clock = RolloutClock()
    clock.condition(KEY, _progress(0, 4, "NoRoomForSurge"), "r2", 0, 600, T0)
    later = T0 + timedelta(hours=1)
    waiting = clock.condition(KEY, _progress(0, 4, "NoRoomForSurge"), "r2", 0, 600, later)
    assert (waiting["status"], waiting["reason"]) == ("False", "NoRoomForSurge")


def test_no_old_replica_is_complete() -> None:
    done = RolloutClock().condition(KEY, None, "r2", 4, 600, T0)
    assert (done["status"], done["reason"]) == ("True", "RolloutComplete")
    assert done["message"] == "4 replicas at revision r2; none of an older revision"
