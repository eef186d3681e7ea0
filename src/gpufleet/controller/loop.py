"""`Controller`: the hub's reconcile step, `step(now) -> StepResult`. Thin Store I/O only.

One step, in this order (docs/controller.md):

1. Read everything through the `Store` port: classes, clusters, deployments, replicas and the
   agents' observations; the assume ledger overlays the controller's own recent writes.
2. Trust: per cluster, judge its agent's reports by lease epoch (status.py); write a
   `StaleAgentReport` event for each ignored report (once per situation).
3. Publish each InferenceCluster's status (`gpuPools`, `agent`, `Ready`, `gateway`).
   A *quiet* step stops here, with the last full step's decision: when that step could be
   repeated and nothing changed since but its own status writes and heartbeats, the rest
   would decide and write the same (`Controller._is_quiet`, docs/controller.md).
4. Publish each ModelReplica's status (`ModelPodsScheduled`, `observedGeneration`, `pools`).
5. Schedule the whole fleet once: build the core `Snapshot` from the statuses just computed,
   call `schedule(snapshot, now)` once, and apply the decision: delete dropped replicas,
   update re-stamped ones, create new ones, write each deployment's status and events.

Every write compares first (nothing is written when nothing changed), carries the
resourceVersion it read, and on `Conflict` re-reads and recomputes, at most
`max_conflict_retries` times. A write that still fails is an error in the `StepResult` (and the
log); the next step recomputes everything from the store and tries again. A deployment whose
replica writes failed gets no status write that step, so its status never claims what was not
applied. Scheduling is skipped entirely (fail closed) when any class, cluster or replica
cannot be read: a partial view could delete replicas or double-book devices.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import logging
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, Protocol, Self, TypeVar, cast

from gpufleet.api import (
    FieldError,
    InferenceClass,
    InferenceCluster,
    ModelDeployment,
    ModelReplica,
    ValidationFailed,
    cluster_from_manifest,
    deployment_from_manifest,
    parse_object,
    replica_from_manifest,
    validate,
)
from gpufleet.cel import CelCompileError
from gpufleet.controller import replicas as replica_docs
from gpufleet.controller.conditions import Obj, ReadObj, is_owned_equal, owned_patch
from gpufleet.controller.config import OBSERVATION_NAMESPACE_PREFIX, ControllerConfig
from gpufleet.controller.events import (
    Event,
    EventReason,
    EventType,
    Recorder,
    event_body,
    repeated,
)
from gpufleet.controller.ledger import AssumeLedger
from gpufleet.controller.status import (
    CLUSTER_OWNED,
    REPLICA_OWNED,
    AgentReport,
    Freshness,
    Trust,
    cluster_inputs,
    cluster_status,
    cluster_times,
    freshness,
    is_pods_scheduled,
    is_refresh_due,
    judge,
    known_epoch,
    parse_report,
    replica_status,
    states_at,
    without_ages,
    without_times,
)
from gpufleet.core import labels
from gpufleet.core.decision import Decision, DeploymentDecision, ReasonCode
from gpufleet.core.model import Cluster, Deployment, Replica, SchedulingConfig, Snapshot
from gpufleet.core.schedule import ScheduleMemo, SnapshotError, schedule
from gpufleet.store import AlreadyExists, Conflict, Kind, NotFound, Store, StoreError
from gpufleet.store.port import (
    EVENT,
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

log = logging.getLogger(__name__)


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
    #: The step found only heartbeats since a step that left nothing to do, and did not
    #: publish replicas or schedule again (`Controller._quiet_result`): `decision` and the
    #: numbers are that step's, which this one would have computed again.
    is_quiet: bool = False

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    def count(self, kind: str, verb: str) -> int:
        return self.writes[(kind, verb)]


@dataclass(slots=True)
class _View:
    """Everything one step reads (deletion-pending objects included)."""

    classes: Sequence[Mapping[str, Any]]
    clusters: Sequence[Mapping[str, Any]]
    deployments: Sequence[Mapping[str, Any]]
    replicas: Sequence[Mapping[str, Any]]
    pool_observations: Sequence[Mapping[str, Any]]
    replica_observations: Sequence[Mapping[str, Any]]


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _with_status(obj: ReadObj, desired: Mapping[str, Any], owned: Sequence[str]) -> Obj:
    """`obj` as it would read with its `owned` status keys set to `desired`.

    A shallow copy: the step reads these objects and never changes them in place (every write
    starts from `copy_json`), so copying each object whole on every step buys nothing."""
    status = dict(obj.get("status") or {})
    for key in owned:
        if key in desired:
            status[key] = desired[key]
        else:
            status.pop(key, None)
    return {**obj, "status": status}


_T = TypeVar("_T")
_E = TypeVar("_E")


def _check_deployment(obj: ReadObj) -> Deployment | list[FieldError]:
    """The deployment as the core reads it, or every error that stops it being read.

    Only the spec is validated: the status is the controller's own to rewrite.
    """
    body = {k: v for k, v in obj.items() if k != "status"}
    try:
        parsed = validate(body)
    except ValidationFailed as e:
        return list(e.errors)
    if not isinstance(parsed, ModelDeployment):
        return [FieldError("kind", "must be ModelDeployment")]
    try:
        return deployment_from_manifest(parsed)
    except CelCompileError as e:
        return [FieldError("spec.template.spec.engines.members.nodeSelector", e.message)]


def _core_replica(obj: ReadObj) -> Replica | None:
    replica = parse_object(obj)
    return replica_from_manifest(replica) if isinstance(replica, ModelReplica) else None


#: A replica object as scheduling reads it: the object, its core Replica (None: not one),
#: the error that keeps it from being read ("" when none), and its (namespace, name).
_ReadReplica = tuple[ReadObj, Replica | None, str, tuple[str, str]]


@dataclass(slots=True)
class _ReplicaBlock:
    """Consecutive replicas of a listing, `[lo, hi)`, as scheduling reads them: their core
    Replicas, ((namespace, name), object) pairs and errors, in listing order. Not changed
    once `Controller._read_block` has made it."""

    lo: int
    hi: int
    cores: list[Replica]
    named: list[tuple[tuple[str, str], ReadObj]]
    errors: list[str]

    def moved(self, lo: int) -> _ReplicaBlock:
        return _ReplicaBlock(lo, lo + self.hi - self.lo, self.cores, self.named, self.errors)


@dataclass(slots=True)
class _PublishBlock:
    """Consecutive replicas of a listing, `[lo, hi)`, as their statuses were published: whether
    every one not being deleted was found in place, the keys those were published under (a
    report entry found under a key is the same object while its report is,
    `_cluster_replica_reports`), the replicas as they read afterwards, and their
    `_published` entries by identity. Not changed once `Controller._publish_block` has made
    it."""

    lo: int
    hi: int
    is_settled: bool
    keys: frozenset[tuple[str, str, str]]
    out: list[ReadObj]
    entries: list[tuple[int, _Published]]

    def moved(self, lo: int) -> _PublishBlock:
        return _PublishBlock(
            lo, lo + self.hi - self.lo, self.is_settled, self.keys, self.out, self.entries
        )


@dataclass(slots=True)
class _PublishListing:
    """A listing of replicas as a step published them: the objects and the blocks."""

    objs: tuple[ReadObj, ...]
    blocks: list[_PublishBlock]


#: A valid deployment as scheduling reads it: the object and its core Deployment.
_ValidDeployment = tuple[ReadObj, Deployment]


@dataclass(slots=True)
class _CheckBlock:
    """Consecutive deployments of a listing, `[lo, hi)`, as `Controller._valid_deployments`
    checked them: whether every one is valid (or being deleted), the valid ones by key, and
    their `_checked_deployment` entries. Not changed once made."""

    lo: int
    hi: int
    is_valid: bool
    valid: list[tuple[tuple[str, str], _ValidDeployment]]
    entries: list[tuple[tuple[str, str], _CheckedDeployment]]

    def moved(self, lo: int) -> _CheckBlock:
        return _CheckBlock(lo, lo + self.hi - self.lo, self.is_valid, self.valid, self.entries)


@dataclass(slots=True)
class _CheckListing:
    """A listing of deployments as a step checked them: the objects and the blocks."""

    objs: tuple[ReadObj, ...]
    blocks: list[_CheckBlock]


@dataclass(slots=True)
class _ApplyBlock:
    """Consecutive deployment decisions, `[lo, hi)` of a Decision's `deployments`, as
    `Controller._apply_decision` applied them: whether each was applied with nothing to
    write (`_apply_once`), their keys, their retained replicas' (namespace, name), what
    they add to the step's numbers (the refusal reason of each one short, in order; the
    shortfall; the refusal subjects), and their `_apply_once` entries. Not changed once
    made."""

    lo: int
    hi: int
    is_applied: bool
    keys: frozenset[tuple[str, str]]
    names: frozenset[tuple[str, str]]
    refusals: list[str]
    shortfall: int
    refused: list[tuple[str, ...]]
    entries: list[tuple[tuple[str, str], _Applied]]

    def moved(self, lo: int) -> _ApplyBlock:
        return _ApplyBlock(
            lo,
            lo + self.hi - self.lo,
            self.is_applied,
            self.keys,
            self.names,
            self.refusals,
            self.shortfall,
            self.refused,
            self.entries,
        )


@dataclass(slots=True)
class _ApplyListing:
    """A Decision's deployments as a step applied them: the decisions and the blocks."""

    objs: tuple[DeploymentDecision, ...]
    blocks: list[_ApplyBlock]


def _is_valid_block(block: _CheckBlock) -> bool:
    return block.is_valid


def _read_replica(obj: ReadObj) -> tuple[Replica | None, str, tuple[str, str]]:
    key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
    try:
        return _core_replica(obj), "", key
    except (ValidationFailed, ValueError, CelCompileError) as e:
        return None, f"ModelReplica {_name(obj)}: {e}", key


#: The fields of a ReplicaObservation's status that `replica_status` reads.
_REPLICA_REPORT_KEYS: Final = ("observedGeneration", "podsScheduled", "pools")


#: A replica status found in place (`Controller._publish_replicas`): the replica object, its
#: (cluster, namespace, name), the report body it was computed from, and whether one of its
#: reports was rejected.
_Published = tuple[ReadObj, tuple[str, str, str], object, bool]

#: A replica's reports among its cluster's judged ones: the accepted ReplicaObservation (the
#: first, in the cluster's report order; None when none) and whether one was rejected.
_ReplicaReports = tuple[AgentReport | None, bool]
_NO_REPORTS: Final[_ReplicaReports] = (None, False)


#: An observation object as `_judge` read it: the object, the cluster it is about (None: not
#: an observation namespace), its report (None when it has an error), and its error ("").
_JudgedObservation = tuple[ReadObj, str | None, AgentReport | None, str]


#: The most observations a run holds (`_Run`), and replicas a block (`_ReplicaBlock`): a run
#: with one changed object is read again whole, so a cluster's ReplicaObservations, or the
#: fleet's replicas, are split into runs of this many.
_RUN_LENGTH: Final = 16


@dataclass(slots=True)
class _Run:
    """Consecutive observations of a listing, `[lo, hi)`, about the same cluster (at most
    `_RUN_LENGTH`): their reports and errors in listing order. Not changed once
    `_judge_objects` has made it."""

    lo: int
    hi: int
    cluster: str | None
    reports: list[AgentReport]
    errors: list[str]

    def moved(self, lo: int) -> _Run:
        return _Run(lo, lo + self.hi - self.lo, self.cluster, self.reports, self.errors)


class _Span(Protocol):
    """Consecutive objects of a listing, `[lo, hi)` (a `_Run`, `_ReplicaBlock` or
    `_PublishBlock`)."""

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    def moved(self, lo: int) -> Self:
        """The same span at `[lo, lo + hi - self.lo)` of a later listing."""
        ...


#: What was read of one object (its first element is the object), and a span of them.
_Hit = TypeVar("_Hit", _JudgedObservation, _ReadReplica)
_S = TypeVar("_S", bound=_Span)
_S_co = TypeVar("_S_co", bound=_Span, covariant=True)

#: Reads `objs[lo:hi]`, taking an object's hit from the map (by identity) when it is there:
#: appends one hit per object and the spans that cover them, in order.
_ReadSpans = Callable[[Sequence[ReadObj], int, int, Mapping[int, _Hit], list[_Hit], list[_S]], None]


@dataclass(slots=True)
class _Listing(Generic[_Hit, _S]):
    """A listing as a step read it: the objects, what was read of each, and the spans that
    cover it in order; of those, the spans read this time (the others were found again),
    and the last listing's spans not found again."""

    objs: tuple[ReadObj, ...]
    hits: list[_Hit]
    spans: list[_S]
    fresh: list[_S]
    dropped: list[_S]


def _aligned(
    objs: Sequence[object],
    last: Sequence[object],
    spans: Iterable[_S],
    is_kept: Callable[[_S], bool] | None = None,
) -> list[tuple[int, int, _S | None]]:
    """`objs` cut into segments `(lo, hi, span)` in order: a span of `last` (a listing, and
    spans that cover it) whose objects are the same objects, consecutive and in the same
    order, at `objs[lo:hi]` (and that `is_kept` keeps), or None for objects to read again.

    A span is looked for where the spans before it put it (in place while the listing only
    changed objects), and else by its first object: an object added or deleted shifts the
    spans after it, which are found again rather than read again. A reused span shorter than
    `_RUN_LENGTH` next to objects read again is read again with them, so that the spans of a
    listing that changes here and there do not shrink step by step."""
    segments: list[tuple[int, int, _S | None]] = []
    where: dict[int, int] | None = None
    at = shift = 0
    end = len(objs)
    for span in spans:
        lo, hi = span.lo, span.hi
        size, start = hi - lo, lo + shift
        if at <= start < end and objs[start] is last[lo]:
            if start + size > end or not all(
                map(operator.is_, objs[start : start + size], last[lo:hi])
            ):
                continue  # in place, but changed
        else:
            if where is None:
                where = dict(zip(map(id, objs), itertools.count()))  # at C speed
            found = where.get(id(last[lo]))
            if (
                found is None
                or found < at
                or found + size > end
                or not all(map(operator.is_, objs[found : found + size], last[lo:hi]))
            ):
                continue
            start, shift = found, found - lo
        if is_kept is not None and not is_kept(span):
            continue
        if at < start:
            segments.append((at, start, None))
        segments.append((start, start + size, span))
        at = start + size
    if at < end:
        segments.append((at, end, None))
    if len(segments) == 1:
        return segments
    # Short spans beside objects read again are read with them; then join what is read.
    out: list[tuple[int, int, _S | None]] = []
    for i, (lo, hi, kept) in enumerate(segments):
        if (
            kept is not None
            and hi - lo < _RUN_LENGTH
            and (
                (i > 0 and segments[i - 1][2] is None)
                or (i + 1 < len(segments) and segments[i + 1][2] is None)
            )
        ):
            kept = None
        if kept is None and out and out[-1][2] is None:
            out[-1] = (out[-1][0], hi, None)
        else:
            out.append((lo, hi, kept))
    return out


class _Blocks(Protocol[_S_co]):
    """A listing as a step went through it by blocks: the objects and the blocks."""

    @property
    def objs(self) -> Sequence[object]: ...

    @property
    def blocks(self) -> Sequence[_S_co]: ...


def _blocks_again(
    objs: Sequence[object], last: _Blocks[_S] | None, is_kept: Callable[[_S], bool]
) -> tuple[list[tuple[int, int, _S | None]], list[_S]]:
    """`objs` in segments (`_aligned`: the blocks of `last` found again and kept, and what
    to go through again), and the blocks of `last` not taken whole: an object gone through
    again was in one of those, if in any, so only their entries are looked up (a block taken
    whole needs none of its entries)."""
    if last is None:
        return [(0, len(objs), None)], []
    segments = _aligned(objs, last.objs, last.blocks, is_kept)
    found = {id(kept) for _, _, kept in segments if kept is not None}
    return segments, [block for block in last.blocks if id(block) not in found]


def _reread(
    listed: Sequence[ReadObj],
    last: _Listing[_Hit, _S] | None,
    read: _ReadSpans[_Hit, _S],
) -> _Listing[_Hit, _S]:
    """`listed` read span by span, `read` called again only for the objects not in a span
    of `last` found again (`_aligned`: the same objects, an unchanged object being the same
    object, as a view's is), as a span's hits are a function of its objects alone; the spans
    keep listing order, so what comes out is what reading each object would give."""
    objs = tuple(listed)
    hits: list[_Hit] = []
    spans: list[_S] = []
    if last is None:
        read(objs, 0, len(objs), {}, hits, spans)
        return _Listing(objs, hits, spans, list(spans), [])
    if len(objs) == len(last.objs):
        return _reread_in_place(objs, last, read)
    by_id: dict[int, _Hit] | None = None
    fresh: list[_S] = []
    found: set[int] = set()
    for lo, hi, span in _aligned(objs, last.objs, last.spans):
        if span is not None:
            hits.extend(last.hits[span.lo : span.hi])
            spans.append(span if span.lo == lo else span.moved(lo))
            found.add(id(span))
            continue
        if by_id is None:  # a hit's first element is its object: `last.objs`, in order
            by_id = dict(zip(map(id, last.objs), last.hits, strict=True))
        start = len(spans)
        read(objs, lo, hi, by_id, hits, spans)
        fresh.extend(spans[start:])
    dropped = [span for span in last.spans if id(span) not in found]
    return _Listing(objs, hits, spans, fresh, dropped)


def _reread_in_place(
    objs: tuple[ReadObj, ...],
    last: _Listing[_Hit, _S],
    read: _ReadSpans[_Hit, _S],
) -> _Listing[_Hit, _S]:
    """`_reread` of a listing as long as the last one: the spans holding an object that is
    not the one at its place in `last` (found at C speed) are read again, and the runs of
    spans between them are taken whole, as `_aligned` would find each of them in place.
    (A span read again in place is cut as it was: no span shrinks.)"""
    changed = list(itertools.compress(itertools.count(), map(operator.is_not, objs, last.objs)))
    if not changed:
        return _Listing(objs, last.hits, last.spans, [], [])
    starts = list(map(_LO, last.spans))
    stale = sorted({bisect.bisect_right(starts, i) - 1 for i in changed})
    by_id = dict(zip(map(id, last.objs), last.hits, strict=True))
    hits: list[_Hit] = []
    spans: list[_S] = []
    fresh: list[_S] = []
    at = 0  # the first span of `last` not taken or read yet
    for index in stale:
        span = last.spans[index]
        spans.extend(last.spans[at:index])
        hits.extend(last.hits[starts[at] if at < index else span.lo : span.lo])
        start = len(spans)
        read(objs, span.lo, span.hi, by_id, hits, spans)
        fresh.extend(spans[start:])
        at = index + 1
    spans.extend(last.spans[at:])
    hits.extend(last.hits[starts[at] if at < len(starts) else len(objs) :])
    return _Listing(objs, hits, spans, fresh, [last.spans[i] for i in stale])


_LO: Final = operator.attrgetter("lo")


def _cluster_replica_reports(
    cluster: str,
    trust: Trust,
    last: Mapping[tuple[str, str, str], _ReplicaReports] | None = None,
) -> dict[tuple[str, str, str], _ReplicaReports]:
    """Each of one cluster's replicas' reports by (cluster, namespace, name), found once
    rather than by scanning every report for every replica. An entry of `last` (the
    cluster's last index) that holds the same report and flag is kept as the same object,
    so a replica whose report did not change finds it again by identity."""
    out: dict[tuple[str, str, str], _ReplicaReports] = {}
    for r in trust.rejected:
        key = _replica_key(cluster, r)
        if key is not None:
            out[key] = (None, True)
    for r in trust.accepted:
        key = _replica_key(cluster, r)
        if key is None:
            continue
        found = out.get(key)
        if found is None:
            out[key] = (r, False)
        elif found[0] is None:
            out[key] = (r, found[1])
    if last:
        for key, entry in out.items():
            kept = last.get(key)
            if kept is not None and kept[0] is entry[0] and kept[1] is entry[1]:
                out[key] = kept
    return out


def _replaced_reports(
    cluster: str,
    last: Sequence[AgentReport],
    accepted: Sequence[AgentReport],
    index: Mapping[tuple[str, str, str], _ReplicaReports],
) -> tuple[dict[tuple[str, str, str], _ReplicaReports], list[tuple[str, str, str]]] | None:
    """`_cluster_replica_reports` for accepted ReplicaObservation reports that are `last`
    (those `index` was made from, with the same rejected ones) but for some replaced at
    their place (found at C speed), each by one about the same replica, which was the one
    `index` holds for it: `index` with those entries replaced, and their keys; None when
    the reports changed otherwise. Each replaced report is then its replica's first, so
    the entry it gets is what computing the index again gives, and every other entry is
    the same object."""
    if len(last) != len(accepted):
        return None
    out: dict[tuple[str, str, str], _ReplicaReports] | None = None
    keys: list[tuple[str, str, str]] = []
    for i in itertools.compress(itertools.count(), map(operator.is_not, last, accepted)):
        was, report = last[i], accepted[i]
        key = _replica_key(cluster, report)
        if key is None:
            return None
        entry = index.get(key)
        if entry is None or entry[0] is not was or _replica_key(cluster, was) != key:
            return None
        if out is None:
            out = dict(index)
        out[key] = (report, entry[1])
        keys.append(key)
    return (out if out is not None else dict(index)), keys


#: A cluster's replicas' reports as `_replica_reports` last found them: the Trust, its
#: accepted and rejected ReplicaObservation reports (`_replica_part`), and the index.
_ClusterReports = tuple[
    Trust,
    tuple[AgentReport, ...],
    tuple[AgentReport, ...],
    dict[tuple[str, str, str], _ReplicaReports],
]


def _replica_part(reports: tuple[AgentReport, ...]) -> tuple[AgentReport, ...]:
    """The ReplicaObservation reports of a Trust's `accepted` or `rejected`, in order: those
    are sorted by (kind, name) (`judge`), and a report is of one of the two observation
    kinds (`parse_report`), so they are its end, from the first not a PoolObservation."""
    return reports[bisect.bisect_left(reports, "ReplicaObservation", key=_KIND) :]


_KIND: Final = operator.attrgetter("kind")
_FRESH: Final = Freshness.FRESH.value
_STALE: Final = Freshness.STALE.value


def _replica_key(cluster: str, report: AgentReport) -> tuple[str, str, str] | None:
    if report.kind != "ReplicaObservation":
        return None
    spec = report.body.get("spec") or {}
    namespace, name = spec.get("replicaNamespace"), spec.get("replicaName")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None  # names no replica
    return (cluster, namespace, name)


def _is_same_report(old: AgentReport, new: AgentReport) -> bool:
    """Whether `new` is about the same object as `old`, at the same lease epoch (what
    `judge` sorts and judges by)."""
    return (
        old.kind == new.kind
        and old.name == new.name
        and old.lease_epoch == new.lease_epoch
        and old.namespace == new.namespace
    )


def _is_heartbeat(old: ReadObj, new: ReadObj) -> bool:
    """Whether `new` is `old` with nothing changed but `status.observedAt` (and the version)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    return (
        old.get("apiVersion") == new.get("apiVersion")
        and old.get("spec") == new.get("spec")
        and old_meta.get("labels") == new_meta.get("labels")
        and old_meta.get("annotations") == new_meta.get("annotations")
        and old_meta.get("deletionTimestamp") == new_meta.get("deletionTimestamp")
        and old_status.keys() == new_status.keys()
        and all(v == old_status[k] for k, v in new_status.items() if k != "observedAt")
    )


def _strict_time(value: object) -> datetime | None:
    """An RFC 3339 time with its offset (as the API accepts it); None otherwise."""
    if not isinstance(value, str) or len(value) < 20 or value[10] != "T":
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


#: A decision applied with nothing to write: the deployment, the decision, the objects of
#: its retained replicas as read (None: not found), and their (namespace, name).
_Applied = tuple[
    ReadObj, DeploymentDecision, tuple[ReadObj | None, ...], tuple[tuple[str, str], ...]
]

#: A checked deployment: its spec (the object), what else the check read, the result, and
#: the whole object it was last found in (the same object: nothing to compare).
_CheckedDeployment = tuple[object, tuple[object, ...], Deployment | list[FieldError], ReadObj]


def _reported(cluster: Cluster, trust: Trust | None) -> Cluster:
    """`cluster` as fresh as its accepted reports: the published `status.agent.observedAt`
    is not rewritten for every heartbeat (`status_refresh_s`), the reports are."""
    if trust is None or not trust.accepted or cluster.agent_observed_at == trust.observed_at:
        return cluster
    return dataclasses.replace(cluster, agent_observed_at=trust.observed_at)


class ParseCache:
    """What the step computed from an object (parsed, converted), by the object's identity.

    A store view hands out the same object until it changes (a stored object is replaced on
    every write, never changed in place), so an object seen again costs a dictionary lookup,
    not a validation. An entry holds its object, so the identity cannot be reused while it is
    cached; entries no step used are dropped when the next step ends. Failures are cached too
    and raised again.

    The object a write returns is a copy of the stored one, which the next step's view hands
    out: an object at the same resourceVersion as the last one of its name, and equal to it,
    gets that one's result too (`same_content`), rather than being validated twice.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], tuple[ReadObj, object, bool]] = {}
        self._used: dict[tuple[str, int], tuple[ReadObj, object, bool]] = {}
        self._named: dict[tuple[str, str, str], tuple[ReadObj, object, bool]] = {}
        self._named_used: dict[tuple[str, str, str], tuple[ReadObj, object, bool]] = {}
        #: How many objects were computed afresh (for tests and metrics).
        self.misses = 0

    def get(self, what: str, obj: ReadObj, compute: Callable[[ReadObj], _T]) -> _T:
        key = (what, id(obj))
        hit = self._used.get(key) or self._entries.get(key)
        if hit is None or hit[0] is not obj:
            meta = obj.get("metadata") or {}
            name = (what, str(meta.get("namespace") or ""), str(meta.get("name")))
            hit = same_content(obj, self._named_used.get(name) or self._named.get(name))
            if hit is None:
                self.misses += 1
                try:
                    hit = (obj, compute(obj), False)
                except (ValidationFailed, ValueError, CelCompileError) as e:
                    hit = (obj, e, True)
            self._named_used[name] = hit
        self._used[key] = hit
        if hit[2]:
            raise cast(Exception, hit[1])
        return cast(_T, hit[1])

    def end_step(self) -> None:
        self._entries, self._used = self._used, {}
        self._named, self._named_used = self._named_used, {}

    def keep_step(self) -> None:
        """End a step that read only part of what a full one reads: keep every entry."""
        self._entries.update(self._used)
        self._used = {}
        self._named.update(self._named_used)
        self._named_used = {}


def same_content(
    obj: ReadObj, last: tuple[ReadObj, _E, bool] | None
) -> tuple[ReadObj, _E, bool] | None:
    """`last` for `obj` when its object is the same version with the same content as `obj`
    (`_is_same_version`), else None."""
    if last is None or not _is_same_version(obj, last[0]):
        return None
    return (obj, last[1], last[2])


def _is_same_version(obj: ReadObj, other: ReadObj) -> bool:
    """The same resourceVersion and equal content (compared, so that a copy changed since,
    as a step's own belief after a failed write is, cannot pass for the stored version)."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if version is None or (other.get("metadata") or {}).get("resourceVersion") != version:
        return False
    return other == obj


class SettledCache:
    """Writes a step found already in place: by (what, object key), the object read and the
    inputs its desired state was computed from.

    A desired status or spec is a function of the object and some inputs, and of `now` only
    through a transition time set when a condition's status changes, which a write that was
    not needed did not do. So when the same object (identity: a view hands out the same object
    until it changes) meets equal inputs again, the write is still not needed and computing it
    can be skipped. Inputs compare by value (identical objects compare at once). Entries no step
    used are dropped when the next step ends, like `ParseCache`.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, ...], tuple[ReadObj, tuple[object, ...]]] = {}
        self._used: dict[tuple[str, ...], tuple[ReadObj, tuple[object, ...]]] = {}
        #: How many checks were answered from the cache (for tests and metrics).
        self.hits = 0

    def is_settled(self, key: tuple[str, ...], obj: ReadObj, inputs: tuple[object, ...]) -> bool:
        hit = self._used.get(key) or self._entries.get(key)
        if hit is None or hit[0] is not obj or hit[1] != inputs:
            return False
        self._used[key] = hit
        self.hits += 1
        return True

    def settle(self, key: tuple[str, ...], obj: ReadObj, inputs: tuple[object, ...]) -> None:
        self._used[key] = (obj, inputs)

    def end_step(self) -> None:
        self._entries, self._used = self._used, {}

    def keep_step(self) -> None:
        """End a step that read only part of what a full one reads: keep every entry."""
        self._entries.update(self._used)
        self._used = {}


@dataclass(slots=True)
class _Quiet:
    """What the last full step read and wrote, when a step after it that finds only its
    writes and heartbeats would decide the same (see `Controller._is_quiet`).

    Objects are kept as read (a view hands out the same object until it changes), and the
    status writes of the step by the resourceVersion they returned: a later view that shows
    an object at that version shows what the step computed with."""

    classes: Sequence[ReadObj]
    deployments: Sequence[ReadObj]
    replicas: Sequence[ReadObj]
    clusters: Sequence[ReadObj]
    #: The step's status writes: (kind, namespace, name) -> the resourceVersion written.
    written: dict[tuple[str, str, str], object]
    #: The observations as listed (PoolObservations, then ReplicaObservations).
    observations: tuple[ReadObj, ...]
    epochs: dict[str, int | None]
    result: StepResult

    def heartbeats(self, observations: Sequence[ReadObj]) -> bool:
        """Whether `observations` (listed as `self.observations` were) are the recorded
        ones but for heartbeats of them (`_is_heartbeat`), each in place of its last
        version.

        Compared place by place (at C speed) first: where each object that is not the
        recorded one at its place is a heartbeat of the object of the same name there, the
        pairs are those that finding each by name gives (names are unique in a listing).
        Otherwise they are found by name, as an object may have another place."""
        recorded = self.observations
        if len(observations) != len(recorded):
            return False
        moved = itertools.compress(itertools.count(), map(operator.is_not, observations, recorded))
        for i in moved:
            obj, last = observations[i], recorded[i]
            if _observation_key(obj) != _observation_key(last) or not _is_heartbeat(last, obj):
                return self._heartbeats_by_name(observations)
        return True

    def _heartbeats_by_name(self, observations: Sequence[ReadObj]) -> bool:
        seen = {id(o): o for o in self.observations}
        by_name = {_observation_key(o): o for o in self.observations}
        # The same objects pair with themselves; only the others are looked up by name (the
        # counts are equal, so each must replace, as a heartbeat, one of the same name).
        for obj in observations:
            if seen.get(id(obj)) is obj:
                continue
            last = by_name.get(_observation_key(obj))
            if last is None or not _is_heartbeat(last, obj):
                return False
        return True


def _observation_key(obj: ReadObj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))


def _is_same_list(a: Sequence[object], b: Sequence[object]) -> bool:
    """The same objects in the same order (by identity: a view's unchanged objects are)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _is_same_or_written(
    kind: Kind,
    current: Sequence[ReadObj],
    recorded: Sequence[ReadObj],
    written: Mapping[tuple[str, str, str], object],
) -> bool:
    """Whether `current` (a listing) holds the objects of `recorded`, each the same object
    or the version the controller wrote of it since (by resourceVersion)."""
    if len(current) != len(recorded):
        return False
    for now, then in zip(current, recorded, strict=True):
        if now is then:
            continue
        meta, before = now["metadata"], then["metadata"]
        name, namespace = meta.get("name"), meta.get("namespace") or ""
        if name != before.get("name") or namespace != (before.get("namespace") or ""):
            return False
        version = meta.get("resourceVersion")
        if version is None or written.get((kind.kind, namespace, str(name))) != version:
            return False
    return True


#: What a step may have written for a later step to be quiet after it: statuses and events
#: (which no step reads), none of which changes what the decision was computed from.
_QUIET_WRITES: Final = frozenset(
    {
        (INFERENCE_CLUSTER.kind, "patch_status"),
        (MODEL_REPLICA.kind, "patch_status"),
        (MODEL_DEPLOYMENT.kind, "patch_status"),
        (EVENT.kind, "create"),
        (EVENT.kind, "update"),
    }
)


class Controller:
    """The hub controller. Not thread-safe: one loop calls `step`.

    `timer` (a monotonic clock in seconds, e.g. `time.perf_counter`) measures the decision
    latency; the controller reads no clock of its own.
    """

    def __init__(
        self,
        hub: Store,
        config: ControllerConfig | None = None,
        identity: str = "gpufleet-controller",
        *,
        timer: Callable[[], float] | None = None,
    ) -> None:
        self.hub = hub
        self.config = config or ControllerConfig()
        self.identity = identity
        self.timer = timer
        self.ledger = AssumeLedger(self.config.assume_ttl_s)
        self.parsed = ParseCache()
        self.settled = SettledCache()
        #: What `schedule` derived from this fleet's objects, kept across steps: the parse
        #: cache hands it the same Deployment and Replica objects while they are unchanged.
        self.schedule_memo = ScheduleMemo()
        #: Core clusters by name: (parsed cluster, what it was converted with, the result);
        #: the entries used in a step replace the others when it ends.
        self._core_clusters: dict[str, tuple[InferenceCluster, tuple[object, ...], Cluster]] = {}
        #: Checked deployments by (namespace, name): (spec, the rest it read, the result);
        #: made from the blocks of the last listing not taken whole (`_valid_deployments`).
        self._deployments: dict[tuple[str, str], _CheckedDeployment] = {}
        self._deployments_used: dict[tuple[str, str], _CheckedDeployment] = {}
        #: The last report parsed from each observation object, by (kind, namespace, name),
        #: for `_parse_report`; swapped like the others.
        self._reports: dict[tuple[str, str, str], tuple[ReadObj, AgentReport | None]] = {}
        self._reports_used: dict[tuple[str, str, str], tuple[ReadObj, AgentReport | None]] = {}
        self._core_clusters_used: dict[
            str, tuple[InferenceCluster, tuple[object, ...], Cluster]
        ] = {}
        self.recorder = Recorder()
        #: The highest lease epoch accepted per cluster (also persisted in its status).
        self.epochs: dict[str, int] = {}
        #: Decisions applied with nothing to write, by deployment: (deployment, decision,
        #: its retained replicas as read), for `_apply_once`; made like `_deployments`.
        self._applied: dict[tuple[str, str], _Applied] = {}
        self._applied_used: dict[tuple[str, str], _Applied] = {}
        #: The last step's listings of observations as judged (0: PoolObservations,
        #: 1: ReplicaObservations), for `_judge_listing`.
        self._listings: dict[int, _Listing[_JudgedObservation, _Run]] = {}
        #: Per cluster, the reports it was last judged on, its known epoch and the Trust.
        #: (And whether the Trust accepted them all in their order.)
        self._trusts: dict[str, tuple[list[AgentReport], int | None, Trust, bool]] = {}
        #: The last listing of replicas as scheduling read it (`_read_replicas`).
        self._replica_listing: _Listing[_ReadReplica, _ReplicaBlock] | None = None
        #: The same by (namespace, name), for a version seen before as another object.
        self._named_replicas: dict[tuple[str, str], _ReadReplica] = {}
        self._named_replicas_used: dict[tuple[str, str], _ReadReplica] = {}
        #: Per cluster name: (converted cluster, report time, the cluster as reported).
        self._reported_clusters: dict[
            str, tuple[Cluster, tuple[bool, datetime | None], Cluster]
        ] = {}
        #: Per cluster name: (cluster object, Trust, the times `cluster_times` found).
        self._cluster_times: dict[str, tuple[ReadObj, Trust, tuple[datetime | None, ...]]] = {}
        #: Per cluster name: (the times, when, their states, the oldest Fresh and Stale).
        self._cluster_states: dict[
            str,
            tuple[
                tuple[datetime | None, ...],
                datetime,
                tuple[str, ...],
                datetime | None,
                datetime | None,
            ],
        ] = {}
        #: Per cluster, the Trust and refresh flag its status inputs were last built from.
        self._cluster_inputs: dict[str, tuple[Trust, bool, tuple[object, ...]]] = {}
        #: Per cluster, its replicas' reports (`_replica_reports`), and the keys whose
        #: entry is another object than in the last step that found them (or none).
        self._cluster_reports: dict[str, _ClusterReports] = {}
        self._changed_reports: set[tuple[str, str, str]] = set()
        #: Replica statuses found in place, by the replica object's identity (an entry holds
        #: its object): (replica, its (cluster, namespace, name), the report body it was
        #: computed from, whether a report was rejected); swapped like the others.
        self._published: dict[int, _Published] = {}
        #: The last listing of replicas as published (`_publish_replicas`).
        self._publish_listing: _PublishListing | None = None
        #: The last listing of deployments as checked (`_valid_deployments`), and the last
        #: decision as applied (`_apply_decision`).
        self._check_listing: _CheckListing | None = None
        self._valid: dict[tuple[str, str], _ValidDeployment] = {}
        #: The last step's replicas by (namespace, name) as scheduling read them, and the
        #: names of the replicas and valid deployments that changed since the last decision
        #: was applied (`_note_changed_replicas`, `_valid_deployments`, `_apply_decision`).
        self._by_name: Mapping[tuple[str, str], ReadObj] = {}
        self._changed_replicas: set[tuple[str, str]] = set()
        self._changed_deployments: set[tuple[str, str]] = set()
        self._apply_listing: _ApplyListing | None = None
        #: The last full step, when it left nothing to do (`_is_quiet`).
        self._quiet: _Quiet | None = None
        #: Cluster status writes of this step that only moved observation times.
        self._refreshes = 0
        #: This step's status writes: (kind, namespace, name) -> resourceVersion written.
        self._written: dict[tuple[str, str, str], object] = {}
        #: Steps that found only heartbeats since a full step with nothing to do (metrics).
        self.quiet_steps = 0

    # --- the step -------------------------------------------------------------------------

    def step(self, now: datetime) -> StepResult:
        result = StepResult(now)
        self.ledger.expire(now)
        try:
            view = self._read()
        except StoreError as e:
            self._error(result, f"read: {e}")
            return result
        classes, is_complete = self._classes(view.classes, result)
        trusts = self._judge(view, now, result)
        self._refreshes = 0
        self._written = {}
        clusters = [
            self._publish_cluster(c, classes, trusts.get(c["metadata"]["name"]), now, result)
            for c in view.clusters
        ]
        if self._is_quiet(view, trusts, now, result):
            return self._quiet_result(view, result)
        reports = self._replica_reports(trusts)
        replicas = self._publish_replicas(view.replicas, reports, now, result)
        if is_complete:
            self._schedule(classes, clusters, trusts, view.deployments, replicas, now, result)
        else:
            self._error(result, "scheduling skipped: an InferenceClass cannot be read")
        result.assumed = len(self.ledger)
        self._quiet = self._quiet_record(view, trusts, now, result)
        self.parsed.end_step()
        self.settled.end_step()
        self._core_clusters, self._core_clusters_used = self._core_clusters_used, {}
        self._named_replicas, self._named_replicas_used = self._named_replicas_used, {}
        return result

    # --- quiet steps ----------------------------------------------------------------------

    def _is_fresh_and_clean(
        self, trusts: Mapping[str, Trust], now: datetime, result: StepResult
    ) -> bool:
        """No error or rejected report so far, and every cluster's accepted reports fresh at
        `now` (so no freshness reason, whose numbers move with time, is in the decision)."""
        if result.errors or result.rejected_reports:
            return False
        for trust in trusts.values():
            if not trust.accepted or trust.rejected or trust.observed_at is None:
                return False
            if freshness(trust.observed_at, now, self.config)[1] != Freshness.FRESH.value:
                return False
        return True

    def _is_quiet(
        self, view: _View, trusts: Mapping[str, Trust], now: datetime, result: StepResult
    ) -> bool:
        """Whether the rest of this step would only repeat the last full step: that step
        could be repeated (`_quiet_record`), and since then nothing changed but its own
        status writes and the agents' heartbeats.

        The rest of a step (replica statuses, the decision, its application) is a function
        of what the step reads and of `now`. Here it reads what the last full step worked
        from: that step scheduled from the statuses it had just published, so its own writes
        are its inputs, and applying its decision again finds every status in place (the
        status functions keep a written status as it is). A heartbeat changes a report's
        `observedAt` alone, which replica statuses do not read, and which the decision reads
        only through each cluster's freshness: Fresh then and now, with no freshness reason
        in either decision. The cluster statuses, which do read the times, were published
        above as in any step, and may only have moved observation times.
        """
        q = self._quiet
        if (
            q is None
            or result.write_count != self._refreshes
            or not self._is_fresh_and_clean(trusts, now, result)
        ):
            return False
        if {name: t.epoch for name, t in trusts.items()} != q.epochs:
            return False
        if not (
            _is_same_list(view.classes, q.classes)
            and _is_same_or_written(MODEL_DEPLOYMENT, view.deployments, q.deployments, q.written)
            and _is_same_or_written(MODEL_REPLICA, view.replicas, q.replicas, q.written)
            and _is_same_or_written(INFERENCE_CLUSTER, view.clusters, q.clusters, q.written)
        ):
            return False
        return q.heartbeats((*view.pool_observations, *view.replica_observations))

    def _quiet_result(self, view: _View, result: StepResult) -> StepResult:
        """End a quiet step: the last full step's decision and numbers, this step's writes
        (cluster status refreshes), and the record brought up to what this step read."""
        q = self._quiet
        assert q is not None
        last = q.result
        result.decision = last.decision
        result.refusals = Counter(last.refusals)
        result.shortfall = last.shortfall
        result.is_quiet = True
        result.assumed = len(self.ledger)
        q.deployments, q.replicas, q.clusters = view.deployments, view.replicas, view.clusters
        q.written = self._written
        # The heartbeats accepted are the versions later steps compare with.
        q.observations = (*view.pool_observations, *view.replica_observations)
        self.quiet_steps += 1
        # Only part of what a full step reads was read: what the rest computed is kept.
        self.parsed.keep_step()
        self.settled.keep_step()
        self._core_clusters.update(self._core_clusters_used)
        self._core_clusters_used = {}
        # Replica statuses, deployments and decisions were not read: their listings (and
        # the entries in their blocks) stay as the full step left them.
        return result

    def _quiet_record(
        self, view: _View, trusts: Mapping[str, Trust], now: datetime, result: StepResult
    ) -> _Quiet | None:
        """What a later step compares with to know it is quiet; None unless this step
        scheduled, met nothing to retry, wrote only statuses and events, and its decision
        creates and drops nothing (so deciding it again would decide the same)."""
        if (
            result.decision is None
            or not set(result.writes) <= _QUIET_WRITES
            or not self._is_fresh_and_clean(trusts, now, result)
            or any(d.created or d.dropped for d in result.decision.deployments)
        ):
            return None
        return _Quiet(
            classes=view.classes,
            deployments=view.deployments,
            replicas=view.replicas,
            clusters=view.clusters,
            written=self._written,
            observations=(*view.pool_observations, *view.replica_observations),
            epochs={name: t.epoch for name, t in trusts.items()},
            result=result,
        )

    def _read(self) -> _View:
        hub = self.hub
        # Read-only views (typed Mapping, so mypy holds the step to never changing what it
        # reads): the whole hub is not copied on every step.
        return _View(
            classes=hub.view(INFERENCE_CLASS),
            clusters=self._assumed(INFERENCE_CLUSTER, hub.view(INFERENCE_CLUSTER)),
            deployments=self._assumed(MODEL_DEPLOYMENT, hub.view(MODEL_DEPLOYMENT)),
            replicas=self._assumed(MODEL_REPLICA, hub.view(MODEL_REPLICA)),
            pool_observations=hub.view(POOL_OBSERVATION),
            replica_observations=hub.view(REPLICA_OBSERVATION),
        )

    def _assumed(self, kind: Kind, listed: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """`listed` with the controller's own unseen writes; one the store no longer has
        (deleted by someone else since) is forgotten rather than brought back."""
        for key in self.ledger.unseen(kind, listed):
            _, namespace, name = key
            if self.hub.get(kind, name, namespace or None) is None:
                self.ledger.forget(key)
        return self.ledger.overlay(kind, listed)

    def _classes(
        self, objs: Iterable[ReadObj], result: StepResult
    ) -> tuple[dict[str, ReadObj], bool]:
        classes: dict[str, ReadObj] = {}
        is_complete = True
        for obj in objs:
            try:
                self.parsed.get("object", obj, parse_object)
            except ValidationFailed as e:
                self._error(result, f"InferenceClass {_name(obj)} is invalid: {e}")
                is_complete = False
                continue
            classes[obj["metadata"]["name"]] = obj
        return classes, is_complete

    # --- trust ----------------------------------------------------------------------------

    def _judge(self, view: _View, now: datetime, result: StepResult) -> dict[str, Trust]:
        names = {c["metadata"]["name"] for c in view.clusters}
        reports: dict[str, list[AgentReport]] = {n: [] for n in names}
        pool_runs = self._judge_listing(0, view.pool_observations)
        replica_runs = self._judge_listing(1, view.replica_observations)
        # The runs in listing order: each run's errors, and its reports, in their order.
        for run in (*pool_runs, *replica_runs):
            if run.cluster is None or run.cluster not in names:
                continue
            for error in run.errors:
                self._error(result, error)
            reports[run.cluster].extend(run.reports)
        observations = (*view.pool_observations, *view.replica_observations)
        self._keep_reports(observations)
        trusts: dict[str, Trust] = {}
        alive: set[tuple[str, ...]] = set()
        by_name = {c["metadata"]["name"]: c for c in view.clusters}
        for cluster in sorted(names):
            remembered = (known_epoch(by_name[cluster]), self.epochs.get(cluster))
            epochs = [e for e in remembered if e is not None]
            trust = self._judge_cluster(cluster, reports[cluster], max(epochs, default=None))
            trusts[cluster] = trust
            if trust.epoch is not None:
                self.epochs[cluster] = trust.epoch
            for report in trust.rejected:
                message = (
                    f"{report.kind} {report.namespace}/{report.name} from agent "
                    f"{report.identity} with lease epoch {report.lease_epoch} ignored: cluster "
                    f"{cluster}'s agent holds lease epoch {trust.epoch}"
                )
                result.rejected_reports.append(message)
                subject = ("stale", cluster, report.kind, report.name)
                alive.add(subject)
                event = Event(
                    by_name[cluster], EventType.WARNING, EventReason.STALE_AGENT_REPORT, message
                )
                self._record_once(subject, event, now, result)
        self.recorder.forget_missing("stale", alive)
        return trusts

    def _judge_listing(self, index: int, listed: Sequence[ReadObj]) -> list[_Run]:
        """The runs of a listing of observations, with each observation's cluster, report
        and error (`_read_report`), found again only for the runs that changed (`_reread`)."""
        judged = _reread(listed, self._listings.get(index), self._judge_objects)
        self._listings[index] = judged
        return judged.spans

    def _judge_objects(
        self,
        objs: Sequence[ReadObj],
        lo: int,
        hi: int,
        last: Mapping[int, _JudgedObservation],
        hits: list[_JudgedObservation],
        runs: list[_Run],
    ) -> None:
        """Judge `objs[lo:hi]`, each taken from `last` (by identity) when there, appending to
        `hits` and making new runs of them (never extending a run made before `lo`)."""
        run: _Run | None = None
        for j in range(lo, hi):
            obj = objs[j]
            hit = last.get(id(obj))
            if hit is None or hit[0] is not obj:
                hit = (obj, *self._read_report(obj))
            hits.append(hit)
            _, cluster, report, error = hit
            if run is None or run.cluster != cluster or j - run.lo >= _RUN_LENGTH:
                run = _Run(j, j + 1, cluster, [], [])
                runs.append(run)
            else:
                run.hi = j + 1
            if error:
                run.errors.append(error)
            elif report is not None:
                run.reports.append(report)

    def _read_report(self, obj: ReadObj) -> tuple[str | None, AgentReport | None, str]:
        """The cluster an observation object is about (None: not an observation namespace),
        its report, and the error that keeps it from being read ("" when none)."""
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        if not namespace.startswith(OBSERVATION_NAMESPACE_PREFIX):
            return None, None, ""
        cluster = namespace.removeprefix(OBSERVATION_NAMESPACE_PREFIX)
        if (obj.get("spec") or {}).get("clusterName") != cluster:
            return cluster, None, f"{obj['kind']} {_name(obj)}: spec.clusterName is not {cluster}"
        try:
            report = self.parsed.get("report", obj, self._parse_report)
        except ValueError as e:
            return cluster, None, f"{obj['kind']} {_name(obj)} is invalid: {e}"
        return cluster, report, ""

    def _judge_cluster(self, cluster: str, reports: list[AgentReport], known: int | None) -> Trust:
        """`judge`, the same Trust while the cluster's reports are the same objects (a report
        that did not change is: `_judged`) and its known epoch is the same.

        When the last reports were accepted all, in the order given (they came sorted, as
        a listing is, and of one epoch), and the new ones only replace some of them in
        place by reports of the same kind, name and lease epoch (a heartbeat, a new
        content), `judge` would sort them the same and accept them all again at the same
        epoch: the Trust is made from them as they are."""
        last = self._trusts.get(cluster)
        if last is not None and last[1] == known and len(last[0]) == len(reports):
            was = last[0]
            changed = itertools.compress(itertools.count(), map(operator.is_not, was, reports))
            first = next(changed, None)
            if first is None:
                return last[2]
            if last[3] and all(
                _is_same_report(was[i], reports[i]) for i in itertools.chain((first,), changed)
            ):
                trust = Trust(last[2].epoch, tuple(reports), ())
                self._trusts[cluster] = (reports, known, trust, True)
                return trust
        trust = judge(reports, known)
        in_order = not trust.rejected and _is_same_list(trust.accepted, reports)
        self._trusts[cluster] = (reports, known, trust, in_order)
        return trust

    def _replica_reports(
        self, trusts: Mapping[str, Trust]
    ) -> dict[tuple[str, str, str], _ReplicaReports]:
        """Every replica's reports (`_cluster_replica_reports`), computed again only for the
        clusters whose judged ReplicaObservation reports changed: a PoolObservation's
        heartbeat makes a new Trust (`_judge_cluster`) but reads no replica's report.
        Notes in `_changed_reports` the keys whose entry is not the one the last call found
        (a cluster's index not computed again keeps its entries; `_publish_replicas`)."""
        out: dict[tuple[str, str, str], _ReplicaReports] = {}
        kept: dict[str, _ClusterReports] = {}
        last = self._cluster_reports
        changed = self._changed_reports = set()
        for cluster, trust in trusts.items():
            hit = last.get(cluster)
            if hit is None or hit[0] is not trust:
                accepted, rejected = _replica_part(trust.accepted), _replica_part(trust.rejected)
                if hit is None or not (
                    _is_same_list(hit[1], accepted) and _is_same_list(hit[2], rejected)
                ):
                    was = hit[3] if hit else {}
                    replaced = None
                    if hit is not None and _is_same_list(hit[2], rejected):
                        replaced = _replaced_reports(cluster, hit[1], accepted, was)
                    if replaced is not None:
                        index = replaced[0]
                        changed.update(replaced[1])
                    else:
                        index = _cluster_replica_reports(cluster, trust, was)
                        changed.update(k for k, v in index.items() if was.get(k) is not v)
                        changed.update(was.keys() - index.keys())
                    hit = (trust, accepted, rejected, index)
                else:
                    hit = (trust, accepted, rejected, hit[3])
            kept[cluster] = hit
            out.update(hit[3])
        for cluster in last.keys() - kept.keys():
            changed.update(last[cluster][3])
        self._cluster_reports = kept
        return out

    def _keep_reports(self, observations: Sequence[ReadObj]) -> None:
        """Remember the reports parsed this step (`_parse_report`), and forget those of
        deleted observations once they are more than a few (amortised: no step pays for it)."""
        self._reports.update(self._reports_used)
        self._reports_used = {}
        if len(self._reports) <= len(observations) + 64:
            return
        alive = {
            (
                str(o.get("kind")),
                str(o["metadata"].get("namespace")),
                str(o["metadata"].get("name")),
            )
            for o in observations
        }
        self._reports = {k: v for k, v in self._reports.items() if k in alive}

    def _parse_report(self, obj: ReadObj) -> AgentReport | None:
        """`parse_report`, without validating again a report that only heartbeated: one equal
        to the last version of the same object but for `status.observedAt` (a valid time) is
        that version's report at the new time."""
        meta = obj.get("metadata") or {}
        key = (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))
        last = self._reports.get(key)
        report: AgentReport | None = None
        if last is not None and last[1] is not None and _is_heartbeat(last[0], obj):
            at = _strict_time(obj["status"]["observedAt"])
            if at is not None:  # `dataclasses.replace`, without its cost per field
                was = last[1]
                report = AgentReport(
                    was.kind, was.name, was.namespace, was.identity, was.lease_epoch, at, obj
                )
        if report is None:
            report = parse_report(obj)
        self._reports_used[key] = (obj, report)
        return report

    # --- published status -----------------------------------------------------------------

    def _publish_cluster(
        self,
        cluster: ReadObj,
        classes: Mapping[str, ReadObj],
        trust: Trust | None,
        now: datetime,
        result: StepResult,
    ) -> ReadObj:
        trust = trust or Trust(None, (), ())

        def desire(current: ReadObj) -> Obj:
            return cluster_status(current, classes, trust, now, self.config)

        name = cluster["metadata"]["name"]
        # The times judged are kept while the cluster and Trust are the same objects: only
        # their states move with `now`.
        times = self._cluster_times.get(name)
        if times is None or times[0] is not cluster or times[1] is not trust:
            times = (cluster, trust, cluster_times(cluster, trust))
            self._cluster_times[name] = times
        states = self._states_at(name, times[2], now)
        # A report that only moved the observation times is published at most every
        # status_refresh_s: the scheduler reads freshness from the reports (`_schedule`).
        is_due = is_refresh_due(cluster, now, self.config)
        known = self._cluster_inputs.get(name)
        if known is None or known[0] is not trust or known[1] is not is_due:
            # The same Trust (kept while its reports are the same objects) has the same
            # inputs: built once, so settling compares identical tuples.
            known = (trust, is_due, cluster_inputs(trust, is_due))
            self._cluster_inputs[name] = known
        written = self._write_status(
            INFERENCE_CLUSTER,
            cluster,
            desire,
            CLUSTER_OWNED,
            now,
            result,
            without_ages if is_due else without_times,
            inputs=(tuple(classes.items()), known[2], states),
        )
        if written is not cluster and is_owned_equal(
            without_times(cluster.get("status") or {}),
            without_times(written.get("status") or {}),
            CLUSTER_OWNED,
        ):
            self._refreshes += 1  # only the observation times moved (see `_is_quiet`)
        return written

    def _states_at(
        self, name: str, times: tuple[datetime | None, ...], now: datetime
    ) -> tuple[str, ...]:
        """`states_at`, the same tuple while no time changed state since it was computed.

        A time's state only moves forward as `now` does (Fresh, Stale, Expired: its age
        grows, and the state grows with the age), and of the times in one state the oldest
        moves first. So at a later `now` at which the oldest Fresh time is still Fresh and
        the oldest Stale one still Stale, every time is in the state it was in."""
        hit = self._cluster_states.get(name)
        if hit is not None and hit[0] is times and hit[1] <= now:
            oldest_fresh, oldest_stale = hit[3], hit[4]
            if (
                oldest_fresh is None or freshness(oldest_fresh, now, self.config)[1] == _FRESH
            ) and (oldest_stale is None or freshness(oldest_stale, now, self.config)[1] == _STALE):
                return hit[2]
        states = states_at(times, now, self.config)
        fresh: datetime | None = None
        stale: datetime | None = None
        for t, state in zip(times, states, strict=True):
            if t is None:
                continue
            if state == _FRESH and (fresh is None or t < fresh):
                fresh = t
            elif state == _STALE and (stale is None or t < stale):
                stale = t
        self._cluster_states[name] = (times, now, states, fresh, stale)
        return states

    def _publish_replicas(
        self,
        replicas: Sequence[ReadObj],
        reports: Mapping[tuple[str, str, str], _ReplicaReports],
        now: datetime,
        result: StepResult,
    ) -> list[ReadObj]:
        """Publish the status of every replica not being deleted (`_publish_replica`); returns
        them as they read afterwards, in order.

        A replica that is the same object as when its status was last found in place, and
        meets the same report object, is that object again: what `replica_status` reads is
        the same (SettledCache, without building its inputs or even its key for each of the
        fleet's replicas). Being the same object, it is not being deleted either. The
        listing goes by blocks (`_PublishBlock`): a block whose replicas were all found in
        place, that holds the same objects as last time, consecutive (wherever they now are
        in the listing: `_aligned`), and none of whose keys has another report entry since
        (`_changed_reports`; so each replica meets the same report), is taken whole."""
        objs = tuple(replicas)
        last = self._publish_listing
        out: list[ReadObj] = []
        blocks: list[_PublishBlock] = []

        changed = self._changed_reports

        def is_kept(block: _PublishBlock) -> bool:
            return block.is_settled and changed.isdisjoint(block.keys)

        segments, left = _blocks_again(objs, last, is_kept)
        self._published = {at: entry for block in left for at, entry in block.entries}
        for lo, hi, kept in segments:
            if kept is not None:
                out.extend(kept.out)
                blocks.append(kept if kept.lo == lo else kept.moved(lo))
                continue
            for start in range(lo, hi, _RUN_LENGTH):
                end = min(start + _RUN_LENGTH, hi)
                blocks.append(self._publish_block(objs, start, end, reports, now, result))
                out.extend(blocks[-1].out)
        self._publish_listing = _PublishListing(objs, blocks)
        return out

    def _publish_block(
        self,
        objs: Sequence[ReadObj],
        lo: int,
        hi: int,
        reports: Mapping[tuple[str, str, str], _ReplicaReports],
        now: datetime,
        result: StepResult,
    ) -> _PublishBlock:
        """Publish the replicas `objs[lo:hi]` one by one (see `_publish_replicas`)."""
        published = self._published
        block = _PublishBlock(lo, hi, True, frozenset(), [], [])
        keys: list[tuple[str, str, str]] = []
        for j in range(lo, hi):
            replica = objs[j]
            hit = published.get(id(replica))
            if hit is not None and hit[0] is replica:
                report, is_rejected = reports.get(hit[1], _NO_REPORTS)
                body = report.body if report is not None else None
                if body is not hit[2] or is_rejected is not hit[3]:
                    hit = None
            else:
                hit = None
            if hit is None:
                if _is_deleting(replica):
                    continue
                written, hit = self._publish_replica(replica, reports, now, result)
                if hit is None:
                    block.is_settled = False
                    block.out.append(written)
                    continue
            block.entries.append((id(replica), hit))
            keys.append(hit[1])
            block.out.append(replica)
        block.keys = frozenset(keys)
        return block

    def _publish_replica(
        self,
        replica: ReadObj,
        reports: Mapping[tuple[str, str, str], _ReplicaReports],
        now: datetime,
        result: StepResult,
    ) -> tuple[ReadObj, _Published | None]:
        """The replica as it reads after publishing its status, and its entry when the
        status was found in place."""
        meta = replica["metadata"]
        cluster = (replica.get("spec") or {}).get("clusterName", "")
        key = (cluster, meta.get("namespace") or "", meta["name"])
        report, is_rejected = reports.get(key, _NO_REPORTS)
        body = report.body if report is not None else None

        def desire(current: ReadObj) -> Obj:
            return replica_status(current, report, is_rejected, now)

        # What replica_status reads of the report: the rest (observedAt) moves on every
        # heartbeat without changing the replica's status.
        seen = (report.body.get("status") or {}) if report else None
        inputs = (is_rejected, *((seen.get(k) for k in _REPLICA_REPORT_KEYS) if seen else ()))
        written = self._write_status(
            MODEL_REPLICA, replica, desire, REPLICA_OWNED, now, result, inputs=inputs
        )
        if written is replica:
            return written, (replica, key, body, is_rejected)
        return written, None

    # --- scheduling -----------------------------------------------------------------------

    def _schedule(
        self,
        classes: Mapping[str, ReadObj],
        clusters: Sequence[ReadObj],
        trusts: Mapping[str, Trust],
        deployments: Sequence[ReadObj],
        replicas: Sequence[ReadObj],
        now: datetime,
        result: StepResult,
    ) -> None:
        sched_config = self.config.scheduling()
        typed_classes: dict[str, InferenceClass] = {}
        for name, obj in classes.items():
            parsed = self.parsed.get("object", obj, parse_object)
            if isinstance(parsed, InferenceClass):
                typed_classes[name] = parsed
        core_clusters: list[Cluster] = []
        unreadable: list[str] = []
        for obj in clusters:
            try:
                cluster = self.parsed.get("object", obj, parse_object)
            except ValidationFailed as e:
                unreadable.append(f"InferenceCluster {_name(obj)}: {e}")
                continue
            if isinstance(cluster, InferenceCluster):
                converted = self._core_cluster(cluster, typed_classes, sched_config)
                core_clusters.append(self._reported(converted, trusts.get(converted.name)))
        core_replicas: list[Replica] = []
        listing = self._read_replicas(replicas)
        for block in listing.spans:
            core_replicas.extend(block.cores)
            unreadable.extend(block.errors)
        by_name = self._replicas_by_name(listing)
        if unreadable:
            for line in unreadable:
                self._error(result, f"scheduling skipped: cannot read {line}")
            return

        valid = self._valid_deployments(deployments, replicas, now, result)
        snapshot = Snapshot(
            deployments=tuple(d for _, d in valid.values()),
            clusters=tuple(core_clusters),
            replicas=tuple(core_replicas),
            config=sched_config,
        )
        started = self.timer() if self.timer else None
        try:
            decision = schedule(snapshot, now, memo=self.schedule_memo)
        except SnapshotError as e:
            self._error(result, f"scheduling skipped: {e}")
            return
        if started is not None and self.timer is not None:
            result.decision_latency_s = self.timer() - started
        result.decision = decision
        self._apply_decision(decision, valid, by_name, now, result)

    def _valid_deployments(
        self,
        deployments: Sequence[ReadObj],
        replicas: Sequence[ReadObj],
        now: datetime,
        result: StepResult,
    ) -> dict[tuple[str, str], _ValidDeployment]:
        """The valid deployments not being deleted, by key in listing order
        (`_checked_deployment`); says why of each invalid one (`_invalid_deployment`).

        The listing goes by blocks (`_CheckBlock`): a block of valid deployments that holds
        the same objects as last time, consecutive (`_aligned`), is taken whole, as checking
        each would find it again (`_checked_deployment` keeps a result while it is the same
        object)."""
        objs = tuple(deployments)
        last, last_valid = self._check_listing, self._valid
        if last is None:
            last_valid = {}
        valid: dict[tuple[str, str], _ValidDeployment] = {}
        alive: set[tuple[str, ...]] = set()
        blocks: list[_CheckBlock] = []
        segments, left = _blocks_again(objs, last, _is_valid_block)
        self._deployments = {at: entry for block in left for at, entry in block.entries}
        used = self._deployments_used = {}
        for lo, hi, kept in segments:
            if kept is not None:
                valid.update(kept.valid)
                blocks.append(kept if kept.lo == lo else kept.moved(lo))
                continue
            for start in range(lo, hi, _RUN_LENGTH):
                block = _CheckBlock(start, min(start + _RUN_LENGTH, hi), True, [], [])
                for obj in objs[block.lo : block.hi]:
                    if _is_deleting(obj):
                        continue
                    checked, at = self._checked_deployment(obj)
                    block.entries.append((at, used[at]))
                    if isinstance(checked, Deployment):
                        key = (checked.key.namespace, checked.key.name)
                        pair = last_valid.get(key)  # the same pair while it is the same
                        if pair is None or pair[0] is not obj or pair[1] is not checked:
                            pair = (obj, checked)
                            self._changed_deployments.add(key)
                        valid[key] = pair
                        block.valid.append((key, pair))
                        continue
                    block.is_valid = False
                    self._invalid_deployment(obj, checked, replicas, now, result)
                    alive.add(("invalid", *self._key(obj)))
                blocks.append(block)
        # A valid deployment of the last listing not found again, unless checked again to
        # the same pair, is gone, moved or changed (see `_note_changed_replicas`).
        for block in left:
            self._changed_deployments.update(
                key for key, pair in block.valid if valid.get(key) is not pair
            )
        self._check_listing, self._valid = _CheckListing(objs, blocks), valid
        self.recorder.forget_missing("invalid", alive)
        return valid

    def _apply_decision(
        self,
        decision: Decision,
        valid: Mapping[tuple[str, str], _ValidDeployment],
        replicas: Mapping[tuple[str, str], ReadObj],
        now: datetime,
        result: StepResult,
    ) -> None:
        """Apply each deployment's decision (`_apply_once`), in the decision's order.

        The decisions go by blocks (`_ApplyBlock`): a block whose decisions were all applied
        with nothing to write, that holds the same decisions as last time, consecutive
        (`_aligned`), and none of whose deployments and retained replicas changed since
        (`_changed_deployments`, `_changed_replicas`: each is the same object as when the
        block was made), is taken whole: `_apply_once` would skip each of them, adding only
        its numbers. The sets are of what changed since the last decision was applied, and
        are emptied here, so no name is looked up for a block taken whole."""
        objs = decision.deployments
        last = self._apply_listing
        changed_deployments, changed_replicas = self._changed_deployments, self._changed_replicas

        def is_applied_kept(block: _ApplyBlock) -> bool:
            return (
                block.is_applied
                and changed_deployments.isdisjoint(block.keys)
                and changed_replicas.isdisjoint(block.names)
            )

        segments, left = _blocks_again(objs, last, is_applied_kept)
        alive: set[tuple[str, ...]] = set()
        blocks: list[_ApplyBlock] = []
        self._applied = {key: entry for block in left for key, entry in block.entries}
        used = self._applied_used = {}
        for lo, hi, kept in segments:
            if kept is not None:
                for reason in kept.refusals:  # the numbers `_apply_once` adds, as it adds them
                    result.refusals[reason] += 1
                result.shortfall += kept.shortfall
                alive.update(kept.refused)
                blocks.append(kept if kept.lo == lo else kept.moved(lo))
                continue
            for start in range(lo, hi, _RUN_LENGTH):
                end = min(start + _RUN_LENGTH, hi)
                keys: list[tuple[str, str]] = []
                names: list[tuple[str, str]] = []
                block = _ApplyBlock(start, end, True, frozenset(), frozenset(), [], 0, [], [])
                for decided in objs[start:end]:
                    key = (decided.key.namespace, decided.key.name)
                    keys.append(key)
                    if self._apply_once(key, valid[key][0], decided, replicas, now, result):
                        entry = used[key]
                        block.entries.append((key, entry))
                        names.extend(entry[3])
                    else:
                        block.is_applied = False
                    if decided.shortfall > 0:
                        subject = ("refusal", decided.key.namespace, decided.key.name)
                        alive.add(subject)
                        block.refused.append(subject)
                        block.refusals.append(decided.condition.reason)
                        block.shortfall += decided.shortfall
                block.keys, block.names = frozenset(keys), frozenset(names)
                blocks.append(block)
        changed_deployments.clear()
        changed_replicas.clear()
        self._apply_listing = _ApplyListing(objs, blocks)
        self.recorder.forget_missing("refusal", alive)

    def _replicas_by_name(
        self, listing: _Listing[_ReadReplica, _ReplicaBlock]
    ) -> Mapping[tuple[str, str], ReadObj]:
        """The listing's replicas by (namespace, name), made from the last step's: without
        the objects of the blocks not found again, with those of the blocks read this time
        (an object in a block found again was in the last listing, under its name; names
        are unique in a listing).

        Adds to `_changed_replicas` every name whose object is not the last step's: such a
        name is in a block read this time or was in a block not found again."""
        last, changed = self._by_name, self._changed_replicas
        if not listing.fresh and not listing.dropped:
            return last
        by_name = dict(last)
        for block in listing.dropped:
            for key, obj in block.named:
                if by_name.get(key) is obj:
                    del by_name[key]
        for block in listing.fresh:
            by_name.update(block.named)
        for block in listing.fresh:
            changed.update(key for key, obj in block.named if last.get(key) is not obj)
        for block in listing.dropped:
            changed.update(key for key, obj in block.named if by_name.get(key) is not obj)
        self._by_name = by_name
        return by_name

    def _read_replicas(self, replicas: Sequence[ReadObj]) -> _Listing[_ReadReplica, _ReplicaBlock]:
        """The replicas as scheduling reads them (`_read_replica`), in blocks of consecutive
        ones, read again only for the blocks that changed (`_reread`)."""
        self._replica_listing = _reread(replicas, self._replica_listing, self._read_blocks)
        return self._replica_listing

    def _read_blocks(
        self,
        objs: Sequence[ReadObj],
        lo: int,
        hi: int,
        last: Mapping[int, _ReadReplica],
        hits: list[_ReadReplica],
        blocks: list[_ReplicaBlock],
    ) -> None:
        """Read `objs[lo:hi]` in blocks of at most `_RUN_LENGTH` (`_read_block`)."""
        for start in range(lo, hi, _RUN_LENGTH):
            blocks.append(self._read_block(objs, start, min(start + _RUN_LENGTH, hi), last, hits))

    def _read_block(
        self,
        objs: Sequence[ReadObj],
        lo: int,
        hi: int,
        last: Mapping[int, _ReadReplica],
        hits: list[_ReadReplica],
    ) -> _ReplicaBlock:
        """Read `objs[lo:hi]`, each taken from `last` (by identity) when there, or from the
        last version of its name when that is the same version (`_is_same_version`: the
        copy a status write returned, seen again as stored); appends to `hits`."""
        named, named_used = self._named_replicas, self._named_replicas_used
        block = _ReplicaBlock(lo, hi, [], [], [])
        for j in range(lo, hi):
            obj = objs[j]
            hit = last.get(id(obj))
            if hit is None or hit[0] is not obj:
                meta = obj["metadata"]
                at = (meta.get("namespace") or "", meta["name"])
                seen = named_used.get(at) or named.get(at)
                if seen is not None and _is_same_version(obj, seen[0]):
                    hit = (obj, *seen[1:])
                else:
                    hit = (obj, *_read_replica(obj))
                named_used[at] = hit
            hits.append(hit)
            _, core, error, key = hit
            block.named.append((key, obj))
            if error:
                block.errors.append(error)
            elif core is not None:
                block.cores.append(core)
        return block

    def _apply_once(
        self,
        key: tuple[str, str],
        deployment: ReadObj,
        decided: DeploymentDecision,
        replicas: Mapping[tuple[str, str], ReadObj],
        now: datetime,
        result: StepResult,
    ) -> bool:
        """`_apply`, skipped when the last step applied the same decision (the core's memo
        hands out the same DeploymentDecision while nothing it read changed) to the same
        deployment and replica objects and that wrote nothing: `_apply` is a function of
        those, and of `now` only through the times of writes it then did not need.

        True when the decision was (or is) applied with nothing to write, and so is kept."""
        hit = self._applied.get(key)
        if (
            hit is not None
            and hit[0] is deployment
            and hit[1] is decided
            # The same decision retains the same replicas (hit[3]: their keys).
            and all(map(operator.is_, map(replicas.get, hit[3]), hit[2]))
        ):
            self._applied_used[key] = hit
            if decided.shortfall > 0:  # the numbers `_apply` adds up, as it adds them
                result.shortfall += decided.shortfall
                result.refusals[decided.condition.reason] += 1
            return True
        names = tuple((key[0], p.name) for p in decided.retained)
        currents = tuple(map(replicas.get, names))
        writes, errors = result.write_count, len(result.errors)
        self._apply(deployment, decided, replicas, now, result)
        if (
            not decided.created
            and not decided.dropped
            and result.write_count == writes
            and len(result.errors) == errors
        ):
            self._applied_used[key] = (deployment, decided, currents, names)
            return True
        return False

    def _checked_deployment(
        self, obj: ReadObj
    ) -> tuple[Deployment | list[FieldError], tuple[str, str]]:
        """`_check_deployment`, the same result while the spec is the same object and what
        it reads of the rest is equal: a status write replaces the object (so `ParseCache`
        misses) but leaves the spec as it was, and the core's ScheduleMemo keys its work by
        the Deployment it is handed. With the key of its entry (in `_deployments_used`)."""
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", str(meta.get("name")))
        last = self._deployments.get(key)
        if last is not None and last[3] is obj:
            self._deployments_used[key] = last
            return last[2], key
        rest = (
            obj.get("apiVersion"),
            obj.get("kind"),
            meta.get("generation"),
            meta.get("uid"),
            meta.get("labels"),
            meta.get("annotations"),
            meta.get("deletionTimestamp"),
        )
        spec = obj.get("spec")
        if last is not None and last[0] is spec and last[1] == rest:
            checked = last[2]
        else:
            checked = self.parsed.get("deployment", obj, _check_deployment)
        self._deployments_used[key] = (spec, rest, checked, obj)
        return checked, key

    def _core_cluster(
        self,
        cluster: InferenceCluster,
        classes: Mapping[str, InferenceClass],
        config: SchedulingConfig,
    ) -> Cluster:
        """`cluster_from_manifest`, computed again only when the parsed cluster (the same
        object while its manifest is unchanged, from ParseCache), a class or the config
        changed."""
        deps = (cluster, tuple(classes.items()), config)
        hit = self._core_clusters.get(cluster.metadata.name)
        if hit is not None and hit[0] is cluster and hit[1] == deps:
            self._core_clusters_used[cluster.metadata.name] = hit
            return hit[2]
        core = cluster_from_manifest(cluster, classes, config)
        self._core_clusters_used[cluster.metadata.name] = (cluster, deps, core)
        return core

    def _reported(self, cluster: Cluster, trust: Trust | None) -> Cluster:
        """`_reported`, the same object while the converted cluster and its report time
        are: the core's memo keys what it derives from a cluster by the object."""
        at = (True, trust.observed_at) if trust is not None and trust.accepted else (False, None)
        hit = self._reported_clusters.get(cluster.name)
        if hit is not None and hit[0] is cluster and hit[1] == at:
            return hit[2]
        reported = _reported(cluster, trust)
        self._reported_clusters[cluster.name] = (cluster, at, reported)
        return reported

    @staticmethod
    def _key(obj: ReadObj) -> tuple[str, str]:
        return (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])

    def _invalid_deployment(
        self,
        obj: ReadObj,
        errors: list[FieldError],
        replicas: Sequence[ReadObj],
        now: datetime,
        result: StepResult,
    ) -> None:
        """Say why the deployment is not scheduled; its replicas are left as they are."""
        scheduled = replica_docs.invalid_condition(errors)
        result.refusals[scheduled["reason"]] += 1
        namespace, name = self._key(obj)
        mine = [
            r
            for r in replicas
            if (r["metadata"].get("namespace") or "") == namespace
            and (r.get("spec") or {}).get("deploymentName") == name
        ]
        ready = sum(1 for r in mine if is_pods_scheduled(r.get("status") or {}))

        def desire(current: ReadObj) -> Obj:
            return replica_docs.deployment_status(current, scheduled, len(mine), ready, now)

        self._write_status(
            MODEL_DEPLOYMENT,
            obj,
            desire,
            replica_docs.DEPLOYMENT_OWNED,
            now,
            result,
            inputs=(scheduled, len(mine), ready),
        )
        event = Event(obj, EventType.WARNING, EventReason.INVALID_SPEC, scheduled["message"])
        self._record_once(("invalid", namespace, name), event, now, result)

    def _apply(
        self,
        deployment: ReadObj,
        decided: DeploymentDecision,
        replicas: Mapping[tuple[str, str], ReadObj],
        now: datetime,
        result: StepResult,
    ) -> None:
        namespace = decided.key.namespace
        is_applied = True
        for dropped in decided.dropped:
            current = replicas.get((namespace, dropped.name))
            if current is None:
                continue
            delete = functools.partial(self._delete, MODEL_REPLICA, current, now, result)
            if not self._guard(result, f"delete ModelReplica {namespace}/{dropped.name}", delete):
                is_applied = False
                continue
            result.drops += 1
            reason = dropped.reason
            kind = EventType.NORMAL if reason.code is ReasonCode.SCALED_DOWN else EventType.WARNING
            message = (
                f"deleted replica {dropped.name} on cluster {dropped.cluster}: "
                f"{reason.code.value}: {reason.message}"
            )
            self._record(Event(deployment, kind, EventReason.DROPPED, message), now, result)
        for placement in decided.retained:
            current = replicas.get((namespace, placement.name))
            if current is None:
                continue
            settle_key = ("restamp", namespace, placement.name)
            inputs = (placement, deployment)
            if self.settled.is_settled(settle_key, current, inputs):
                continue
            if replica_docs.restamped(current, placement, deployment) is None:
                # As the placement wants it: the same replica, placement and deployment
                # will not need an update next step either (restamped reads nothing else).
                self.settled.settle(settle_key, current, inputs)
                continue
            restamp = functools.partial(
                replica_docs.restamped, placement=placement, deployment=deployment
            )
            update = functools.partial(self._update, MODEL_REPLICA, current, restamp, now, result)
            if not self._guard(result, f"update ModelReplica {namespace}/{placement.name}", update):
                is_applied = False
        created = 0
        for placement in decided.created:
            body = replica_docs.replica_body(placement, deployment)
            restamp = functools.partial(
                replica_docs.restamped, placement=placement, deployment=deployment
            )
            create = functools.partial(self._create, MODEL_REPLICA, body, restamp, now, result)
            if not self._guard(result, f"create ModelReplica {namespace}/{placement.name}", create):
                is_applied = False
                continue
            created += 1
            result.placements += 1
            pools = sorted({m.pool for e in placement.engines for m in e.members})
            message = (
                f"created replica {placement.name} on cluster {placement.cluster} "
                f"(index {placement.index}, pools {', '.join(pools)})"
            )
            self._record(
                Event(deployment, EventType.NORMAL, EventReason.SCHEDULED, message), now, result
            )

        if decided.shortfall > 0:
            result.shortfall += decided.shortfall
            result.refusals[decided.condition.reason] += 1
            event = Event(
                deployment,
                EventType.WARNING,
                EventReason.FAILED_SCHEDULING,
                decided.condition.message,
            )
            self._record_once(("refusal", namespace, decided.key.name), event, now, result)
        if not is_applied:
            return  # not fully applied: no status claims it; the next step retries
        total = len(decided.retained) + created
        ready = sum(
            1
            for p in decided.retained
            if is_pods_scheduled((replicas.get((namespace, p.name)) or {}).get("status") or {})
        )
        scheduled = replica_docs.decision_condition(decided.condition)

        def desire(current: ReadObj) -> Obj:
            return replica_docs.deployment_status(current, scheduled, total, ready, now)

        self._write_status(
            MODEL_DEPLOYMENT,
            deployment,
            desire,
            replica_docs.DEPLOYMENT_OWNED,
            now,
            result,
            inputs=(scheduled, total, ready),
        )

    # --- writes ---------------------------------------------------------------------------

    def _error(self, result: StepResult, message: str) -> None:
        log.warning("%s", message)
        result.errors.append(message)

    def _guard(self, result: StepResult, what: str, write: Callable[[], object]) -> bool:
        """Run one write; a StoreError becomes an error of the step. True when it succeeded."""
        try:
            write()
        except StoreError as e:
            self._error(result, f"{what}: {type(e).__name__}: {e}")
            return False
        return True

    def _retries(self) -> int:
        return max(1, self.config.max_conflict_retries)

    def _reread(self, kind: Kind, obj: ReadObj) -> Obj:
        meta = obj["metadata"]
        fresh = self.hub.get(kind, meta["name"], meta.get("namespace"))
        if fresh is None:
            raise NotFound(f"{kind.kind} {_name(obj)} not found")
        return fresh

    def _write_status(
        self,
        kind: Kind,
        obj: ReadObj,
        desire: Callable[[ReadObj], Obj],
        owned: Sequence[str],
        now: datetime,
        result: StepResult,
        normalize: Callable[[Mapping[str, Any]], Obj] = dict,
        *,
        inputs: tuple[object, ...] | None = None,
    ) -> ReadObj:
        """Make the `owned` status keys of `obj` what `desire` computes; returns the object as
        it reads afterwards (written or not). Errors are recorded, and the object is returned
        as desired, so the rest of the step works from what the controller believes.

        `inputs`: everything `desire` reads besides the object and `now` (see `SettledCache`);
        None when that cannot be said, and the status is computed every step."""
        meta = obj["metadata"]
        settle_key = (kind.kind, meta.get("namespace") or "", meta["name"])
        if inputs is not None and self.settled.is_settled(settle_key, obj, inputs):
            return obj
        current = obj
        try:
            for _ in range(self._retries()):
                desired = desire(current)
                status = current.get("status") or {}
                if is_owned_equal(normalize(status), normalize(desired), owned):
                    # As stored, or different only in what `normalize` drops (ages), which is
                    # not written and which nothing downstream reads: the same object, so what
                    # was computed from it (ParseCache) still holds.
                    if inputs is not None and current is obj:
                        self.settled.settle(settle_key, obj, inputs)
                    return current
                meta = current["metadata"]
                try:
                    written = self.hub.patch_status(
                        kind,
                        meta["name"],
                        meta.get("namespace"),
                        owned_patch(status, desired, owned),
                        meta.get("resourceVersion"),
                    )
                except Conflict:
                    current = self._reread(kind, current)
                    continue
                self.ledger.assume_written(kind, written, now)
                result.writes[(kind.kind, "patch_status")] += 1
                written_meta = written["metadata"]
                self._written[
                    (kind.kind, written_meta.get("namespace") or "", written_meta["name"])
                ] = written_meta.get("resourceVersion")
                return written
            raise Conflict(f"still conflicting after {self._retries()} attempts")
        except StoreError as e:
            self._error(result, f"status of {kind.kind} {_name(obj)}: {type(e).__name__}: {e}")
            return _with_status(current, desire(current), owned)

    def _update(
        self,
        kind: Kind,
        obj: ReadObj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepResult,
    ) -> None:
        """Update `obj` to `change(obj)` (None: nothing to change), re-reading on Conflict."""
        current = obj
        for _ in range(self._retries()):
            updated = change(current)
            if updated is None:
                return
            try:
                written = self.hub.update(updated)
            except Conflict:
                current = self._reread(kind, current)
                continue
            self.ledger.assume_written(kind, written, now)
            result.writes[(kind.kind, "update")] += 1
            return
        raise Conflict(f"still conflicting after {self._retries()} attempts")

    def _create(
        self,
        kind: Kind,
        body: Obj,
        change: Callable[[ReadObj], Obj | None],
        now: datetime,
        result: StepResult,
    ) -> None:
        """Create `body`. If it exists already (the view had not shown it), adopt it when it
        is this controller's kind of object for the same deployment, updating it as needed."""
        try:
            written = self.hub.create(body)
        except AlreadyExists:
            existing = self._reread(kind, body)
            want = body["metadata"].get("labels", {}).get(labels.DEPLOYMENT)
            have = (existing["metadata"].get("labels") or {}).get(labels.DEPLOYMENT)
            if want != have or _is_deleting(existing):
                raise
            self.ledger.assume_written(kind, existing, now)
            self._update(kind, existing, change, now, result)
            return
        self.ledger.assume_written(kind, written, now)
        result.writes[(kind.kind, "create")] += 1
        if kind == MODEL_REPLICA:
            # Its first status (NotObserved) now, not one step later: a step leaves nothing
            # for the next one to write when nothing changes.
            def desire(current: ReadObj) -> Obj:
                return replica_status(current, None, False, now)

            self._write_status(kind, written, desire, REPLICA_OWNED, now, result)

    def _delete(self, kind: Kind, obj: ReadObj, now: datetime, result: StepResult) -> None:
        meta = obj["metadata"]
        try:
            self.hub.delete(kind, meta["name"], meta.get("namespace"))
        except NotFound:
            pass
        else:
            result.writes[(kind.kind, "delete")] += 1
        self.ledger.assume_deleted(kind, obj, now)

    # --- events ---------------------------------------------------------------------------

    def _record_once(
        self, subject: tuple[str, ...], event: Event, now: datetime, result: StepResult
    ) -> None:
        """Record a standing situation's event when its message changed since the last one."""
        if not self.recorder.is_new(subject, event.message):
            return
        if self._record(event, now, result):
            self.recorder.remember(subject, event.message)

    def _record(self, event: Event, now: datetime, result: StepResult) -> bool:
        body = event_body(event, now, self.config.component, self.identity)
        meta = body["metadata"]
        try:
            try:
                self.hub.create(body)
                result.writes[(EVENT.kind, "create")] += 1
                return True
            except AlreadyExists:
                pass
            for _ in range(self._retries()):
                existing = self.hub.get(EVENT, meta["name"], meta["namespace"])
                if existing is None:
                    self.hub.create(body)
                    result.writes[(EVENT.kind, "create")] += 1
                    return True
                try:
                    self.hub.update(repeated(existing, now))
                except Conflict:
                    continue
                result.writes[(EVENT.kind, "update")] += 1
                return True
            raise Conflict(f"still conflicting after {self._retries()} attempts")
        except StoreError as e:
            self._error(result, f"event {event.reason} for {_name(event.involved)}: {e}")
            return False
