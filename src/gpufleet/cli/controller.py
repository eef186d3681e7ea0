"""`gpufleet controller`: the hub controller as a process (what the hub Deployment runs).

It composes the generic daemon pieces of `gpufleet.kube` with the hub `Controller`:

- a `KubeStore` on the in-cluster config or `--kubeconfig`, with informers on the six
  gpufleet.io kinds: any change triggers a step (debounced), and a resync timer steps anyway
  (freshness and expiry are judged on time alone);
- Lease leader election (`--leader-elect`, on by default): only the leader steps, each term with
  a fresh `Controller` (an empty assume ledger; lease epochs are re-read from cluster status);
- `/healthz`, `/readyz` on `--health-address` and Prometheus `/metrics` on `--metrics-address`;
- JSON-lines logs on stderr; SIGTERM releases the Lease so a standby takes over at once.

`ControllerDaemon` is the composition without the process around it: tests build it on an
emulated API server with an injected clock and drive `loop.tick()`.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG, KubeConfig
from lightkube.core.exceptions import ConfigError
from prometheus_client import CollectorRegistry

from gpufleet.cli.durations import duration_option
from gpufleet.controller import Controller, ControllerConfig, StepResult
from gpufleet.kube import logs
from gpufleet.kube.daemon import (
    DaemonLoop,
    LoopConfig,
    Reconcile,
    Trigger,
    Watch,
    endpoints,
    run_until_signalled,
)
from gpufleet.kube.fleet_metrics import FleetCapacity, read_fleet
from gpufleet.kube.health import parse_address
from gpufleet.kube.install import CONTROLLER, HEALTH_PORT, METRICS_PORT, SYSTEM_NAMESPACE, VERSION
from gpufleet.kube.leader import LeaderConfig, LeaderElector
from gpufleet.kube.metrics import (
    CONTENT_TYPE_LATEST,
    ControllerMetrics,
    disable_created_series,
    render,
)
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

log = logging.getLogger(__name__)

#: What the controller reads; a change of any of them can change a decision or a status.
HUB_KINDS = (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)


#: The garbage collector's thresholds in the controller process (CPython's default is
#: (700, 10, 10)); the simulator runs with the same (`GC_THRESHOLDS`).
COLLECTOR_THRESHOLDS = (50_000, 20, 100)


def tune_collector() -> None:
    """Collect garbage less often in the controller process (set once, at its start).

    The controller holds every hub object (its index, the assume ledger, the desired
    statuses): millions of long-lived objects at 50,000 deployments, which each full
    collection walks again while the first step allocates; that was 30% of the first step
    (docs/performance.md, "Many deployments"). Its objects make few reference cycles
    (reference counting frees the rest), so collecting every 50,000 allocations instead of
    every 700 costs little memory."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def placements_by_cluster(result: StepResult) -> Counter[str]:
    """The replicas a step created, by cluster (creates that failed are not placements)."""
    counts: Counter[str] = Counter()
    if result.decision is None:
        return counts
    for decided in result.decision.deployments:
        for placement in decided.created:
            failed = f"create ModelReplica {decided.key.namespace}/{placement.name}:"
            if not any(error.startswith(failed) for error in result.errors):
                counts[str(placement.cluster)] += 1
    return counts


class ControllerDaemon:
    """The hub controller's loop, metrics and current term, on a `KubeStore`."""

    def __init__(
        self,
        hub: KubeStore,
        identity: str,
        clock: Callable[[], datetime],
        *,
        leader: LeaderConfig | None,
        loop_config: LoopConfig | None = None,
        config: ControllerConfig | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.hub = hub
        self.identity = identity
        self.config = config or ControllerConfig()
        self.timer = timer
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry, clock, self._fleet)
        self.controller: Controller | None = None
        self.last_result: StepResult | None = None
        elector = LeaderElector(hub, identity, leader, clock) if leader is not None else None
        self.loop = DaemonLoop(
            component="controller",
            watches=[Watch(hub, kind) for kind in HUB_KINDS],
            start=self._start,
            clock=clock,
            config=loop_config or LoopConfig(),
            elector=elector,
            metrics=self.metrics.loop,
        )

    def _fleet(self, now: datetime) -> FleetCapacity | None:
        """The fleet's capacity for `/metrics`: on the leader only (see `FleetCollector`)."""
        return read_fleet(self.hub, now) if self.loop.is_leading() else None

    def _start(self, epoch: int | None) -> Reconcile:
        controller = Controller(self.hub, self.config, self.identity, timer=self.timer)
        self.controller = controller

        def reconcile(now: datetime, trigger: Trigger) -> datetime | None:
            started = self.timer()
            result = controller.step(now)
            self.last_result = result
            self.metrics.record_step(
                placements_by_cluster(result),
                # A quiet step repeats the last pass's refusals without a pass of its own.
                {} if result.is_quiet else result.refusals,
                result.shortfall,
                result.decision_latency_s,
                len(result.rejected_reports),
            )
            level = logging.INFO if result.write_count or result.errors else logging.DEBUG
            log.log(
                level,
                "step: %d writes, %d placed, %d dropped, %d short, %d errors",
                result.write_count,
                result.placements,
                result.drops,
                result.shortfall,
                len(result.errors),
                extra={
                    "component": "controller",
                    "identity": self.identity,
                    "epoch": epoch,
                    "trigger": trigger.value,
                    "duration_s": round(self.timer() - started, 6),
                    "writes": result.write_count,
                    "placements": result.placements,
                    "drops": result.drops,
                    "shortfall": result.shortfall,
                    "refusals": dict(result.refusals),
                    "rejected_reports": len(result.rejected_reports),
                    # Quiet: only heartbeats and its own status writes since a step that
                    # left nothing to do; the decision is that step's (docs/controller.md).
                    "quiet": result.is_quiet,
                    "errors": result.errors[:10],
                },
            )
            # Wake at the next time-driven change (a freshness crossing, a stuck deadline,
            # a backoff's end), not only on the resync (docs/controller.md).
            return controller.next_due(now)

        return reconcile

    def metrics_response(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, render(self.registry)


# --- the command ------------------------------------------------------------------------------


class LogFormat(StrEnum):
    JSON = "json"
    TEXT = "text"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def default_identity() -> str:
    """client-go's default: the host name (the pod name in a cluster) plus a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


#: What a kubeconfig file can fail with: absent, unreadable, not YAML, or not a kubeconfig.
_KUBECONFIG_ERRORS = (
    ConfigError,
    OSError,
    yaml.YAMLError,
    KeyError,
    TypeError,
    AttributeError,
    ValueError,
)


def _problem(path: str | Path, error: BaseException) -> str:
    """One line saying what is wrong with the kubeconfig at `path`."""
    file = Path(path).expanduser()
    if not file.exists():
        return "no such file"
    if not file.is_file():
        return "not a file"
    if isinstance(error, yaml.YAMLError):
        return "not YAML"
    if isinstance(error, KeyError):
        return f"not a kubeconfig (no {error} entry)"
    if isinstance(error, TypeError | AttributeError):
        return "not a kubeconfig"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _load(path: str | Path) -> KubeConfig:
    """A kubeconfig file whose current context resolves; raises one of `_KUBECONFIG_ERRORS`."""
    config = KubeConfig.from_file(path)
    config.get()  # its current context, cluster and user exist
    return config


def kube_config(path: Path | None, flag: str = "--kubeconfig") -> KubeConfig:
    """`path`, else the in-cluster service account, else `$KUBECONFIG` or `~/.kube/config`.

    A missing or broken kubeconfig is a usage error (exit 2) naming what was tried.
    """
    if path is not None:
        try:
            return _load(path)
        except _KUBECONFIG_ERRORS as e:
            raise typer.BadParameter(
                f"{path}: {_problem(path, e)}", param_hint=f"'{flag}'"
            ) from None
    try:
        return KubeConfig.from_service_account()
    except (ConfigError, OSError, KeyError):
        pass  # not in a pod
    env = os.environ.get("KUBECONFIG")
    file = env or DEFAULT_KUBECONFIG
    try:
        return _load(file)
    except _KUBECONFIG_ERRORS as e:
        problem = _problem(file, e)
        tried = (
            f"$KUBECONFIG={env} ({problem})"
            if env
            else f"$KUBECONFIG (unset), {DEFAULT_KUBECONFIG} ({problem})"
        )
        raise typer.BadParameter(
            f"no usable kubeconfig: tried in-cluster (no service account), {tried}",
            param_hint=f"'{flag}'",
        ) from None


def connect(config: KubeConfig, flag: str = "--kubeconfig") -> KubeStore:
    """A `KubeStore` on `config`; a kubeconfig lightkube cannot build a client from (a context
    without a user, a certificate file that is missing) is a usage error (exit 2)."""
    try:
        return KubeStore(config)
    # lightkube checks a context's user with `assert`.
    except (*_KUBECONFIG_ERRORS, AssertionError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise typer.BadParameter(
            f"cannot build a Kubernetes client from it: {problem}", param_hint=f"'{flag}'"
        ) from None


KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file; default: in-cluster service account, then $KUBECONFIG, "
        "then ~/.kube/config.",
    ),
]
LeaderElectOption = Annotated[
    bool,
    typer.Option(
        "--leader-elect/--no-leader-elect", help="Elect one acting replica through a Lease."
    ),
]
LeaseNamespaceOption = Annotated[
    str, typer.Option("--lease-namespace", help="Namespace of the Lease.")
]
LeaseIdentityOption = Annotated[
    str | None,
    typer.Option("--lease-identity", help="This replica's identity; default: hostname_<random>."),
]
LeaseDurationOption = Annotated[
    int,
    duration_option(
        "--lease-duration",
        "How long a standby waits to take over (whole seconds).",
        15,
        2,
        is_whole=True,
    ),
]
RenewDeadlineOption = Annotated[
    float,
    duration_option("--renew-deadline", "How long a leader keeps acting without a renewal.", 10),
]
RetryPeriodOption = Annotated[
    float, duration_option("--retry-period", "Time between election attempts.", 2)
]
MetricsAddressOption = Annotated[
    str, typer.Option("--metrics-address", help="Serve /metrics here (HOST:PORT, :PORT, 0=off).")
]
HealthAddressOption = Annotated[
    str,
    typer.Option(
        "--health-address", help="Serve /healthz and /readyz here (HOST:PORT, :PORT, 0=off)."
    ),
]
ResyncOption = Annotated[
    float, duration_option("--resync-period", "Time between steps when nothing changes.", 30)
]
DebounceOption = Annotated[
    float, duration_option("--debounce", "Time from a change to the step it triggers.", 0.5)
]
LogFormatOption = Annotated[LogFormat, typer.Option("--log-format", help="Log line format.")]
LogLevelOption = Annotated[
    LogLevel, typer.Option("--log-level", case_sensitive=False, help="Lowest level logged.")
]


def check_address(address: str, flag: str) -> None:
    """Fail as a usage error (exit 2) on an address `parse_address` cannot read."""
    try:
        parse_address(address)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=f"'{flag}'") from e


def check_gateway_template(template: str) -> None:
    """Fail as a usage error (exit 2) on a `--gateway-address` other than text with `{cluster}`
    as its only placeholder."""
    try:
        template.format(cluster="c")
    except (KeyError, IndexError, ValueError) as e:
        raise typer.BadParameter(
            f"{template!r}: the only placeholder allowed is {{cluster}} ({e})",
            param_hint="'--gateway-address'",
        ) from None


def leader_config(
    is_enabled: bool,
    name: str,
    namespace: str,
    duration_s: int,
    renew_deadline_s: float,
    retry_period_s: float,
) -> LeaderConfig | None:
    if not is_enabled:
        return None
    try:
        return LeaderConfig(name, namespace, duration_s, renew_deadline_s, retry_period_s)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--lease-duration'") from e


def command(
    kubeconfig: KubeconfigOption = None,
    leader_elect: LeaderElectOption = True,
    lease_namespace: LeaseNamespaceOption = SYSTEM_NAMESPACE,
    lease_name: Annotated[str, typer.Option("--lease-name", help="Name of the Lease.")] = (
        CONTROLLER
    ),
    lease_identity: LeaseIdentityOption = None,
    lease_duration: LeaseDurationOption = 15,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    metrics_address: MetricsAddressOption = f":{METRICS_PORT}",
    health_address: HealthAddressOption = f":{HEALTH_PORT}",
    resync_period: ResyncOption = 30.0,
    debounce: DebounceOption = 0.5,
    stale_after: Annotated[
        float, duration_option("--stale-after", "Age at which an observation is Stale.", 60)
    ] = 60.0,
    expire_after: Annotated[
        float,
        duration_option(
            "--expire-after", "Agent silence after which a cluster gets no placements.", 300
        ),
    ] = 300.0,
    stuck_after: Annotated[
        float,
        duration_option(
            "--stuck-after",
            "How long a replica's claiming pods may stay Unschedulable before it is "
            "re-placed on another cluster or pool (not while the autoscaler adds its node).",
            120,
            1,
            86400,
        ),
    ] = 120.0,
    manage_ready: Annotated[
        bool,
        typer.Option(
            "--manage-ready/--no-manage-ready",
            help="Write each InferenceCluster's Ready condition from its agent's reports "
            "(--no-manage-ready: your platform owns Ready).",
        ),
    ] = True,
    gateway_address: Annotated[
        str,
        typer.Option(
            "--gateway-address",
            metavar="TEMPLATE",
            help="Gateway address of a cluster whose status has none, {cluster} replaced by its "
            "name (example: '{cluster}.inference.example.com'); default none (a gateway is "
            "optional).",
        ),
    ] = "",
    log_format: LogFormatOption = LogFormat.JSON,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run the hub controller: publish cluster status, schedule the fleet (leader only)."""
    check_address(metrics_address, "--metrics-address")
    check_address(health_address, "--health-address")
    check_gateway_template(gateway_address)
    hub_config = kube_config(kubeconfig)
    logs.configure(log_level.value, log_format.value)
    leader = leader_config(
        leader_elect, lease_name, lease_namespace, lease_duration, renew_deadline, retry_period
    )
    disable_created_series()
    tune_collector()
    identity = lease_identity or default_identity()
    hub = connect(hub_config)
    daemon = ControllerDaemon(
        hub,
        identity,
        lambda: datetime.now(UTC),
        leader=leader,
        loop_config=LoopConfig(debounce_s=debounce, resync_period_s=resync_period),
        config=ControllerConfig(
            stale_after_s=stale_after,
            expire_after_s=expire_after,
            manages_ready=manage_ready,
            default_gateway_address=gateway_address,
            stuck_after_s=stuck_after,
            hub_version=VERSION,
        ),
    )
    log.info(
        "controller %s starting",
        identity,
        extra={"component": "controller", "identity": identity, "leader_elect": leader_elect},
    )
    try:
        servers = endpoints(daemon.loop, daemon.metrics_response, metrics_address, health_address)
    except BaseException:
        hub.close()
        raise
    run_until_signalled(daemon.loop, servers, [hub])
