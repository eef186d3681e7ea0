"""`Controller`: the hub's reconcile step, `step(now) -> StepResult`. Thin Store I/O only.

The shape is client-go's (informer -> dirty keys -> sync of each key), docs/controller.md:

    Store.changes(cursor) --> HubIndex (parse once per version) --> dirty keys per concern
                                  |  + assume ledger overlay           |
                                  v                                    v
                         step: trust -> cluster statuses -> replica statuses -> schedule -> apply
                                                                                      |
                                                                                writes to the hub

One step, in this order:

1. Sync the index (index.py) from the change feed, and overlay the assume ledger: the keys
   whose effective object changed mark what depends on them dirty.
2. Trust: judge each cluster whose reports or known epoch changed (reports.py, status.py);
   write a `StaleAgentReport` event for each ignored report (once per situation).
3. Publish the status (`gpuPools`, `agent`, `Ready`, `gateway`) of each dirty cluster: its
   object, its reports or a class changed, or one of its times crosses into another
   freshness state, or its status refresh falls due (`status_refresh_s`).
4. Publish the status (`ModelPodsScheduled`, `observedGeneration`, `pools`) of each dirty
   replica: its object or the reports about it changed.
5. Schedule the whole fleet once, when a scheduling input changed (a class, a cluster as the
   core reads it, a deployment's spec, a replica) or a cluster's freshness did: build the core
   `Snapshot`, call the pure `schedule(snapshot, now)`, and apply each deployment decision
   that differs from the last one applied (or whose deployment or replicas changed since):
   delete dropped replicas, update re-stamped ones, create new ones, write the deployment's
   status and events. A step that schedules nothing is *quiet*: its decision is the last one.

Every write compares first (nothing is written when nothing changed), carries the
resourceVersion it read, and on `Conflict` re-reads and recomputes, at most
`max_conflict_retries` times. A write that still fails is an error in the `StepResult` (and the
log), and the next step takes every key as dirty. A deployment whose replica writes failed
gets no status write that step, so its status never claims what was not applied. Scheduling is
skipped entirely (fail closed) when any class, cluster or replica cannot be read: a partial
view could delete replicas or double-book devices.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpufleet.api import InferenceClass, InferenceCluster, cluster_from_manifest
from gpufleet.api.times import parse_time
from gpufleet.controller import dues
from gpufleet.controller import replicas as replica_docs
from gpufleet.controller.apply import DecisionApplier
from gpufleet.controller.barrier import FaultPoint, Faults, Quarantine, describe
from gpufleet.controller.conditions import Obj, ReadObj, is_owned_equal
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.dues import untimed as _untimed
from gpufleet.controller.fence import known_fence, published_fence
from gpufleet.controller.index import (
    HubIndex,
    Key,
    Record,
    is_deleting,
    name_of,
    version_of,
)
from gpufleet.controller.inputs import SchedulingInputs
from gpufleet.controller.replace import Replacer, is_waiting
from gpufleet.controller.replicas import OrphanWatch
from gpufleet.controller.report_events import ReportEvents
from gpufleet.controller.reports import NO_TRUST, FleetReports
from gpufleet.controller.result import StepResult
from gpufleet.controller.status import (
    CLUSTER_OWNED,
    REPLICA_OWNED,
    AgentReport,
    Trust,
    cluster_inputs,
    cluster_status,
    cluster_times,
    is_refresh_due,
    next_state_change,
    replica_status,
    states_at,
    without_ages,
    without_times,
)
from gpufleet.controller.statuses import ClusterState, ClusterStatuses
from gpufleet.controller.writes import HubWriter, step_error
from gpufleet.core.model import Cluster, Deployment, SchedulingConfig
from gpufleet.core.reuse import ScheduleMemo
from gpufleet.core.schedule import SnapshotError
from gpufleet.store import Kind, Store, StoreError
from gpufleet.store.port import (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

log = logging.getLogger(__name__)

__all__ = ["Controller", "StepResult"]


def _put(table: dict[Key, Any], key: Key, value: object) -> None:
    """Set `table[key]` (in place, keeping the table's order), or remove it for None."""
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _replica_desire(current: ReadObj, found: tuple[AgentReport | None, bool], now: datetime) -> Obj:
    return replica_status(current, found[0], found[1], now)


def _reported(cluster: Cluster, trust: Trust | None) -> Cluster:
    """`cluster` as fresh as its accepted reports: the published `status.agent.observedAt`
    is not rewritten for every heartbeat (`status_refresh_s`), the reports are."""
    if trust is None or not trust.accepted or cluster.agent_observed_at == trust.observed_at:
        return cluster
    return dataclasses.replace(cluster, agent_observed_at=trust.observed_at)


def _standing(trust: Trust) -> tuple[object, ...]:
    """What of a Trust a replica's status reads besides its own report."""
    future = tuple((r.kind, r.name) for r in trust.future)
    return (trust.fence, trust.rejected, future)


@dataclass(slots=True)
class _Dirty:
    """The keys a step must sync, per concern (client-go's workqueue, one per concern)."""

    #: Clusters whose status to publish.
    clusters: set[str] = field(default_factory=set)
    #: Clusters whose reports to judge again (a report came or went, or the object moved).
    trusts: set[str] = field(default_factory=set)
    #: Clusters whose core Cluster to convert again, or whose reports' time moved.
    cores: set[str] = field(default_factory=set)
    #: Replicas (namespace, name) whose status to publish.
    replicas: set[Key] = field(default_factory=set)
    #: Deployments (namespace, name) whose decision to apply again.
    deployments: set[Key] = field(default_factory=set)


class Controller(ReportEvents):
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
        faults: Faults | None = None,
    ) -> None:
        self.hub = hub
        self.config = config or ControllerConfig()
        self.identity = identity
        self.timer = timer
        #: The writes, with what correctness needs of them: the assume ledger and the events
        #: already recorded (writes.py).
        self.writer = HubWriter(hub, self.config, identity, self)
        #: Per cluster: its fence and receipts (correctness state), trust and dues.
        self.statuses = ClusterStatuses(self.config.expire_after_s)
        #: What the core derives from deployments and replicas, kept across steps.
        self.schedule_memo = ScheduleMemo()
        #: What was re-placed, and the backoffs that stand (replace.py).
        self.replacer = Replacer(self.config)
        #: Applies the decisions, through the writer, behind this controller's barrier.
        self.applier = DecisionApplier(self.writer, self, self.replacer)
        #: The objects whose processing raised, and their backoffs (barrier.py).
        config = self.config
        self.quarantine = Quarantine(config.fault_backoff_s, config.fault_backoff_max_s, faults)
        #: The step under way (its time and result): what `track` reports a failure in.
        self._step_at: tuple[datetime, StepResult] | None = None
        self._reset()

    def _reset(self) -> None:
        """Forget the hub: the next step lists it again, and every key is dirty."""
        #: The hub as last synced, every object parsed (index.py).
        self.index = HubIndex()
        self.reports = FleetReports()
        self.statuses.forget()
        #: The core's view of the hub: it emits the `Snapshot`, and says whether it moved.
        self.inputs = SchedulingInputs()
        self._dirty = _Dirty()
        self.applier.forget()
        #: Objects of this step that differ from the store (a status write that failed).
        self._unstored: set[tuple[Kind, Key]] = set()
        #: The replicas by deployment, and those `_collect` judges again.
        self.orphans = OrphanWatch()
        #: Per event prefix, the standing situations last seen (`forget_cleared`).
        self._alive: dict[str, set[tuple[str, ...]]] = {}

    # --- the step -------------------------------------------------------------------------

    def step(self, now: datetime) -> StepResult:
        result = StepResult(now)
        try:
            self._step(now, result)
        except Exception as e:
            log.exception("controller step failed")
            self._reset()  # list the hub again next step: no change read here is lost
            step_error(result, f"step failed: {describe(e)}")
        return result

    @property
    def quiet_steps(self) -> int:
        """Steps that found nothing to schedule (metrics, tests)."""
        return self.applier.quiet_steps

    def next_due(self, now: datetime) -> datetime | None:
        """When the next time-driven change falls due after `now`, with nothing changed on
        the hub (dues.py): the daemon steps then rather than on its resync alone."""
        statuses = self.statuses
        config = self.config
        times = (
            dues.after(dues.status_due(statuses.dues, statuses.status_dues())),
            dues.after(self.inputs.fresh_next),
            dues.trust_due(
                statuses.moving,
                statuses.trusts,
                statuses.heard(),
                config.max_clock_skew_s,
                config.expire_after_s,
            ),
            self.replacer.due,
            self.quarantine.next_due(),
            self.writer.ledger.next_expiry(),
        )
        return dues.earliest_after(now, times)

    def _step(self, now: datetime, result: StepResult) -> None:
        self._step_at = (now, result)
        self.writer.ledger.expire(now)
        try:
            self._sync(now)
        except StoreError as e:
            self._reset()  # list again next step
            step_error(result, f"read: {e}")
            return
        self._requeue(now)
        classes, is_complete = self._classes(result)
        self._judge(now, result)
        records = self.index.records[INFERENCE_CLUSTER]
        for name in self._clusters_to_publish(now):
            publish = functools.partial(self._publish_cluster, name, classes, now, result)
            obj = records[("", name)].obj
            _, is_done = self.behind_barrier(
                FaultPoint.PUBLISH, INFERENCE_CLUSTER, obj, now, result, publish
            )
            if not is_done:
                self.statuses.clusters.pop(name, None)  # computed again when it is retried
        self._publish_replicas(now, result)
        self.inputs.moved = self._collect(now, result) or self.inputs.moved
        if self.quarantine.faults is not None:
            self.quarantine.faults.check(FaultPoint.STEP, "", ("", ""))
        if is_complete:
            self._schedule(classes, now, result)
        else:
            step_error(result, "scheduling skipped: an InferenceClass cannot be read")
        result.assumed = len(self.writer.ledger)
        if result.errors:
            self._everything_dirty()  # a failed write is retried from scratch

    def _sync(self, now: datetime) -> None:
        """Read the change feed and mark what the changed keys make dirty."""
        index = self.index
        for kind, key in self._unstored:
            shown = index.mirror[kind].get(key)
            if shown is not None:
                index.put(kind, key, shown, force=True)
            self.track(kind, key)
        self._unstored = set()
        is_first = index.cursor is None
        moved = index.overlay(self.hub, self.writer.ledger, index.sync(self.hub))
        dirty = self._dirty
        if moved[INFERENCE_CLASS]:
            dirty.clusters.update(k[1] for k in index.records[INFERENCE_CLUSTER])
            dirty.cores.update(k[1] for k in index.records[INFERENCE_CLUSTER])
            self.inputs.moved = True
        for key in moved[INFERENCE_CLUSTER]:
            self.quarantine.touch(INFERENCE_CLUSTER.kind, key)
            dirty.clusters.add(key[1])
            dirty.trusts.add(key[1])
            dirty.cores.add(key[1])
            if not is_first:  # then every replica is dirty anyway
                self._replicas_on(key[1])
        for key in moved[MODEL_DEPLOYMENT]:
            dirty.deployments.add(key)
            record, last = (
                index.records[MODEL_DEPLOYMENT].get(key),
                index.previous[MODEL_DEPLOYMENT].get(key),
            )
            if record is None or last is None or record.signature != last.signature:
                self.inputs.moved = True
            self.quarantine.touch(MODEL_DEPLOYMENT.kind, key)
            self.track(MODEL_DEPLOYMENT, key)
        for key in moved[MODEL_REPLICA]:
            dirty.replicas.add(key)
            self.inputs.moved = True
            for record in (
                index.records[MODEL_REPLICA].get(key),
                index.previous[MODEL_REPLICA].get(key),
            ):
                if record is not None:
                    dirty.deployments.add(replica_docs.deployment_of(record.obj))
            self.quarantine.touch(MODEL_REPLICA.kind, key)
            self.track(MODEL_REPLICA, key)
        for kind in (POOL_OBSERVATION, REPLICA_OBSERVATION):
            records = index.records[kind]
            if is_first:
                self.statuses.receipts.keep(kind, records)
            for key in moved[kind]:
                self.quarantine.touch(kind.kind, key)
                self._receive(kind, key, now)
        index.forget_previous()
        if is_first:
            self._everything_dirty()

    def _requeue(self, now: datetime) -> None:
        """Mark dirty again the quarantined objects whose backoff ended (barrier.py)."""
        if not self.quarantine.held:
            return
        dirty = self._dirty
        for kind_name, key in self.quarantine.due(now):
            if kind_name == INFERENCE_CLUSTER.kind:
                dirty.clusters.add(key[1])
                dirty.trusts.add(key[1])
                dirty.cores.add(key[1])
            elif kind_name == MODEL_DEPLOYMENT.kind:
                self.track(MODEL_DEPLOYMENT, key)
                dirty.deployments.add(key)
            elif kind_name == MODEL_REPLICA.kind:
                self.track(MODEL_REPLICA, key)
                dirty.replicas.add(key)
            else:  # an observation: read it again
                is_pool = kind_name == POOL_OBSERVATION.kind
                self._receive(POOL_OBSERVATION if is_pool else REPLICA_OBSERVATION, key, now)
            self.inputs.moved = True

    def _receive(self, kind: Kind, key: Key, now: datetime) -> None:
        """File the observation at `key` again. A version that cannot be read is quarantined,
        and what its last version filed stands (its cluster ages from it, toward full)."""
        record = self.index.records[kind].get(key)

        def receive() -> tuple[set[str], set[Key]]:
            read = self.statuses.receipts.receive(kind, key, record, now)
            return self.reports.put(kind.kind, key, read)

        touched: tuple[set[str], set[Key]] | None = None
        if record is None:
            self.quarantine.forget(kind.kind, key)
            touched = receive()
        else:
            assert self._step_at is not None
            touched, _ = self.behind_barrier(
                FaultPoint.READ, kind, record.obj, now, self._step_at[1], receive
            )
        if touched is None:
            return
        clusters, replicas = touched
        dirty = self._dirty
        dirty.clusters |= clusters
        dirty.trusts |= clusters
        dirty.replicas |= replicas

    def unstore(self, kind: Kind, key: Key) -> None:
        """`key` differs from the store (a status write failed): read it again next step."""
        self._unstored.add((kind, key))

    def track(self, kind: Kind, key: Key) -> None:
        """Bring the step's tables of deployments and replicas up to the record at `key`."""
        record = self.index.records[kind].get(key)
        if kind == MODEL_DEPLOYMENT:
            tables: tuple[dict[Key, Any], ...] = (
                self.inputs.deployments,
                self.inputs.invalid,
                self.inputs.unread,
            )
        elif kind == MODEL_REPLICA:
            tables = (
                self.inputs.replica_objs,
                self.inputs.replica_cores,
                self.inputs.replica_errors,
                self.inputs.waiting,
            )
        else:
            return
        if record is None or is_deleting(record.obj):
            for table in tables:
                table.pop(key, None)
            self._watch(kind, key, None)
            if self.quarantine.held:
                self.quarantine.forget(kind.kind, key)
            return
        self._watch(kind, key, record.obj)
        assert self._step_at is not None
        now, result = self._step_at
        parsed, is_read = self.behind_barrier(
            FaultPoint.READ,
            kind,
            record.obj,
            now,
            result,
            functools.partial(getattr, record, "parsed"),
        )
        if not is_read or parsed is None:
            # Quarantined: a deployment is left out of the decision (its replicas are kept);
            # a replica is an input that cannot be read (scheduling fails closed).
            for table in tables:
                table.pop(key, None)
            if kind == MODEL_DEPLOYMENT:
                self.inputs.unread[key] = record.obj
            else:
                self.inputs.replica_objs[key] = record.obj
                self.inputs.replica_errors[key] = f"ModelReplica {name_of(record.obj)}: quarantined"
            return
        if kind == MODEL_DEPLOYMENT:
            checked = parsed
            good = isinstance(checked, Deployment)
            _put(self.inputs.deployments, key, (record.obj, checked) if good else None)
            _put(self.inputs.invalid, key, None if good else (record.obj, checked))
            return
        core, error = parsed
        self.inputs.replica_objs[key] = record.obj
        _put(self.inputs.replica_errors, key, error or None)
        _put(self.inputs.replica_cores, key, core if not error else None)
        waits = not error and is_waiting(core, record.obj)
        _put(self.inputs.waiting, key, (core, record.obj) if waits else None)

    def _watch(self, kind: Kind, key: Key, obj: ReadObj | None) -> None:
        """Tell `orphans` of a change of the step's deployment or replica at `key`."""
        if kind == MODEL_DEPLOYMENT:
            self.orphans.deployment(key)
        else:
            self.orphans.replica(key, obj)

    def _replicas_on(self, cluster: str) -> None:
        """Mark dirty the replicas of `cluster` (their reports come and go with its trust)."""
        for key, record in self.index.records[MODEL_REPLICA].items():
            if (record.obj.get("spec") or {}).get("clusterName") == cluster:
                self._dirty.replicas.add(key)

    def _everything_dirty(self) -> None:
        records = self.index.records
        dirty = self._dirty
        names = [k[1] for k in records[INFERENCE_CLUSTER]]
        dirty.clusters.update(names)
        dirty.trusts.update(names)
        dirty.cores.update(names)
        dirty.replicas.update(records[MODEL_REPLICA])
        dirty.deployments.update(records[MODEL_DEPLOYMENT])
        self.inputs.moved = True
        self.orphans.everything()
        self.applier.applied = {}
        self.statuses.clusters = {}

    def _classes(self, result: StepResult) -> tuple[dict[str, ReadObj], bool]:
        classes: dict[str, ReadObj] = {}
        is_complete = True
        for key, record in sorted(self.index.records[INFERENCE_CLASS].items()):
            parsed, error = record.parsed
            if parsed is None:
                step_error(result, f"InferenceClass {name_of(record.obj)} is invalid: {error}")
                is_complete = False
                continue
            classes[key[1]] = record.obj
        return classes, is_complete

    # --- trust ----------------------------------------------------------------------------

    def _judge(self, now: datetime, result: StepResult) -> None:
        """Judge again the clusters whose reports or known epoch may have changed; repeat
        what every step reports of the reports it ignores and cannot read."""
        records = self.index.records[INFERENCE_CLUSTER]
        for error in self.reports.cluster_errors(records):
            step_error(result, error)
        judged, self._dirty.trusts = self._dirty.trusts, set()
        # Which reports are in the future moves with the clock: judge those clusters again.
        # (So does whether a contested fence's incarnation has been silent long enough.)
        judged |= self.statuses.moving
        for cluster in sorted(judged):
            record = records.get(("", cluster))
            if record is None:
                self.statuses.forget_cluster(cluster)
                self.quarantine.forget(INFERENCE_CLUSTER.kind, ("", cluster))
                continue
            judge = functools.partial(self._judge_cluster, cluster, record.obj, now)
            # (Quarantined: its trust stays the last one judged.)
            self.behind_barrier(FaultPoint.JUDGE, INFERENCE_CLUSTER, record.obj, now, result, judge)
        self._report_future(now, result)
        self._report_stale(now, result)

    def _judge_cluster(self, cluster: str, obj: ReadObj, now: datetime) -> None:
        state = self.statuses.clusters.setdefault(cluster, ClusterState())
        version, read = version_of(obj), state.fence_read
        if read is None or not version or read[0] != version:  # read again as it moves
            read = state.fence_read = (version or "", published_fence(obj))
        known, heard = known_fence(read[1], self.statuses.epochs.get(cluster))
        horizon = now + timedelta(seconds=self.config.max_clock_skew_s)
        trust = self.reports.judge(
            cluster, known, horizon, now=now, heard_at=heard, silence_s=self.config.expire_after_s
        )
        last = self.statuses.trusts.get(cluster)
        if last is not trust:
            self._dirty.clusters.add(cluster)
            self._dirty.cores.add(cluster)
            # (A cluster judged for the first time is new, or every replica is dirty.)
            if last is not None and _standing(last) != _standing(trust):
                self._replicas_on(cluster)
        self.statuses.judged(cluster, trust, known, heard)

    # --- published status -----------------------------------------------------------------

    def _clusters_to_publish(self, now: datetime) -> list[str]:
        """The dirty clusters and those due by `now`, in listing order."""
        names, self._dirty.clusters = self._dirty.clusters, set()
        names |= self.statuses.take_due(now)
        records = self.index.records[INFERENCE_CLUSTER]
        return sorted(n for n in names if ("", n) in records)

    def _publish_cluster(
        self, name: str, classes: Mapping[str, ReadObj], now: datetime, result: StepResult
    ) -> None:
        """Publish one cluster's status (it is dirty or due, `ClusterState`)."""
        state = self.statuses.clusters.setdefault(name, ClusterState())
        record = self.index.records[INFERENCE_CLUSTER][("", name)]
        cluster = record.obj
        trust = self.statuses.trusts.get(name) or NO_TRUST
        settled, is_due = self._settle(state, name, cluster, classes, trust, now)
        if settled == state.settled:
            return
        verdicts = state.verdicts.of(cluster, classes, trust)  # once, for events and status
        self._report_implausible(cluster, verdicts, now, result)

        def desire(current: ReadObj) -> Obj:
            # The verdicts hold for `cluster` (its pools); a version read again on Conflict
            # is checked again.
            checked = verdicts if version_of(current) == version_of(cluster) else None
            return cluster_status(current, classes, trust, now, self.config, checked)

        normalize = without_ages if is_due else without_times
        written = self.writer.write_status(
            INFERENCE_CLUSTER, cluster, desire, CLUSTER_OWNED, now, result, normalize
        )
        state.settled = settled if written is cluster else None
        if written is cluster:
            return
        if (INFERENCE_CLUSTER, ("", name)) in self._unstored:
            self._dirty.clusters.add(name)  # compute again next step, from the store's version
        else:
            # What was written is the status desired of it (`cluster_status` keeps its own
            # output): settled at its own inputs, so that the next step computes nothing
            # unless one of them moves.
            state.settled, _ = self._settle(state, name, written, classes, trust, now)
        if name not in self._dirty.cores and not is_owned_equal(
            # (A cluster judged again this step is dirty already: nothing to compare.)
            without_times(cluster.get("status") or {}),
            without_times(written.get("status") or {}),
            CLUSTER_OWNED,
        ):
            # The core reads the status (Ready, observations). A write that moved only
            # report times (a refresh, which needs accepted reports) changes nothing it
            # reads but through freshness, from the reports' newest time (`_reported`).
            self._dirty.cores.add(name)

    def _settle(
        self,
        state: ClusterState,
        name: str,
        cluster: ReadObj,
        classes: Mapping[str, ReadObj],
        trust: Trust,
        now: datetime,
    ) -> tuple[tuple[object, ...], bool]:
        """The inputs' signature of `cluster`'s status at `now` (`ClusterState.settled`)
        and whether a refresh is due; sets when its status next falls due by time alone."""
        times = cluster_times(cluster, trust)
        states = states_at(times, now, self.config)
        is_due = is_refresh_due(cluster, now, self.config)
        settled = (
            version_of(cluster),
            tuple((k, version_of(v)) for k, v in classes.items()),
            cluster_inputs(trust, is_due),
            states,
        )
        self.statuses.fall_due(name, state, self._due(cluster, times, states, now))
        return settled, is_due

    def _due(
        self,
        cluster: ReadObj,
        times: Sequence[datetime | None],
        states: Sequence[str],
        now: datetime,
    ) -> datetime | None:
        """When the cluster's status may next change with time alone: a time crossing into
        the next freshness state, or the published report time `status_refresh_s` old."""
        due = next_state_change(times, states, self.config)
        published = parse_time(((cluster.get("status") or {}).get("agent") or {}).get("observedAt"))
        if published is not None:
            refresh = published + timedelta(seconds=self.config.status_refresh_s)
            if refresh > now and (due is None or refresh < due):
                due = refresh
        return due

    def _publish_replicas(self, now: datetime, result: StepResult) -> None:
        """Publish the status of each dirty replica not being deleted, in listing order."""
        dirty, self._dirty.replicas = self._dirty.replicas, set()
        records = self.index.records[MODEL_REPLICA]
        for key in sorted(dirty):
            record = records.get(key)
            if record is None or is_deleting(record.obj):
                continue
            publish = functools.partial(self._publish_replica, key, record.obj, now, result)
            self.behind_barrier(FaultPoint.PUBLISH, MODEL_REPLICA, record.obj, now, result, publish)

    def _publish_replica(
        self, key: Key, replica: ReadObj, now: datetime, result: StepResult
    ) -> None:
        cluster = (replica.get("spec") or {}).get("clusterName", "")
        trust = self.statuses.trusts.get(cluster)
        found = self.reports.replica_reports(cluster, *key, trust)
        desire = functools.partial(_replica_desire, found=found, now=now)
        written = self.writer.write_status(
            MODEL_REPLICA, replica, desire, REPLICA_OWNED, now, result
        )
        if written is not replica:
            self.inputs.moved = True
            self._dirty.deployments.add(replica_docs.deployment_of(replica))

    # --- scheduling -----------------------------------------------------------------------

    def _update_cores(
        self,
        classes: Mapping[str, ReadObj],
        config: SchedulingConfig,
        now: datetime,
        result: StepResult,
    ) -> None:
        """Convert again the clusters whose object or a class changed (`SchedulingInputs.core`), and bring
        the others in `dirty.cores` (their reports' time moved) as fresh as their reports
        (`_reported`). A cluster that came, went or reads differently to the core, times
        aside (`_untimed`), is a scheduling input that changed."""
        names, self._dirty.cores = self._dirty.cores, set()
        if not names:
            return
        typed: dict[str, InferenceClass] = {}
        for key, klass in sorted(self.index.records[INFERENCE_CLASS].items()):
            if isinstance(klass.parsed[0], InferenceClass):
                typed[key[1]] = klass.parsed[0]
        signature_classes = tuple((k, version_of(v)) for k, v in classes.items())
        records = self.index.records[INFERENCE_CLUSTER]
        self.inputs.fresh_moved |= names  # their freshness may have moved
        for name in names:
            record = records.get(("", name))
            self.inputs.cluster_errors.pop(name, None)
            if record is None:
                self._update_core(name, None, typed, signature_classes, config)
                continue
            update = functools.partial(
                self._update_core, name, record, typed, signature_classes, config
            )
            _, is_read = self.behind_barrier(
                FaultPoint.READ, INFERENCE_CLUSTER, record.obj, now, result, update
            )
            if is_read:
                continue
            # Quarantined: the core reads it as last converted; never converted, it is an
            # input that cannot be read (scheduling fails closed).
            known = self.inputs.core.get(name)
            if known is not None:
                self.inputs.reported[name] = _reported(known[1], self.statuses.trusts.get(name))
            else:
                self.inputs.cluster_errors[name] = f"InferenceCluster {name}: quarantined"

    def _update_core(
        self,
        name: str,
        record: Record | None,
        typed: Mapping[str, InferenceClass],
        signature_classes: tuple[object, ...],
        config: SchedulingConfig,
    ) -> None:
        """Convert the cluster `name` again if its object or a class moved (`_update_cores`)."""
        parsed, error = record.parsed if record is not None else (None, "")
        if record is not None and parsed is None:
            self.inputs.cluster_errors[name] = f"InferenceCluster {name_of(record.obj)}: {error}"
        if record is None or not isinstance(parsed, InferenceCluster):
            if self.inputs.core.pop(name, None) is not None:
                self.inputs.moved = True
            self.inputs.reported.pop(name, None)
            return
        signature = (record.signature, signature_classes, config)
        known = self.inputs.core.get(name)
        if known is None or known[0] != signature:
            core = cluster_from_manifest(parsed, typed, config, signature[:2])
            untimed = None
            if known is None:
                self.inputs.moved = True
            elif not self.inputs.moved:  # (else the comparison would change nothing)
                untimed = _untimed(core)
                was = known[2] if known[2] is not None else _untimed(known[1])
                if was != untimed:
                    self.inputs.moved = True
            known = (signature, core, untimed)
            self.inputs.core[name] = known
        self.inputs.reported[name] = _reported(known[1], self.statuses.trusts.get(name))

    def _schedule(self, classes: Mapping[str, ReadObj], now: datetime, result: StepResult) -> None:
        config = self.config.scheduling()
        self._update_cores(classes, config, now, result)
        unreadable = self.inputs.unreadable()
        if unreadable:
            for line in unreadable:
                step_error(result, f"scheduling skipped: cannot read {line}")
            return
        self.applier.check_invalid(now, result)
        self._replace(now)
        fresh = self.inputs.freshness(now, config)
        if not self.inputs.moved and self.applier.is_settled(fresh):
            self.applier.quiet(result)
            return
        deployments: Mapping[Key, tuple[ReadObj, Deployment]] | None = None
        if self.quarantine.held:  # the quarantined ones wait out their backoff
            held = self.quarantine.is_held
            kind = MODEL_DEPLOYMENT.kind
            at = FaultPoint.SCHEDULE
            every = self.inputs.deployments
            deployments = {k: v for k, v in every.items() if not held(kind, k, now, at)}
        snapshot = self.inputs.snapshot(config, self.replacer.avoid, deployments)
        started = self.timer() if self.timer else None
        try:
            decision = self._decide(snapshot, now, result)
        except SnapshotError as e:
            step_error(result, f"scheduling skipped: {e}")
            return
        if started is not None and self.timer is not None:
            result.decision_latency_s = self.timer() - started
        result.decision = decision
        self.inputs.moved = False
        self.applier.apply(decision, fresh, self._dirty.deployments, now, result)
        self._dirty.deployments = set()

    def _replace(self, now: datetime) -> None:
        """Count the replicas stuck by `now` (replace.py); a change of what the core must
        avoid is a scheduling input that changed, for the deployments it names."""
        before = self.replacer.avoid
        if not self.inputs.waiting and not before:
            return
        if self.replacer.update(self.inputs.waiting, self.inputs.replica_objs, now):
            self.inputs.moved = True
            for entry in (*before, *self.replacer.avoid):
                self._dirty.deployments.add((entry.deployment.namespace, entry.deployment.name))
