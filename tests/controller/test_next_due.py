"""`Controller.next_due` (controller/dues.py), held to its oracle: with nothing changed on
the hub, a controller that steps only at the times `next_due` names writes what one that steps
every second writes, never later, and a step just before a named time writes nothing.
(A named time may turn out to change nothing: dues err early, never late.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from controller_builders import SIM, at, cluster, deployment, gpu_class, hub, pool_obs

from gpufleet.controller import Controller
from gpufleet.store import Obj

BEFORE = timedelta(milliseconds=1)
UNTIL_S = 700


def _writes(controller: Controller, now: datetime) -> int:
    return controller.step(now).write_count


def _settle(controller: Controller, now: datetime) -> datetime:
    for _ in range(10):
        now += timedelta(milliseconds=10)
        if not _writes(controller, now):
            return now
    raise AssertionError("did not settle")


def _at_dues(objs: tuple[Obj, ...]) -> tuple[list[float], list[float]]:
    """Step only at the times `next_due` names: those times and the ones that wrote."""
    controller = Controller(hub(*objs), SIM, "ctl")
    now = _settle(controller, at(0))
    named: list[float] = []
    wrote: list[float] = []
    while (due := controller.next_due(now)) is not None and due <= at(UNTIL_S):
        assert due > now
        if due - BEFORE > now:
            assert not _writes(controller, due - BEFORE), due
        named.append((due - at(0)).total_seconds())
        if _writes(controller, due):
            wrote.append(named[-1])
        now = _settle(controller, due)
    return named, wrote


def _every_second(objs: tuple[Obj, ...]) -> list[float]:
    """Step every second (after the same settling): the seconds whose step wrote."""
    controller = Controller(hub(*objs), SIM, "ctl")
    _settle(controller, at(0))
    return [float(t) for t in range(1, UNTIL_S) if _writes(controller, at(t))]


@dataclass(frozen=True)
class Case:
    id: str
    objs: tuple[Obj, ...]


CASES = [
    # SIM: Stale after 60 s of silence, Expired after 300 s.
    Case(
        "freshness crossings", (gpu_class(), cluster(), pool_obs(observed_at=at(0)), deployment())
    ),
    # The report is stamped 120 s ahead: accepted once within the skew tolerance
    # (max_clock_skew_s), then it ages toward Stale and Expired.
    Case("a future report", (gpu_class(), cluster(), pool_obs(observed_at=at(120)), deployment())),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_stepping_only_at_next_due_writes_what_stepping_every_second_writes(case: Case) -> None:
    named, wrote = _at_dues(case.objs)
    dense = _every_second(case.objs)
    assert dense  # the case has time-driven writes
    # Each write of the dense sweep at second t is made at a named time in (t - 1, t].
    assert [next(w for w in wrote if t - 1 < w <= t) for t in dense] == wrote
    assert set(wrote) <= set(named)


def test_with_nothing_left_to_change_next_due_is_none() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(0)), deployment())
    controller = Controller(store, SIM, "ctl")
    now = _settle(controller, at(400))  # Expired already: nothing moves with time
    assert controller.next_due(now) is None
