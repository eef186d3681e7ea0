"""`StepResult`: what one controller step did (loop.py), for metrics, logs and tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.core.decision import Decision


@dataclass(slots=True)
class StepResult:
    """What one step did: writes by (kind, verb), the decision, errors and metric numbers."""

    now: datetime
    #: Writes that succeeded, by (kind, verb); verbs: create, update, patch_status, delete.
    writes: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The step's scheduling decision; None when scheduling was skipped.
    decision: Decision | None = None
    #: Failures of this step (each is retried on the next step).
    errors: list[str] = field(default_factory=list)
    #: Observations ignored because their agent's lease epoch is older than the cluster's.
    rejected_reports: list[str] = field(default_factory=list)
    #: Replicas created (placements) and deleted (drops) this step.
    placements: int = 0
    drops: int = 0
    #: Deployments short of replicas (or invalid), by their condition's reason code.
    refusals: Counter[str] = field(default_factory=Counter)
    #: Replicas asked for but not placed, over all deployments.
    shortfall: int = 0
    #: How long `schedule` took, by the caller's timer; None without a timer.
    decision_latency_s: float | None = None
    #: Assumed writes still in force after the step (the view lags them).
    assumed: int = 0
    #: No scheduling input changed since the last decision, which `decision` is (the same
    #: object): nothing was scheduled or applied again.
    is_quiet: bool = False

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    def count(self, kind: str, verb: str) -> int:
        return self.writes[(kind, verb)]
