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
- controller: `gpufleet_placements_total{cluster}`, `gpufleet_refusals_total{reason}`
  (deployments a pass left short, once per deployment and pass), `gpufleet_unplaced_replicas`
  (gauge: the replicas missing after the last pass), `gpufleet_decision_duration_seconds`
  (histogram), `gpufleet_rejected_reports_total`; and the fleet's capacity (`FleetCollector`,
  from `gpufleet.kube.fleet_metrics`): per cluster, pool and driver the devices, free,
  allocated and unavailable, nodes by free devices, the largest free block; per pool the nodes,
  excluded nodes and `gpufleet_observation_age_seconds`; replicas placed and running per
  cluster, replicas desired, and deployments unscheduled by reason;
- agent: `gpufleet_agent_report_duration_seconds` (histogram of a whole step),
  `gpufleet_agent_reports_total{result}` (`pushed`, `unchanged`, `failed`).

The fleet's capacity is computed when scraped, from what the hub store holds (the controller's
watch caches), and only on the leading replica. So `gpufleet_observation_age_seconds` (now minus
the `observedAt` of the observation the controller last published) keeps growing while an
agent is silent or the controller is stuck: alerting on it needs no second signal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from gpufleet.kube.fleet_metrics import FleetCapacity
from gpufleet.store.port import StoreError

__all__ = [
    "CONTENT_TYPE_LATEST",
    "AgentMetrics",
    "ControllerMetrics",
    "FleetCollector",
    "LoopMetrics",
    "disable_created_series",
    "fleet_families",
    "render",
]

log = logging.getLogger(__name__)

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


class FleetCollector(Collector):
    """The fleet's capacity (`fleet_metrics.FleetCapacity`), computed when scraped.

    `source(now)` reads it (None: export nothing, as on a standby: only the leader exports the
    fleet's numbers, so a sum over the controller's replicas counts each pool once). A source
    that raises `StoreError` exports nothing for that scrape and logs why.
    """

    def __init__(
        self,
        source: Callable[[datetime], FleetCapacity | None],
        clock: Callable[[], datetime],
    ) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            fleet = self._source(self._clock())
        except StoreError as e:
            log.warning("cannot read the fleet for metrics: %s", e)
            return
        if fleet is not None:
            yield from fleet_families(fleet)


def _gauge(name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def fleet_families(fleet: FleetCapacity) -> list[GaugeMetricFamily]:
    """The metric families of `fleet` (docs/operations.md lists them)."""
    pool, driver = ("cluster", "pool"), ("cluster", "pool", "driver")
    nodes = _gauge("gpufleet_pool_nodes", "Nodes the agent observed in the pool.", pool)
    max_nodes = _gauge(
        "gpufleet_pool_max_nodes", "Nodes the pool may reach (maxNodeCount, else nodeCount).", pool
    )
    excluded = _gauge(
        "gpufleet_pool_excluded_nodes",
        "Observed nodes with nothing free for the fleet, by the agent's exclusion reason.",
        (*pool, "reason"),
    )
    age = _gauge(
        "gpufleet_observation_age_seconds",
        "Age of the observation the controller published per cluster and pool.",
        pool,
    )
    devices = _gauge(
        "gpufleet_pool_devices",
        "Devices on the pool's observed nodes (nodes times the devices one node offers).",
        driver,
    )
    free = _gauge("gpufleet_pool_free_devices", "Free devices in the pool.", driver)
    allocated = _gauge(
        "gpufleet_pool_allocated_devices",
        "Devices allocated to claims of any tenant on the pool's schedulable nodes.",
        driver,
    )
    unavailable = _gauge(
        "gpufleet_pool_unavailable_devices",
        "Devices on observed nodes the agent excluded (cordoned, NotReady, tainted, ...).",
        driver,
    )
    largest = _gauge(
        "gpufleet_pool_largest_free_block_devices",
        "The most free devices on one node of the pool.",
        driver,
    )
    by_free = _gauge(
        "gpufleet_pool_nodes_by_free_devices",
        "Nodes of the pool with exactly `free` devices free.",
        (*driver, "free"),
    )
    for p in fleet.pools:
        key = [p.cluster, p.pool]
        _add(nodes, key, p.observed_nodes)
        _add(max_nodes, key, p.max_nodes)
        _add(age, key, p.age_s)
        for reason, count in p.excluded_nodes:
            excluded.add_metric([*key, reason], count)
        for d in p.drivers:
            dkey = [*key, d.driver]
            _add(devices, dkey, d.devices)
            _add(free, dkey, d.free)
            _add(allocated, dkey, d.allocated)
            _add(unavailable, dkey, d.unavailable)
            _add(largest, dkey, d.largest_free_block)
            for count, n in d.nodes_by_free:
                by_free.add_metric([*dkey, str(count)], n)
    placed = _gauge("gpufleet_replicas_placed", "ModelReplicas pinned to the cluster.", ["cluster"])
    running = _gauge(
        "gpufleet_replicas_running",
        "ModelReplicas of the cluster whose ModelPodsScheduled condition is True.",
        ["cluster"],
    )
    for cluster, n_placed, n_running in fleet.replicas:
        placed.add_metric([cluster], n_placed)
        running.add_metric([cluster], n_running)
    desired = _gauge(
        "gpufleet_replicas_desired", "Replicas the ModelDeployments ask for (spec.replicas).", []
    )
    desired.add_metric([], fleet.replicas_desired)
    unscheduled = _gauge(
        "gpufleet_unscheduled_deployments",
        "ModelDeployments whose ReplicasScheduled condition is False, by its reason.",
        ["reason"],
    )
    for reason, count in fleet.unscheduled_deployments:
        unscheduled.add_metric([reason], count)
    short = _gauge(
        "gpufleet_short_deployments",
        "ModelDeployments whose ReplicasRunning condition is False, by its reason.",
        ["reason"],
    )
    for reason, count in fleet.short_deployments:
        short.add_metric([reason], count)
    return [
        nodes,
        max_nodes,
        excluded,
        age,
        devices,
        free,
        allocated,
        unavailable,
        largest,
        by_free,
        placed,
        running,
        desired,
        unscheduled,
        short,
    ]


def _add(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


class ControllerMetrics:
    """The hub controller's metrics (plus `LoopMetrics` for component `controller`).

    `fleet(now)`, when given, supplies the fleet's capacity at scrape time (`FleetCollector`).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        clock: Callable[[], datetime],
        fleet: Callable[[datetime], FleetCapacity | None] | None = None,
    ) -> None:
        self.loop = LoopMetrics(registry, "controller")
        self._placements = Counter(
            "gpufleet_placements",
            "Replicas placed (ModelReplicas created), by cluster.",
            ["cluster"],
            registry=registry,
        )
        self._refusals = Counter(
            "gpufleet_refusals",
            "Deployments a scheduling pass left short of replicas (or found invalid), by the "
            "reason code of their ReplicasScheduled condition; once per deployment and pass.",
            ["reason"],
            registry=registry,
        )
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
            "Agent observations ignored: an older lease epoch, another Lease incarnation, or "
            "stamped in the future.",
            registry=registry,
        )
        if fleet is not None:
            registry.register(FleetCollector(fleet, clock))

    def record_step(
        self,
        placements_by_cluster: Mapping[str, int],
        refusals_by_reason: Mapping[str, int],
        unplaced_replicas: int,
        decision_latency_s: float | None,
        rejected_reports: int,
    ) -> None:
        """One step's numbers; `refusals_by_reason` counts the deployments this step's pass
        refused (pass nothing for a step that did not schedule again)."""
        for cluster, count in sorted(placements_by_cluster.items()):
            if count > 0:
                self._placements.labels(cluster).inc(count)
        for reason, count in sorted(refusals_by_reason.items()):
            if count > 0:
                self._refusals.labels(reason).inc(count)
        self._unplaced.set(unplaced_replicas)
        if decision_latency_s is not None:
            self._decision.observe(decision_latency_s)
        if rejected_reports > 0:
            self._rejected.inc(rejected_reports)


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
