"""The freshness states a cluster's status is judged with, kept while no time changed state
(`Controller._states_at`), are what `states_at` computes at every `now`: as `now` moves on
in steps of any size (crossing each time's Stale and Expired edges), and back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller import ControllerConfig
from gpufleet.controller.loop import Controller
from gpufleet.controller.status import states_at
from gpufleet.store import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("seed", range(10))
def test_kept_states_are_the_states_at_every_now(seed: int) -> None:
    rng = random.Random(seed)
    config = ControllerConfig()
    controller = Controller(MemoryStore(clock=lambda: T0), config)
    times = tuple(
        None if rng.random() < 0.1 else T0 + timedelta(seconds=rng.uniform(0, 400))
        for _ in range(12)
    )
    now = T0
    kept, seen = 0, set()
    for _ in range(500):
        now += timedelta(seconds=rng.choice([0.0, 0.5, 1.0, 3.0, 20.0, -5.0]))
        if rng.random() < 0.02:  # another cluster status: other times
            times = tuple(t + timedelta(seconds=30) if t else t for t in times)
        expected = states_at(times, now, config)
        got = controller._states_at("a", times, now)
        assert got == expected
        kept += controller._cluster_states["a"][1] != now  # computed at an earlier now
        seen.update(got)
    assert {"Fresh", "Stale", "Expired"} <= seen  # the edges were crossed
    assert kept > 100  # and the states were mostly kept
