"""The observe half of the agent's step (`Observer`): the cluster's change feeds, its
`FreeDeviceTable`, the policy and autoscaler annotations, and the report made from them.

A quiet step costs next to nothing: `observe` keys what it made by the versions of what it
read (the local change feed's revision, the autoscaler Events' revision, each assigned
replica's (namespace, name, uid, generation), the pools the hub declares, and the time
while the table holds a claim without a uid, whose time is every snapshot's), as a client-go
informer's reader keys by resourceVersion. With the same key the table, the policy gate and
the autoscaler's verdicts would give what they gave (each is a function of those inputs), so
the last report is handed out again at the new time (`Report.at`). The oracle,
tests/agent/test_observer_quiet.py, runs agents with the reuse on and off over sequences of
steps and holds their reports and the hub's writes equal.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from gpufleet.agent.admission import PolicyGate
from gpufleet.agent.device_plugin import device_plugin_pools
from gpufleet.agent.feed import ClusterFeed
from gpufleet.agent.model import (
    AllocationClock,
    ObservationResult,
    ObserveConfig,
    ObservedPool,
    ObservedReplica,
)
from gpufleet.agent.policy import ClusterPolicy
from gpufleet.agent.reads import declared_pools
from gpufleet.agent.scaleup import ScaleUpVerdicts
from gpufleet.agent.table import FreeDeviceTable
from gpufleet.api.names import replica_object_name
from gpufleet.store.port import INFERENCE_CLUSTER, Obj, Store, StoreError


def replica_observation_name(namespace: str, name: str) -> str:
    """`<namespace>.<name>`: the name of the replica's object on the hub, where replicas of
    equal names from two tenant namespaces share their cluster's namespace (`HubReplicas`)."""
    return replica_object_name(namespace, name)


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


class Observer:
    """What the observe half keeps between steps; made new to observe from scratch."""

    def __init__(
        self,
        cluster_name: str,
        local: Store,
        hub: Store,
        namespace: str,
        *,
        observe: ObserveConfig,
        policy: ClusterPolicy,
        heartbeat_interval_s: float,
        steering: Callable[[Mapping[str, Any] | None], None],
        reuse: bool = True,
    ) -> None:
        self.cluster_name = cluster_name
        self.hub = hub
        self.namespace = namespace
        self.heartbeat_interval_s = heartbeat_interval_s
        #: Told the InferenceCluster read with the declared pools (its `spec.steering`).
        self._steering = steering
        #: Whether a quiet step hands out the last report again (off: the oracle's plain run).
        self.reuse = reuse
        self.clock = AllocationClock()
        self.policy_gate = PolicyGate(policy)
        #: The cluster's free-device table, fed by its change feed.
        self.table = FreeDeviceTable(observe)
        self.feed = ClusterFeed(local, self.table)
        #: The cluster autoscaler's verdicts on unschedulable pods (their Events).
        self.scale_up = ScaleUpVerdicts(local)
        #: The last status body made from each pool's and replica's observation: an equal
        #: observation reuses it, so unchanged content is the same object step after step.
        self._pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        self._replica_statuses: dict[str, tuple[ObservedReplica, Obj]] = {}
        #: The mappings of the last report made: an entry (and a mapping) whose content is
        #: unchanged is reused.
        self._last_report_pools: dict[str, Obj] = {}
        self._last_report_replicas: Mapping[str, tuple[Obj, Obj]] = {}
        #: The pools the hub declared for this cluster when last read (`read_declared_pools`),
        #: and when that read succeeded (None: never).
        self._declared_pools: frozenset[str] = frozenset()
        #: The device-plugin pools the hub declares, and their resources (part of the key).
        self._device_plugin: tuple[tuple[str, frozenset[str]], ...] = ()
        self._declared_read_at: datetime | None = None
        #: The version key of the last report's inputs, and that report (`observe`).
        self._last: tuple[tuple[object, ...], Report] | None = None
        #: How many observations handed out the last report again (for tests and benchmarks).
        self.reused = 0

    def read_declared_pools(self, now: datetime | None = None) -> frozenset[str]:
        """The pools the hub declares for this cluster (`Agent.read_declared_pools`)."""
        last = self._declared_read_at
        if (
            now is not None
            and last is not None
            and last <= now
            and (now - last).total_seconds() < self.heartbeat_interval_s
        ):
            return self._declared_pools
        try:
            found = self.hub.get(INFERENCE_CLUSTER, self.cluster_name)
        except StoreError:
            return self._declared_pools
        self._declared_pools = declared_pools(found)
        device_plugin = device_plugin_pools(found)
        self._device_plugin = tuple(sorted(device_plugin.items()))
        self.table.declare_device_plugin_pools(device_plugin)
        self._steering(found)
        self._declared_read_at = now if now is not None else last
        return self._declared_pools

    def _key(
        self, now: datetime, replicas: Sequence[Mapping[str, Any]], declared: frozenset[str]
    ) -> tuple[object, ...] | None:
        """The version key of `observe`'s inputs; None when a replica lacks a uid or a
        generation. Of a replica, the table and the policy gate read its namespace, name and
        spec (`read_replica`, `check_replica`), and the store moves `generation` exactly when
        the spec changes (the port's contract): so its (namespace, name, uid, generation) is
        its part, and a write of its status alone (the controller publishing) leaves it."""
        try:
            metas = list(map(_METADATA, replicas))
            signatures = list(zip(*(map(get, metas) for get in _SIGNATURE), strict=True))
        except (KeyError, TypeError):
            return None
        if any(None in signature for signature in signatures):
            return None
        timed = now if self.feed.is_timed else None
        return (
            self.feed.revision,
            self.scale_up.revision,
            signatures,
            declared,
            self._device_plugin,
            timed,
        )

    def observe(self, now: datetime, replicas: Sequence[Mapping[str, Any]]) -> Report:
        """Observe the local cluster (advancing the allocation clock) into a `Report`."""
        self.feed.sync()
        self.scale_up.sync()
        declared = self.read_declared_pools(now)
        key = self._key(now, replicas, declared) if self.reuse else None
        if key is not None and self._last is not None and self._last[0] == key:
            self.reused += 1
            return self._last[1].at(now)
        self._last = None
        report = self._observe(now, replicas, declared)
        if key is not None:
            self._last = (key, report)
        return report

    def _observe(
        self,
        now: datetime,
        replicas: Sequence[Mapping[str, Any]],
        declared: frozenset[str],
    ) -> Report:
        snapshot = self.table.snapshot(replicas, now, declared)
        self.clock = snapshot.clock
        # The policy's refusals are said on the observations; a replica whose verdict moved is
        # reported again even when the table's observation of it did not change.
        result = self.policy_gate.annotate(snapshot.result, replicas)
        result = self.scale_up.annotate(result)
        result = self.feed.host_room.annotate(result, self.table.free_devices)
        changed = snapshot.changed_replicas
        if changed is not None and self.policy_gate.moved:
            changed = changed | self.policy_gate.moved
        if changed is not None and self.scale_up.moved:
            changed = changed | self.scale_up.moved
        pool_statuses: dict[str, tuple[ObservedPool, Obj]] = {}
        for p in result.pools:
            pool_statuses[str(p.name)] = _status_of(p, self._pool_statuses.get(str(p.name)))
        self._pool_statuses = pool_statuses
        # Unchanged content is the same objects as last step, entry by entry, and then the
        # same mappings (`ReportWriter.is_push_due`, `ReportWriter.push`).
        reps = self._report_replicas(result, changed)
        pools = {name: status for name, (_, status) in pool_statuses.items()}
        if _is_same_entries(pools, self._last_report_pools):
            pools = self._last_report_pools
        self._last_report_replicas, self._last_report_pools = reps, pools
        return Report(now, result, pools, reps)

    def _report_replicas(
        self,
        result: ObservationResult,
        changed: AbstractSet[tuple[str, str]] | None,
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
                observed = self.scale_up.annotated(
                    self.policy_gate.annotated(self.table.observed_replica(key))
                )
                if observed is None:
                    reps.pop(name, None)
                    self._replica_statuses.pop(name, None)
                else:
                    reps[name] = self._replica_entry(observed, name, self._replica_statuses)
        return last if _is_same_entries(reps, last) else reps

    def _replica_entry(
        self,
        r: ObservedReplica,
        name: str,
        statuses: dict[str, tuple[ObservedReplica, Obj]],
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


_O = TypeVar("_O", ObservedPool, ObservedReplica)
_METADATA = operator.itemgetter("metadata")
#: What `Observer._key` takes of a replica's metadata.
_SIGNATURE = tuple(
    operator.methodcaller("get", field) for field in ("namespace", "name", "uid", "generation")
)


def _status_of(observed: _O, last: tuple[_O, Obj] | None) -> tuple[_O, Obj]:
    """The status body of `observed`: the last one made, when the observation is equal."""
    if last is not None and last[0] == observed:
        return last
    return observed, observed.to_status()


def _is_same_entries(new: Mapping[str, object], old: Mapping[str, object]) -> bool:
    """Whether two mappings have the same keys, each to the same object (identity)."""
    return len(new) == len(old) and all(k in old and old[k] is v for k, v in new.items())
