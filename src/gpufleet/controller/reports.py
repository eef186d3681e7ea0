"""`FleetReports`: the agents' reports by cluster and by replica, changed one observation at a
time, from which each cluster's `Trust` is judged (status.py).

What the index reads of an observation object (`Observation`: its cluster, report, error and
the replica it names) is filed here under its kind and key; `put` replaces what the last
version filed and says which clusters and replicas it touched, so the step marks exactly those
dirty. A cluster's reports are judged again only when they, or the epoch the cluster is known
to hold, changed (`judge`); a replica's report is looked up by (cluster, namespace, name)
rather than by scanning the cluster's reports.

Equivalence with judging every report of the listing (the plain computation, kept in
`judge`): a cluster's reports are those of its observation namespace that parse, in (kind,
name) order; a replica's report is the first accepted ReplicaObservation naming it, in that
order, and it counts as rejected when any rejected one names it. A report stamped beyond the
clock-skew tolerance is set aside (`Trust.future`) and counts as rejected for its replica: what
was published stays, as if its agent were silent.
"""

from __future__ import annotations

import operator
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.controller.fence import Fence, is_fenced
from gpufleet.controller.index import Key, Observation
from gpufleet.controller.status import AgentReport, Trust, judge

#: An observation by (kind, namespace, name).
ObservationKey = tuple[str, str, str]
#: A replica's reports by (cluster, namespace, name).
ReplicaKey = tuple[str, str, str]

NO_TRUST = Trust(None, (), ())
_AT = operator.attrgetter("observed_at")
_KEY = operator.itemgetter(0)


@dataclass(slots=True)
class _Cluster:
    """One cluster's parsed reports by (kind, name), and its last judgement."""

    #: The reports by (kind, name); in that order while `is_sorted` (a replacement keeps a
    #: key's place, a new key goes last).
    reports: dict[tuple[str, str], AgentReport] = field(default_factory=dict)
    is_sorted: bool = True
    #: The Trust, and the known fence it was judged with; None when reports came or went,
    #: or changed epoch or incarnation, since.
    judged: tuple[Trust, Fence | None] | None = None
    #: Whether reports were replaced since the judgement (by ones of the same kind, name,
    #: lease incarnation and epoch: a heartbeat or new content).
    is_replaced: bool = False
    #: The reports that replaced others since the judgement, by (kind, name), and whether
    #: each was stamped and received no earlier than the one it replaced (`Trust.moved`).
    moved: dict[tuple[str, str], AgentReport] = field(default_factory=dict)
    is_forward: bool = True
    #: The latest `observed_at` of the reports (`latest_stamp`); None: to compute again.
    latest: datetime | None = None

    def latest_stamp(self) -> datetime | None:
        """The latest stamp of the reports (None without reports), kept across replacements."""
        if self.latest is None and self.reports:
            self.latest = max(map(_AT, self.reports.values()))
        return self.latest

    def in_order(self) -> tuple[AgentReport, ...]:
        """The reports in (kind, name) order (sorted again only after a new key came)."""
        if not self.is_sorted:
            self.reports = dict(sorted(self.reports.items(), key=_KEY))
            self.is_sorted = True
        return tuple(self.reports.values())

    def judged_as(self, trust: Trust, known: Fence | None) -> Trust:
        """Remember `trust`, judged with `known`, as the last judgement; returns it."""
        self.judged, self.is_replaced, self.is_forward = (trust, known), False, True
        self.moved.clear()
        return trust

    def restamp(self, old: datetime | None, new: datetime) -> None:
        """One report's stamp moved from `old` (None: it was not filed) to `new`: the latest
        stamp is then still known unless `old` may have been it and `new` is earlier."""
        latest = self.latest
        if latest is None:
            return
        if new >= latest:
            self.latest = new
        elif old is not None and old >= latest:
            self.latest = None


def _is_replacement(old: Observation, new: Observation) -> bool:
    """Whether `new` only replaces `old`'s report: both read, of the same cluster, replica
    and lease epoch."""
    return (
        old.report is not None
        and new.report is not None
        and old.cluster == new.cluster
        and old.replica == new.replica
        and old.report.lease_epoch == new.report.lease_epoch
        and old.report.lease_uid == new.report.lease_uid
        and not old.error
        and not new.error
    )


class FleetReports:
    """Reports by cluster and replica (see the module docstring). Not thread-safe."""

    def __init__(self) -> None:
        self._clusters: dict[str, _Cluster] = {}
        self._filed: dict[ObservationKey, Observation] = {}
        #: Per replica (cluster, namespace, name): its ReplicaObservations' reports by name.
        self._replicas: dict[ReplicaKey, dict[str, AgentReport]] = {}
        #: Observations that cannot be read, by (kind order, namespace, name): (cluster, error).
        self.errors: dict[tuple[int, str, str], tuple[str, str]] = {}

    def put(
        self, kind: str, key: Key, read: Observation | None
    ) -> tuple[set[str], set[tuple[str, str]]]:
        """File what was read of the observation at `key` (None: it is gone), in place of
        what its last version filed; the clusters and replicas (namespace, name) touched."""
        at = (kind, *key)
        old = self._filed.get(at)
        if old is not None and read is not None and _is_replacement(old, read):
            self._replace(kind, key, old, read)
            self._filed[at] = read
            assert read.cluster is not None
            return {read.cluster}, {read.replica} if read.replica is not None else set()
        clusters: set[str] = set()
        replicas: set[tuple[str, str]] = set()
        for observation, is_added in ((self._filed.pop(at, None), False), (read, True)):
            if observation is None or observation.cluster is None:
                continue
            self._file(kind, key, observation, is_added)
            clusters.add(observation.cluster)
            if observation.replica is not None:
                replicas.add(observation.replica)
        if read is not None:
            self._filed[at] = read
        return clusters, replicas

    def _file(self, kind: str, key: Key, observation: Observation, is_added: bool) -> None:
        cluster = observation.cluster
        assert cluster is not None
        order = (0 if kind == "PoolObservation" else 1, *key)
        entry = self._clusters.setdefault(cluster, _Cluster())
        entry.judged = None
        report = observation.report
        if not is_added:
            self.errors.pop(order, None)
            if entry.reports.pop((kind, key[1]), None) is not None:
                entry.latest = None
            if report is not None and observation.replica is not None:
                self._unfile_replica(cluster, observation.replica, key[1])
            return
        if observation.error:
            self.errors[order] = (cluster, observation.error)
        if report is None:
            return
        overwritten = entry.reports.get((kind, key[1]))
        entry.restamp(
            overwritten.observed_at if overwritten is not None else None, report.observed_at
        )
        entry.reports[(kind, key[1])] = report
        if overwritten is None and len(entry.reports) > 1:
            entry.is_sorted = False
        if observation.replica is not None:
            named = self._replicas.setdefault((cluster, *observation.replica), {})
            named[key[1]] = report

    def _unfile_replica(self, cluster: str, replica: tuple[str, str], name: str) -> None:
        named = self._replicas.get((cluster, *replica))
        if named is not None:
            named.pop(name, None)
            if not named:
                del self._replicas[(cluster, *replica)]

    def _replace(self, kind: str, key: Key, old: Observation, new: Observation) -> None:
        """`new` in place of `old`: a report of the same cluster, kind, name, lease epoch
        and replica (see `_is_replacement`)."""
        assert new.cluster is not None and new.report is not None
        entry = self._clusters.setdefault(new.cluster, _Cluster())
        report = new.report
        last = entry.reports.get((kind, key[1]))
        entry.restamp(last.observed_at if last is not None else None, report.observed_at)
        entry.reports[(kind, key[1])] = report
        entry.is_replaced = True
        entry.moved[(kind, key[1])] = report
        if (
            last is None
            or report.observed_at < last.observed_at
            or report.aged_from < last.aged_from
        ):
            entry.is_forward = False
        if new.replica is not None:
            self._replicas[(new.cluster, *new.replica)][key[1]] = new.report

    def judge(
        self,
        cluster: str,
        known: Fence | None,
        horizon: datetime | None = None,
        *,
        now: datetime | None = None,
        heard_at: datetime | None = None,
        silence_s: float | None = None,
    ) -> Trust:
        """The cluster's Trust (`status.judge` of its reports), judged again only when its
        reports or `known` changed since the last call.

        Reports only replaced since a judgement that accepted them all (each by one of the
        same kind, name, lease incarnation and epoch) are accepted all again under the same
        fence, in the same (kind, name) order: `judge` would find the same fence. When each
        replacement was stamped and received no earlier than the report it replaced (a
        heartbeat), the newest report and the time last heard are found from the replacements
        alone (`Trust.moved`) rather than from every report (oracle:
        tests/controller/test_reports_judge.py).

        With `horizon` (now plus the clock-skew tolerance), a cluster with a report stamped
        after it, or whose last judgement set one aside, is judged again in full (`judge`):
        which reports are in the future moves with the clock. So is one whose fence was
        contested (another incarnation waits for the fenced one's silence, at `now`): the
        fenced incarnation last heard at `heard_at` or later, silent after `silence_s`."""
        entry = self._clusters.setdefault(cluster, _Cluster())
        last = entry.judged
        if (last is not None and last[0].is_contested) or (
            horizon is not None
            and (
                (last is not None and last[0].future)
                or ((latest := entry.latest_stamp()) is not None and latest > horizon)
            )
        ):
            trust = judge(
                entry.reports.values(),
                known,
                horizon,
                now=now,
                heard_at=heard_at,
                silence_s=silence_s,
            )
            return entry.judged_as(trust, known)
        if last is not None and last[1] == known:
            if not entry.is_replaced:
                return last[0]
            if not last[0].rejected and len(last[0].accepted) == len(entry.reports):
                accepted = entry.in_order()
                if entry.is_forward:
                    return entry.judged_as(last[0].moved(accepted, entry.moved.values()), known)
                trust = Trust(last[0].epoch, accepted, (), (), last[0].uid)
                return entry.judged_as(trust, known)
        trust = judge(
            entry.reports.values(), known, now=now, heard_at=heard_at, silence_s=silence_s
        )
        return entry.judged_as(trust, known)

    def replica_reports(
        self, cluster: str, namespace: str, name: str, trust: Trust | None
    ) -> tuple[AgentReport | None, bool]:
        """The replica's accepted ReplicaObservation (the first by name) and whether one
        naming it was rejected; (None, False) when its cluster has no Trust."""
        named = self._replicas.get((cluster, namespace, name))
        if trust is None or not named or trust.epoch is None:
            return None, False
        fence = trust.fence
        future = {r.name for r in trust.future if r.kind == "ReplicaObservation"}
        report: AgentReport | None = None
        is_rejected = False
        for obs_name in sorted(named):
            found = named[obs_name]
            if not is_fenced(found, fence) or obs_name in future:
                is_rejected = True
            elif report is None:
                report = found
        return report, is_rejected

    def cluster_errors(self, clusters: Container[tuple[str, str]]) -> list[str]:
        """The errors of the observations about the clusters that exist (`clusters` holds
        their keys, ("", name)), in listing order (PoolObservations, then
        ReplicaObservations, each by namespace and name)."""
        if not self.errors:
            return []
        return [error for _, (c, error) in sorted(self.errors.items()) if ("", c) in clusters]
