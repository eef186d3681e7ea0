"""A deployment's `Progressing` condition, with its progress deadline (docs/controller.md,
"Rollouts"), as a Deployment's: the core says how far a rollout is and whether it waits for
room (core/rollout.py: `RollingOut`, `NoRoomForSurge`, `RolloutComplete`); the controller,
which knows time, adds `ProgressDeadlineExceeded` when a rollout that is not waiting for room
has made no progress (no new replica placed for the current revision, no old one removed)
for `spec.progressDeadlineSeconds`.

The time of the last progress is the controller's memory, keyed by the deployment's
(namespace, name) and the revision: after a restart (or a failover) it starts again from the
first step that sees the rollout, so the deadline errs late, never early.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from gpufleet.controller.conditions import Obj, condition
from gpufleet.core.decision import DeploymentDecision, RolloutProgress
from gpufleet.core.rollout import PROGRESSING, ROLLING_OUT, ROLLOUT_COMPLETE

PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"
DEFAULT_PROGRESS_DEADLINE_S: Final = 600


class RolloutClock:
    """Per deployment, its rollout's last counts and since when they hold."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], tuple[tuple[object, ...], datetime]] = {}

    def condition(
        self,
        key: tuple[str, str],
        progress: RolloutProgress | None,
        revision: str,
        updated: int,
        deadline_s: float,
        now: datetime,
    ) -> Obj:
        """The `Progressing` condition of deployment `key` at `now` (`progress` None: no
        replica of an older revision is left)."""
        if progress is None:
            self._since.pop(key, None)
            return condition(
                PROGRESSING,
                "True",
                ROLLOUT_COMPLETE,
                f"{updated} replicas at revision {revision}; none of an older revision",
            )
        counts = (progress.revision, progress.updated, progress.old)
        last = self._since.get(key)
        if last is None or last[0] != counts or progress.superseded:
            last = self._since[key] = (counts, now)
        found = progress.condition
        stalled_s = (now - last[1]).total_seconds()
        if found.reason == ROLLING_OUT and stalled_s > deadline_s:
            return condition(
                PROGRESSING,
                "False",
                PROGRESS_DEADLINE_EXCEEDED,
                f"no progress for {stalled_s:.0f}s (progressDeadlineSeconds {deadline_s:.0f}): "
                f"{found.message}",
            )
        return condition(found.type, found.status, found.reason, found.message)

    def forget(self, key: tuple[str, str]) -> None:
        self._since.pop(key, None)


def is_rolling(decided: DeploymentDecision) -> bool:
    """Whether the decision's rollout is under way: its deadline moves with time, so an equal
    decision is applied again next step (not skipped as applied)."""
    return decided.rollout is not None and decided.rollout.condition.reason == ROLLING_OUT
