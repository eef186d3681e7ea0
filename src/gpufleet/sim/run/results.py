"""What a scenario run produced: check failures, refusals, metrics over time, the final
summary per deployment and pool, and the event log (`RunResult`, with its JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.sim.run.samples import Samples
from gpufleet.sim.scenario.load import (
    Accounting,
    Scenario,
    format_duration,
)

PoolKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A deployment got fewer replicas than it asked for, and why (from the decision)."""

    at_s: float
    deployment: str
    desired: int
    placed: int
    #: The condition's reason (CamelCase) and message (the kube-style roll-up).
    reason: str
    message: str
    #: The top reason of the diagnosis: where, its code, its message and numbers.
    where: str = ""
    detail_code: str = ""
    detail: str = ""
    numbers: Mapping[str, int | str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at_s,
            "deployment": self.deployment,
            "desired": self.desired,
            "placed": self.placed,
            "reason": self.reason,
            "message": self.message,
            "where": self.where,
            "detailCode": self.detail_code,
            "detail": self.detail,
            "numbers": dict(self.numbers),
        }


@dataclass(frozen=True, slots=True)
class CheckFailure:
    at_s: float
    path: str
    what: str
    expected: object
    got: object

    def __str__(self) -> str:
        return (
            f"at {format_duration(self.at_s)} ({self.path}) {self.what}: "
            f"expected {self.expected}, got {self.got}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at_s,
            "check": self.path,
            "what": self.what,
            "expected": _jsonable(self.expected),
            "got": _jsonable(self.got),
        }


@dataclass(slots=True)
class Series:
    """Metrics over time; every list is aligned with `times_s`."""

    times_s: list[float] = field(default_factory=list)
    pool_allocated: dict[PoolKey, list[int]] = field(default_factory=dict)
    pool_free: dict[PoolKey, list[int]] = field(default_factory=dict)
    pool_nodes: dict[PoolKey, list[int]] = field(default_factory=dict)
    desired: dict[str, list[int]] = field(default_factory=dict)
    placed: dict[str, list[int]] = field(default_factory=dict)
    running: dict[str, list[int]] = field(default_factory=dict)
    pending: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PoolSummary:
    cluster: str
    pool: str
    nodes: int
    gpus_total: int
    gpus_allocated: int
    gpus_free: int
    #: {free GPUs on a node: nodes}, the ground truth and the agent's last report.
    histogram: Mapping[int, int]
    observed_histogram: Mapping[int, int] | None

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.pool}"


@dataclass(frozen=True, slots=True)
class DeploymentSummary:
    name: str
    desired: int
    placed: int
    running: int
    clusters: Mapping[str, int]
    condition_reason: str
    condition_message: str


@dataclass(slots=True)
class RunResult:
    scenario: Scenario
    accounting: Accounting
    checks_run: int
    failures: list[CheckFailure]
    refusals: list[Refusal]
    series: Series
    deployments: list[DeploymentSummary]
    pools: list[PoolSummary]
    wall_s: float
    events_run: int
    controller_steps: int
    controller_errors: list[str]
    #: (time, line): timeline actions and the controller's placements, drops and refusals.
    log: list[tuple[float, str]] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    #: The report's samples (the hub's view over time), apart from the fingerprinted `series`.
    samples: Samples = field(default_factory=Samples)

    @property
    def is_passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        s = self.series
        return {
            "scenario": self.scenario.name,
            "description": self.scenario.description,
            "accounting": self.accounting.value,
            "end": self.scenario.end_s,
            "passed": self.is_passed,
            "checks": {
                "run": self.checks_run,
                "failed": [f.to_json() for f in self.failures],
            },
            "deployments": [
                {
                    "name": d.name,
                    "desired": d.desired,
                    "placed": d.placed,
                    "running": d.running,
                    "clusters": dict(d.clusters),
                    "condition": {"reason": d.condition_reason, "message": d.condition_message},
                }
                for d in self.deployments
            ],
            "pools": [
                {
                    "cluster": p.cluster,
                    "pool": p.pool,
                    "nodes": p.nodes,
                    "gpus": p.gpus_total,
                    "allocated": p.gpus_allocated,
                    "free": p.gpus_free,
                    "histogram": {str(k): v for k, v in sorted(p.histogram.items())},
                    "observedHistogram": None
                    if p.observed_histogram is None
                    else {str(k): v for k, v in sorted(p.observed_histogram.items())},
                }
                for p in self.pools
            ],
            "refusals": [r.to_json() for r in self.refusals],
            "log": [{"at": t, "event": line} for t, line in self.log],
            "series": {
                "times": s.times_s,
                "pending": s.pending,
                "pools": {
                    f"{c}/{p}": {
                        "allocated": s.pool_allocated[(c, p)],
                        "free": s.pool_free[(c, p)],
                        "nodes": s.pool_nodes[(c, p)],
                    }
                    for c, p in s.pool_allocated
                },
                "deployments": {
                    d: {"desired": s.desired[d], "placed": s.placed[d], "running": s.running[d]}
                    for d in s.desired
                },
            },
            "stats": {
                "wallSeconds": round(self.wall_s, 3),
                "events": self.events_run,
                "controllerSteps": self.controller_steps,
                "controllerErrors": self.controller_errors[:20],
            },
        }


def _jsonable(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
