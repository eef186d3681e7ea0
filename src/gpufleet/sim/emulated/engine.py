"""The discrete-event engine: a simulated clock and a queue of timed events.

Time starts at a fixed epoch (`EPOCH`) and moves only when an event runs. Events are ordered by
(time, sequence): two events at the same instant run in the order they were scheduled, so a
run is a pure function of its inputs and the seed. Randomness comes only from the one
`random.Random` the loop holds (`loop.rng`), seeded explicitly; components draw from it in event
order, which is itself deterministic.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

#: Where every simulation's clock starts.
EPOCH: Final = datetime(2026, 1, 1, tzinfo=UTC)

#: Anything callable without arguments; its result is ignored.
Action = Callable[[], object]


@dataclass(slots=True)
class _Event:
    at: datetime
    seq: int
    name: str
    action: Action
    cancelled: bool = False


#: A queue entry: (time, sequence, event). Tuples compare in C, and a sequence number is never
#: repeated, so the event itself is never compared; a dataclass's generated ordering cost a
#: Python call per comparison, a dozen per event.
_Entry = tuple[datetime, int, _Event]


class Handle:
    """A scheduled event; `cancel()` keeps it from running."""

    __slots__ = ("_event",)

    def __init__(self, event: _Event) -> None:
        self._event = event

    def cancel(self) -> None:
        self._event.cancelled = True

    @property
    def at(self) -> datetime:
        return self._event.at


class EventLoop:
    def __init__(self, seed: int = 0, start: datetime = EPOCH) -> None:
        self.rng = random.Random(seed)
        self._now = start
        self._queue: list[_Entry] = []
        self._seq = 0
        self.events_run = 0

    @property
    def now(self) -> datetime:
        return self._now

    def clock(self) -> datetime:
        """The current simulated time (a callable for `MemoryStore(clock=...)`)."""
        return self._now

    def at(self, when: datetime, action: Action, name: str = "") -> Handle:
        """Run `action` at `when` (never in the past: a past time means now)."""
        self._seq += 1
        event = _Event(max(when, self._now), self._seq, name, action)
        heapq.heappush(self._queue, (event.at, event.seq, event))
        return Handle(event)

    def after(self, delay_s: float, action: Action, name: str = "") -> Handle:
        return self.at(self._now + timedelta(seconds=max(0.0, delay_s)), action, name)

    def every(
        self, period_s: float, action: Action, name: str = "", first_after_s: float = 0.0
    ) -> Handle:
        """Run `action` every `period_s` seconds; the returned handle cancels the series."""
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        series = _Event(self._now, 0, name, action)
        handle = Handle(series)
        period = timedelta(seconds=period_s)
        queue = self._queue

        def tick() -> None:
            if series.cancelled:
                return
            action()
            # `after(period_s, tick, name)` without its checks and handle: the next run is
            # never in the past, and a series is cancelled through its own handle. The
            # series' one queued event is the one running now (out of the queue, and no
            # handle names it), so it goes back in with its new time and sequence.
            self._seq += 1
            event.at, event.seq = self._now + period, self._seq
            heapq.heappush(queue, (event.at, event.seq, event))

        event = self.after(first_after_s, tick, name)._event
        return handle

    def run_until(self, until: datetime) -> None:
        """Run every event due at or before `until`, then set the clock to `until`."""
        queue, pop = self._queue, heapq.heappop
        while queue and queue[0][0] <= until:
            event = pop(queue)[2]
            if event.cancelled:
                continue
            self._now = event.at
            self.events_run += 1
            event.action()
        self._now = max(self._now, until)

    def run_for(self, seconds: float) -> None:
        self.run_until(self._now + timedelta(seconds=seconds))

    @property
    def pending(self) -> int:
        return sum(1 for _, _, e in self._queue if not e.cancelled)
