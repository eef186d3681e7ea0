"""The agent's runner: one `Agent` per workload cluster, driven by `step(now)`.

A step has two halves, both through the `Store` port only:

1. **Observe and report.** List the cluster's Nodes, ResourceSlices, ResourceClaims and Pods
   and the ModelReplicas assigned to the cluster on the hub (from its hub namespace
   `gpufleet-cluster-<cluster>`, the only one it may read: `gpufleet.agent.hub`), and the
   cluster's own InferenceCluster on the hub for the pools it declares (by name, at most once
   per heartbeat interval; each is reported, at zero nodes when the agent sees none: a cluster
   whose pools are all at zero nodes still reports, and its autoscaled pools can grow from
   zero); run the pure observe core (`gpufleet.agent.observe`) with the allocation clock the
   Agent keeps between steps; write one PoolObservation per pool and one ReplicaObservation
   per replica to the hub namespace `gpufleet-cluster-<cluster>`, stamped with
   `status.agent: {identity, leaseEpoch, leaseUID}` and `status.observedAt`. Observations of
   replicas that are gone are deleted. A pool with a PoolObservation on the hub that the agent no longer
   sees (its nodes all gone, no replica pins it) is reported empty (no nodes, so the hub counts
   only growth) rather than left stale: a stale report of free devices errs toward "free".
2. **Materialize** (`gpufleet.agent.workloads`). Make the cluster's ResourceClaimTemplates,
   Deployments and LeaderWorkerSets equal what `materialize` wants for the assigned replicas:
   create what is missing, update what differs, delete what no replica wants.

Reports are pushed when their content (everything but `observedAt`) changed, or when a
heartbeat interval passed since the last push, but never sooner than a minimum interval after
the last push (debounce). A heartbeat refreshes `observedAt` on the PoolObservations; a
ReplicaObservation is written only when its content changed (or someone else wrote it), so a
heartbeat costs the hub one write per pool, not one per replica. Nor does it cost the agent
a comparison per replica: unchanged content is the same objects step after step (an entry, and
a whole mapping, of the report are reused), and an entry that is the one the last complete push
wrote, whose observation the hub still holds at the version that push left, is not looked at.
A push that fails (the hub unreachable) is retried on the next step.
When the hub cannot be read the step changes nothing locally: a partition must not look like
"every replica was deleted".

Conflicts (`Conflict`: stale resourceVersion) are retried by re-reading, a bounded number of
times. A restarted agent is a new `Agent`: its allocation clock is empty (every allocated
claim is stamped with the restart time, which errs toward charging) and it pushes at once.

A step costs what changed since the last one, not every object: the Agent observes through its
`FreeDeviceTable`, fed by the cluster's change feed (`ClusterFeed`), which rebuilds only the pools
and replicas a change touches and says which replica observations changed, so only their report
entries are made again. Materialize looks only at the replicas and local objects whose
resourceVersion moved (or that came or went) since its last call and at what it wrote last
(`Workloads`); and a push patches the observations it wrote last without reading them back
(guarded by their resourceVersion), and leaves alone those the hub holds at the version its
last push left (the versions on the hub are kept from the hub's change feed,
`ObservationVersions`, not read again).

**Fault barrier** (client-go's `HandleCrash` plus a rate-limited requeue, as the controller's,
docs/agent.md). A bug must cost one replica, never the cluster. When materializing raises, the
replica that makes it raise is found by bisection (its desired objects made again, alone, from
scratch) and quarantined: the step says so in its errors, the replica's last version that
materialized stands (its workloads are left as they were; a replica never materialized is left
out) and it is retried after a backoff (`fault_backoff_s`, doubled on each failure in a row, at
most `fault_backoff_max_s`), or at once when it changes. A failure no one replica explains, or
one while observing, stops that half of the step only: the half's incremental state is dropped
(the next try lists the cluster again, so no change read by the failed step is lost) and it is
retried with the same backoff. `AgentFaults` is the declared fault-injection seam.

The cluster's policy for tenant pod templates (`AgentConfig.policy`, `gpufleet.agent.policy`)
is enforced in both halves: a replica that breaks it is not materialized, and its observation
says why (`PolicyGate`: `podsScheduled: false`, condition `PolicyAllowed=False`). Its verdict
is kept while the replica's (uid, resourceVersion, generation) are unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, TypeVar

from gpufleet.agent.admission import PolicyGate
from gpufleet.agent.feed import ClusterFeed
from gpufleet.agent.hub import HubReplicas, ObservationVersions
from gpufleet.agent.model import (
    AllocationClock,
    ObservationResult,
    ObserveConfig,
    ObservedPool,
    ObservedReplica,
    format_time,
)
from gpufleet.agent.policy import ClusterPolicy
from gpufleet.agent.reads import declared_pools
from gpufleet.agent.scaleup import ScaleUpVerdicts
from gpufleet.agent.steer import Steerer, steering_of
from gpufleet.agent.table import FreeDeviceTable
from gpufleet.agent.workloads import OWNED_KINDS, DesiredState, PassOutcome, Workloads
from gpufleet.api.models import STANDALONE_LEASE
from gpufleet.api.names import cluster_namespace, replica_object_name
from gpufleet.core import labels
from gpufleet.core.model import PoolName, Steering
from gpufleet.store.merge import merge_patch
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    Conflict,
    Kind,
    NotFound,
    Obj,
    Store,
    StoreError,
)

log = logging.getLogger(__name__)

__all__ = ["OWNED_KINDS", "Agent", "AgentConfig", "Report", "StepOutcome"]

_T = TypeVar("_T")

#: A pool with no nodes the agent can see (all gone, or scaled to zero).
_EMPTY_POOL_STATUS: Final = ObservedPool(PoolName(""), 0, (), None, {}, {}, 0).to_status()


def replica_observation_name(namespace: str, name: str) -> str:
    """`<namespace>.<name>`: the name of the replica's object on the hub, where replicas of
    equal names from two tenant namespaces share their cluster's namespace (`HubReplicas`)."""
    return replica_object_name(namespace, name)


def observation_namespace(cluster_name: str) -> str:
    """The hub namespace that holds one cluster's observations and replicas."""
    return cluster_namespace(cluster_name)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    #: Push at least this often, even when nothing changed (freshness for the hub).
    heartbeat_interval_s: float = 30.0
    #: Never push sooner than this after the last push (debounce).
    min_push_interval_s: float = 2.0
    #: How often a write that hit a stale resourceVersion is re-read and retried.
    max_conflict_retries: int = 5
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    #: What tenant pod templates may do here (docs/agent.md, "Cluster policy").
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    #: Whether claiming pods are steered to the nodes the agent chose (`gpufleet.agent.steer`)
    #: while the agent has not read its InferenceCluster; once read, its `spec.steering` (what
    #: the hub predicts by) is followed.
    steering: Steering = Steering.PREFERRED
    #: A half of the step or a replica whose processing raised is retried after this long,
    #: doubled on each failure in a row, at most `fault_backoff_max_s` (the fault barrier).
    fault_backoff_s: float = 1.0
    fault_backoff_max_s: float = 300.0
    #: The agent's gpufleet version, stamped in every report (`status.agent.version`) for the
    #: hub's version-skew check; None (the simulator, tests): not stamped.
    version: str | None = None


class AgentFaults(Protocol):
    """The fault-injection seam: raise to make `point` fail; `point` is `observe` (the
    observe-and-push half, `key` ("", "")) or `materialize` (per replica (namespace, name),
    checked before the half and when its culprit is looked for)."""

    def check(self, point: str, key: tuple[str, str]) -> None: ...


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why and until when a half of the step, or a replica, waits (the fault barrier)."""

    error: str
    count: int
    retry_at: datetime
    #: The resourceVersion of the replica that failed (another version is tried at once).
    version: object = None


#: The keys of the two halves in `Agent.quarantine` (replicas are (namespace, name)).
_OBSERVE: Final = ("", "observe")
_MATERIALIZE: Final = ("", "materialize")


@dataclass(frozen=True, slots=True)
class Report:
    """What one observation produced, ready to push: statuses by (kind, name) in the hub
    namespace, without `agent` and `observedAt` (so unchanged content compares equal)."""

    observed_at: datetime
    result: ObservationResult
    pools: Mapping[str, Obj]
    replicas: Mapping[str, tuple[Obj, Obj]]  # name -> (spec, status)

    def at(self, observed_at: datetime) -> Report:
        """The same report, observed at `observed_at` (what a quiet step re-sends)."""
        return Report(observed_at, self.result, self.pools, self.replicas)


@dataclass(slots=True)
class StepOutcome(PassOutcome):
    """What a step did; for logs, the simulator and tests."""

    is_hub_reachable: bool = True
    is_pushed: bool = False


class Agent:
    """The agent of one workload cluster. Not thread-safe: one loop calls `step`."""

    def __init__(
        self,
        cluster_name: str,
        local: Store,
        hub: Store,
        config: AgentConfig | None = None,
        identity: str = "agent",
        lease_epoch: int = 1,
        lease_uid: str = STANDALONE_LEASE,
        faults: AgentFaults | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        self.local = local
        self.hub = hub
        self.config = config or AgentConfig()
        self.identity = identity
        self.lease_epoch = lease_epoch
        #: The incarnation of the Lease the epoch counts in (its uid; `standalone` without one).
        self.lease_uid = lease_uid
        self.clock = AllocationClock()
        self.namespace = observation_namespace(cluster_name)
        #: Its ModelReplicas, read from its hub namespace only, as their deployments see them.
        self._hub_replicas = HubReplicas(hub, cluster_name)
        #: The fault barrier: what failed (a half of the step, or a replica) and its backoff.
        self.faults = faults
        self.quarantine: dict[tuple[str, str], _Failure] = {}
        #: The replicas the last materialize that raised nothing was given (held, not copied).
        self._materialized: Sequence[Mapping[str, Any]] = ()
        self._start_observing()

    def _start_observing(self) -> None:
        """Observe from scratch: what the observe half keeps between steps, made new (as
        after a restart, but for the lease and the last push's time)."""
        self._policy_gate = PolicyGate(self.config.policy)
        self._last_push_at: datetime | None = None
        #: The mappings of the last report pushed (held: their identities stay theirs).
        #: Mappings are never changed, so the same ones have the same content, and content
        #: is compared with them (`is_push_due`).
        self._last_pushed_from: tuple[Mapping[str, Obj], Mapping[str, tuple[Obj, Obj]]] | None = (
            None
        )
        #: The cluster's free-device table, fed by its change feed.
        self.table = FreeDeviceTable(self.config.observe)
        self._feed = ClusterFeed(self.local, self.table)
        #: The cluster autoscaler's verdicts on unschedulable pods (their Events).
        self._scale_up = ScaleUpVerdicts(self.local)
        #: The last status body made from each pool's and replica's observation: an equal
        #: observation reuses it, so unchanged content is the same object step after step and
        #: compares (and diffs) by identity.
        self._pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        self._replica_statuses: dict[str, tuple[ObservedReplica, Obj]] = {}
        #: The mappings of the last report made: an entry (and a mapping) whose content is
        #: unchanged is reused, so that it too compares by identity.
        self._last_report_pools: dict[str, Obj] = {}
        self._last_report_replicas: Mapping[str, tuple[Obj, Obj]] = {}
        #: The versions of the ReplicaObservations on the hub, by name, kept from its feed.
        self._hub_versions = ObservationVersions(self.hub, self.namespace)
        #: The materialize half of the step.
        #: Chooses the nodes of new replicas' claiming pods; its mode follows the
        #: InferenceCluster's `spec.steering` (read with the declared pools).
        self._steerer = Steerer(
            self.config.steering,
            self._free_devices,
            self._allocated_pods,
            room=self._feed.host_room.room,
        )
        self._workloads = Workloads(self.local, self._retry, self.config.policy, self._steerer)
        #: Per observation (kind, name), the object as our last write left it, and the status
        #: content (without agent/observedAt) written then. The next write patches it blind,
        #: guarded by its resourceVersion, instead of reading it again.
        self._written: dict[tuple[str, str], tuple[Mapping[str, Any], Obj]] = {}
        #: What the last complete push left of the ReplicaObservations: the report's replica
        #: entries (held: their identities stay theirs), the agent stamp, each observation's
        #: resourceVersion after it, and the versions it found on the hub (held) when it wrote
        #: and deleted none. An observation of the same entry found at the same version on
        #: the hub has nothing to write (`_write_replica_observations`).
        self._replicas_left: _ReplicasLeft | None = None
        #: The pools the hub declared for this cluster when last read (`read_declared_pools`),
        #: and when that read succeeded (None: never).
        self._declared_pools: frozenset[str] = frozenset()
        self._declared_read_at: datetime | None = None

    # --- the step -------------------------------------------------------------------------

    def step(self, now: datetime, deliver: Callable[[Report], None] | None = None) -> StepOutcome:
        """Observe, push if due, and materialize, each half behind the fault barrier.

        `deliver` is how the report reaches the hub: None pushes it at once (`push`); the
        simulator hands it on to push later, for a cluster whose reports travel
        (`ClusterBehaviour.report_delay_s`)."""
        outcome = StepOutcome()
        replicas = self.read_replicas(outcome)
        if replicas is None:
            return outcome
        if self._is_open(_OBSERVE, now):
            try:
                if self.faults is not None:
                    self.faults.check("observe", ("", ""))
                report = self.observe(now, replicas)
                if deliver is None:
                    self.push(report, now, outcome)
                else:
                    deliver(report)
            except Exception as e:
                log.exception("agent %s: observing failed", self.cluster_name)
                self._fail(_OBSERVE, e, now, outcome)
                self._start_observing()  # list the cluster again: no change read is lost
                self._last_pushed_from = None
            else:
                self.quarantine.pop(_OBSERVE, None)
        if self._is_open(_MATERIALIZE, now):
            self._materialize_behind_barrier(replicas, now, outcome)
        return outcome

    # --- the fault barrier ----------------------------------------------------------------

    def _is_open(self, key: tuple[str, str], now: datetime) -> bool:
        failure = self.quarantine.get(key)
        return failure is None or failure.retry_at <= now

    def _fail(
        self,
        key: tuple[str, str],
        error: Exception,
        now: datetime,
        outcome: StepOutcome,
        version: object = None,
    ) -> None:
        last = self.quarantine.get(key)
        count = 1 if last is None else last.count + 1
        config = self.config
        wait_s = min(config.fault_backoff_max_s, config.fault_backoff_s * 2 ** min(count - 1, 62))
        text = f"{type(error).__name__}: {error}"[:500]
        self.quarantine[key] = _Failure(text, count, now + timedelta(seconds=wait_s), version)
        what = key[1] if not key[0] else f"replica {key[0]}/{key[1]}"
        outcome.errors.append(f"{what} failed ({count} in a row): {text}; retried in {wait_s:g} s")

    def _materialize_behind_barrier(
        self, replicas: Sequence[Mapping[str, Any]], now: datetime, outcome: StepOutcome
    ) -> None:
        """`materialize`, with each replica that makes it raise quarantined (bisection) and
        the others materialized; a failure no one replica explains waits as a whole."""
        for _ in range(8):  # at most this many culprits per step
            given = self._held_back(replicas, now) if len(self.quarantine) > 0 else replicas
            try:
                self._check_each(given, now)
                self.materialize(given, outcome)
            except Exception as e:
                log.exception("agent %s: materializing failed", self.cluster_name)
                # Its memory may hold half a pass: the next look is at everything.
                self._workloads = Workloads(
                    self.local, self._retry, self.config.policy, self._steerer
                )
                culprit = self._culprit(given, now)
                if culprit is None:
                    self._fail(_MATERIALIZE, e, now, outcome)
                    return
                key = _key_of(culprit)
                self._fail(key, e, now, outcome, _version_of(culprit))
                continue
            self._materialized = given
            self.quarantine.pop(_MATERIALIZE, None)
            self._release(replicas, now)
            return
        self._fail(_MATERIALIZE, RuntimeError("too many replicas failed"), now, outcome)

    def _check_each(self, replicas: Sequence[Mapping[str, Any]], now: datetime) -> None:
        """The seam's check of each replica but those held back at a version that
        materialized (`_held_back`)."""
        if self.faults is not None:
            for r in replicas:
                key = _key_of(r)
                if self._is_open(key, now):
                    self.faults.check("materialize", key)

    def _culprit(
        self, replicas: Sequence[Mapping[str, Any]], now: datetime
    ) -> Mapping[str, Any] | None:
        """The one replica whose desired objects raise, made alone from scratch (bisection);
        None when no one replica explains the failure."""

        def fails(part: Sequence[Mapping[str, Any]]) -> bool:
            try:
                self._check_each(part, now)
                DesiredState(self.config.policy).update(part)
            except Exception:
                return True
            return False

        candidates = list(replicas)
        if not fails(candidates):
            return None
        while len(candidates) > 1:
            half = len(candidates) // 2
            for part in (candidates[:half], candidates[half:]):
                if fails(part):
                    candidates = part
                    break
            else:
                return None  # only together
        return candidates[0]

    def _held_back(
        self, replicas: Sequence[Mapping[str, Any]], now: datetime
    ) -> list[Mapping[str, Any]]:
        """`replicas`, with each quarantined one (its backoff standing, the same version)
        as it last materialized, or left out when it never did."""
        last = {_key_of(r): r for r in self._materialized}
        out: list[Mapping[str, Any]] = []
        for r in replicas:
            key = _key_of(r)
            failure = self.quarantine.get(key)
            if failure is None or failure.retry_at <= now or failure.version != _version_of(r):
                out.append(r)
            elif key in last:
                out.append(last[key])
        return out

    def _release(self, replicas: Sequence[Mapping[str, Any]], now: datetime) -> None:
        """Forget the quarantined replicas that just materialized (or are gone)."""
        present = {_key_of(r): r for r in replicas} if len(self.quarantine) > 0 else {}
        for key, failure in list(self.quarantine.items()):
            replica = present.get(key)
            if key[0] and (
                replica is None
                or failure.retry_at <= now
                or failure.version != _version_of(replica)
            ):
                del self.quarantine[key]

    def _free_devices(self, pool: str) -> Mapping[str, Mapping[Any, int]]:
        """`FreeDeviceTable.free_devices` of the table in use (it is made again on a fault)."""
        return self.table.free_devices(pool)

    def read_replicas(self, outcome: StepOutcome | None = None) -> list[Mapping[str, Any]] | None:
        """The ModelReplicas assigned to this cluster (read-only), or None when the hub is
        unreachable."""
        try:
            # Only read (observe and materialize copy what they keep), and a view hands out
            # the same object until it changes, so what was derived from it can be reused.
            found = self._hub_replicas.read()
        except StoreError as e:
            if outcome is not None:
                outcome.is_hub_reachable = False
                outcome.errors.append(f"list ModelReplicas: {e}")
            return None
        if not any(map(_DELETING, map(_METADATA, found))):
            return list(found)  # compared in C: almost always, none is being deleted
        return [r for r in found if not r["metadata"].get("deletionTimestamp")]

    def read_declared_pools(self, now: datetime | None = None) -> frozenset[str]:
        """The pools the hub declares for this cluster (its InferenceCluster's `nodePools`;
        none when it has no InferenceCluster), or those last read when the hub cannot be read
        (a partition must not look like "every pool was removed").

        With `now`, the hub is asked at most once per heartbeat interval (one GET; pools are
        declared rarely, and a newly declared pool has no nodes yet, so reporting it up to a
        heartbeat later only delays its growth by as much)."""
        last = self._declared_read_at
        if (
            now is not None
            and last is not None
            and last <= now
            and (now - last).total_seconds() < self.config.heartbeat_interval_s
        ):
            return self._declared_pools
        try:
            found = self.hub.get(INFERENCE_CLUSTER, self.cluster_name)
        except StoreError as e:
            log.debug("get InferenceCluster %s: %s", self.cluster_name, e)
            return self._declared_pools
        self._declared_pools = declared_pools(found)
        self._steerer.mode = steering_of(found, self.config.steering)
        self._declared_read_at = now if now is not None else last
        return self._declared_pools

    def observe(self, now: datetime, replicas: Sequence[Mapping[str, Any]]) -> Report:
        """Observe the local cluster (advancing the allocation clock) into a `Report`."""
        self._feed.sync()
        self._scale_up.sync()
        snapshot = self.table.snapshot(replicas, now, self.read_declared_pools(now))
        self.clock = snapshot.clock
        # The policy's refusals are said on the observations; a replica whose verdict moved is
        # reported again even when the table's observation of it did not change.
        result = self._policy_gate.annotate(snapshot.result, replicas)
        result = self._scale_up.annotate(result)
        result = self._feed.host_room.annotate(result, self.table.free_devices)
        changed = snapshot.changed_replicas
        if changed is not None and self._policy_gate.moved:
            changed = changed | self._policy_gate.moved
        if changed is not None and self._scale_up.moved:
            changed = changed | self._scale_up.moved
        pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        for p in result.pools:
            pool_statuses[str(p.name)] = _status_of(p, self._pool_statuses.get(str(p.name)))
        self._pool_statuses = pool_statuses
        # Unchanged content is the same objects as last step, entry by entry, and then the
        # same mappings: a push compares them by identity (`is_push_due`, `push`).
        reps = self._report_replicas(result, changed)
        pools = {name: status for name, (_, status) in pool_statuses.items()}
        if _is_same_entries(pools, self._last_report_pools):
            pools = self._last_report_pools
        self._last_report_replicas, self._last_report_pools = reps, pools
        return Report(now, result, pools, reps)

    def _report_replicas(
        self, result: ObservationResult, changed: AbstractSet[tuple[str, str]] | None
    ) -> Mapping[str, tuple[Obj, Obj]]:
        """The report's replica entries: the last report's, with those of the replicas whose
        observation the table says changed made again (every one, when it cannot say)."""
        last = self._last_report_replicas
        if changed is None:
            statuses: dict[str, tuple[ObservedReplica, Obj]] = {}
            reps = {}
            for r in result.replicas:
                name = replica_observation_name(r.namespace, r.name)
                reps[name] = self._replica_entry(r, name, statuses)
            self._replica_statuses = statuses
        elif not changed:
            return last
        else:
            reps = dict(last)
            for key in sorted(changed):
                name = replica_observation_name(*key)
                observed = self._scale_up.annotated(
                    self._policy_gate.annotated(self.table.observed_replica(key))
                )
                if observed is None:
                    reps.pop(name, None)
                    self._replica_statuses.pop(name, None)
                else:
                    reps[name] = self._replica_entry(observed, name, self._replica_statuses)
        return last if _is_same_entries(reps, last) else reps

    def _replica_entry(
        self, r: ObservedReplica, name: str, statuses: dict[str, tuple[ObservedReplica, Obj]]
    ) -> tuple[Obj, Obj]:
        """The report's entry for `r` (named `name`), and its status into `statuses`: the
        last report's entry and status when they are equal (so then the same objects)."""
        statuses[name] = _status_of(r, self._replica_statuses.get(name))
        status = statuses[name][1]
        entry = self._last_report_replicas.get(name)
        # The replica it observes is the hub's object: the same name, in the same namespace.
        if not (
            entry is not None
            and entry[1] is status
            and entry[0]["replicaName"] == name
            and entry[0]["replicaNamespace"] == self.namespace
        ):
            spec = {
                "clusterName": self.cluster_name,
                "replicaName": name,
                "replicaNamespace": self.namespace,
            }
            entry = (spec, status)
        return entry

    def is_push_due(self, report: Report, now: datetime) -> bool:
        last = self._last_pushed_from
        if self._last_push_at is None or last is None:
            return True
        since_s = (now - self._last_push_at).total_seconds()
        if since_s < self.config.min_push_interval_s:
            return False
        if since_s >= self.config.heartbeat_interval_s:
            return True
        # A report's content is its two mappings: compared in C, and by identity for the
        # entries that are the same objects (unchanged content is).
        return not self._is_last_pushed(report) and (
            report.pools != last[0] or report.replicas != last[1]
        )

    def _is_last_pushed(self, report: Report) -> bool:
        """Whether the report holds the very mappings last pushed (a quiet step's report)."""
        last = self._last_pushed_from
        return last is not None and last[0] is report.pools and last[1] is report.replicas

    def push(self, report: Report, now: datetime, outcome: StepOutcome | None = None) -> bool:
        """Write the report to the hub if due; True when it was written in full."""
        outcome = outcome if outcome is not None else StepOutcome()
        if not self.is_push_due(report, now):
            return False
        stamp = {
            "agent": {
                "identity": self.identity,
                "leaseEpoch": self.lease_epoch,
                "leaseUID": self.lease_uid,
                **({"version": self.config.version} if self.config.version else {}),
            },
            "observedAt": format_time(report.observed_at),
        }
        is_complete = True
        try:
            pools = dict(report.pools)
            for obj in self.hub.view(POOL_OBSERVATION, self.namespace):
                # Reported before (by this agent or an earlier one), gone now: say so.
                pools.setdefault(obj["metadata"]["name"], _EMPTY_POOL_STATUS)
            for pool, content in sorted(pools.items()):
                spec = {"clusterName": self.cluster_name, "poolName": pool}
                self._write_observation(POOL_OBSERVATION, pool, spec, content, stamp)
            # What is on the hub now: an observation someone else wrote since our last write
            # has another resourceVersion, and is written again even when ours is unchanged.
            on_hub = self._hub_versions.read()
            left = self._write_replica_observations(report, stamp, on_hub)
        except StoreError as e:
            # Unreachable hub or a write refused: try again on the next step.
            outcome.is_hub_reachable = False
            outcome.errors.append(f"push: {e}")
            is_complete = False
        if not is_complete:
            return False
        self._last_push_at = now
        self._last_pushed_from = (report.pools, report.replicas)
        self._replicas_left = left
        outcome.is_pushed = True
        return True

    def _write_replica_observations(
        self, report: Report, stamp: Mapping[str, Any], on_hub: Mapping[str, object]
    ) -> _ReplicasLeft:
        """Write each of the report's ReplicaObservations that changed or someone else wrote
        (`_write_observation` leaves the others alone), delete those of replicas that are gone,
        and say what that left (`_replicas_left`): the resourceVersion each of the report's
        observations has now, and `on_hub` when nothing was written or deleted."""
        left, self._replicas_left = self._replicas_left, None
        kind = REPLICA_OBSERVATION.kind
        if (
            left is not None
            and left[0] is report.replicas
            and left[3] == on_hub
            and left[1] == stamp["agent"]
        ):
            # The very entries, and the very observations on the hub, that the last complete
            # push found and left as they were: it would find nothing again.
            return left
        if left is None or left[1] != stamp["agent"]:
            names = sorted(report.replicas)
            versions: dict[str, object] = {}
        else:
            # Since our last complete push, only this agent wrote the observations whose
            # version on the hub is the one that push left, and an entry (spec, content) of
            # that push's report that is the same object here holds the same content: such
            # an observation would be left alone, so it is not looked at one by one.
            entries, _, versions, _ = left
            # The observations not at the version that push left (compared in C: versions
            # are strings), and the entries that are not that push's (in C too, when the two
            # mappings have their names in one order, as reports of the same replicas do).
            stale = {n for n, v in versions.items() - on_hub.items() if on_hub.get(n) != v}
            replicas = report.replicas
            if replicas is entries:
                changed: Iterable[str] = ()
            elif list(replicas) == list(entries):
                changed = itertools.compress(
                    replicas, map(operator.is_not, replicas.values(), entries.values())
                )
            else:
                changed = [n for n, entry in replicas.items() if entries.get(n) is not entry]
                stale &= replicas.keys()
            stale.update(changed)
            versions = dict(versions)
            names = sorted(stale)
        for name in names:
            spec, content = report.replicas[name]
            self._write_observation(REPLICA_OBSERVATION, name, spec, content, stamp, on_hub=on_hub)
            versions[name] = self._written[(kind, name)][0]["metadata"].get("resourceVersion")
        # In the view's order (by name).
        gone = sorted(on_hub.keys() - report.replicas.keys())
        for name in gone:
            self._written.pop((kind, name), None)
            with contextlib.suppress(NotFound):
                self.hub.delete(REPLICA_OBSERVATION, name, self.namespace)
        if versions.keys() != report.replicas.keys():
            versions = {name: versions[name] for name in report.replicas}
        is_untouched = not names and not gone
        return report.replicas, stamp["agent"], versions, on_hub if is_untouched else None

    def _write_observation(
        self,
        kind: Kind,
        name: str,
        spec: Obj,
        content: Obj,
        stamp: Mapping[str, Any],
        *,
        on_hub: Mapping[str, object] | None = None,
    ) -> None:
        """Make the observation `name` hold `spec` and the status `content` + `stamp`.

        When this agent wrote it last, it patches what that write left, guarded by its
        resourceVersion, without reading it again; a conflict or a deletion (someone else
        wrote) falls back to reading it, as a first write does. Either way the object ends
        as one read-modify-write would leave it.

        `on_hub` (name: resourceVersion on the hub) is given for observations that do not
        heartbeat (ReplicaObservations: the PoolObservations carry the agent's heartbeat): one
        still as this agent last wrote it, with the same content, is left alone, since only
        its `observedAt` would move.
        """
        key = (kind.kind, name)
        known = self._written.pop(key, None)
        if known is not None:
            obj, last_content = known
            status = obj.get("status") or {}
            if (
                on_hub is not None
                and on_hub.get(name) == obj["metadata"].get("resourceVersion")
                and obj.get("spec") == spec
                and (content is last_content or content == last_content)
                and status.get("agent") == stamp["agent"]
            ):
                self._written[key] = known
                return
            patch = _status_patch(obj.get("status") or {}, last_content, content, stamp)
            if patch and obj.get("spec") == spec:
                try:
                    written = self.hub.patch_status(
                        kind, name, self.namespace, patch, obj["metadata"]["resourceVersion"]
                    )
                except (Conflict, NotFound):
                    pass  # changed or deleted since: read it, below
                else:
                    self._written[key] = (written, content)
                    return
        status = {**content, **stamp}

        def write() -> Mapping[str, Any]:
            current = self.hub.get(kind, name, self.namespace)
            if current is None:
                body: Obj = {
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": {labels.CLUSTER: self.cluster_name},
                    },
                    "spec": spec,
                }
                # The status subresource is written separately, as on the API server.
                current = self.hub.create(body)
            elif current.get("spec") != spec:
                current["spec"] = spec
                current = self.hub.update(current)
            patch = merge_patch(current.get("status") or {}, status)
            if not patch:
                return current
            return self.hub.patch_status(
                kind, name, self.namespace, patch, current["metadata"]["resourceVersion"]
            )

        self._written[key] = (self._retry(write), content)

    # --- materialize ----------------------------------------------------------------------

    def materialize(
        self, replicas: Sequence[Mapping[str, Any]], outcome: StepOutcome | None = None
    ) -> None:
        """Make the local workloads equal the desired set for `replicas` (`Workloads`)."""
        self._workloads.materialize(replicas, outcome if outcome is not None else StepOutcome())

    def _allocated_pods(self, key: tuple[str, str]) -> int | None:
        """The replica's pods with allocated claims, as of the table's last snapshot."""
        observed = self.table.observed_replica(key)
        if observed is None:
            return None
        return sum(m.allocated_pods for p in observed.pools for m in p.members)

    def _retry(self, fn: Callable[[], _T]) -> _T:
        attempts = max(1, self.config.max_conflict_retries)
        for attempt in range(attempts):
            try:
                return fn()
            except Conflict:
                if attempt == attempts - 1:
                    raise
                log.debug("conflict; re-reading (attempt %d)", attempt + 1)
        raise AssertionError("unreachable")


#: See `Agent._replicas_left`.
_ReplicasLeft = tuple[
    Mapping[str, tuple[Obj, Obj]], object, dict[str, object], Mapping[str, object] | None
]

_O = TypeVar("_O", ObservedPool, ObservedReplica)


def _key_of(replica: Mapping[str, Any]) -> tuple[str, str]:
    meta = replica.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _version_of(replica: Mapping[str, Any]) -> object:
    return (replica.get("metadata") or {}).get("resourceVersion")


def _status_of(observed: _O, last: tuple[_O, Obj] | None) -> tuple[_O, Obj]:
    """The status body of `observed`: the last one made, when the observation is equal."""
    # The observe cache hands out the very observation while its inputs are unchanged.
    if last is not None and (last[0] is observed or last[0] == observed):
        return last
    return observed, observed.to_status()


def _is_same_entries(new: Mapping[str, object], old: Mapping[str, object]) -> bool:
    """Whether two mappings have the same keys, each to the same object (identity)."""
    return len(new) == len(old) and all(k in old and old[k] is v for k, v in new.items())


def _status_patch(
    written: Mapping[str, Any], last_content: Obj, content: Obj, stamp: Mapping[str, Any]
) -> Obj:
    """The merge patch from `written` (the status our last write left: `last_content` and a
    stamp) to `content` and `stamp`. Unchanged content is the same object (`_status_of`), so
    then only the stamp is compared."""
    if content is last_content:
        at = stamp.get("observedAt")
        if (
            stamp.keys() == _STAMP_KEYS
            and isinstance(at, str)
            and "agent" in written
            and written["agent"] == stamp["agent"]
        ):
            # A heartbeat: the agent as written, so only the time can move (what the diff
            # below finds, without making it).
            return {} if written.get("observedAt") == at else {"observedAt": at}
        return merge_patch({k: written[k] for k in stamp if k in written}, stamp)
    return merge_patch(written, {**content, **stamp})


_STAMP_KEYS: Final = frozenset({"agent", "observedAt"})
_METADATA: Final = operator.itemgetter("metadata")
_DELETING: Final = operator.methodcaller("get", "deletionTimestamp")
