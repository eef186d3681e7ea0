"""Running a scenario: the simulated fleet, the real hub controller, the timeline, the checks,
and metrics over time.

`run_scenario(scenario, accounting=...)` builds a `Fleet` from the scenario with the real
`gpufleet.controller.loop.Controller` on its hub, applies the scenario's manifests at time 0,
and then walks simulated time. At each instant that matters (a timeline action, a check, a
metrics sample, the end) it first runs the fleet up to that instant (every emulated component,
agent and controller step due by then), then evaluates the checks of that instant, then takes
the sample, then applies the actions of that instant. So a check at the same time as an action
sees the state before the action.

Accounting modes:

- `free-gpu`: the controller reads the agents' observations (PoolObservation,
  ReplicaObservation) and owns each cluster's `Ready` condition (`manages_ready`).
- `whole-node`: the controller has no switch for it, so the mode is made at the edge: the
  controller reads the hub through `ObservationBlindStore`, a view in which observations do not
  exist. Every pool then has no observation and the core uses whole-node accounting (Modelplane
  HEAD). With no reports the controller would call every cluster not Ready, so in this mode the
  simulator plays the platform team and sets `Ready=True` (reason `PlatformReady`) itself, and
  the controller does not manage `Ready`. The agents still run: they materialize replicas and
  push observations, which the controller never sees.

Hub garbage collection: deleting a ModelDeployment (the `delete` action) deletes the
ModelReplicas it owns at once, as the API server's garbage collector would shortly after.

Refusals are taken from the controller's own decisions (`StepResult.decision`): whenever a
deployment's shortfall, condition reason or top reason changes, one `Refusal` is recorded with
the condition's reason and message and the core's top reason with its numbers.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import gc
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.loop import Controller, StepResult
from gpufleet.core import labels
from gpufleet.core.decision import Diagnosis, Reason
from gpufleet.sim.cluster import WorkloadCluster
from gpufleet.sim.engine import EPOCH
from gpufleet.sim.fleet import Fleet, FleetSpec
from gpufleet.sim.samples import Samples
from gpufleet.sim.scenario import (
    Accounting,
    Action,
    ActionKind,
    Check,
    Scenario,
    format_duration,
)
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    NODE,
    POD,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
    Change,
    ChangeType,
    Kind,
    NotFound,
    Obj,
    Store,
)

#: About this many samples per run when the scenario does not set `sampleInterval`.
DEFAULT_SAMPLES = 240
GATEWAY_ADDRESS = "{cluster}.gateway.sim"
_HIDDEN = (POOL_OBSERVATION, REPLICA_OBSERVATION)

PoolKey = tuple[str, str]


# --- the whole-node edge ------------------------------------------------------------------


class ObservationBlindStore(ForwardingStore):
    """The hub as a controller without observations sees it: no Pool/ReplicaObservations."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        return None if kind in _HIDDEN else self.inner.get(kind, name, namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        return [] if kind in _HIDDEN else self.inner.list(kind, namespace, label_selector)

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> Sequence[Mapping[str, Any]]:
        return [] if kind in _HIDDEN else self.inner.view(kind, namespace, label_selector)

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        found, cursor = self.inner.changes(cursor, kinds)
        return [c for c in found if c.kind not in _HIDDEN], cursor


# --- results ------------------------------------------------------------------------------


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


# --- the controller adapter ---------------------------------------------------------------


class _ObservedTimes:
    """The observation times the hub's objects carry (the clusters' published agent and pool
    observations, and the observations' own), kept sorted and brought up to date from the
    hub's change feed: a settled step asks for the next one to age, and most steps change a
    few of the fleet's ~1,000 observations."""

    _KINDS: Final = (INFERENCE_CLUSTER, POOL_OBSERVATION, REPLICA_OBSERVATION)

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, hub: MemoryStore | None) -> None:
        """Start over with `hub` (the hub step is handed its fleet's hub after it is made)."""
        self._hub = hub
        self._cursor = 0
        #: Per object (kind, namespace, name), the times it carries; how many carry each
        #: time, and the distinct times in order.
        self._of: dict[tuple[str, str, str], tuple[datetime, ...]] = {}
        self._count: Counter[datetime] = Counter()
        self._sorted: list[datetime] = []
        self._parsed: dict[str, datetime] = {}

    def first_after(self, hub: MemoryStore, when: datetime) -> datetime | None:
        """The earliest time on `hub` later than `when`."""
        if hub is not self._hub:
            self._reset(hub)
        self._catch_up(hub)
        at = bisect.bisect_right(self._sorted, when)
        return self._sorted[at] if at < len(self._sorted) else None

    def _catch_up(self, hub: MemoryStore) -> None:
        changes = hub.changes_after(self._cursor)
        self._cursor = hub.revision
        for c in changes:
            if c.kind not in self._KINDS:
                continue
            meta = c.obj["metadata"]
            key = (c.kind.kind, meta.get("namespace") or "", meta["name"])
            for at in self._of.pop(key, ()):
                self._count[at] -= 1
                if not self._count[at]:
                    del self._count[at]
                    del self._sorted[bisect.bisect_left(self._sorted, at)]
            if c.type is ChangeType.DELETED:
                continue
            times = self._times_of(c.kind, c.obj)
            self._of[key] = times
            for at in times:
                if not self._count[at]:
                    bisect.insort(self._sorted, at)
                self._count[at] += 1
        if len(self._parsed) > 4 * len(self._count) + 1024:
            self._parsed.clear()

    def _times_of(self, kind: Kind, obj: Mapping[str, Any]) -> tuple[datetime, ...]:
        status = obj.get("status") or {}
        if kind == INFERENCE_CLUSTER:
            texts = [(status.get("agent") or {}).get("observedAt")]
            for pool in status.get("gpuPools") or []:
                texts.append((pool.get("observation") or {}).get("observedAt"))
        else:
            texts = [status.get("observedAt")]
        times: list[datetime] = []
        for text in texts:
            if not text or not isinstance(text, str):
                continue
            at = self._parsed.get(text)
            if at is None:
                try:
                    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
                except ValueError:
                    continue  # not a time: nothing ages (the controller rejects the report)
                self._parsed[text] = at
            times.append(at)
        return tuple(times)


class _HubStep:
    """What the fleet calls: the controller's step, plus refusal bookkeeping.

    Quiet steps are skipped: when the controller's last step wrote nothing, had no errors and
    no assumed writes in force, the hub has not changed since, and no observation crosses its
    stale or expire age before `now`, a step would read the same objects and decide the same
    thing (the controller is a function of the hub and `now`, and `now` matters only through
    those ages).
    """

    def __init__(self, hub: MemoryStore, stale_after_s: float, expire_after_s: float) -> None:
        self.hub = hub
        self.ages_s = (stale_after_s, expire_after_s)
        self.controller: Controller | None = None
        self.refusals: list[Refusal] = []
        self.steps = 0
        self.skipped = 0
        self._settled_revision = -1
        self._due: datetime | None = None
        self.errors: list[str] = []
        #: (time, line): what the controller did and the actions of the timeline.
        self.log: list[tuple[float, str]] = []
        self._last: dict[str, tuple[object, ...]] = {}
        #: The last decision `_record` went through (see there).
        self._recorded: object = None
        #: The observation times on the hub, for `_next_age_crossing`.
        self._times = _ObservedTimes()

    def step(self, now: datetime) -> None:
        if self.controller is None:
            return
        if self.hub.revision == self._settled_revision and (self._due is None or now < self._due):
            self.skipped += 1
            return
        before = self.hub.revision
        result = self.controller.step(now)
        self.steps += 1
        is_settled = self.hub.revision == before and not result.errors and result.assumed == 0
        self._settled_revision = before if is_settled else -1
        self._due = self._next_age_crossing(now) if is_settled else None
        if result.errors and len(self.errors) < 100:
            self.errors.extend(f"{format_time(now)} {e}" for e in result.errors)
        self._record(result, now)

    def _next_age_crossing(self, now: datetime) -> datetime | None:
        """The earliest time after `now` an observation on the hub turns Stale or Expired:
        for each age, the earliest observation time more than the age (and one second:
        ages are compared with `>`) before `now`, plus that."""
        due: datetime | None = None
        for age_s in self.ages_s:
            after = timedelta(seconds=age_s + 1)
            at = self._times.first_after(self.hub, now - after)
            if at is not None and (due is None or at + after < due):
                due = at + after
        return due

    def _record(self, result: StepResult, now: datetime) -> None:
        # A quiet step hands out the last full step's decision again: it creates and drops
        # nothing (`Controller._quiet_record`), and every signature below is the one recorded
        # for it, so going through it again would add nothing.
        if result.decision is None or (result.is_quiet and result.decision is self._recorded):
            return
        self._recorded = result.decision
        at_s = (now - EPOCH).total_seconds()
        for decided in result.decision.deployments:
            key = f"{decided.key.namespace}/{decided.key.name}"
            for placed_replica in decided.created:
                self.log.append((at_s, f"placed {key} on {placed_replica.cluster}"))
            for dropped in decided.dropped:
                self.log.append(
                    (at_s, f"dropped {key} from {dropped.cluster} ({dropped.reason.code.value})")
                )
            if decided.shortfall <= 0:
                self._last.pop(key, None)
                continue
            placed = decided.desired - decided.shortfall
            top = _top_reason(decided.diagnosis) if decided.diagnosis else None
            reason = decided.condition.reason
            if decided.condition.status == "True" and top is not None:
                reason = top[0].code.value  # partial shortfall: the condition stays True
            signature = (decided.desired, placed, reason, top[0] if top else None)
            if self._last.get(key) == signature:
                continue
            self._last[key] = signature
            self.log.append(
                (at_s, f"refused {key}: placed {placed} of {decided.desired}, {reason}")
            )
            self.refusals.append(
                Refusal(
                    at_s=at_s,
                    deployment=key,
                    desired=decided.desired,
                    placed=placed,
                    reason=reason,
                    message=decided.condition.message,
                    where=top[1] if top else "",
                    detail_code=top[0].code.value if top else "",
                    detail=top[0].message if top else "",
                    numbers=dict(top[0].details) if top else {},
                )
            )


def _top_reason(diagnosis: Diagnosis) -> tuple[Reason, str] | None:
    """The reason to show first (as `gpufleet explain` picks it), with where it was found."""
    if diagnosis.reasons:
        return diagnosis.reasons[0], ""
    code = diagnosis.dominant_code()
    for verdict in diagnosis.clusters:
        if verdict.fits:
            continue
        for reason in verdict.reasons:
            if reason.code is not code:
                continue
            for pool in verdict.pools:
                for pool_reason in pool.reasons:
                    if pool_reason.code is code:
                        return pool_reason, f"cluster {verdict.cluster}, pool {pool.pool}"
            return reason, f"cluster {verdict.cluster}"
    return None


# --- reading the fleet --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PoolTruth:
    nodes: int
    total: int
    allocated: int
    #: {free devices on a node: nodes}
    histogram: Mapping[int, int]


def pool_truth(cluster: WorkloadCluster) -> dict[str, _PoolTruth]:
    """Per pool, what the cluster really has: nodes, published devices, taken, histogram."""
    published = cluster.store.published()
    taken = cluster.store.taken()
    per_pool: dict[str, list[tuple[int, int]]] = {p: [] for p in cluster.pools}
    for node in cluster.store.peek(NODE):
        pool = (node["metadata"].get("labels") or {}).get(labels.POOL, "")
        if pool not in per_pool:
            continue
        devices = published.get(node["metadata"]["name"], [])
        used = sum(1 for d in devices if d.key in taken)
        per_pool[pool].append((len(devices), used))
    out: dict[str, _PoolTruth] = {}
    for pool, nodes in per_pool.items():
        histogram: Counter[int] = Counter(total - used for total, used in nodes)
        out[pool] = _PoolTruth(
            nodes=len(nodes),
            total=sum(t for t, _ in nodes),
            allocated=sum(u for _, u in nodes),
            histogram=dict(histogram),
        )
    return out


def observed_histogram(hub: Store, cluster: str, pool: str) -> dict[int, int] | None:
    """{free devices: nodes} of the agent's last PoolObservation; None when there is none."""
    obj = hub.get(POOL_OBSERVATION, pool, f"gpufleet-cluster-{cluster}")
    status = (obj or {}).get("status")
    if not status:
        return None
    out: Counter[int] = Counter()
    for bucket in status.get("freeDevices") or []:
        out[sum(int(v) for v in (bucket.get("free") or {}).values())] += int(bucket["nodes"])
    return dict(out)


def _deployment_key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace') or 'default'}/{obj['metadata']['name']}"


def _replicas_by_deployment(hub: Store) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for r in hub.view(MODEL_REPLICA):
        if r["metadata"].get("deletionTimestamp"):
            continue
        ns = r["metadata"].get("namespace") or "default"
        dep = (r.get("spec") or {}).get("deploymentName") or r["metadata"]["labels"].get(
            labels.DEPLOYMENT, ""
        )
        cluster = (r.get("spec") or {}).get("clusterName", "")
        out.setdefault(f"{ns}/{dep}", Counter())[cluster] += 1
    return out


def _running_by_deployment(fleet: Fleet) -> Counter[str]:
    out: Counter[str] = Counter()
    for cluster in fleet.clusters.values():
        for pod in cluster.store.peek(POD):
            meta = pod["metadata"]
            dep = (meta.get("labels") or {}).get(labels.DEPLOYMENT)
            if dep is None or meta.get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") == "Running":
                out[f"{meta['namespace']}/{dep}"] += 1
    return out


class _State:
    """One consistent read of the fleet at an instant, computed lazily and cached."""

    def __init__(
        self, fleet: Fleet, truths: dict[str, tuple[int, dict[str, _PoolTruth]]] | None = None
    ) -> None:
        self.fleet = fleet
        self._deployments: dict[str, Obj] | None = None
        self._replicas: dict[str, Counter[str]] | None = None
        self._running: Counter[str] | None = None
        self._truth: dict[str, dict[str, _PoolTruth]] = {}
        #: Each cluster's truth by its store's revision, shared by the instants of one run:
        #: a cluster that did not change since the last sample is not counted again.
        self._truths = truths if truths is not None else {}

    @property
    def deployments(self) -> dict[str, Obj]:
        if self._deployments is None:
            self._deployments = {
                _deployment_key(d): d for d in self.fleet.hub.view(MODEL_DEPLOYMENT)
            }
        return self._deployments

    @property
    def replicas(self) -> dict[str, Counter[str]]:
        if self._replicas is None:
            self._replicas = _replicas_by_deployment(self.fleet.hub)
        return self._replicas

    @property
    def running(self) -> Counter[str]:
        if self._running is None:
            self._running = _running_by_deployment(self.fleet)
        return self._running

    def truth(self, cluster: str) -> dict[str, _PoolTruth]:
        if cluster not in self._truth:
            workload = self.fleet.clusters[cluster]
            known = self._truths.get(cluster)
            if known is None or known[0] != workload.store.revision:
                known = (workload.store.revision, pool_truth(workload))
                self._truths[cluster] = known
            self._truth[cluster] = known[1]
        return self._truth[cluster]

    def desired(self, key: str) -> int:
        d = self.deployments.get(key)
        return int(d["spec"].get("replicas", 1)) if d is not None else 0

    def placed(self, key: str) -> int:
        return sum(self.replicas.get(key, Counter()).values())

    def pending(self, key: str) -> int:
        return max(0, self.desired(key) - self.placed(key))

    def pool_state(self, cluster: str, pool: str) -> str:
        obj = self.fleet.hub.get(INFERENCE_CLUSTER, cluster)
        for entry in ((obj or {}).get("status") or {}).get("gpuPools") or []:
            if entry.get("name") == pool:
                return str((entry.get("observation") or {}).get("state") or "None")
        return "None"

    def condition(self, key: str, type_: str) -> Obj | None:
        d = self.deployments.get(key)
        for c in ((d or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return dict(c)
        return None


# --- checks -------------------------------------------------------------------------------


def evaluate(check: Check, state: _State) -> list[CheckFailure]:
    """Every way `check` does not hold in `state`."""
    out: list[CheckFailure] = []

    def fail(what: str, expected: object, got: object) -> None:
        out.append(CheckFailure(check.at_s, check.path, what, expected, got))

    for dep, want in sorted(check.placements.items()):
        got_clusters = dict(state.replicas.get(dep, Counter()))
        got = sum(got_clusters.values())
        if want.count is not None and got != want.count:
            fail(f"placements of {dep}", want.count, f"{got} {_clusters_text(got_clusters)}")
        if want.clusters is not None and got_clusters != dict(want.clusters):
            fail(f"placements of {dep} by cluster", dict(want.clusters), got_clusters)
    if check.pending is not None:
        for dep, want_n in sorted(check.pending.items()):
            if dep == "":
                got_n = sum(state.pending(d) for d in state.deployments)
                label = "pending replicas (fleet)"
            else:
                got_n, label = state.pending(dep), f"pending replicas of {dep}"
            if got_n != want_n:
                fail(label, want_n, got_n)
    if check.pods_running is not None:
        for dep, want_n in sorted(check.pods_running.items()):
            got_n = sum(state.running.values()) if dep == "" else state.running.get(dep, 0)
            if got_n != want_n:
                fail("running pods" + (f" of {dep}" if dep else " (fleet)"), want_n, got_n)
    for (c, p), want_n in sorted(check.free_gpus.items()):
        truth = state.truth(c)[p]
        got_n = truth.total - truth.allocated
        if got_n != want_n:
            fail(f"free GPUs in {c}/{p} (actual)", want_n, got_n)
    for (c, p), want_n in sorted(check.allocated_gpus.items()):
        got_n = state.truth(c)[p].allocated
        if got_n != want_n:
            fail(f"allocated GPUs in {c}/{p} (actual)", want_n, got_n)
    for (c, p), want_n in sorted(check.observed_free_gpus.items()):
        hist = observed_histogram(state.fleet.hub, c, p)
        got_obs = None if hist is None else sum(k * v for k, v in hist.items())
        if got_obs != want_n:
            fail(f"free GPUs in {c}/{p} (agent-observed)", want_n, got_obs)
    for (c, p), want_h in sorted(check.histogram.items()):
        got_h = observed_histogram(state.fleet.hub, c, p)
        if got_h != dict(want_h):
            fail(f"observed histogram of {c}/{p} {{free: nodes}}", dict(want_h), got_h)
    for (c, p), want_n in sorted(check.nodes.items()):
        got_n = state.truth(c)[p].nodes
        if got_n != want_n:
            fail(f"nodes in {c}/{p}", want_n, got_n)
    for (c, p), want_s in sorted(check.pool_state.items()):
        got_s = state.pool_state(c, p)
        if got_s != want_s:
            fail(f"observation state of {c}/{p}", want_s, got_s)
    for dep, want_c in sorted(check.conditions.items()):
        got_c = state.condition(dep, want_c.type)
        if got_c is None:
            fail(f"{want_c.type} of {dep}", _condition_text(want_c), "no such condition")
            continue
        is_ok = (
            (want_c.status is None or got_c.get("status") == want_c.status)
            and (want_c.reason is None or got_c.get("reason") == want_c.reason)
            and (want_c.message is None or want_c.message in str(got_c.get("message", "")))
        )
        if not is_ok:
            got_text = f"{got_c.get('status')}/{got_c.get('reason')}: {got_c.get('message', '')}"
            fail(f"{want_c.type} of {dep}", _condition_text(want_c), got_text)
    return out


def _clusters_text(clusters: Mapping[str, int]) -> str:
    if not clusters:
        return "(none)"
    return "(" + ", ".join(f"{c}: {n}" for c, n in sorted(clusters.items())) + ")"


def _condition_text(want: Any) -> str:
    parts = [
        f"status={want.status}" if want.status else "",
        f"reason={want.reason}" if want.reason else "",
        f"message contains {want.message!r}" if want.message else "",
    ]
    return " ".join(p for p in parts if p) or "present"


# --- actions ------------------------------------------------------------------------------


def apply_deployment(hub: Store, manifest: Obj) -> None:
    """`kubectl apply` of a ModelDeployment: create, or replace its labels and spec."""
    meta = manifest["metadata"]
    current = hub.get(MODEL_DEPLOYMENT, meta["name"], meta["namespace"])
    if current is None:
        hub.create(manifest)
        return
    current["metadata"]["labels"] = dict(meta.get("labels") or {})
    current["spec"] = manifest["spec"]
    hub.update(current)


def delete_deployment(hub: Store, key: str) -> None:
    """Delete a deployment and (as the garbage collector would) the replicas it owns."""
    namespace, _, name = key.partition("/")
    current = hub.get(MODEL_DEPLOYMENT, name, namespace)
    if current is None:
        return
    hub.delete(MODEL_DEPLOYMENT, name, namespace)
    uid = current["metadata"].get("uid")
    owned: list[str] = []
    for r in hub.view(MODEL_REPLICA, namespace):  # read-only: nothing copied to be deleted
        meta = r["metadata"]
        refs = meta.get("ownerReferences")
        if refs:
            is_owned = any(o.get("uid") == uid for o in refs)
        else:
            is_owned = (r.get("spec") or {}).get("deploymentName") == name
        if is_owned:
            owned.append(meta["name"])
    for replica in owned:
        with contextlib.suppress(NotFound):
            hub.delete(MODEL_REPLICA, replica, namespace)


def scale_deployment(hub: Store, key: str, replicas: int) -> None:
    namespace, _, name = key.partition("/")
    current = hub.get(MODEL_DEPLOYMENT, name, namespace)
    if current is None:
        raise ActionFailed(f"deployment {key} does not exist")
    current["spec"]["replicas"] = replicas
    hub.update(current)


class ActionFailed(RuntimeError):
    """A timeline action cannot be carried out at its time (e.g. no such node)."""


def _nodes(cluster: WorkloadCluster, action: Action) -> list[str]:
    assert action.target is not None
    existing = [n["metadata"]["name"] for n in cluster.nodes()]
    names = action.target.names(existing)
    missing = [n for n in names if n not in existing]
    if missing or not names:
        raise ActionFailed(
            f"{action.path}: cluster {cluster.name} has no node {', '.join(missing) or action.target}"
            f" (nodes: {', '.join(existing)})"
        )
    return names


def _cluster_taint(hub: Store, cluster: str, action: Action, present: bool) -> None:
    obj = hub.get(INFERENCE_CLUSTER, cluster)
    if obj is None:
        raise ActionFailed(f"{action.path}: no InferenceCluster {cluster}")
    taints = [
        t
        for t in obj["spec"].get("taints") or []
        if not (t.get("key") == action.key and t.get("effect") == action.effect)
    ]
    if present:
        taint = {"key": action.key, "effect": action.effect}
        if action.value:
            taint["value"] = action.value
        taints.append(taint)
    if taints:
        obj["spec"]["taints"] = taints
    else:
        obj["spec"].pop("taints", None)
    hub.update(obj)


def perform(fleet: Fleet, action: Action) -> None:
    """Carry out one timeline action on the fleet."""
    k = action.kind
    hub = fleet.hub
    if k is ActionKind.APPLY:
        assert action.manifest is not None
        apply_deployment(hub, action.manifest)
        return
    if k is ActionKind.DELETE:
        delete_deployment(hub, action.deployment)
        return
    if k is ActionKind.SCALE:
        scale_deployment(hub, action.deployment, action.replicas)
        return
    name = action.cluster
    if k is ActionKind.KILL_AGENT:
        fleet.crash_agent(name)
        return
    if k is ActionKind.START_AGENT:
        if fleet.agents[name].agent is None:
            fleet.restart_agent(name)
        return
    if k is ActionKind.PARTITION:
        fleet.partition(name)
        return
    if k is ActionKind.HEAL:
        fleet.heal(name)
        return
    cluster = fleet.clusters[name]
    if k is ActionKind.ADD_NODE:
        assert action.target is not None
        cluster.add_node(action.target.pool)
        return
    if k in (ActionKind.TAINT, ActionKind.UNTAINT) and action.target is None:
        _cluster_taint(hub, name, action, k is ActionKind.TAINT)
        return
    if k is ActionKind.REMOVE_FOREIGN_CLAIM:
        _remove_foreign(cluster, action)
        return
    for node in _nodes(cluster, action):
        if k is ActionKind.CORDON:
            cluster.cordon(node)
        elif k is ActionKind.UNCORDON:
            cluster.uncordon(node)
        elif k is ActionKind.TAINT:
            cluster.taint(node, action.key, action.effect, action.value)
        elif k is ActionKind.UNTAINT:
            cluster.untaint(node, action.key)
        elif k is ActionKind.FAIL_NODE:
            cluster.fail_node(node)
        elif k is ActionKind.RECOVER_NODE:
            cluster.recover_node(node)
        elif k is ActionKind.REMOVE_NODE:
            cluster.remove_node(node)
        elif k is ActionKind.ADD_FOREIGN_CLAIM:
            try:
                cluster.add_foreign_claim(node, action.devices)
            except ValueError as error:
                raise ActionFailed(f"{action.path}: {error}") from None


def _remove_foreign(cluster: WorkloadCluster, action: Action) -> None:
    foreign = [
        c
        for c in cluster.store.list(RESOURCE_CLAIM, "other-tenant")
        if c["metadata"]["name"].startswith("foreign-")
    ]
    if action.claim:
        names = [action.claim]
    else:
        nodes = set(_nodes(cluster, action))
        names = [
            c["metadata"]["name"]
            for c in foreign
            if any(
                r.get("pool") in nodes
                for r in ((c.get("status") or {}).get("allocation") or {})
                .get("devices", {})
                .get("results", [])
            )
        ]
    for claim in names:
        try:
            cluster.remove_foreign_claim(claim)
        except NotFound:
            raise ActionFailed(f"{action.path}: no foreign claim {claim}") from None


# --- the run ------------------------------------------------------------------------------


def controller_config(scenario: Scenario, accounting: Accounting) -> ControllerConfig:
    s = scenario.controller
    return ControllerConfig(
        stale_after_s=s.stale_after_s,
        expire_after_s=s.expire_after_s,
        manages_ready=accounting is Accounting.FREE_GPU,
        default_gateway_address=GATEWAY_ADDRESS,
        node_choice={c.name: c.behaviour.node_choice for c in scenario.fleet.clusters},
    )


def build_fleet(scenario: Scenario, accounting: Accounting) -> tuple[Fleet, _HubStep]:
    spec = FleetSpec(
        scenario.fleet.clusters,
        controller_interval_s=scenario.controller.interval_s,
        agent=scenario.fleet.agent,
    )
    hub_step = _HubStep(
        MemoryStore(), scenario.controller.stale_after_s, scenario.controller.expire_after_s
    )
    fleet = Fleet(spec, controller=hub_step, seed=scenario.seed)
    hub_step.hub = fleet.hub
    view: Store = fleet.hub
    if accounting is Accounting.WHOLE_NODE:
        view = ObservationBlindStore(fleet.hub)
        for cluster in scenario.fleet.clusters:
            condition = {
                "type": "Ready",
                "status": "True",
                "reason": "PlatformReady",
                "message": "set by the simulator (whole-node accounting: no agent reports)",
                "lastTransitionTime": format_time(fleet.now),
            }
            fleet.hub.patch_status(
                INFERENCE_CLUSTER, cluster.name, None, {"conditions": [condition]}
            )
    hub_step.controller = Controller(
        view, controller_config(scenario, accounting), identity="gpufleet-controller-sim"
    )
    for manifest in scenario.manifests:
        apply_deployment(fleet.hub, manifest)
    return fleet, hub_step


def sample_interval(scenario: Scenario) -> float:
    if scenario.sample_interval_s > 0:
        return scenario.sample_interval_s
    step = max(1.0, scenario.end_s / DEFAULT_SAMPLES)
    return float(max(1, round(step)))


def _sample(series: Series, state: _State, at_s: float, names: Sequence[str]) -> None:
    series.times_s.append(at_s)
    for c in sorted(state.fleet.clusters):
        for p, truth in sorted(state.truth(c).items()):
            series.pool_allocated.setdefault((c, p), []).append(truth.allocated)
            series.pool_free.setdefault((c, p), []).append(truth.total - truth.allocated)
            series.pool_nodes.setdefault((c, p), []).append(truth.nodes)
    keys = list(names) + [k for k in sorted(state.deployments) if k not in names]
    for key in keys:
        for store, value in (
            (series.desired, state.desired(key)),
            (series.placed, state.placed(key)),
            (series.running, state.running.get(key, 0)),
        ):
            column = store.setdefault(key, [0] * (len(series.times_s) - 1))
            column.append(value)
    series.pending.append(sum(state.pending(k) for k in state.deployments))


def timeline_runner(fleet: Fleet, scenario: Scenario) -> Callable[[float], None]:
    """A function running `fleet` to a time (seconds after EPOCH), performing the actions of
    the scenario's timeline due on the way, in order: the run without checks or samples, for
    benchmarks and profiles that stop and look in between."""
    actions = sorted(scenario.timeline, key=lambda a: a.at_s)

    def run_to(until_s: float) -> None:
        while actions and actions[0].at_s <= until_s:
            action = actions.pop(0)
            fleet.run_until(EPOCH + timedelta(seconds=action.at_s))
            perform(fleet, action)
        fleet.run_until(EPOCH + timedelta(seconds=until_s))

    return run_to


#: The collector's thresholds while a scenario runs (CPython's default is (700, 10, 10)).
GC_THRESHOLDS = (50_000, 20, 100)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect garbage less often while a scenario runs, and restore the thresholds after.

    A fleet is millions of long-lived objects (every store's dicts), and CPython's
    generational collector walks them again and again as the run allocates: a quarter of a
    day's run went to it. The simulator makes few reference cycles, so collecting every
    50,000 allocations instead of every 700 costs little memory."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _run_scenario(
    scenario: Scenario,
    accounting: Accounting | str | None = None,
    *,
    progress: Callable[[float], None] | None = None,
    measure_memory: bool = False,
) -> RunResult:
    mode = Accounting(accounting) if accounting is not None else scenario.controller.accounting
    started = time.perf_counter()
    if measure_memory:
        tracemalloc.start()
    fleet, hub_step = build_fleet(scenario, mode)
    interval = sample_interval(scenario)
    sample_times = {
        min(scenario.end_s, i * interval) for i in range(int(scenario.end_s // interval) + 1)
    }
    sample_times.add(scenario.end_s)
    instants = sorted(
        {a.at_s for a in scenario.timeline} | {c.at_s for c in scenario.checks} | sample_times
    )
    actions: dict[float, list[Action]] = {}
    for a in scenario.timeline:
        actions.setdefault(a.at_s, []).append(a)
    checks: dict[float, list[Check]] = {}
    for c in scenario.checks:
        checks.setdefault(c.at_s, []).append(c)

    series = Series()
    samples = Samples()
    truths: dict[str, tuple[int, dict[str, _PoolTruth]]] = {}
    failures: list[CheckFailure] = []
    names = scenario.deployment_names()
    for at_s in instants:
        fleet.run_until(EPOCH + timedelta(seconds=at_s))
        state = _State(fleet, truths)
        for check in checks.get(at_s, []):
            failures.extend(evaluate(check, state))
        if at_s in sample_times:
            _sample(series, state, at_s, names)
            samples.take(fleet, at_s)
        for action in actions.get(at_s, []):
            hub_step.log.append((at_s, action.describe()))
            try:
                perform(fleet, action)
            except ActionFailed as error:
                failures.append(
                    CheckFailure(at_s, action.path, action.describe(), "to succeed", str(error))
                )
        if progress is not None:
            progress(at_s)

    state = _State(fleet)
    deployments = [
        DeploymentSummary(
            name=key,
            desired=state.desired(key),
            placed=state.placed(key),
            running=state.running.get(key, 0),
            clusters=dict(state.replicas.get(key, Counter())),
            condition_reason=str(
                (state.condition(key, "ReplicasScheduled") or {}).get("reason", "")
            ),
            condition_message=str(
                (state.condition(key, "ReplicasScheduled") or {}).get("message", "")
            ),
        )
        for key in names
        if key in state.deployments
    ]
    pools = []
    for cluster_name in sorted(fleet.clusters):
        for pool_name, truth in sorted(state.truth(cluster_name).items()):
            pools.append(
                PoolSummary(
                    cluster=cluster_name,
                    pool=pool_name,
                    nodes=truth.nodes,
                    gpus_total=truth.total,
                    gpus_allocated=truth.allocated,
                    gpus_free=truth.total - truth.allocated,
                    histogram=truth.histogram,
                    observed_histogram=observed_histogram(fleet.hub, cluster_name, pool_name),
                )
            )
    peak = None
    if measure_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return RunResult(
        scenario=scenario,
        accounting=mode,
        checks_run=len(scenario.checks),
        failures=failures,
        refusals=hub_step.refusals,
        series=series,
        deployments=deployments,
        pools=pools,
        wall_s=time.perf_counter() - started,
        events_run=fleet.loop.events_run,
        controller_steps=hub_step.steps,
        controller_errors=hub_step.errors,
        log=hub_step.log,
        peak_memory_bytes=peak,
        samples=samples,
    )


def run_scenario(
    scenario: Scenario,
    accounting: Accounting | str | None = None,
    *,
    progress: Callable[[float], None] | None = None,
    measure_memory: bool = False,
) -> RunResult:
    """Run `scenario` to its end; `accounting` overrides the scenario's controller setting."""
    with _fewer_collections():
        return _run_scenario(scenario, accounting, progress=progress, measure_memory=measure_memory)
