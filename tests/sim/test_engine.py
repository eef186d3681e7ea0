"""The event loop: time order, deterministic ties, periodic events, cancellation."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.sim.emulated.engine import EPOCH, EventLoop


def test_events_run_in_time_then_schedule_order() -> None:
    loop = EventLoop()
    ran: list[str] = []
    loop.after(2, lambda: ran.append("b@2"))
    loop.after(1, lambda: ran.append("a@1"))
    loop.after(2, lambda: ran.append("c@2"))
    loop.after(0, lambda: ran.append("now"))
    loop.run_until(EPOCH + timedelta(seconds=2))
    assert ran == ["now", "a@1", "b@2", "c@2"]
    assert loop.now == EPOCH + timedelta(seconds=2)


def test_run_until_leaves_later_events_and_advances_the_clock() -> None:
    loop = EventLoop()
    ran: list[float] = []
    loop.after(5, lambda: ran.append((loop.now - EPOCH).total_seconds()))
    loop.run_for(3)
    assert (ran, loop.now, loop.pending) == ([], EPOCH + timedelta(seconds=3), 1)
    loop.run_for(3)
    assert ran == [5.0]


def test_every_repeats_and_cancels() -> None:
    loop = EventLoop()
    ticks: list[float] = []
    handle = loop.every(2, lambda: ticks.append((loop.now - EPOCH).total_seconds()), "t", 1)
    loop.run_for(6)
    handle.cancel()
    loop.run_for(10)
    assert ticks == [1.0, 3.0, 5.0]


def test_events_scheduled_from_events_run_in_the_same_run() -> None:
    loop = EventLoop()
    ran: list[str] = []
    loop.after(1, lambda: loop.after(1, lambda: ran.append("child")))
    loop.run_for(2)
    assert ran == ["child"]


def test_seeded_randomness_is_reproducible() -> None:
    assert [EventLoop(7).rng.random() for _ in range(2)] == [EventLoop(7).rng.random()] * 2


def test_a_series_runs_again_after_what_was_scheduled_before_its_last_run() -> None:
    """A periodic event is queued again when it runs (a new sequence number): at an instant
    shared with others it runs after every event scheduled before its previous run."""
    loop = EventLoop()
    ran: list[str] = []

    def log(tag: str) -> None:
        ran.append(f"{tag}{(loop.now - EPOCH).total_seconds():g}")

    loop.every(1, lambda: log("a"))
    loop.every(2, lambda: log("b"))
    loop.after(2, lambda: log("x"))
    loop.run_for(2)
    assert ran == ["a0", "b0", "a1", "x2", "b2", "a2"]
    assert loop.pending == 2
