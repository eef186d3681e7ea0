"""The agent's runner: one `Agent` per workload cluster, driven by `step(now)`.

A step has two halves, both through the `Store` port only:

1. **Observe and report.** List the cluster's Nodes, ResourceSlices, ResourceClaims and Pods
   and the ModelReplicas assigned to the cluster on the hub (label `gpufleet.io/cluster`, all
   namespaces); run the pure observe core (`gpufleet.agent.observe`) with the allocation clock
   the Agent keeps between steps; write one PoolObservation per pool and one ReplicaObservation
   per replica to the hub namespace `gpufleet-cluster-<cluster>`, stamped with
   `status.agent: {identity, leaseEpoch}` and `status.observedAt`. Observations of replicas
   that are gone are deleted. A pool with a PoolObservation on the hub that the agent no longer
   sees (its nodes all gone, no replica pins it) is reported empty (no nodes, so the hub counts
   only growth) rather than left stale: a stale report of free devices errs toward "free".
2. **Materialize.** Make the cluster's ResourceClaimTemplates, Deployments and
   LeaderWorkerSets equal what `materialize` wants for the assigned replicas: create what is
   missing, update what differs (templates are immutable in `resource.k8s.io/v1`, so a changed
   template is deleted and recreated), delete what no replica wants.

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

A step costs what changed since the last one, not every object: the Agent reads through
`Store.view`, whose objects are replaced, never changed, when they change, so what it derived
from an object is kept by the object's identity (`ObserveCache`, each replica's desired
objects by its spec's, which a status write leaves as it is; the local objects known to agree
with them). Materialize looks only at the replicas and local objects that came or went since
its last call (by identity) and at what it wrote last; and a push patches the observations it
wrote last without reading them back (guarded by their resourceVersion).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar

from gpufleet.agent.admission import PolicyGate
from gpufleet.agent.materialize import OWNED_SELECTOR, ReplicaInvalid, materialize
from gpufleet.agent.observe import (
    AllocationClock,
    ClusterObjects,
    ObservationResult,
    ObserveCache,
    ObserveConfig,
    ObservedPool,
    ObservedReplica,
    format_time,
    observe,
)
from gpufleet.agent.policy import ClusterPolicy, namespace_body
from gpufleet.core import labels
from gpufleet.core.model import PoolName
from gpufleet.store.merge import merge_patch
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    MODEL_REPLICA,
    NAMESPACE,
    NODE,
    POD,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    AlreadyExists,
    Conflict,
    Kind,
    NotFound,
    Obj,
    Store,
    StoreError,
)

log = logging.getLogger(__name__)

#: The kinds the agent owns on the workload cluster, in the order it writes them (templates
#: before the workloads whose pods reference them).
OWNED_KINDS: Final = (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT, LEADER_WORKER_SET)

_T = TypeVar("_T")

#: A pool with no nodes the agent can see (all gone, or scaled to zero).
_EMPTY_POOL_STATUS: Final = ObservedPool(PoolName(""), 0, (), None, {}, {}, 0).to_status()


def replica_observation_name(namespace: str, name: str) -> str:
    """`<namespace>.<name>`: replicas of equal names in two namespaces share one hub namespace
    for their observations, so the name carries the namespace (a DNS subdomain either way)."""
    return f"{namespace}.{name}"


def observation_namespace(cluster_name: str) -> str:
    """The hub namespace that holds one cluster's observations."""
    return f"gpufleet-cluster-{cluster_name}"


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


@dataclass(frozen=True, slots=True)
class Report:
    """What one observation produced, ready to push: statuses by (kind, name) in the hub
    namespace, without `agent` and `observedAt` (so unchanged content compares equal)."""

    observed_at: datetime
    result: ObservationResult
    pools: Mapping[str, Obj]
    replicas: Mapping[str, tuple[Obj, Obj]]  # name -> (spec, status)


@dataclass(slots=True)
class StepOutcome:
    """What a step did; for logs, the simulator and tests."""

    is_hub_reachable: bool = True
    is_pushed: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


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
    ) -> None:
        self.cluster_name = cluster_name
        self.local = local
        self.hub = hub
        self.config = config or AgentConfig()
        self.identity = identity
        self.lease_epoch = lease_epoch
        self.clock = AllocationClock()
        self.namespace = observation_namespace(cluster_name)
        self._policy_gate = PolicyGate(self.config.policy)
        self._last_push_at: datetime | None = None
        #: The mappings of the last report pushed (held: their identities stay theirs).
        #: Mappings are never changed, so the same ones have the same content, and content
        #: is compared with them (`is_push_due`).
        self._last_pushed_from: tuple[Mapping[str, Obj], Mapping[str, tuple[Obj, Obj]]] | None = (
            None
        )
        #: The replicas the last `read_replicas` viewed (held), and those it kept (not deleting).
        self._replicas_read: tuple[tuple[Mapping[str, Any], ...], list[Mapping[str, Any]]]
        self._replicas_read = ((), [])
        #: What observe read from each object it saw last step (by identity: views only).
        self._observed = ObserveCache()
        #: The last status body made from each pool's and replica's observation: an equal
        #: observation reuses it, so unchanged content is the same object step after step and
        #: compares (and diffs) by identity.
        self._pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        self._replica_statuses: dict[str, tuple[ObservedReplica, Obj]] = {}
        #: The mappings of the last report made: an entry (and a mapping) whose content is
        #: unchanged is reused, so that it too compares by identity.
        self._last_report_pools: dict[str, Obj] = {}
        self._last_report_replicas: dict[str, tuple[Obj, Obj]] = {}
        #: The replica observations the last report was made from (held), by identity, with
        #: their observations' names.
        self._observed_replicas: tuple[
            tuple[ObservedReplica, ...], dict[int, tuple[ObservedReplica, str]]
        ] = ((), {})
        #: What the last desired set was made from, and what was made (`_desired_set`).
        self._desired_state: _DesiredState | None = None
        #: Per kind, what its last pass saw and found (`_materialize_kind`).
        self._passes: dict[Kind, _KindPass] = {}
        #: Per kind, after a pass in which every local object agreed with what was wanted and
        #: none was unwanted: the wanted mapping and the local objects listed (both held).
        self._settled: dict[Kind, tuple[object, tuple[Mapping[str, Any], ...]]] = {}
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
        #: The ReplicaObservations the last push viewed on the hub (held) and their versions.
        self._viewed_on_hub: tuple[
            tuple[Mapping[str, Any], ...], dict[int, Mapping[str, Any]], dict[str, object]
        ] = ((), {}, {})

    # --- the step -------------------------------------------------------------------------

    def step(self, now: datetime) -> StepOutcome:
        """Observe, push if due, and materialize."""
        outcome = StepOutcome()
        replicas = self.read_replicas(outcome)
        if replicas is None:
            return outcome
        report = self.observe(now, replicas)
        self.push(report, now, outcome)
        self.materialize(replicas, outcome)
        return outcome

    def read_replicas(self, outcome: StepOutcome | None = None) -> list[Mapping[str, Any]] | None:
        """The ModelReplicas assigned to this cluster (read-only), or None when the hub is
        unreachable."""
        try:
            # Only read (observe and materialize copy what they keep), and a view hands out
            # the same object until it changes, so what was derived from it can be reused.
            found = self.hub.view(MODEL_REPLICA, None, {labels.CLUSTER: self.cluster_name})
        except StoreError as e:
            if outcome is not None:
                outcome.is_hub_reachable = False
                outcome.errors.append(f"list ModelReplicas: {e}")
            return None
        held, kept = self._replicas_read
        if not _is_same(held, found):
            kept = [r for r in found if not r["metadata"].get("deletionTimestamp")]
            self._replicas_read = (tuple(found), kept)
        return list(kept)

    def observe(self, now: datetime, replicas: Sequence[Mapping[str, Any]]) -> Report:
        """Observe the local cluster (advancing the allocation clock) into a `Report`."""
        # observe() only reads: views spare copying every object of the cluster each step.
        objects = ClusterObjects(
            nodes=tuple(self.local.view(NODE)),
            slices=tuple(self.local.view(RESOURCE_SLICE)),
            claims=tuple(self.local.view(RESOURCE_CLAIM)),
            pods=tuple(self.local.view(POD)),
            replicas=tuple(replicas),
        )
        result, self.clock = observe(objects, self.clock, self.config.observe, now, self._observed)
        result = self._policy_gate.annotate(result, replicas)
        pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        for p in result.pools:
            pool_statuses[str(p.name)] = _status_of(p, self._pool_statuses.get(str(p.name)))
        self._pool_statuses = pool_statuses
        # Unchanged content is the same objects as last step, entry by entry, and then the
        # same mappings: a push compares them by identity (`is_push_due`, `push`).
        reps = self._report_replicas_since(result.replicas)
        if reps is None:
            replica_statuses: dict[str, tuple[ObservedReplica, Obj]] = {}
            names: dict[int, tuple[ObservedReplica, str]] = {}
            reps = {}
            for r in result.replicas:
                name = replica_observation_name(r.namespace, r.name)
                reps[name] = self._replica_entry(r, name, replica_statuses)
                names[id(r)] = (r, name)
            self._replica_statuses = replica_statuses
            self._observed_replicas = (result.replicas, names)
            if _is_same_entries(reps, self._last_report_replicas):
                reps = self._last_report_replicas
        pools = {name: status for name, (_, status) in pool_statuses.items()}
        if _is_same_entries(pools, self._last_report_pools):
            pools = self._last_report_pools
        self._last_report_replicas, self._last_report_pools = reps, pools
        return Report(now, result, pools, reps)

    def _replica_entry(
        self, r: ObservedReplica, name: str, statuses: dict[str, tuple[ObservedReplica, Obj]]
    ) -> tuple[Obj, Obj]:
        """The report's entry for `r` (named `name`), and its status into `statuses`: the
        last report's entry and status when they are equal (so then the same objects)."""
        statuses[name] = _status_of(r, self._replica_statuses.get(name))
        status = statuses[name][1]
        entry = self._last_report_replicas.get(name)
        if not (
            entry is not None
            and entry[1] is status
            and entry[0]["replicaName"] == r.name
            and entry[0]["replicaNamespace"] == r.namespace
        ):
            spec = {
                "clusterName": self.cluster_name,
                "replicaName": r.name,
                "replicaNamespace": r.namespace,
            }
            entry = (spec, status)
        return entry

    def _report_replicas_since(
        self, observed: tuple[ObservedReplica, ...]
    ) -> dict[str, tuple[Obj, Obj]] | None:
        """The report's replica entries from the last report's, patched with the observations
        that came and went since (by identity: the observe cache hands out the very
        observation while nothing it reads changed), since every other would give the entry
        it gave. None when that cannot be told this way (then every observation is looked
        at): many changed, or two observations share a name."""
        (held, last), last_reps = self._observed_replicas, self._last_report_replicas
        if observed is held:
            return last_reps
        if not (len(last) == len(self._replica_statuses) == len(last_reps)):
            return None  # two shared one name
        by_id = dict(zip(map(id, observed), observed, strict=True))
        gone = last.keys() - by_id.keys()
        came = by_id.keys() - last.keys()
        if len(by_id) != len(observed) or len(gone) + len(came) > 8 + len(observed) // 4:
            return None
        statuses = dict(self._replica_statuses)
        reps = dict(last_reps)
        names = dict(last)
        for i in gone:
            name = names.pop(i)[1]
            del statuses[name], reps[name]
        is_changed = bool(gone)
        # In the observations' order (by namespace and name), as a whole report is made.
        for r in sorted((by_id[i] for i in came), key=_namespace_name):
            name = replica_observation_name(r.namespace, r.name)
            if name in statuses:
                return None  # two observations of one name
            entry = reps[name] = self._replica_entry(r, name, statuses)
            names[id(r)] = (r, name)
            is_changed = is_changed or entry is not last_reps.get(name)
        self._replica_statuses, self._observed_replicas = statuses, (observed, names)
        return reps if is_changed else last_reps

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
            "agent": {"identity": self.identity, "leaseEpoch": self.lease_epoch},
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
            on_hub = self._versions_on_hub(self.hub.view(REPLICA_OBSERVATION, self.namespace))
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

    def _versions_on_hub(self, viewed: Sequence[Mapping[str, Any]]) -> dict[str, object]:
        """Name -> resourceVersion of the viewed observations; the same dict as last push when
        the view holds the same objects (a view hands out an object until it changes), else
        that dict patched with the objects that came and went (by identity) when the view
        has one object per name (as a namespace's listing has)."""
        listed, held, versions = self._viewed_on_hub
        if _is_same(listed, viewed):
            return versions
        by_id = dict(zip(map(id, viewed), viewed, strict=True))
        gone, came = held.keys() - by_id.keys(), by_id.keys() - held.keys()
        if not gone and not came and len(by_id) == len(viewed):
            return versions
        patched = _patched_versions(held, versions, by_id, gone, came)
        if patched is None or len(by_id) != len(viewed):
            patched = {o["metadata"]["name"]: o["metadata"].get("resourceVersion") for o in viewed}
        # Held only for a view of one object per name: the next is patched from it.
        is_plain = len(patched) == len(by_id) == len(viewed)
        self._viewed_on_hub = (tuple(viewed), by_id if is_plain else {}, patched)
        return patched

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
            and left[3] is on_hub
            and left[0] is report.replicas
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
        """Make the local workloads equal the desired set for `replicas`."""
        outcome = outcome if outcome is not None else StepOutcome()
        desired, namespaces, errors, changes = self._desired_set(replicas)
        outcome.errors.extend(errors)
        for ns in namespaces:
            self._ensure_namespace(ns, outcome)
        for kind in OWNED_KINDS:
            try:
                # Read-only here: an update re-reads the object it changes.
                listed = self.local.view(kind, None, OWNED_SELECTOR)
            except NotFound:
                # The kind is not served (LeaderWorkerSet without its CRD): nothing of it exists;
                # a replica that needs it fails on create and says so, the others go on.
                listed = []
            wanted = desired[kind]
            settled = self._settled.pop(kind, None)
            if settled is not None and settled[0] is wanted and _is_same(settled[1], listed):
                # The same wanted objects and the same local ones as a pass in which every
                # one agreed and none was unwanted: this pass would find the same.
                self._settled[kind] = settled
                continue
            self._materialize_kind(kind, wanted, listed, outcome, changes.get(kind))

    def _materialize_kind(
        self,
        kind: Kind,
        wanted: Mapping[tuple[str, str], Obj],
        listed: Sequence[Mapping[str, Any]],
        outcome: StepOutcome,
        since: _WantedChange | None = None,
    ) -> None:
        """Create or update each wanted object that the local one does not hold (sorted by
        key), then delete each listed object not wanted (sorted).

        A pass costs what changed since the last one: a wanted object whose local object
        was found to hold it, both the same objects since, is not looked at again (objects
        are replaced, never changed, so the same pair agrees again). When the wanted
        mapping is the last pass's, or `since` names the keys in which it differs from it,
        only those keys, the keys of the local objects that came or went (by identity) and
        the keys the last pass acted on are looked at: every other key is a pair that agreed
        and is the same pair."""
        last = self._passes.pop(kind, None)
        by_id = dict(zip(map(id, listed), listed, strict=True))
        existing: dict[tuple[str, str], Mapping[str, Any]] | None = None
        keys: set[tuple[str, str]] | None = None
        if last is not None and len(by_id) == len(listed):
            changed: AbstractSet[tuple[str, str]] | None = None
            if last.wanted is wanted:
                changed = frozenset()
            elif since is not None and since[0] is last.wanted:
                changed = since[1]
            if changed is not None:
                found = _listing_since(last, by_id)
                if found is not None:
                    existing, touched = found
                    keys = last.acted | changed | touched
        if existing is None:
            existing = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in listed}
        before = last.agreeing if last is not None else {}
        agreeing: dict[tuple[str, str], tuple[Mapping[str, Any], Obj]]
        if keys is None:
            agreeing, looked_at = {}, sorted(wanted)
        else:
            # Every pair held but for these keys is one of keys not looked at: it stays.
            agreeing = dict(before)
            for key in keys:
                agreeing.pop(key, None)
            looked_at = sorted(k for k in keys if k in wanted)
        acted: set[tuple[str, str]] = set()
        for key in looked_at:
            want, current = wanted[key], existing.get(key)
            held = before.get(key)
            if current is not None and held is not None and held[0] is current and held[1] is want:
                # Neither changed since they were found to agree (both are held there,
                # so the identities are still theirs).
                agreeing[key] = held
                continue
            if self._apply(kind, want, current, outcome):
                assert current is not None
                agreeing[key] = (current, want)
            else:
                acted.add(key)
        unwanted = sorted(k for k in (existing if keys is None else keys) if k not in wanted)
        for key in unwanted:
            if key in existing:
                acted.add(key)
                self._delete_local(kind, key[1], key[0], outcome)
        if not acted:
            self._settled[kind] = (wanted, tuple(listed))
        if len(existing) == len(listed):
            # One object per key: what came and went next pass can be told by identity.
            self._passes[kind] = _KindPass(wanted, by_id, existing, agreeing, acted)

    def _desired_set(self, replicas: Sequence[Mapping[str, Any]]) -> _DesiredSet:
        """Every replica's desired objects by kind and (namespace, name), their namespaces
        (sorted), the errors of invalid replicas, and per kind whose mapping is not last
        call's, that mapping and the keys in which the two differ, when they are known.

        The same mappings as last call when each replica's desired objects are, so that a
        kind's pass can tell by identity that nothing it wants changed. A replica's desired
        objects are the very objects of the last call when what `materialize` reads of it is
        unchanged: the spec, which a status write leaves the same object (objects are
        replaced, their unchanged subtrees shared), and the name, namespace, generation and
        labels. So a replica whose status alone changed changes nothing here."""
        state = self._desired_state
        if state is not None and state.counts is not None:
            found = self._desired_set_since(state, replicas)
            if found is not None:
                return found
        return self._desired_set_whole(replicas)

    def _desired_set_since(
        self, state: _DesiredState, replicas: Sequence[Mapping[str, Any]]
    ) -> _DesiredSet | None:
        """`_desired_set` from the last call's, by the replicas that came or went since (by
        identity); None when it cannot be told that way (then it is made whole).

        For a plain last set only (`_DesiredState.counts`): every replica with a key and an
        identity of its own, none invalid, no object wanted by two. Then the set does not
        depend on the replicas' order, and changes by what the replicas that came or went
        want, as long as no two replicas come to want one object."""
        by_id = dict(zip(map(id, replicas), replicas, strict=True))
        if len(by_id) != len(replicas):
            return None
        seen = state.seen
        gone = seen.keys() - by_id.keys()
        came = by_id.keys() - seen.keys()
        if not gone and not came:
            return state.desired, state.namespaces, state.errors, {}
        last = state.by_key
        made: dict[tuple[object, object], tuple[int, _DesiredOf]] = {}
        for i in came:
            replica = by_id[i]
            meta = replica.get("metadata") or {}
            key = (meta.get("namespace"), meta.get("name"))
            if key in made:
                return None
            spec = replica.get("spec")
            reads = (meta.get("generation", 1), meta.get("labels"))
            held = last.get(key)
            if held is None or held[0] is not spec or held[1] != reads:
                held = (spec, reads, _desired_of(replica, self.config.policy))
            made[key] = (i, held)
        new_seen = dict(seen)
        by_key = dict(last)
        removed: dict[tuple[object, object], tuple[_Desired, ...] | ReplicaInvalid] = {}
        for i in gone:
            _, key, held = new_seen.pop(i)
            removed[key] = held[2]
            del by_key[key]
        for key, (i, held) in made.items():
            if key in by_key:
                return None  # a replica that stays has this key too
            by_key[key] = held
            new_seen[i] = (by_id[i], key, held)
        olds: list[tuple[_Desired, ...]] = []
        news: list[tuple[_Desired, ...]] = []
        for key in removed.keys() | made.keys():
            old = removed.get(key, ())
            new = made[key][1][2] if key in made else ()
            if old is new:
                continue
            if isinstance(old, ReplicaInvalid) or isinstance(new, ReplicaInvalid):
                return None
            olds.append(old)
            news.append(new)
        desired, namespaces, counts = state.desired, state.namespaces, state.counts
        changes: dict[Kind, _WantedChange] = {}
        if olds or news:
            assert counts is not None
            counts = dict(counts)
            copies: dict[Kind, dict[tuple[str, str], Obj]] = {}
            keys: dict[Kind, set[tuple[str, str]]] = {}
            # What the replicas wanted first, then what they want (an object may move).
            for objs, by in ((olds, -1), (news, 1)):
                for kind, key, obj in (d for o in objs for d in o):
                    copy = copies.get(kind)
                    if copy is None:
                        copy = copies[kind] = dict(desired[kind])
                        keys[kind] = set()
                    if by < 0:
                        del copy[key]
                    elif key in copy:
                        return None  # two replicas want it
                    else:
                        copy[key] = obj
                    counts[key[0]] = counts.get(key[0], 0) + by
                    keys[kind].add(key)
            for ns in [ns for ns, n in counts.items() if not n]:
                del counts[ns]
            if counts.keys() != set(namespaces):
                namespaces = sorted(counts)
            changes = {kind: (desired[kind], keys[kind]) for kind in copies}
            desired = {**desired, **copies}
        self._desired_state = _DesiredState(
            new_seen, by_key, None, desired, namespaces, state.errors, counts
        )
        return desired, namespaces, state.errors, changes

    def _desired_set_whole(self, replicas: Sequence[Mapping[str, Any]]) -> _DesiredSet:
        """`_desired_set`, replica by replica (what it reuses is by identity or key)."""
        state = self._desired_state
        last_seen = state.seen if state is not None else {}
        last = state.by_key if state is not None else {}
        seen: dict[int, tuple[Mapping[str, Any], tuple[object, object], _DesiredOf]] = {}
        by_key: dict[tuple[object, object], _DesiredOf] = {}
        made: list[tuple[_Desired, ...] | ReplicaInvalid] = []
        for replica in replicas:
            hit = last_seen.get(id(replica))
            if hit is not None and hit[0] is replica:
                # The very object of the last call: nothing to look up in it.
                key, held = hit[1], hit[2]
            else:
                meta = replica.get("metadata") or {}
                key = (meta.get("namespace"), meta.get("name"))
                spec = replica.get("spec")
                reads = (meta.get("generation", 1), meta.get("labels"))
                found = last.get(key)
                if found is None or found[0] is not spec or found[1] != reads:
                    found = (spec, reads, _desired_of(replica, self.config.policy))
                held = found
            by_key[key] = held
            seen[id(replica)] = (replica, key, held)
            made.append(held[2])
        is_unique = len(seen) == len(by_key) == len(replicas)
        if state is not None and state.made is not None and _is_same(state.made, made):
            desired, namespaces, errors = state.desired, state.namespaces, state.errors
            counts = state.counts if is_unique else None
        else:
            desired_by: dict[Kind, dict[tuple[str, str], Obj]] = {k: {} for k in OWNED_KINDS}
            errors = []
            counts = {} if is_unique else None
            for replica, objs in zip(replicas, made, strict=True):
                if isinstance(objs, ReplicaInvalid):
                    meta = replica.get("metadata") or {}
                    errors.append(f"replica {meta.get('namespace')}/{meta.get('name')}: {objs}")
                    counts = None
                    continue
                for kind, key, obj in objs:
                    if counts is not None:
                        if key in desired_by[kind]:
                            counts = None  # wanted twice: the last replica's wins
                        else:
                            counts[key[0]] = counts.get(key[0], 0) + 1
                    desired_by[kind][key] = obj
            desired = desired_by
            namespaces = sorted({ns for by in desired_by.values() for (ns, _) in by})
        self._desired_state = _DesiredState(
            seen, by_key, tuple(made), desired, namespaces, errors, counts
        )
        return desired, namespaces, errors, {}

    def _apply(
        self, kind: Kind, want: Obj, current: Mapping[str, Any] | None, outcome: StepOutcome
    ) -> bool:
        """Create or update the local object to hold `want`; True when it already did."""
        ref = _ref(kind, want["metadata"]["namespace"], want["metadata"]["name"])
        try:
            if current is None:
                self.local.create(want)
                outcome.created.append(ref)
                return False
            if _contains(current, {"metadata": {"labels": want["metadata"]["labels"]}}) and (
                _contains(current.get("spec"), want["spec"])
            ):
                return True
            if kind == RESOURCE_CLAIM_TEMPLATE:
                # Immutable spec: replace it. Pods already running keep the claims they have.
                self.local.delete(kind, want["metadata"]["name"], want["metadata"]["namespace"])
                self.local.create(want)
                outcome.updated.append(ref)
                return False

            def update() -> None:
                latest = self.local.get(
                    kind, want["metadata"]["name"], want["metadata"]["namespace"]
                )
                if latest is None:
                    self.local.create(want)
                    return
                latest["metadata"]["labels"] = dict(want["metadata"]["labels"])
                latest["spec"] = want["spec"]
                self.local.update(latest)

            self._retry(update)
            outcome.updated.append(ref)
        except StoreError as e:
            outcome.errors.append(f"apply {ref}: {e}")
        return False

    def _delete_local(self, kind: Kind, name: str, ns: str, outcome: StepOutcome) -> None:
        try:
            self.local.delete(kind, name, ns)
            outcome.deleted.append(_ref(kind, ns, name))
        except NotFound:
            pass
        except StoreError as e:
            outcome.errors.append(f"delete {_ref(kind, ns, name)}: {e}")

    def _ensure_namespace(self, ns: str, outcome: StepOutcome) -> None:
        try:
            if self.local.get(NAMESPACE, ns) is None:
                self.local.create(namespace_body(ns, self.config.policy))
        except AlreadyExists:
            pass
        except StoreError as e:
            outcome.errors.append(f"namespace {ns}: {e}")

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


def _patched_versions(
    held: Mapping[int, Mapping[str, Any]],
    versions: Mapping[str, object],
    by_id: Mapping[int, Mapping[str, Any]],
    gone: Iterable[int],
    came: Iterable[int],
) -> dict[str, object] | None:
    """`versions` (name -> resourceVersion of the objects `held`, one per name) changed to
    those of `by_id`, which lacks the objects `gone` and adds those `came`; None when
    `held` or `by_id` has two objects of one name."""
    if len(versions) != len(held):
        return None
    patched = dict(versions)
    for i in gone:
        del patched[held[i]["metadata"]["name"]]
    for i in came:
        meta = by_id[i]["metadata"]
        if meta["name"] in patched:
            return None
        patched[meta["name"]] = meta.get("resourceVersion")
    return patched


def _namespace_name(r: ObservedReplica) -> tuple[str, str]:
    return r.namespace, r.name


def _status_of(observed: _O, last: tuple[_O, Obj] | None) -> tuple[_O, Obj]:
    """The status body of `observed`: the last one made, when the observation is equal."""
    # The observe cache hands out the very observation while its inputs are unchanged.
    if last is not None and (last[0] is observed or last[0] == observed):
        return last
    return observed, observed.to_status()


def _is_same(held: Sequence[object], objects: Sequence[object]) -> bool:
    """Whether two sequences hold the same objects, in order (identity; compared in C)."""
    return len(held) == len(objects) and all(map(operator.is_, held, objects))


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


#: One desired local object: its kind, (namespace, name) and body (shared: never changed).
_Desired = tuple[Kind, tuple[str, str], Obj]
#: A kind's wanted mapping as it was, and the keys in which the one now differs from it.
_WantedChange = tuple[Mapping[tuple[str, str], Obj], AbstractSet[tuple[str, str]]]
#: What `Agent._desired_set` returns: the desired objects by kind and (namespace, name),
#: their namespaces, the errors of invalid replicas, and the kinds' changes when known.
_DesiredSet = tuple[
    Mapping[Kind, Mapping[tuple[str, str], Obj]], list[str], list[str], Mapping[Kind, _WantedChange]
]
#: A replica's spec (held: its identity stays its own), its generation and labels, and the
#: desired objects made from them (`Agent._desired_of_all`).
_DesiredOf = tuple[object, tuple[object, object], tuple[_Desired, ...] | ReplicaInvalid]


@dataclass(frozen=True, slots=True, eq=False)
class _DesiredState:
    """One `Agent._desired_set` call: what it was made from and what it made. Never changed
    once made (a call makes a new one), so the mappings it holds keep their content."""

    #: Each replica (held: its identity stays its own) by identity, with its (namespace,
    #: name) and its desired objects and what they were made from.
    seen: dict[int, tuple[Mapping[str, Any], tuple[object, object], _DesiredOf]]
    #: The same desired objects by the replica's (namespace, name).
    by_key: dict[tuple[object, object], _DesiredOf]
    #: Each replica's desired objects in the replicas' order (held); None when the set was
    #: made from a change (`_desired_set_since`), which does not keep an order.
    made: tuple[tuple[_Desired, ...] | ReplicaInvalid, ...] | None
    desired: Mapping[Kind, Mapping[tuple[str, str], Obj]]
    namespaces: list[str]
    errors: list[str]
    #: How many desired objects each namespace has, for a plain set: every replica with a
    #: key and an identity of its own, none invalid, no object wanted by two. None otherwise
    #: (then the next set is made whole).
    counts: dict[str, int] | None


@dataclass(frozen=True, slots=True, eq=False)
class _KindPass:
    """What one kind's last pass saw and found (`Agent._materialize_kind`), for a listing
    with one object per key. Never changed once made."""

    #: The wanted mapping (held: its identity stays its own).
    wanted: Mapping[tuple[str, str], Obj]
    #: The local objects listed (held), by identity.
    listed: dict[int, Mapping[str, Any]]
    #: The same, by (namespace, name).
    existing: dict[tuple[str, str], Mapping[str, Any]]
    #: Each wanted key whose local object holds what is wanted: the pair (held).
    agreeing: dict[tuple[str, str], tuple[Mapping[str, Any], Obj]]
    #: The keys the pass wrote (or failed to): wanted ones whose local object did not hold
    #: what is wanted, and listed ones not wanted.
    acted: set[tuple[str, str]]


def _listing_since(
    last: _KindPass, by_id: Mapping[int, Mapping[str, Any]]
) -> tuple[dict[tuple[str, str], Mapping[str, Any]], set[tuple[str, str]]] | None:
    """The listing `by_id` by (namespace, name), from the last pass's, and the keys of the
    objects that came or went since (by identity: a changed object is one gone, one come);
    None when it has two objects of one key."""
    gone = last.listed.keys() - by_id.keys()
    came = by_id.keys() - last.listed.keys()
    if not gone and not came:
        return last.existing, set()
    existing = dict(last.existing)
    touched: set[tuple[str, str]] = set()
    for i in gone:
        meta = last.listed[i]["metadata"]
        key = (meta["namespace"], meta["name"])
        del existing[key]
        touched.add(key)
    for i in came:
        meta = by_id[i]["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in existing:
            return None
        existing[key] = by_id[i]
        touched.add(key)
    return existing, touched


def _desired_of(
    replica: Mapping[str, Any], policy: ClusterPolicy
) -> tuple[_Desired, ...] | ReplicaInvalid:
    """`materialize(replica, policy)` keyed for the diff; the error when the replica is invalid
    or refused."""
    try:
        objs = materialize(replica, policy)
    except ReplicaInvalid as e:
        return e
    return tuple((_kind(o), (o["metadata"]["namespace"], o["metadata"]["name"]), o) for o in objs)


def _contains(current: object, want: object) -> bool:
    """Whether `current` holds every field of `want` (the API server may add defaults)."""
    if isinstance(want, Mapping):
        return isinstance(current, Mapping) and all(
            k in current and _contains(current[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(current, list)
            and len(current) == len(want)
            and all(_contains(c, w) for c, w in zip(current, want, strict=True))
        )
    return current == want


def _kind(obj: Mapping[str, Any]) -> Kind:
    for kind in OWNED_KINDS:
        if kind.api_version == obj["apiVersion"] and kind.kind == obj["kind"]:
            return kind
    raise ValueError(f"not an owned kind: {obj['apiVersion']} {obj['kind']}")


def _ref(kind: Kind, ns: str, name: str) -> str:
    return f"{kind.kind} {ns}/{name}"
