"""The fault barrier: client-go's `HandleCrash` plus a rate-limited requeue, per object.

A bug (or a hostile object the validation missed) must cost one object, never the fleet. Each
point of the controller's step processes its objects one at a time through `Quarantine.run`:

- an object whose processing raises is *quarantined*: the exception is logged with its stack
  (HandleCrash), the step's result says what failed, the object gets the condition
  `Processed=False` (reason `ProcessingFailed`, the point and the exception in the message)
  and a Warning Event `ProcessingFailed`, and the rest of the step goes on without it;
- it is retried when its backoff ends: `fault_backoff_s`, doubled on each failure in a row, at
  most `fault_backoff_max_s` (client-go's `ItemExponentialFailureRateLimiter`), or at once
  when the object changes (a new version may read). Until then the point that failed and
  every later one skip it; the step marks it dirty again when the backoff ends (`due`), and
  `next_due` says when that is;
- when the point that failed succeeds again, the object is released and its condition removed.

What the rest of the step does without a quarantined object is the conservative reading of it
(docs/controller.md, "Fault barrier"): a deployment is left out of the decision, and its
replicas are kept and charged as they are; a replica or cluster that cannot be *read* is an
unreadable input, and scheduling is skipped (fail closed) as for any unreadable input; one that
fails later (its status, its trust) keeps what was last decided of it.

A failure outside every per-object point (a bug in the step itself) is caught at the top of the
step: the controller forgets its view of the hub (not its correctness state), so the next step
lists the hub again and no change read in the failed step is lost.

`Faults` is the declared fault-injection seam: the step calls `check(point, kind, key)` before
it processes each object at each point, and a test's `Faults` raises for the object it picks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final, Protocol, TypeVar

from gpufleet.controller.conditions import Obj, ReadObj, condition
from gpufleet.controller.index import Key

log = logging.getLogger("gpufleet.controller.loop")

_T = TypeVar("_T")

#: The condition a quarantined object carries (removed when it is processed again).
PROCESSED: Final = "Processed"
#: Its reason, and the reason of the Warning Event.
PROCESSING_FAILED: Final = "ProcessingFailed"
#: The longest exception text quoted in a condition or event.
MAX_ERROR_CHARS: Final = 500


class FaultPoint(StrEnum):
    """The points of the step at which an object is processed, in step order."""

    #: Parsing the object (deployments and replicas as they are tracked, clusters as the
    #: core reads them).
    READ = "read"
    #: Judging a cluster's reports (its trust).
    JUDGE = "judge"
    #: Publishing a cluster's or a replica's status.
    PUBLISH = "publish"
    #: Judging whether a replica is an orphan.
    COLLECT = "collect"
    #: Scheduling a deployment (the core's call, the culprit found by bisection).
    SCHEDULE = "schedule"
    #: Applying a deployment's decision (its replica writes and status).
    APPLY = "apply"
    #: The step itself, before it schedules (no object: the step's barrier takes it).
    STEP = "step"


#: The points in step order.
_ORDER: Final = {point: at for at, point in enumerate(FaultPoint)}


class Faults(Protocol):
    """The fault-injection seam: raise to make processing `key` of `kind` fail at `point`."""

    def check(self, point: FaultPoint, kind: str, key: Key) -> None: ...


@dataclass(frozen=True, slots=True)
class Failure:
    """Why and until when an object is quarantined."""

    point: FaultPoint
    #: `ExceptionType: message`, bounded.
    error: str
    #: Failures in a row (the backoff doubles with each).
    count: int
    retry_at: datetime
    #: Whether the step has marked it dirty again since its backoff ended.
    is_requeued: bool = False

    def message(self, kind: str, name: str, now: datetime) -> str:
        wait_s = max(0.0, (self.retry_at - now).total_seconds())
        return (
            f"processing {kind} {name} failed at {self.point.value} ({self.count} in a row): "
            f"{self.error}; retried in {wait_s:g} s"
        )

    def condition(self, kind: str, name: str, now: datetime) -> Obj:
        return condition(PROCESSED, "False", PROCESSING_FAILED, self.message(kind, name, now))


def describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


#: (kind, key) of a quarantined object.
Held = tuple[str, Key]


class Quarantine:
    """The objects whose processing raised, and their backoffs (see the module docstring).

    Correctness state: kept across a restart of the view (`Controller._reset`), so that a
    listing again does not retry every quarantined object at once.
    """

    def __init__(self, base_s: float, max_s: float, faults: Faults | None = None) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.faults = faults
        self.held: dict[Held, Failure] = {}

    def __len__(self) -> int:
        return len(self.held)

    def is_held(
        self, kind: str, key: Key, now: datetime, point: FaultPoint = FaultPoint.STEP
    ) -> bool:
        """Whether `key` is quarantined at `point`: its backoff has not ended by `now`, and
        `point` is the one it failed at or a later one (the points before it read the
        object as they did before it failed)."""
        failure = self.held.get((kind, key))
        return (
            failure is not None
            and now < failure.retry_at
            and _ORDER[point] >= _ORDER[failure.point]
        )

    def run(
        self,
        point: FaultPoint,
        kind: str,
        key: Key,
        now: datetime,
        process: Callable[[], _T],
    ) -> tuple[_T | None, Failure | None]:
        """`process()` behind the barrier: its value and None, or None and the new failure
        when it raised (the object is quarantined). A success at the point that failed last
        releases the object (the caller removes its condition, `released`)."""
        try:
            if self.faults is not None:
                self.faults.check(point, kind, key)
            value = process()
        except Exception as e:
            log.exception("processing %s %s/%s failed at %s", kind, key[0], key[1], point.value)
            return None, self.fail(point, kind, key, e, now)
        return value, None

    def fail(
        self, point: FaultPoint, kind: str, key: Key, error: BaseException, now: datetime
    ) -> Failure:
        last = self.held.get((kind, key))
        count = 1 if last is None else last.count + 1
        wait_s = min(self.max_s, self.base_s * 2 ** min(count - 1, 62))
        failure = Failure(point, describe(error), count, now + timedelta(seconds=wait_s))
        self.held[(kind, key)] = failure
        return failure

    def released(self, point: FaultPoint, kind: str, key: Key) -> Failure | None:
        """Release `key` when it last failed at `point` (it just succeeded there): the
        failure it was quarantined for, else None."""
        failure = self.held.get((kind, key))
        if failure is None or failure.point is not point:
            return None
        del self.held[(kind, key)]
        return failure

    def touch(self, kind: str, key: Key) -> None:
        """The object changed: retry it at once, a new version may read (its backoff keeps
        counting)."""
        failure = self.held.get((kind, key))
        if failure is not None:
            self.held[(kind, key)] = dataclasses.replace(
                failure, retry_at=datetime.min.replace(tzinfo=UTC), is_requeued=True
            )

    def forget(self, kind: str, key: Key) -> None:
        """The object is gone: nothing to retry."""
        self.held.pop((kind, key), None)

    def due(self, now: datetime) -> list[Held]:
        """The quarantined objects whose backoff ended by `now` and that were not marked
        dirty again since: the step marks them dirty (each once per failure)."""
        found = [
            held
            for held, failure in self.held.items()
            if not failure.is_requeued and failure.retry_at <= now
        ]
        for held in found:
            self.held[held] = dataclasses.replace(self.held[held], is_requeued=True)
        return sorted(found)

    def next_due(self) -> datetime | None:
        """When the next backoff ends (None: none stands)."""
        waiting = [f.retry_at for f in self.held.values() if not f.is_requeued]
        return min(waiting, default=None)


def without_processed(status: ReadObj) -> list[Obj] | None:
    """The status's conditions without `Processed` (None: it has none)."""
    conditions = list(status.get("conditions") or [])
    kept = [dict(c) for c in conditions if c.get("type") != PROCESSED]
    return None if len(kept) == len(conditions) else kept
