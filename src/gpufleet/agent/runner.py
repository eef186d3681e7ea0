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

A step whose inputs' versions did not move (the local feed, the Events, the replicas' uids and
generations, the declared pools) hands out the last report again (`Observer`). Otherwise a
step costs what changed since the last one, not every object: the Agent observes through its
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

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, TypeVar

from gpufleet.agent.hub import HubReplicas
from gpufleet.agent.model import AllocationClock, ObserveConfig
from gpufleet.agent.observer import Observer, Report, replica_observation_name
from gpufleet.agent.policy import ClusterPolicy
from gpufleet.agent.report_writer import ReportWriter, StepOutcome
from gpufleet.agent.steer import Steerer, steering_of
from gpufleet.agent.table import FreeDeviceTable
from gpufleet.agent.workloads import OWNED_KINDS, DesiredState, Workloads
from gpufleet.api.models import STANDALONE_LEASE
from gpufleet.api.names import cluster_namespace
from gpufleet.core.model import Steering
from gpufleet.store.port import Conflict, Store, StoreError

log = logging.getLogger(__name__)

_T = TypeVar("_T")

__all__ = [
    "OWNED_KINDS",
    "Agent",
    "AgentConfig",
    "Report",
    "StepOutcome",
    "replica_observation_name",
]


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


class Agent:
    """The agent of one workload cluster. Not thread-safe: one loop calls `step`.

    Its state is held by collaborators that own it: the observe half (`Observer`: the change
    feeds, the table, the policy gate, the report), the push side (`ReportWriter`), the
    materialize half (`Workloads`, with its `Steerer`), and the fault barrier's quarantine
    here."""

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
        *,
        reuse: bool = True,
    ) -> None:
        self.cluster_name = cluster_name
        self.local = local
        self.hub = hub
        self.config = config or AgentConfig()
        self.identity = identity
        self.lease_epoch = lease_epoch
        #: The incarnation of the Lease the epoch counts in (its uid; `standalone` without one).
        self.lease_uid = lease_uid
        self.namespace = observation_namespace(cluster_name)
        #: Its ModelReplicas, read from its hub namespace only, as their deployments see them.
        self._hub_replicas = HubReplicas(hub, cluster_name)
        #: The fault barrier: what failed (a half of the step, or a replica) and its backoff.
        self.faults = faults
        self.quarantine: dict[tuple[str, str], _Failure] = {}
        #: The replicas the last materialize that raised nothing was given (held, not copied).
        self._materialized: Sequence[Mapping[str, Any]] = ()
        #: Whether a quiet step reuses the last report (`Observer`; off: the oracle's run).
        self._reuse = reuse
        self._start_observing()

    @property
    def table(self) -> FreeDeviceTable:
        """The cluster's free-device table in use (made again when observing starts over)."""
        return self._observer.table

    @property
    def clock(self) -> AllocationClock:
        """The allocation clock the last observation left."""
        return self._observer.clock

    def _agent_stamp(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "leaseEpoch": self.lease_epoch,
            "leaseUID": self.lease_uid,
            **({"version": self.config.version} if self.config.version else {}),
        }

    def _start_observing(self) -> None:
        """Observe from scratch: what the observe half and the push side keep between steps,
        made new (as after a restart, but for the lease)."""
        config = self.config
        self._observer = Observer(
            self.cluster_name,
            self.local,
            self.hub,
            self.namespace,
            observe=config.observe,
            policy=config.policy,
            heartbeat_interval_s=config.heartbeat_interval_s,
            steering=self._read_steering,
            reuse=self._reuse,
        )
        self._writer = ReportWriter(
            self.cluster_name,
            self.hub,
            self.namespace,
            self._agent_stamp(),
            min_push_interval_s=config.min_push_interval_s,
            heartbeat_interval_s=config.heartbeat_interval_s,
            retry=self._retry,
        )
        #: The materialize half of the step.
        #: Chooses the nodes of new replicas' claiming pods; its mode follows the
        #: InferenceCluster's `spec.steering` (read with the declared pools).
        self._steerer = Steerer(
            config.steering,
            self._free_devices,
            self._allocated_pods,
            room=self._observer.feed.host_room.room,
        )
        self._workloads = Workloads(self.local, self._retry, config.policy, self._steerer)

    def _read_steering(self, cluster: Mapping[str, Any] | None) -> None:
        self._steerer.mode = steering_of(cluster, self.config.steering)

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
        return self._observer.read_declared_pools(now)

    def observe(self, now: datetime, replicas: Sequence[Mapping[str, Any]]) -> Report:
        """Observe the local cluster (advancing the allocation clock) into a `Report`."""
        return self._observer.observe(now, replicas)

    def is_push_due(self, report: Report, now: datetime) -> bool:
        return self._writer.is_push_due(report, now)

    def push(self, report: Report, now: datetime, outcome: StepOutcome | None = None) -> bool:
        """Write the report to the hub if due; True when it was written in full."""
        return self._writer.push(report, now, outcome)

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


def _key_of(replica: Mapping[str, Any]) -> tuple[str, str]:
    meta = replica.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _version_of(replica: Mapping[str, Any]) -> object:
    return (replica.get("metadata") or {}).get("resourceVersion")


_METADATA: Final = operator.itemgetter("metadata")
_DELETING: Final = operator.methodcaller("get", "deletionTimestamp")
