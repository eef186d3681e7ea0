"""`gpufleet agent --cluster NAME`: a workload cluster's agent as a process.

It composes the generic daemon pieces of `gpufleet.kube` with the `Agent`:

- a local `KubeStore` (in-cluster config or `--kubeconfig`) with informers on Nodes,
  ResourceSlices, ResourceClaims, Pods and the workloads the agent owns (labelled
  `gpufleet.io/replica`: templates, Deployments, PodDisruptionBudgets; LeaderWorkerSets
  optional, the CRD may be absent);
- a hub `KubeStore` from `--hub-kubeconfig` with watches scoped to its hub namespace
  `gpufleet-cluster-<name>` (its RBAC allows nothing wider): its ModelReplicas (labelled
  `gpufleet.io/cluster=<name>`) and its observations. Changes of the observations do not
  trigger a step (they are the agent's own writes); the watch proves the credentials work;
- the cluster's policy for tenant pod templates from `--policy FILE` (YAML; default: the secure
  default of `gpufleet.agent.policy`), read and checked before anything connects;
- leader election on a Lease in the *local* cluster: each term gets a fresh `Agent` stamping
  the term's epoch (`leaseTransitions`) and the Lease's uid (its incarnation) on its reports,
  so the hub can reject an older leader and let a recreated Lease take over once the old one
  is silent; with `--no-leader-elect` the incarnation is `standalone` at epoch 0;
- a step on every change (debounced), again after the Agent's minimum push interval when a
  change was not pushed yet, and at least every heartbeat interval (the Agent pushes a
  heartbeat when one is due); health and metrics endpoints; JSON logs; SIGTERM releases the
  Lease.

`AgentDaemon` is the composition without the process: tests drive `loop.tick()`.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from lightkube.config.kubeconfig import KubeConfig
from prometheus_client import CollectorRegistry

from gpufleet.agent.materialize import OWNED_SELECTOR
from gpufleet.agent.policy import ClusterPolicy, PolicyInvalid, parse_policy
from gpufleet.agent.policy import warnings as policy_warnings
from gpufleet.agent.runner import Agent, AgentConfig, StepOutcome, observation_namespace
from gpufleet.api.errors import LimitExceeded, ValidationFailed
from gpufleet.api.loader import load_yaml_documents
from gpufleet.api.models import STANDALONE_LEASE
from gpufleet.api.names import (
    CLUSTER_NAME_MAX_CHARS,
    is_cluster_name,
    is_dns_label,
    is_dns_subdomain,
)
from gpufleet.cli.controller import (
    _KUBECONFIG_ERRORS,
    DebounceOption,
    HealthAddressOption,
    KubeconfigOption,
    LeaderElectOption,
    LeaseDurationOption,
    LeaseIdentityOption,
    LeaseNamespaceOption,
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
    MetricsAddressOption,
    RenewDeadlineOption,
    ResyncOption,
    RetryPeriodOption,
    check_address,
    connect,
    default_identity,
    kube_config,
    leader_config,
)
from gpufleet.cli.durations import duration_option
from gpufleet.core import labels
from gpufleet.core.model import Steering
from gpufleet.kube import logs
from gpufleet.kube.agent_token import renewing_hub
from gpufleet.kube.daemon import (
    DaemonLoop,
    LoopConfig,
    Reconcile,
    Trigger,
    Watch,
    endpoints,
    run_until_signalled,
)
from gpufleet.kube.install import AGENT, HEALTH_PORT, METRICS_PORT, VERSION
from gpufleet.kube.install import SYSTEM_NAMESPACE as LEASE_NAMESPACE
from gpufleet.kube.leader import LeaderConfig, LeaderElector
from gpufleet.kube.metrics import CONTENT_TYPE_LATEST, AgentMetrics, disable_created_series, render
from gpufleet.kube.renewal import TokenRenewer
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    MODEL_REPLICA,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
)

log = logging.getLogger(__name__)

#: A policy file larger than this is refused unread (a policy is a few lines).
MAX_POLICY_FILE_BYTES = 64 * 1024


def load_policy(path: Path | None) -> ClusterPolicy:
    """The cluster policy in the YAML file `path` (None: the default policy). A file that is
    missing, too large, not YAML or not a valid policy is a usage error (exit 2) naming the
    field and the rule."""
    if path is None:
        return ClusterPolicy()

    def bad(problem: str) -> typer.BadParameter:
        return typer.BadParameter(f"{path}: {problem}", param_hint="'--policy'")

    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise bad("not a regular file")
            raw = f.read(MAX_POLICY_FILE_BYTES + 1)
    except OSError as e:
        raise bad(e.strerror or type(e).__name__) from None
    if len(raw) > MAX_POLICY_FILE_BYTES:
        raise bad(f"larger than {MAX_POLICY_FILE_BYTES} bytes")
    try:
        docs = load_yaml_documents(raw.decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise bad("not YAML (UTF-8)") from None
    except LimitExceeded as e:
        raise bad(str(e)) from None
    except ValidationFailed:
        raise bad("not YAML (UTF-8)") from None
    if len(docs) > 1:
        raise bad(f"one YAML document expected, got {len(docs)}")
    try:
        policy = parse_policy(docs[0] if docs else None)
    except PolicyInvalid as e:
        raise bad(str(e)) from None
    for warning in policy_warnings(policy):
        typer.echo(f"warning: {path}: {warning}", err=True)
    return policy


def report_result(outcome: StepOutcome) -> str:
    """`gpufleet_agent_reports_total`'s `result` label for one step."""
    if outcome.is_pushed:
        return "pushed"
    return "unchanged" if outcome.is_hub_reachable else "failed"


class AgentDaemon:
    """One workload cluster's agent loop, metrics and current term, on two `KubeStore`s."""

    def __init__(
        self,
        cluster: str,
        local: KubeStore,
        hub: KubeStore,
        identity: str,
        clock: Callable[[], datetime],
        *,
        leader: LeaderConfig | None,
        loop_config: LoopConfig | None = None,
        config: AgentConfig | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cluster = cluster
        self.local = local
        self.hub = hub
        self.identity = identity
        self.config = config or AgentConfig()
        self.timer = timer
        self.registry = CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.agent: Agent | None = None
        self.last_outcome: StepOutcome | None = None
        namespace = observation_namespace(cluster)
        watches = [
            Watch(local, NODE),
            Watch(local, RESOURCE_SLICE),
            Watch(local, RESOURCE_CLAIM),
            Watch(local, POD),
            Watch(local, RESOURCE_CLAIM_TEMPLATE, label_selector=OWNED_SELECTOR),
            Watch(local, DEPLOYMENT, label_selector=OWNED_SELECTOR),
            Watch(local, LEADER_WORKER_SET, label_selector=OWNED_SELECTOR, required=False),
            Watch(local, POD_DISRUPTION_BUDGET, label_selector=OWNED_SELECTOR),
            Watch(
                hub,
                MODEL_REPLICA,
                namespace=namespace,
                label_selector=f"{labels.CLUSTER}={cluster}",
            ),
            Watch(hub, POOL_OBSERVATION, namespace=namespace, triggers=False),
            Watch(hub, REPLICA_OBSERVATION, namespace=namespace, triggers=False),
        ]
        loop_config = loop_config or LoopConfig()
        if loop_config.resync_period_s > self.config.heartbeat_interval_s:
            # A step must come at least once per heartbeat interval for the heartbeat to go out.
            loop_config = LoopConfig(
                debounce_s=loop_config.debounce_s,
                resync_period_s=self.config.heartbeat_interval_s,
                error_backoff_s=loop_config.error_backoff_s,
                max_wait_s=loop_config.max_wait_s,
            )
        elector = LeaderElector(local, identity, leader, clock) if leader is not None else None
        self._elector = elector
        self.loop = DaemonLoop(
            component="agent",
            watches=watches,
            start=self._start,
            clock=clock,
            config=loop_config,
            elector=elector,
            metrics=self.metrics.loop,
        )

    def _lease_uid(self) -> str:
        """The incarnation the term's reports are fenced by: its Lease's uid, or
        `standalone` without leader election (one fixed incarnation, so a restarted
        standalone agent is accepted at once)."""
        elector = self._elector
        if elector is None:
            return STANDALONE_LEASE
        return elector.lease_uid or STANDALONE_LEASE

    def _start(self, epoch: int | None) -> Reconcile:
        # A new term is a new Agent: it pushes at once under the new epoch, and its allocation
        # clock starts over (which errs toward charging, as after a restart).
        agent = Agent(
            self.cluster,
            self.local,
            self.hub,
            self.config,
            identity=self.identity,
            lease_epoch=epoch if epoch is not None else 0,
            lease_uid=self._lease_uid(),
        )
        self.agent = agent
        min_push = timedelta(seconds=self.config.min_push_interval_s)
        last_push_at: datetime | None = None

        def reconcile(now: datetime, trigger: Trigger) -> datetime | None:
            nonlocal last_push_at
            started = self.timer()
            outcome = agent.step(now)
            if outcome.is_pushed:
                last_push_at = now
            self.last_outcome = outcome
            duration_s = self.timer() - started
            self.metrics.record_step(duration_s, report_result(outcome))
            is_eventful = (
                outcome.is_pushed
                or outcome.created
                or outcome.updated
                or outcome.deleted
                or outcome.errors
            )
            log.log(
                logging.WARNING
                if outcome.errors
                else logging.INFO
                if is_eventful
                else logging.DEBUG,
                "step: %s, %d created, %d updated, %d deleted, %d errors",
                report_result(outcome),
                len(outcome.created),
                len(outcome.updated),
                len(outcome.deleted),
                len(outcome.errors),
                extra={
                    "component": "agent",
                    "cluster": self.cluster,
                    "identity": self.identity,
                    "epoch": agent.lease_epoch,
                    "trigger": trigger.value,
                    "duration_s": round(duration_s, 6),
                    # (`created` is a LogRecord attribute: `extra` may not set it.)
                    "workloads_created": outcome.created,
                    "workloads_updated": outcome.updated,
                    "workloads_deleted": outcome.deleted,
                    "errors": outcome.errors[:10],
                },
            )
            if not outcome.is_hub_reachable:
                return now + min_push  # retry the push soon
            if outcome.is_pushed or last_push_at is None:
                return None
            held_until = last_push_at + min_push  # the agent compares with the `now` it pushed at
            if now < held_until:
                # A change inside the minimum push interval: push it when the interval since
                # the last push ends (if the report did not change, that step pushes nothing).
                return held_until
            return None

        return reconcile

    def metrics_response(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, render(self.registry)


def command(
    cluster: Annotated[
        str, typer.Option("--cluster", help="The InferenceCluster this agent reports for.")
    ],
    kubeconfig: KubeconfigOption = None,
    hub_kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--hub-kubeconfig",
            help="Kubeconfig of the hub (the gpufleet-hub Secret); default: the local cluster "
            "is also the hub.",
        ),
    ] = None,
    hub_secret: Annotated[
        str | None,
        typer.Option(
            "--hub-secret",
            metavar="NAMESPACE/NAME",
            help="The local Secret holding the hub kubeconfig: the agent writes its renewed hub "
            "token there (default: the renewed token is kept in memory only).",
        ),
    ] = None,
    leader_elect: LeaderElectOption = True,
    lease_namespace: LeaseNamespaceOption = LEASE_NAMESPACE,
    lease_name: Annotated[
        str, typer.Option("--lease-name", help="Name of the Lease (in the local cluster).")
    ] = AGENT,
    lease_identity: LeaseIdentityOption = None,
    lease_duration: LeaseDurationOption = 15,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    metrics_address: MetricsAddressOption = f":{METRICS_PORT}",
    health_address: HealthAddressOption = f":{HEALTH_PORT}",
    resync_period: ResyncOption = 30.0,
    debounce: DebounceOption = 0.5,
    heartbeat_interval: Annotated[
        float, duration_option("--heartbeat-interval", "Push at least this often.", 30)
    ] = 30.0,
    min_push_interval: Annotated[
        float,
        duration_option("--min-push-interval", "Never push sooner than this after a push.", 0.5),
    ] = 0.5,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="YAML file of what tenant pod templates may do on this cluster (docs/agent.md, "
            "'Cluster policy'); default: Pod Security baseline, service account 'default' "
            "only, every namespace but kube-* and gpufleet-system.",
        ),
    ] = None,
    steering: Annotated[
        Steering,
        typer.Option(
            "--steering",
            help="Steer claiming pods to the nodes the agent chose by best fit: Preferred "
            "(node affinity weight 100), Required, or Off; only until the agent has read its "
            "InferenceCluster, whose spec.steering it then follows.",
        ),
    ] = Steering.PREFERRED,
    log_format: LogFormatOption = LogFormat.JSON,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run a workload cluster's agent: report free GPUs to the hub, materialize replicas."""
    if not is_cluster_name(cluster):
        raise typer.BadParameter(
            f"must be a DNS label of at most {CLUSTER_NAME_MAX_CHARS} characters",
            param_hint="'--cluster'",
        )
    check_address(metrics_address, "--metrics-address")
    check_address(health_address, "--health-address")
    secret = _secret_ref(hub_secret)
    policy = load_policy(policy_file)
    local_config = kube_config(kubeconfig)
    hub_config = kube_config(hub_kubeconfig, "--hub-kubeconfig") if hub_kubeconfig else local_config
    logs.configure(log_level.value, log_format.value)
    leader = leader_config(
        leader_elect, lease_name, lease_namespace, lease_duration, renew_deadline, retry_period
    )
    disable_created_series()
    identity = lease_identity or default_identity()
    local = connect(local_config)
    renewer = None
    try:
        if hub_kubeconfig is None:
            hub = connect(hub_config)
        else:
            hub, renewer = _renewing_hub(hub_config, cluster, local_config, secret, hub_kubeconfig)
    except BaseException:
        local.close()
        raise
    daemon = AgentDaemon(
        cluster,
        local,
        hub,
        identity,
        lambda: datetime.now(UTC),
        leader=leader,
        loop_config=LoopConfig(debounce_s=debounce, resync_period_s=resync_period),
        config=AgentConfig(
            heartbeat_interval_s=heartbeat_interval,
            min_push_interval_s=min_push_interval,
            policy=policy,
            steering=steering,
            version=VERSION,
        ),
    )
    log.info(
        "agent %s of cluster %s starting",
        identity,
        cluster,
        extra={"component": "agent", "cluster": cluster, "identity": identity},
    )
    try:
        servers = endpoints(daemon.loop, daemon.metrics_response, metrics_address, health_address)
    except BaseException:
        local.close()
        hub.close()
        raise
    try:
        run_until_signalled(daemon.loop, servers, [local, hub])
    finally:
        if renewer is not None:
            renewer.stop()


def _secret_ref(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    ns, sep, name = text.partition("/")
    if not (sep and is_dns_label(ns) and is_dns_subdomain(name)):
        raise typer.BadParameter(
            f"{text!r} is not NAMESPACE/NAME (e.g. gpufleet-system/gpufleet-hub)",
            param_hint="'--hub-secret'",
        )
    return ns, name


def _renewing_hub(
    hub_config: KubeConfig,
    cluster: str,
    local_config: KubeConfig,
    secret: tuple[str, str] | None,
    path: Path,
) -> tuple[KubeStore, TokenRenewer | None]:
    """The hub store, renewing its token when it has a known lifetime (`connect`'s errors)."""
    try:
        return renewing_hub(
            hub_config,
            cluster,
            lambda: datetime.now(UTC),
            member=local_config,
            hub_secret=secret,
            kubeconfig_path=path,
        )
    except (*_KUBECONFIG_ERRORS, AssertionError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise typer.BadParameter(
            f"cannot build a Kubernetes client from it: {problem}", param_hint="'--hub-kubeconfig'"
        ) from None
