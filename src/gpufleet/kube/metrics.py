"""Prometheus metrics of the controller and the agent (`prometheus-client`, one registry each).

Each daemon owns a `CollectorRegistry` of its own, never the library's global one, so two
daemons in one process (the tests run a hub controller and two agents side by side) keep
separate numbers. `render(registry)` is the text exposition `/metrics` serves.

The metrics take plain numbers, not the controller's or the agent's result types: `gpufleet.kube`
does not import them (the layers contract); `gpufleet.cli` maps a step's result onto these calls.

Names (docs/operations.md, "Metrics"):

- both: `gpufleet_leader{component}` (1 while this replica holds the Lease),
  `gpufleet_lease_epoch{component}` (its `leaseTransitions` while leading),
  `gpufleet_reconciles_total{component, trigger}`, `gpufleet_reconcile_errors_total{component}`;
- controller: `gpufleet_placements_total{cluster}`, `gpufleet_refusals{reason}` and
  `gpufleet_unplaced_replicas` (gauges: the last pass's deployments short of replicas, and
  the replicas missing), `gpufleet_decision_duration_seconds` (histogram),
  `gpufleet_rejected_reports_total`, `gpufleet_observation_age_seconds{cluster, pool}`;
- agent: `gpufleet_agent_report_duration_seconds` (histogram of a whole step),
  `gpufleet_agent_reports_total{result}` (`pushed`, `unchanged`, `failed`).

`gpufleet_observation_age_seconds` is computed when scraped (now minus the `observedAt` of the
observation the controller last published), so it keeps growing while an agent is silent or
the controller is stuck: alerting on it needs no second signal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE_LATEST",
    "AgentMetrics",
    "ControllerMetrics",
    "LoopMetrics",
    "disable_created_series",
    "render",
]

#: Buckets of a scheduling pass or an agent step: milliseconds to tens of seconds.
DURATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def disable_created_series() -> None:
    """Leave out the `*_created` series (process-wide; for metrics created after the call).

    They double what a scrape carries and nothing we chart uses them; the daemons call this
    once at start-up, before building their metrics.
    """
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of `registry`."""
    return generate_latest(registry)


class LoopMetrics:
    """What every daemon loop reports: leadership and reconciles."""

    def __init__(self, registry: CollectorRegistry, component: str) -> None:
        self.component = component
        self._leader = Gauge(
            "gpufleet_leader",
            "1 on the replica that holds the Lease, else 0.",
            ["component"],
            registry=registry,
        ).labels(component)
        self._epoch = Gauge(
            "gpufleet_lease_epoch",
            "The Lease's leaseTransitions while this replica leads; -1 when it does not.",
            ["component"],
            registry=registry,
        ).labels(component)
        self._reconciles = Counter(
            "gpufleet_reconciles",
            "Reconcile steps run, by what triggered them.",
            ["component", "trigger"],
            registry=registry,
        )
        self._errors = Counter(
            "gpufleet_reconcile_errors",
            "Reconcile steps that raised (retried after a backoff).",
            ["component"],
            registry=registry,
        ).labels(component)
        self._epoch.set(-1)

    def set_leader(self, is_leading: bool, epoch: int | None) -> None:
        self._leader.set(1 if is_leading else 0)
        self._epoch.set(epoch if is_leading and epoch is not None else -1)

    def reconciled(self, trigger: str) -> None:
        self._reconciles.labels(self.component, trigger).inc()

    def failed(self) -> None:
        self._errors.inc()


class _ObservationAges(Collector):
    """`gpufleet_observation_age_seconds`, computed at scrape time from `observedAt`s."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._observed_at: dict[tuple[str, str], datetime] = {}

    def set(self, observed_at: Mapping[tuple[str, str], datetime]) -> None:
        with self._lock:
            self._observed_at = dict(observed_at)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpufleet_observation_age_seconds",
            "Age of the newest observation the controller published per cluster and pool.",
            labels=["cluster", "pool"],
        )
        now = self._clock()
        with self._lock:
            items = sorted(self._observed_at.items())
        for (cluster, pool), at in items:
            family.add_metric([cluster, pool], max(0.0, (now - at).total_seconds()))
        yield family


class ControllerMetrics:
    """The hub controller's metrics (plus `LoopMetrics` for component `controller`)."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], datetime]) -> None:
        self.loop = LoopMetrics(registry, "controller")
        self._placements = Counter(
            "gpufleet_placements",
            "Replicas placed (ModelReplicas created), by cluster.",
            ["cluster"],
            registry=registry,
        )
        self._refusals = Gauge(
            "gpufleet_refusals",
            "Deployments short of replicas (or invalid) after the last scheduling pass, by the "
            "reason code of their Scheduled condition.",
            ["reason"],
            registry=registry,
        )
        self._refusal_reasons: set[str] = set()
        self._unplaced = Gauge(
            "gpufleet_unplaced_replicas",
            "Replicas asked for but not placed after the last scheduling pass.",
            registry=registry,
        )
        self._decision = Histogram(
            "gpufleet_decision_duration_seconds",
            "Duration of one scheduling pass over the whole fleet.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self._rejected = Counter(
            "gpufleet_rejected_reports",
            "Agent observations ignored because their lease epoch is older than the cluster's.",
            registry=registry,
        )
        self._ages = _ObservationAges(clock)
        registry.register(self._ages)

    def record_step(
        self,
        placements_by_cluster: Mapping[str, int],
        refusals_by_reason: Mapping[str, int],
        unplaced_replicas: int,
        decision_latency_s: float | None,
        rejected_reports: int,
    ) -> None:
        for cluster, count in sorted(placements_by_cluster.items()):
            if count > 0:
                self._placements.labels(cluster).inc(count)
        # A reason that cleared reads 0 rather than vanishing (no gap in a graph or an alert).
        self._refusal_reasons |= set(refusals_by_reason)
        for reason in sorted(self._refusal_reasons):
            self._refusals.labels(reason).set(refusals_by_reason.get(reason, 0))
        self._unplaced.set(unplaced_replicas)
        if decision_latency_s is not None:
            self._decision.observe(decision_latency_s)
        if rejected_reports > 0:
            self._rejected.inc(rejected_reports)

    def set_observations(self, observed_at: Mapping[tuple[str, str], datetime]) -> None:
        """The `observedAt` of each (cluster, pool) observation just published."""
        self._ages.set(observed_at)


class AgentMetrics:
    """An agent's metrics (plus `LoopMetrics` for component `agent`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.loop = LoopMetrics(registry, "agent")
        self._duration = Histogram(
            "gpufleet_agent_report_duration_seconds",
            "Duration of one agent step: observe, push if due, materialize.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self._reports = Counter(
            "gpufleet_agent_reports",
            "Agent steps by what happened to the report: pushed, unchanged (not due), failed.",
            ["result"],
            registry=registry,
        )

    def record_step(self, duration_s: float, result: str) -> None:
        self._duration.observe(duration_s)
        self._reports.labels(result).inc()
