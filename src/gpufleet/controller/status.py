"""Published status from agent reports: trust, cluster `gpuPools`, replica `ModelPodsScheduled`.

Pure functions of (stored objects, reports, now, config); the loop reads and writes.

Trust. Every observation carries `status.agent: {identity, leaseEpoch, leaseUID}`. Per
cluster the controller keeps a fence (fence.py): the Lease incarnation (`leaseUID`) and the
highest lease epoch it has accepted of it (persisted in the cluster's `status.agent`, so a
restarted controller keeps it). A report of a lower epoch of that incarnation comes from an
agent that no longer holds the cluster's Lease; one of another incarnation is ignored until
the fenced one has been silent for `expire_after_s`, then takes over. An ignored report
changes nothing (what was published from earlier accepted reports stays, ageing toward
Expired) and is named in `rejected`, for an event. A report of a higher epoch of the fenced
incarnation is accepted and its epoch becomes the cluster's.
A report stamped more than `max_clock_skew_s` ahead of the controller's clock is set aside
first (`Trust.future`): it counts for no epoch and is not accepted (fails closed). An accepted
pool report whose numbers cannot be true of its pool and class (`plausible`) publishes its
pool as unobserved (whole-node accounting).

Freshness. A pool's published observation is `Fresh` until `stale_after_s`, then `Stale` (still
used by the scheduler: errs toward full for fleet pods), then `Expired` after `expire_after_s`
(its cluster takes no new replicas: fail closed). `ageSeconds` is the age at the controller's
last publish: it is left out when deciding whether a status changed, so an unchanged
observation is not rewritten every step just because it grew older; a change of `state` is a
change.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import compress
from typing import Any, Final

from gpufleet.api import parse_object
from gpufleet.api.kinds import PoolObservation, ReplicaObservation
from gpufleet.api.times import parse_time
from gpufleet.controller.conditions import (
    Obj,
    ReadObj,
    condition,
    drop_condition,
    find_condition,
    set_condition,
)
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.fence import Fence, choose_fence, is_fenced
from gpufleet.controller.plausible import (
    IMPLAUSIBLE_REPORT,
    Implausible,
    check_pool_report,
    pool_ceiling,
)
from gpufleet.controller.skew import AGENT_VERSION, skew_condition
from gpufleet.core.capacity import as_utc
from gpufleet.core.durations import format_duration
from gpufleet.store import copy_json, copy_obj, format_time

READY: Final = "Ready"
POOLS_PUBLISHED: Final = "PoolsPublished"
MODEL_PODS_SCHEDULED: Final = "ModelPodsScheduled"
HISTOGRAM_AVAILABLE: Final = "HistogramAvailable"
TOO_MANY_BUCKETS: Final = "TooManyBuckets"
#: A cluster condition, present only while some report is stamped beyond the clock-skew
#: tolerance: False, reason `FutureTimestamp`.
REPORT_TIMES: Final = "ReportTimesValid"
FUTURE_TIMESTAMP: Final = "FutureTimestamp"
POOL: Final = "PoolObservation"

#: The status keys of an InferenceCluster the controller writes (others are left alone).
CLUSTER_OWNED: Final = ("conditions", "gateway", "agent", "gpuPools")
#: The status keys of a ModelReplica the controller writes.
REPLICA_OWNED: Final = ("observedGeneration", "conditions", "pools")


class ReadyReason(StrEnum):
    """Reasons of the `Ready` condition when the controller manages it."""

    AGENT_REPORTING = "AgentReporting"
    AGENT_NOT_REPORTING = "AgentNotReporting"
    AGENT_EXPIRED = "AgentExpired"
    #: Reporting, with a clock more than `expire_after_s` behind the hub's (aged from receipt).
    CLOCK_BEHIND = "ClockBehind"


class PodsReason(StrEnum):
    """Reasons of a replica's `ModelPodsScheduled` condition."""

    #: Every live pod of the current generation has its claims allocated.
    ALL_PODS_ALLOCATED = "AllPodsAllocated"
    #: The agent counted the current generation and some pods are not allocated yet.
    PODS_PENDING = "PodsPending"
    #: As PodsPending, and some claiming pods are marked Unschedulable by kube-scheduler: the
    #: message says how many, since when, and what the cluster autoscaler said. Past
    #: `stuckAfter` the replica is re-placed (replace.py).
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    #: The agent counted pods of another generation (the replica changed since).
    GENERATION_MISMATCH = "GenerationMismatch"
    #: No accepted report for the replica (not yet materialized, or the agent is silent).
    NOT_OBSERVED = "NotObserved"
    #: The cluster's agent refused the replica's pod templates under its cluster policy
    #: (its report's `PolicyAllowed=False` condition): it made nothing, and never will.
    POLICY_DENIED = "PolicyDenied"


class Freshness(StrEnum):
    FRESH = "Fresh"
    STALE = "Stale"
    EXPIRED = "Expired"


#: The states' values, read once: an enum member's `.value` costs a lookup per read, and
#: every publish judges the freshness of each of a cluster's times.
_FRESH: Final = Freshness.FRESH.value
_STALE: Final = Freshness.STALE.value
_EXPIRED: Final = Freshness.EXPIRED.value


@dataclass(frozen=True, slots=True)
class AgentReport:
    """One observation object (PoolObservation or ReplicaObservation), validated."""

    kind: str
    name: str
    namespace: str
    identity: str
    lease_epoch: int
    #: The report's own stamp (`status.observedAt`, the agent's clock).
    observed_at: datetime
    body: ReadObj
    #: The agent's Lease incarnation (`status.agent.leaseUID`; "" when the agent sent none).
    lease_uid: str = ""
    #: When the controller first saw this version of the report, by its own clock (None:
    #: not known; the stamp alone then ages it).
    received_at: datetime | None = None
    #: A receipt later than the stamp by more than this (an agent clock far behind; None: no
    #: such rule) ages the report from its receipt; see `aged_from`.
    behind_after_s: float | None = None
    #: What the report's age is judged from: the earlier of its stamp and its receipt (a
    #: report cannot be newer than its receipt, whatever the agent's clock says); but the
    #: receipt when it is more than `behind_after_s` after the stamp (the clock-behind rule:
    #: a reporting agent whose clock is far behind is not Expired forever).
    aged_from: datetime = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        received, stamped = self.received_at, self.observed_at
        aged = received if received is not None and received < stamped else stamped
        if received is not None and self.clock_behind_s is not None:
            aged = received
        object.__setattr__(self, "aged_from", aged)

    @property
    def clock_behind_s(self) -> float | None:
        """How far the agent's stamp is behind the receipt, when past `behind_after_s`."""
        received, after = self.received_at, self.behind_after_s
        if received is None or after is None:
            return None
        behind = (received - self.observed_at).total_seconds()
        return behind if behind > after else None

    def received(self, at: datetime, behind_after_s: float | None = None) -> AgentReport:
        """This report, received at `at` (its age judged from at most then, or from then
        when it is stamped more than `behind_after_s` before)."""
        if at == self.received_at and behind_after_s == self.behind_after_s:
            return self
        # Built directly: `dataclasses.replace` costs several times as much, per heartbeat.
        return AgentReport(
            self.kind,
            self.name,
            self.namespace,
            self.identity,
            self.lease_epoch,
            self.observed_at,
            self.body,
            self.lease_uid,
            at,
            behind_after_s,
        )


def parse_report(obj: ReadObj) -> AgentReport | None:
    """The report an observation object carries; None when its status is not written yet.

    Raises ValidationFailed (a ValueError) when the object is malformed.
    """
    if not obj.get("status"):
        return None
    parsed = parse_object(obj)
    if not isinstance(parsed, PoolObservation | ReplicaObservation) or parsed.status is None:
        raise ValueError(f"{obj.get('kind')} is not an observation kind")
    return AgentReport(
        kind=parsed.kind,
        name=parsed.metadata.name,
        namespace=parsed.metadata.namespace or "",
        identity=parsed.status.agent.identity,
        lease_epoch=parsed.status.agent.lease_epoch,
        # In `UTC` (the same instant): a report's time is compared and subtracted many times
        # a step (`Trust`, `freshness`), and times that share a tzinfo do so in C.
        observed_at=as_utc(parsed.status.observed_at),
        body=obj,
        lease_uid=parsed.status.agent.lease_uid or "",
    )


@dataclass(frozen=True, slots=True)
class Trust:
    """Which of one cluster's reports the controller believes."""

    #: The cluster's lease epoch after this judgement; None while no agent ever reported.
    epoch: int | None
    accepted: tuple[AgentReport, ...]
    #: Reports not of the fence (an older epoch, or another Lease incarnation): ignored.
    rejected: tuple[AgentReport, ...]
    #: Reports stamped beyond the clock-skew tolerance (`judge`'s `horizon`): not accepted,
    #: as if never sent; they count for no epoch.
    future: tuple[AgentReport, ...] = ()
    #: The Lease incarnation the cluster is fenced to ("" when unknown), with `epoch`.
    uid: str = ""
    #: Another incarnation waits for the fenced one's silence: judged again as time passes.
    is_contested: bool = False
    #: The newest accepted report, found once (a step asks for it many times). Found from
    #: `accepted` unless given with `heard_at` (by `moved`, which knows them already).
    newest: AgentReport | None = field(default=None, kw_only=True, compare=False, repr=False)
    #: When the hub last heard from the agent: the latest `aged_from` of the accepted
    #: reports (None without any).
    heard_at: datetime | None = field(default=None, kw_only=True, compare=False, repr=False)
    #: The accepted PoolObservation reports, in `accepted`'s order (a cluster's status reads
    #: these alone, several times a publish; most reports are ReplicaObservations).
    pools: tuple[AgentReport, ...] = field(init=False, default=(), compare=False, repr=False)
    #: The fence after this judgement (`uid`, `epoch`); None while no agent ever reported.
    fence: Fence | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.epoch is not None:
            object.__setattr__(self, "fence", Fence(self.uid, self.epoch))
        # The newest by (observed_at, kind, name), the first of equals: found among the
        # reports of the latest time alone (picked at C speed: a cluster has ~90 reports).
        if not self.accepted:
            object.__setattr__(self, "newest", None)
            object.__setattr__(self, "heard_at", None)
            return
        pools = tuple(compress(self.accepted, map(POOL.__eq__, map(_KIND, self.accepted))))
        object.__setattr__(self, "pools", pools)
        if self.heard_at is not None:
            return  # given, with `newest` (`moved`)
        times = list(map(_AT, self.accepted))
        latest = max(times)
        tied = list(compress(self.accepted, map(latest.__eq__, times)))
        newest = tied[0] if len(tied) == 1 else max(tied, key=_NEWEST)
        object.__setattr__(self, "newest", newest)
        object.__setattr__(self, "heard_at", max(map(_AGED, self.accepted)))

    def moved(self, accepted: tuple[AgentReport, ...], moved: Iterable[AgentReport]) -> Trust:
        """`Trust(epoch, accepted, rejected, future, uid, is_contested)` of this Trust's own,
        where `accepted` holds this Trust's accepted reports but for `moved`, each of which
        replaces the one of its kind and name by one stamped and received no earlier (a
        heartbeat; a report moved twice is in `moved` in its last version). Its newest report
        and `heard_at` are then found from this Trust's and the moved reports alone: a report
        that moves no earlier cannot leave the latest behind."""
        newest, heard = self.newest, self.heard_at
        for report in moved:
            # The newest by (observed_at, kind, name): unique by kind and name, so an equal
            # key is the same report's new version.
            if newest is None or _NEWEST(report) >= _NEWEST(newest):
                newest = report
            if heard is None or report.aged_from > heard:
                heard = report.aged_from
        return Trust(
            self.epoch,
            accepted,
            self.rejected,
            self.future,
            self.uid,
            self.is_contested,
            newest=newest,
            heard_at=heard,
        )

    @property
    def identity(self) -> str:
        """The identity of the newest accepted report ("" when none)."""
        return self.newest.identity if self.newest is not None else ""

    @property
    def observed_at(self) -> datetime | None:
        """When the hub last heard from the agent (`heard_at`): what its freshness is judged
        from, and what `status.agent.observedAt` publishes."""
        return self.heard_at


#: The sort keys of reports (attrgetters: a cluster is judged again on every heartbeat).
_NEWEST: Final = operator.attrgetter("observed_at", "kind", "name")
_AT: Final = operator.attrgetter("observed_at")
_AGED: Final = operator.attrgetter("aged_from")
_KIND: Final = operator.attrgetter("kind")
_ORDER: Final = operator.attrgetter("kind", "name")


def judge(
    reports: Iterable[AgentReport],
    known: Fence | int | None,
    horizon: datetime | None = None,
    *,
    now: datetime | None = None,
    heard_at: datetime | None = None,
    silence_s: float | None = None,
) -> Trust:
    """Accept the reports of the cluster's fence (fence.py): its Lease incarnation's highest
    epoch seen or remembered (`known`; an int is an epoch of an unknown incarnation); ignore
    the others. Another incarnation takes over once the fenced one, last heard at `heard_at`
    or in its reports, has been silent for `silence_s` at `now`.

    Reports stamped after `horizon` (now plus the clock-skew tolerance) are set aside first:
    they are not accepted and count for no fence (fail closed). One of the fenced incarnation
    at an older epoch is rejected as any older report is; the others are `future`."""
    if isinstance(known, int):
        known = Fence("", known)
    reports = sorted(reports, key=_ORDER)
    if horizon is not None and reports and max(map(_AT, reports)) > horizon:
        present = [r for r in reports if r.observed_at <= horizon]
        judged = judge(present, known, now=now, heard_at=heard_at, silence_s=silence_s)
        ahead = [r for r in reports if r.observed_at > horizon]
        fence = judged.fence
        old = [r for r in ahead if fence is not None and _is_older(r, fence)]
        future = tuple(r for r in ahead if fence is None or not _is_older(r, fence))
        rejected = tuple(sorted([*judged.rejected, *old], key=_ORDER))
        return Trust(
            judged.epoch, judged.accepted, rejected, future, judged.uid, judged.is_contested
        )
    fence, is_contested = choose_fence(reports, known, heard_at, now, silence_s)
    if fence is None:
        return Trust(None, (), ())
    if all(is_fenced(r, fence) for r in reports):  # all of one epoch, as between lease changes
        return Trust(fence.epoch, tuple(reports), (), (), fence.uid, is_contested)
    return Trust(
        fence.epoch,
        tuple(r for r in reports if is_fenced(r, fence)),
        tuple(r for r in reports if not is_fenced(r, fence)),
        (),
        fence.uid,
        is_contested,
    )


def _is_older(report: AgentReport, fence: Fence) -> bool:
    """Of the fenced incarnation at an older epoch (a future report's one is still stale)."""
    return report.lease_uid == fence.uid and report.lease_epoch < fence.epoch


def freshness(observed_at: datetime, now: datetime, config: ControllerConfig) -> tuple[int, str]:
    """(age in whole seconds, state) of something observed at `observed_at`."""
    age_s = max(0.0, (now - observed_at).total_seconds())
    if age_s > config.expire_after_s:
        state = _EXPIRED
    elif age_s > config.stale_after_s:
        state = _STALE
    else:
        state = _FRESH
    return int(age_s), state


# --- cluster status -----------------------------------------------------------------------


def published_observation(
    report: AgentReport,
    now: datetime,
    config: ControllerConfig,
    pool: ReadObj | None = None,
    klass: ReadObj | None = None,
    checked: Mapping[str, Implausible | None] | None = None,
) -> Obj:
    """A pool report as `status.gpuPools[].observation` (shapes.md), in one piece.

    Histogram and `lastAllocationTime` come from the same report, so they describe one
    instant. An absent `lastAllocationTime` stays absent (a value published before is cleared).
    A histogram over the bucket cap is left out and says so in `HistogramAvailable`, so the
    pool falls back to whole-node accounting alone, instead of failing the whole status.

    With the declared `pool` and its `klass`, a report whose numbers cannot be true of them
    (`plausible.check_pool_report`) is refused the same way: no histogram, no excluded nodes or
    extended resources, `observedNodes` at most the pool's ceiling, and
    `HistogramAvailable=False` / `ImplausibleReport` with the rule and the numbers. `checked`
    holds what `check_pool_report` found already, by pool name (`pool_verdicts`).
    """
    if pool is not None and klass is not None:
        name = str(pool.get("name"))
        if checked is not None and name in checked:
            implausible = checked[name]
        else:
            implausible = check_pool_report(report.body["status"], pool, klass)
        if implausible is not None:
            return _refused(report, now, config, pool_ceiling(pool), implausible.message)
    status = report.body["status"]
    age_s, state = freshness(report.aged_from, now, config)
    conditions: list[Obj] = list(status.get("conditions") or [])
    observation: Obj = {
        "observedAt": status["observedAt"],
        "ageSeconds": age_s,
        "state": state,
        "observedNodes": status["observedNodes"],
    }
    buckets = status.get("freeDevices")
    if buckets is not None and len(buckets) > config.max_histogram_buckets:
        message = (
            f"{len(buckets)} buckets over the cap of {config.max_histogram_buckets}: "
            "whole-node accounting for this pool"
        )
        capped = condition(HISTOGRAM_AVAILABLE, "False", TOO_MANY_BUCKETS, message)
        conditions = [c for c in conditions if c.get("type") != HISTOGRAM_AVAILABLE]
        conditions.insert(0, capped)
    elif buckets is not None:
        observation["freeDevices"] = buckets
    if status.get("lastAllocationTime"):
        observation["lastAllocationTime"] = status["lastAllocationTime"]
    observation["excludedNodes"] = dict(status.get("excludedNodes") or {})
    observation["extendedResources"] = dict(status.get("extendedResources") or {})
    if status.get("shareableRoom") is not None:
        observation["shareableRoom"] = dict(status["shareableRoom"])
    observation["conditions"] = conditions
    return observation


def _refused(
    report: AgentReport, now: datetime, config: ControllerConfig, ceiling: int, message: str
) -> Obj:
    """An implausible pool report published as unobserved: whole-node accounting."""
    status = report.body["status"]
    age_s, state = freshness(report.aged_from, now, config)
    observed = status.get("observedNodes")
    in_range = isinstance(observed, int) and 0 <= observed <= ceiling
    refused = condition(HISTOGRAM_AVAILABLE, "False", IMPLAUSIBLE_REPORT, message)
    return {
        "observedAt": status["observedAt"],
        "ageSeconds": age_s,
        "state": state,
        "observedNodes": observed if in_range else ceiling,
        "excludedNodes": {},
        "extendedResources": {},
        "conditions": [refused],
    }


def _aged(observation: ReadObj, now: datetime, config: ControllerConfig) -> Obj:
    """A previously published observation with its age and state brought up to `now`."""
    aged = copy_obj(observation)
    observed_at = parse_time(aged.get("observedAt"))
    if observed_at is not None:
        aged["ageSeconds"], aged["state"] = freshness(observed_at, now, config)
    return aged


def _ready(
    current: Sequence[ReadObj],
    trust: Trust,
    agent: ReadObj | None,
    now: datetime,
    config: ControllerConfig,
) -> Obj | None:
    """The controller's `Ready` condition, or None when it must not write one."""
    if not config.manages_ready:
        return None
    existing = find_condition(current, READY)
    if existing is not None and existing.get("reason") not in {r.value for r in ReadyReason}:
        return None  # another writer owns it
    observed_at = trust.observed_at or parse_time((agent or {}).get("observedAt"))
    if observed_at is None:
        return condition(
            READY, "False", ReadyReason.AGENT_NOT_REPORTING, "no agent has reported yet"
        )
    _, state = freshness(observed_at, now, config)
    if state == Freshness.EXPIRED:
        return condition(
            READY,
            "False",
            ReadyReason.AGENT_EXPIRED,
            f"the agent has been silent for more than {format_duration(config.expire_after_s)}",
        )
    identity = trust.identity or (agent or {}).get("identity", "")
    behind = trust.newest.clock_behind_s if trust.newest is not None else None
    if behind is not None:
        return condition(
            READY,
            "True",
            ReadyReason.CLOCK_BEHIND,
            f"agent {identity} reports with lease epoch {trust.epoch}, but its clock is "
            f"{behind:.0f}s behind the hub's (more than expireAfter, {config.expire_after_s:g}s): "
            "its reports are aged from when the hub received them; fix the agent's clock",
        )
    return condition(
        READY,
        "True",
        ReadyReason.AGENT_REPORTING,
        f"agent {identity} reports with lease epoch {trust.epoch}",
    )


def cluster_status(
    cluster: ReadObj,
    classes: Mapping[str, ReadObj],
    trust: Trust,
    now: datetime,
    config: ControllerConfig,
    checked: Mapping[str, Implausible | None] | None = None,
) -> Obj:
    """The desired `CLUSTER_OWNED` keys of one InferenceCluster's status.

    `trust` holds the cluster's judged reports (pool reports among them, named after pools);
    `checked` what `check_pool_report` found of them already (`pool_verdicts` of this cluster
    object, classes and trust), by pool name.

    The result shares what it takes whole from the reports and classes (histograms, report
    conditions, class devices): like every object the step reads, it is never changed in
    place, and whoever writes it copies what it keeps (the store's `merged`).
    """
    name = cluster["metadata"]["name"]
    current: Obj = cluster.get("status") or {}
    published = {p.get("name"): p for p in current.get("gpuPools") or []}
    pool_reports = {r.name: r for r in trust.pools}
    rejected_pools = {r.name for r in (*trust.rejected, *trust.future) if r.kind == POOL}
    gpu_pools: list[Obj] = []
    missing: list[str] = []
    for pool in (cluster.get("spec") or {}).get("nodePools") or []:
        pool_name, class_name = pool["name"], pool["className"]
        klass = classes.get(class_name)
        if klass is None:
            missing.append(f"pool {pool_name}: InferenceClass {class_name} not found")
            continue
        max_nodes = pool.get("maxNodeCount")
        entry: Obj = {
            "name": pool_name,
            "nodes": max_nodes if max_nodes is not None else pool.get("nodeCount", 1),
            "devices": klass["spec"]["devices"],
        }
        report = pool_reports.get(pool_name)
        previous = (published.get(pool_name) or {}).get("observation")
        if report is not None:
            entry["observation"] = published_observation(report, now, config, pool, klass, checked)
        elif pool_name in rejected_pools and previous is not None:
            entry["observation"] = _aged(previous, now, config)
        gpu_pools.append(entry)

    desired: Obj = {"gpuPools": gpu_pools}
    agent = current.get("agent")
    if trust.epoch is not None and trust.accepted:
        observed_at = trust.observed_at
        desired["agent"] = {
            "identity": trust.identity,
            "leaseEpoch": trust.epoch,
            **({"leaseUID": trust.uid} if trust.uid else {}),
            **({"observedAt": format_time(observed_at)} if observed_at else {}),
        }
    elif agent is not None:
        desired["agent"] = copy_json(agent)
    if current.get("gateway") is not None:
        desired["gateway"] = copy_json(current["gateway"])
    elif config.default_gateway_address:
        desired["gateway"] = {"address": config.default_gateway_address.format(cluster=name)}

    conditions: list[Obj] = list(current.get("conditions") or [])
    generation = cluster["metadata"].get("generation")
    ready = _ready(conditions, trust, desired.get("agent"), now, config)
    if ready is not None:
        conditions = set_condition(conditions, ready, now, generation)
    if missing:
        pools_condition = condition(POOLS_PUBLISHED, "False", "ClassNotFound", "; ".join(missing))
    else:
        pools_condition = condition(POOLS_PUBLISHED, "True", "AllPoolsPublished")
    conditions = set_condition(conditions, pools_condition, now, generation)
    conditions = _report_times(conditions, trust, now, generation, config)
    desired["conditions"] = _agent_version(conditions, trust, now, generation, config)
    return desired


def _agent_version(
    conditions: list[Obj],
    trust: Trust,
    now: datetime,
    generation: int | None,
    config: ControllerConfig,
) -> list[Obj]:
    """`AgentVersionSupported=False` while the newest accepted report's agent version is
    outside the hub's version-skew window (skew.py); no such condition otherwise. The
    report is used either way."""
    newest = trust.newest
    version = None
    if newest is not None:
        version = ((newest.body.get("status") or {}).get("agent") or {}).get("version")
    skewed = skew_condition(version, config.hub_version)
    if skewed is None:
        return drop_condition(conditions, AGENT_VERSION)
    return set_condition(conditions, skewed, now, generation)


def future_message(trust: Trust, config: ControllerConfig) -> str:
    """Why the cluster's future-stamped reports are not accepted ("" when none is)."""
    if not trust.future:
        return ""
    names = ", ".join(f"{r.kind} {r.name}" for r in trust.future)
    return (
        f"{len(trust.future)} report(s) stamped more than "
        f"{format_duration(config.max_clock_skew_s)} ahead "
        f"of the controller's clock are not accepted (check the agent's clock): {names}"
    )


def _report_times(
    conditions: list[Obj],
    trust: Trust,
    now: datetime,
    generation: int | None,
    config: ControllerConfig,
) -> list[Obj]:
    """`ReportTimesValid=False/FutureTimestamp` while a report is stamped in the future;
    no such condition otherwise."""
    message = future_message(trust, config)
    if not message:
        return drop_condition(conditions, REPORT_TIMES)
    future = condition(REPORT_TIMES, "False", FUTURE_TIMESTAMP, message)
    return set_condition(conditions, future, now, generation)


def pool_verdicts(
    cluster: ReadObj, classes: Mapping[str, ReadObj], trust: Trust
) -> dict[str, Implausible | None]:
    """Pool name -> what `check_pool_report` finds of its accepted report (None: plausible),
    for each pool with an accepted report and a class: checked once per publish, for its
    events (`implausible_pools`) and its status (`cluster_status`)."""
    reports = {r.name: r for r in trust.pools}
    verdicts: dict[str, Implausible | None] = {}
    for pool in (cluster.get("spec") or {}).get("nodePools") or []:
        report = reports.get(pool["name"])
        klass = classes.get(pool["className"])
        if report is None or klass is None:
            continue
        verdicts[pool["name"]] = check_pool_report(report.body["status"], pool, klass)
    return verdicts


@dataclass(slots=True)
class VerdictMemo:
    """`pool_verdicts` of one cluster, checked again only when what they read moved: each
    declared pool (`spec.nodePools[]`), its class's uid and resourceVersion, and its accepted
    report but for the report's stamp (`check_pool_report` reads no time). A heartbeat that
    moved only `observedAt`, the most common report, finds the verdicts found before. The
    verdicts returned are shared: read, never changed."""

    inputs: tuple[object, ...] | None = None
    verdicts: dict[str, Implausible | None] = field(default_factory=dict)

    def of(
        self, cluster: ReadObj, classes: Mapping[str, ReadObj], trust: Trust
    ) -> dict[str, Implausible | None]:
        """`pool_verdicts(cluster, classes, trust)`."""
        inputs = _verdict_inputs(cluster, classes, trust)
        if inputs != self.inputs:
            self.inputs, self.verdicts = inputs, pool_verdicts(cluster, classes, trust)
        return self.verdicts


def _verdict_inputs(
    cluster: ReadObj, classes: Mapping[str, ReadObj], trust: Trust
) -> tuple[object, ...]:
    reports = {r.name: r for r in trust.pools}
    inputs: list[object] = []
    for pool in (cluster.get("spec") or {}).get("nodePools") or []:
        klass = classes.get(pool["className"])
        report = reports.get(pool["name"])
        meta = klass["metadata"] if klass is not None else {}
        inputs.append(
            (
                pool,
                meta.get("uid"),
                meta.get("resourceVersion"),
                None if report is None else _untimed(report.body),
            )
        )
    return tuple(inputs)


def implausible_pools(verdicts: Mapping[str, Implausible | None]) -> dict[str, str]:
    """Pool name -> why its accepted report was refused (`plausible`), for events."""
    return {name: v.message for name, v in verdicts.items() if v is not None}


def cluster_states(
    cluster: ReadObj, trust: Trust, now: datetime, config: ControllerConfig
) -> tuple[str, ...]:
    """Everything `cluster_status` derives from `now`, ages aside: the freshness state of each
    time it judges (the newest report, for `Ready`; each pool's accepted report; a rejected
    pool's previous publication; the agent's last published report). With the same cluster
    object, classes and trust, equal states mean an equal status but for ages."""
    return states_at(cluster_times(cluster, trust), now, config)


def states_at(
    times: Iterable[datetime | None], now: datetime, config: ControllerConfig
) -> tuple[str, ...]:
    """The freshness state at `now` of each of `times` ("" for None), for `cluster_states`."""
    return tuple("" if t is None else freshness(t, now, config)[1] for t in times)


def next_state_change(
    times: Iterable[datetime | None], states: Iterable[str], config: ControllerConfig
) -> datetime | None:
    """The earliest time after which one of `times` (in `states`, `states_at` them at some
    `now`) may be in another freshness state: up to and at it, every state is the same (a
    state moves once the age is *over* its limit). None when every time is Expired or None."""
    limits = {
        _FRESH: timedelta(seconds=config.stale_after_s),
        _STALE: timedelta(seconds=config.expire_after_s),
    }
    due: datetime | None = None
    for t, state in zip(times, states, strict=True):
        limit = limits.get(state)
        if t is not None and limit is not None:
            moves = t + limit
            if due is None or moves < due:
                due = moves
    return due


def cluster_times(cluster: ReadObj, trust: Trust) -> tuple[datetime | None, ...]:
    """The times whose freshness `cluster_states` judges, in its order: a function of the
    cluster object and the Trust alone. A time `cluster_status` does not read is None in its
    place: the agent's published report time while the Trust has a report time of its own
    (`_ready` reads that one), and a published pool observation's time unless the pool's
    report is rejected with none accepted (`_aged` reads that one)."""
    current = cluster.get("status") or {}
    accepted = trust.pools
    times: list[datetime | None] = [
        trust.observed_at,
        None
        if trust.observed_at is not None
        else parse_time((current.get("agent") or {}).get("observedAt")),
    ]
    times += [r.aged_from for r in accepted]
    aged = {r.name for r in (*trust.rejected, *trust.future) if r.kind == POOL}
    aged -= {r.name for r in accepted}
    times += [
        parse_time((pool.get("observation") or {}).get("observedAt"))
        if pool.get("name") in aged
        else None
        for pool in current.get("gpuPools") or []
    ]
    return tuple(times)


def cluster_inputs(trust: Trust, is_refresh_due: bool) -> tuple[object, ...]:
    """What `cluster_status` reads of the judged reports, for `SettledCache`: the fence and
    identity, and each pool report but for its time. The times enter through the freshness
    states (`cluster_states`), and themselves only when a refresh is due, so a heartbeat
    that changed nothing else leaves these inputs equal."""
    pools = tuple((r.name, r.identity, r.lease_epoch, _untimed(r.body)) for r in trust.pools)
    rejected = tuple(r.name for r in trust.rejected if r.kind == "PoolObservation")
    future = tuple((r.kind, r.name) for r in trust.future)
    when = trust.observed_at if is_refresh_due else None
    return (trust.fence, trust.identity, pools, rejected, future, is_refresh_due, when)


def _untimed(body: ReadObj) -> dict[str, Any]:
    return _without(body.get("status") or {}, _STAMP)


def is_refresh_due(cluster: ReadObj, now: datetime, config: ControllerConfig) -> bool:
    """Whether the published report time is `status_refresh_s` old (or absent): a report that
    only moved the observation times is then published again."""
    agent = (cluster.get("status") or {}).get("agent") or {}
    published = parse_time(agent.get("observedAt"))
    return published is None or (now - published).total_seconds() >= config.status_refresh_s


def without_times(status: Mapping[str, Any]) -> Obj:
    """`status` without the observation times (`agent.observedAt`, and each pool's
    `observedAt` and `ageSeconds`): what a report that only heartbeats leaves unchanged."""
    stripped = _without_keys(status, _TIMES)
    agent = stripped.get("agent")
    if isinstance(agent, Mapping) and "observedAt" in agent:
        stripped["agent"] = _without(agent, _STAMP)
    return stripped


#: What `without_ages` and `without_times` leave out of each pool's observation.
_AGES: Final = frozenset({"ageSeconds"})
_TIMES: Final = frozenset({"ageSeconds", "observedAt"})
_STAMP: Final = frozenset({"observedAt"})


def _without_keys(status: Mapping[str, Any], keys: frozenset[str]) -> Obj:
    """`status` (a shallow copy) with `keys` left out of each `gpuPools[].observation`, in
    one pass: only the path to an observation that has one of them is copied."""
    stripped = dict(status)
    pools = stripped.get("gpuPools")
    if isinstance(pools, list):
        stripped["gpuPools"] = [_pool_without(pool, keys) for pool in pools]
    return stripped


def _pool_without(pool: Any, keys: frozenset[str]) -> Any:
    observation = pool.get("observation") if isinstance(pool, Mapping) else None
    if not isinstance(observation, Mapping) or keys.isdisjoint(observation):
        return pool
    return {**pool, "observation": _without(observation, keys)}


def _without(mapping: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """A shallow copy of `mapping` without `keys` (copied whole, then the keys taken out:
    several times faster than filtering each key)."""
    out = dict(mapping)
    for key in keys:
        out.pop(key, None)
    return out


def without_ages(status: Mapping[str, Any]) -> Obj:
    """`status` without `gpuPools[].observation.ageSeconds`, for comparing publishes.

    Only the path to each observation is copied: the result is for comparing, never written
    or changed, so it shares the rest with `status`."""
    return _without_keys(status, _AGES)


# --- replica status -----------------------------------------------------------------------


def _pods_message(pools: Sequence[Mapping[str, Any]]) -> str:
    live = sum(m.get("livePods", 0) for p in pools for m in p.get("members") or [])
    allocated = sum(m.get("allocatedPods", 0) for p in pools for m in p.get("members") or [])
    return f"{allocated} of {live} live pods have their devices allocated"


def _unschedulable_message(pools: Sequence[Mapping[str, Any]]) -> str:
    """What the pools say of unschedulable pods; empty when none are."""
    parts = []
    for p in pools:
        pods = p.get("unschedulablePods") or 0
        if not pods:
            continue
        text = f"{pods} claiming pod(s) on pool {p.get('name')} Unschedulable"
        if p.get("unschedulableSince"):
            text += f" since {p['unschedulableSince']}"
        if p.get("scaleUp"):
            verdict = "TriggeredScaleUp" if p["scaleUp"] == "Triggered" else "NotTriggerScaleUp"
            at = f" at {p['scaleUpTime']}" if p.get("scaleUpTime") else ""
            text += f" (autoscaler: {verdict}{at})"
        parts.append(text)
    return "; ".join(parts)


def replica_status(
    replica: ReadObj, report: AgentReport | None, is_rejected: bool, now: datetime
) -> Obj:
    """The desired `REPLICA_OWNED` keys of a ModelReplica's status.

    `report` is the replica's accepted ReplicaObservation. With none, and an observation that
    was rejected (`is_rejected`), what was published stays; with none at all the replica is
    `NotObserved` and its pod counts are cleared (so it is charged in full: errs toward full).
    """
    current: Obj = replica.get("status") or {}
    conditions: list[Obj] = list(current.get("conditions") or [])
    cluster = (replica.get("spec") or {}).get("clusterName", "")
    generation = int(replica["metadata"].get("generation") or 1)
    desired: Obj = {}
    if report is None:
        has_condition = find_condition(conditions, MODEL_PODS_SCHEDULED) is not None
        if is_rejected and has_condition:
            return {k: copy_json(current[k]) for k in REPLICA_OWNED if k in current}
        not_observed = condition(
            MODEL_PODS_SCHEDULED,
            "False",
            PodsReason.NOT_OBSERVED,
            f"no report about this replica from cluster {cluster}'s agent",
        )
        desired["conditions"] = set_condition(conditions, not_observed, now, generation)
        return desired
    status = report.body["status"]
    observed_generation = status.get("observedGeneration")
    pools = copy_json(list(status.get("pools") or []))
    if observed_generation is not None:
        desired["observedGeneration"] = observed_generation
    desired["pools"] = pools
    denied = find_condition(status.get("conditions") or [], "PolicyAllowed")
    if denied is not None and denied.get("status") == "False":
        pods = condition(
            MODEL_PODS_SCHEDULED,
            "False",
            PodsReason.POLICY_DENIED,
            f"cluster {cluster}'s agent refused it: {denied.get('message', '')}",
        )
    elif observed_generation != generation:
        counted = (
            f"generation {observed_generation}"
            if observed_generation is not None
            else "no generation"
        )
        pods = condition(
            MODEL_PODS_SCHEDULED,
            "False",
            PodsReason.GENERATION_MISMATCH,
            f"the agent counted pods of {counted}; the replica is at generation {generation}",
        )
    elif not status.get("podsScheduled"):
        stuck = _unschedulable_message(pools)
        pods = condition(
            MODEL_PODS_SCHEDULED,
            "False",
            PodsReason.PODS_UNSCHEDULABLE if stuck else PodsReason.PODS_PENDING,
            f"{_pods_message(pools)}: {stuck}" if stuck else _pods_message(pools),
        )
    else:
        pods = condition(
            MODEL_PODS_SCHEDULED,
            "True",
            PodsReason.ALL_PODS_ALLOCATED,
            f"all pods of generation {generation} have their devices allocated",
        )
    desired["conditions"] = set_condition(conditions, pods, now, generation)
    return desired


def is_pods_scheduled(status: Mapping[str, Any]) -> bool:
    found = find_condition(status.get("conditions") or [], MODEL_PODS_SCHEDULED)
    return found is not None and found.get("status") == "True"
