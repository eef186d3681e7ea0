"""A cluster's status falls due again when one of its times may cross into another freshness
state (`next_state_change`): up to and at that time every state is what it was, and just
after it one state moved (so a step that sleeps until then misses no crossing)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller import ControllerConfig
from gpufleet.controller.status import next_state_change, states_at

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("seed", range(20))
def test_states_hold_until_the_next_state_change_and_move_just_after(seed: int) -> None:
    rng = random.Random(seed)
    config = ControllerConfig()
    times = tuple(
        None if rng.random() < 0.1 else T0 + timedelta(seconds=rng.uniform(0, 400))
        for _ in range(12)
    )
    now = T0
    for _ in range(200):
        now += timedelta(seconds=rng.choice([0.0, 0.5, 1.0, 3.0, 20.0, 60.0]))
        states = states_at(times, now, config)
        due = next_state_change(times, states, config)
        if due is None:
            assert all(s in ("", "Expired") for s in states)
            continue
        assert due >= now
        for later in (now, due, now + (due - now) / 2):
            assert states_at(times, later, config) == states
        assert states_at(times, due + timedelta(microseconds=1), config) != states
