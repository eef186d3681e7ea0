"""The push side of the agent's step (`ReportWriter`): the report's observations written to the
hub namespace of the cluster, each only when its content changed (or someone else wrote it),
patched blind from what the last write left, guarded by its resourceVersion (see
`gpufleet.agent.runner`)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from gpufleet.agent.hub import ObservationVersions
from gpufleet.agent.model import ObservedPool, format_time
from gpufleet.agent.observer import Report
from gpufleet.agent.workloads import PassOutcome
from gpufleet.core import labels
from gpufleet.core.model import PoolName
from gpufleet.store.merge import merge_patch
from gpufleet.store.port import (
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

_T = TypeVar("_T")

#: A pool with no nodes the agent can see (all gone, or scaled to zero).
_EMPTY_POOL_STATUS: Final = ObservedPool(PoolName(""), 0, (), None, {}, {}, 0).to_status()


@dataclass(slots=True)
class StepOutcome(PassOutcome):
    """What a step did; for logs, the simulator and tests."""

    is_hub_reachable: bool = True
    is_pushed: bool = False


class ReportWriter:
    """What the push side keeps between steps: when and what it last pushed, and what its
    writes left on the hub. Made new when the agent observes from scratch."""

    def __init__(
        self,
        cluster_name: str,
        hub: Store,
        namespace: str,
        agent_stamp: Mapping[str, Any],
        *,
        min_push_interval_s: float,
        heartbeat_interval_s: float,
        retry: Callable[[Callable[[], Any]], Any],
    ) -> None:
        self.cluster_name = cluster_name
        self.hub = hub
        self.namespace = namespace
        #: `status.agent` of every observation written: identity, lease epoch and uid.
        self.agent_stamp = agent_stamp
        self.min_push_interval_s = min_push_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self._retry = retry
        self._last_push_at: datetime | None = None
        #: The mappings of the last report pushed (held: their identities stay theirs).
        #: Mappings are never changed, so the same ones have the same content, and content
        #: is compared with them (`is_push_due`).
        self._last_pushed_from: tuple[Mapping[str, Obj], Mapping[str, tuple[Obj, Obj]]] | None = (
            None
        )
        #: The versions of the ReplicaObservations on the hub, by name, kept from its feed.
        self._hub_versions = ObservationVersions(hub, namespace)
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

    def is_push_due(self, report: Report, now: datetime) -> bool:
        last = self._last_pushed_from
        if self._last_push_at is None or last is None:
            return True
        since_s = (now - self._last_push_at).total_seconds()
        if since_s < self.min_push_interval_s:
            return False
        if since_s >= self.heartbeat_interval_s:
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
        stamp = {"agent": self.agent_stamp, "observedAt": format_time(report.observed_at)}
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


#: See `ReportWriter._replicas_left`.
_ReplicasLeft = tuple[
    Mapping[str, tuple[Obj, Obj]], object, dict[str, object], Mapping[str, object] | None
]


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
