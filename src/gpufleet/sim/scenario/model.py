"""The data model of a scenario: what `gpufleet.sim.scenario.load` parses a file into.

Frozen dataclasses: the `Scenario` (fleet, controller settings, manifests, timeline, checks),
each timeline `Action` and each `Check` with its expectations, and the durations every time
field is written in (seconds as a number, or `90s`, `30m`, `2h`, `1h30m`, `1d`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from gpufleet.core import durations
from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.store.port import Obj

API_VERSION: Final = "gpufleet.io/v1alpha1"
DEFAULT_NAMESPACE: Final = "default"


class ScenarioInvalid(ValueError):
    """A scenario that cannot run; `problems` lists every `path: message`."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(
            f"{head}invalid scenario ({_count(len(self.problems), 'problem')}):\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class Accounting(StrEnum):
    """How the controller counts capacity."""

    #: From the agents' observations (histograms of nodes by free GPUs).
    FREE_GPU = "free-gpu"
    #: Observations are not fed to the controller: every claiming pod costs a whole node.
    WHOLE_NODE = "whole-node"


class ActionKind(StrEnum):
    APPLY = "apply"
    DELETE = "delete"
    SCALE = "scale"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    #: `kubectl drain`: cordon, then evict every pod on the node through its
    #: PodDisruptionBudgets, retrying the refused evictions (`gpufleet.sim.emulated.disruption`).
    DRAIN = "drain"
    TAINT = "taint"
    UNTAINT = "untaint"
    FAIL_NODE = "failNode"
    RECOVER_NODE = "recoverNode"
    ADD_NODE = "addNode"
    REMOVE_NODE = "removeNode"
    KILL_AGENT = "killAgent"
    START_AGENT = "startAgent"
    REINSTALL_AGENT = "reinstallAgent"
    PARTITION = "partition"
    HEAL = "heal"
    ADD_FOREIGN_CLAIM = "addForeignClaim"
    #: Another tenant's (or a DaemonSet's) pod bound to a node, requesting CPU and memory.
    ADD_HOST_POD = "addHostPod"
    REMOVE_FOREIGN_CLAIM = "removeForeignClaim"
    DELETE_CLUSTER = "deleteCluster"
    LABEL_CLUSTER = "labelCluster"


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    interval_s: float = 5.0
    stale_after_s: float = 60.0
    expire_after_s: float = 300.0
    accounting: Accounting = Accounting.FREE_GPU
    #: A replica whose claiming pods stay Unschedulable this long is re-placed.
    stuck_after_s: float = 120.0


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node by name, or a pool's node by index, or (neither) every node of the pool."""

    node: str = ""
    pool: str = ""
    index: int | None = None

    def names(self, existing: Sequence[str]) -> list[str]:
        if self.node:
            return [self.node]
        if self.index is not None:
            return [f"{self.pool}-{self.index}"]
        return [n for n in existing if n.rpartition("-")[0] == self.pool]

    def __str__(self) -> str:
        if self.node:
            return self.node
        return f"{self.pool}[{self.index}]" if self.index is not None else f"pool {self.pool}"


@dataclass(frozen=True, slots=True)
class Action:
    """One timeline entry; which fields matter depends on `kind` (docs/scenarios.md)."""

    at_s: float
    kind: ActionKind
    path: str
    cluster: str = ""
    target: NodeRef | None = None
    deployment: str = ""
    replicas: int = 0
    manifest: Obj | None = None
    key: str = ""
    value: str = ""
    #: taint: the effect (default NoSchedule); untaint: "" removes the key whatever its effect.
    effect: str = "NoSchedule"
    devices: int = 1
    #: addForeignClaim: the one device it takes by name (a MIG partition); "" = first free.
    device: str = ""
    claim: str = ""
    #: addHostPod: the pod's CPU and memory requests (quantities).
    cpu: str = ""
    memory: str = ""
    #: addHostPod `daemonSet: true`: a DaemonSet owns the pod (the agent's shareable room).
    is_daemon: bool = False
    #: labelCluster: label -> new value, or None to remove the label.
    labels: Mapping[str, str | None] = field(default_factory=dict)

    def describe(self) -> str:
        k = self.kind
        if k is ActionKind.APPLY and self.manifest is not None:
            meta = self.manifest["metadata"]
            return f"apply {meta['namespace']}/{meta['name']}"
        if k in (ActionKind.DELETE,):
            return f"delete {self.deployment}"
        if k is ActionKind.SCALE:
            return f"scale {self.deployment} to {self.replicas}"
        where = self.cluster + (f"/{self.target}" if self.target is not None else "")
        if k in (ActionKind.TAINT, ActionKind.UNTAINT):
            return f"{k.value} {where} {self.key}"
        if k is ActionKind.ADD_FOREIGN_CLAIM:
            if self.device:
                return f"addForeignClaim {where} ({self.device})"
            return f"addForeignClaim {where} ({self.devices} devices)"
        if k is ActionKind.ADD_HOST_POD:
            owner = ", DaemonSet" if self.is_daemon else ""
            return f"addHostPod {where} (cpu {self.cpu or 0}, memory {self.memory or 0}{owner})"
        if k is ActionKind.REMOVE_FOREIGN_CLAIM:
            return f"removeForeignClaim {self.cluster} {self.claim or self.target}"
        if k is ActionKind.ADD_NODE:
            return f"addNode {self.cluster}/{self.target.pool if self.target else ''}"
        if k is ActionKind.LABEL_CLUSTER:
            changes = ", ".join(
                f"{key}-" if value is None else f"{key}={value}"
                for key, value in sorted(self.labels.items())
            )
            return f"labelCluster {self.cluster} {changes}"
        return f"{k.value} {where}"


@dataclass(frozen=True, slots=True)
class PlacementExpectation:
    count: int | None = None
    #: Replicas per cluster; a cluster not named must hold none when `is_exact_clusters`.
    clusters: Mapping[str, int] | None = None
    is_exact_clusters: bool = True


@dataclass(frozen=True, slots=True)
class ConditionExpectation:
    type: str = "ReplicasScheduled"
    status: str | None = None
    reason: str | None = None
    #: A substring the message must contain.
    message: str | None = None


class CheckMode(StrEnum):
    """When a check is evaluated and what makes it pass."""

    #: At one instant.
    AT = "at"
    #: At every instant from `at_s` to `until_s`: it must hold at each.
    ALWAYS = "always"
    #: At every instant after `at_s` up to `until_s`: it must hold at one of them.
    WITHIN = "within"


class HubVsActual(StrEnum):
    """How the hub's free GPUs compare with the ground truth (`hubFreeGPUs`)."""

    EQUAL = "actual"
    AT_MOST = "atMostActual"


@dataclass(frozen=True, slots=True)
class PodsExpectation:
    """Pods of a deployment on the workload clusters by state; None: not checked."""

    running: int | None = None
    #: Phase Pending (bound or not), not deleting; includes the unschedulable ones.
    pending: int | None = None
    #: Pending with `PodScheduled=False, reason Unschedulable`.
    unschedulable: int | None = None


@dataclass(frozen=True, slots=True)
class PodsScheduledExpectation:
    """The `ModelPodsScheduled` condition of a deployment's replicas."""

    status: str | None = None
    reason: str | None = None
    #: How many replicas have that condition; None: every replica (and at least one).
    count: int | None = None


@dataclass(frozen=True, slots=True)
class PoolExpectations:
    """A check's expectations of pools, each keyed by (cluster, pool)."""

    #: GPUs the cluster really has free: published, held by no claim.
    free_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: Free GPUs in the agent's last report on the hub (its histogram).
    observed_free_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    allocated_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    histogram: Mapping[tuple[str, str], Mapping[int, int]] = field(default_factory=dict)
    nodes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    pool_state: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: Free GPUs in the hub's accounting, or how they compare with the truth.
    hub_free_gpus: Mapping[tuple[str, str], int | HubVsActual] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Check:
    """What must hold at `at_s` (after the components of that instant ran, before actions),
    or over a window (`mode`)."""

    at_s: float
    path: str
    placements: Mapping[str, PlacementExpectation] = field(default_factory=dict)
    #: None: not checked; key "" is the fleet total.
    pending: Mapping[str, int] | None = None
    pods_running: Mapping[str, int] | None = None
    #: Per (cluster, pool): what the pool's GPUs, report and hub accounting must show.
    pools: PoolExpectations = field(default_factory=PoolExpectations)
    conditions: Mapping[str, ConditionExpectation] = field(default_factory=dict)
    pods: Mapping[str, PodsExpectation] = field(default_factory=dict)
    pods_scheduled: Mapping[str, PodsScheduledExpectation] = field(default_factory=dict)
    ready_replicas: Mapping[str, int] = field(default_factory=dict)
    #: The deployment's `status.updatedReplicas` (replicas of its current template revision).
    updated_replicas: Mapping[str, int] = field(default_factory=dict)
    #: At least this many of the deployment's pods Running (a rollout's floor).
    min_pods_running: Mapping[str, int] = field(default_factory=dict)
    mode: CheckMode = CheckMode.AT
    #: ALWAYS and WITHIN: the window's end.
    until_s: float = 0.0
    #: ALWAYS and WITHIN: evaluated at least this often in the window.
    every_s: float = 1.0

    def instants(self) -> list[float]:
        """The instants the check is evaluated at, besides the run's own in its window."""
        if self.mode is CheckMode.AT:
            return [self.at_s]
        start = self.at_s + (self.every_s if self.mode is CheckMode.WITHIN else 0.0)
        count = int((self.until_s - start) // self.every_s) + 1 if self.until_s >= start else 0
        return sorted({*(start + i * self.every_s for i in range(count)), self.until_s})

    def evaluations(self) -> float:
        """About how many instants `instants` holds, without making them."""
        if self.mode is CheckMode.AT:
            return 1.0
        return (self.until_s - self.at_s) / self.every_s + 2

    def covers(self, at_s: float) -> bool:
        """Whether the check is evaluated at `at_s`, an instant the run stops at."""
        if self.mode is CheckMode.AT:
            return at_s == self.at_s
        if self.mode is CheckMode.ALWAYS:
            return self.at_s <= at_s <= self.until_s
        return self.at_s < at_s <= self.until_s

    def window(self) -> str:
        if self.mode is CheckMode.ALWAYS:
            return f"always from {format_duration(self.at_s)} to {format_duration(self.until_s)}"
        if self.mode is CheckMode.WITHIN:
            within = format_duration(self.until_s - self.at_s)
            return f"within {within} after {format_duration(self.at_s)}"
        return f"at {format_duration(self.at_s)}"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    seed: int
    end_s: float
    fleet: FleetSpec
    controller: ControllerSettings
    #: ModelDeployments applied at time 0 (validated bodies, namespace filled in).
    manifests: tuple[Obj, ...]
    timeline: tuple[Action, ...]
    checks: tuple[Check, ...]
    #: How often metrics are sampled (0: automatic, about 240 samples per run).
    sample_interval_s: float = 0.0
    #: Where the scenario was read (a path, or `builtin:<name>`).
    source: str = ""

    def deployment_names(self) -> list[str]:
        """`namespace/name` of every deployment the scenario applies, in order."""
        out: list[str] = []
        bodies = [*self.manifests, *(a.manifest for a in self.timeline if a.manifest)]
        for body in bodies:
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            if key not in out:
                out.append(key)
        return out


# --- durations ----------------------------------------------------------------------------

#: The longest duration any field may hold: a scenario is a story of hours or days.
MAX_DURATION_S: Final = 30 * 86400.0
#: The shortest period of anything that repeats (ticks, reports, steps, samples, scans).
MIN_PERIOD_S: Final = 0.001
#: The most metrics samples a run may take, and the most periodic steps (cluster ticks, agent
#: reports, controller steps, check evaluations) its settings may imply: bounds on memory and
#: time, far above what a readable scenario needs.
MAX_SAMPLES: Final = 100_000
MAX_STEPS: Final = 10_000_000


def parse_duration(value: object) -> float:
    """Seconds from a number or a duration string (`90s`, `30m`, `1h30m`); ValueError if not,
    or if it is over `MAX_DURATION_S`."""
    seconds = _seconds(value)
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(f"must be at most 30d (got {_short(value)})")
    return seconds


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a duration (seconds, or like 30s, 5m, 2h)")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("must not be negative")
        return float(value) if value <= MAX_DURATION_S else math.inf
    if isinstance(value, str) and value.strip()[:1].isdigit():
        with contextlib.suppress(ValueError):  # the CLI's grammar (core/durations.py)
            return durations.parse_duration(value)
    raise ValueError(f"{_short(value)} is not a duration (seconds, or like 30s, 5m, 2h, 1h30m)")


def format_duration(seconds: float) -> str:
    """`1h02m05s`-style; whole seconds, `0s` for zero."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{sec:02d}s"
    if m:
        return f"{m}m{sec:02d}s"
    return f"{sec}s"
