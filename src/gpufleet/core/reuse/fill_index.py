"""`FillIndex`: where one deployment tries its next replica during the fill (schedule.py
step 4), its candidate clusters in fill order indexed so that a placement does not scan the
fleet. Reuse within one call, above the core: `FRESH` fills with `PlainFill`
(core/fill_order.py), the specification.

Invariant: placing through `FillIndex` is the same as `PlainFill`, trying every candidate in
fill order with `place_replica` (tests/core/test_fill_index.py, and every `Derive` against
`FRESH`: tests/core/test_derive_properties.py), for less.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping

from gpufleet.core.decision import Reason
from gpufleet.core.model import ClusterName, Deployment, PoolName
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    ReplicaFit,
    commit,
    explain_profile,
    place_replica,
)


class FillIndex:
    """Where one deployment tries its next replica, in fill order: its candidate clusters by
    (its replicas there, rank), rank being the position in `names` counted from `offset`
    (wrapping around). Mutable, for one call.

    Index, so that a placement does not scan the fleet: clusters without a replica of the
    deployment are `names` read from a cursor (the tuple is shared by every deployment with
    these candidates), then the ones before the cursor that it failed on (kept with the
    cluster's `version` at the failure, in rank order), then the few that hold its replicas,
    kept sorted. A cluster is tried again only when its version moved since it failed there
    (the fit is a function of the deployment's explain profile and the cluster's version, so
    the same try would fail again), and a cluster where another deployment of the same
    explain profile failed at the current version (`ClusterLedger.failures`) is not tried.
    Placing is the same as trying every candidate in fill order, for less.
    """

    __slots__ = (
        "_counts",
        "_cursor",
        "_failed",
        "_levels",
        "_offset",
        "_profiles",
        "_ranks",
        "_zero",
        "names",
    )

    def __init__(
        self,
        names: tuple[ClusterName, ...],
        ranks: Mapping[ClusterName, int],
        counts: Mapping[ClusterName, int],
        offset: int = 0,
    ) -> None:
        #: The candidates in name order (shared, never mutated), and each one's position.
        self.names = names
        self._ranks = ranks
        self._offset = offset % len(names) if names else 0
        #: This deployment's replicas per candidate cluster (clusters with one or more).
        self._counts = {c: n for c, n in counts.items() if n > 0 and c in ranks}
        #: (count, rank, cluster) of clusters with a replica, sorted.
        self._levels = sorted((n, self._rank(c), c) for c, n in self._counts.items())
        #: Clusters without a replica, before the cursor, that failed: (rank, cluster,
        #: version at the failure), in rank order.
        self._zero: list[tuple[int, ClusterName, int]] = []
        #: Clusters with a replica that failed: their version at the failure.
        self._failed: dict[ClusterName, int] = {}
        self._cursor = 0
        #: The deployment's explain profile per cluster shape.
        self._profiles: dict[int, int] = {}

    def _rank(self, cluster: ClusterName) -> int:
        return (self._ranks[cluster] - self._offset) % len(self.names)

    def place(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        deployment: Deployment,
        memo: PlacementMemo,
        owner: Callable[[ClusterName], str],
        avoid: Mapping[ClusterName, Mapping[PoolName, Reason]] | None = None,
    ) -> tuple[ClusterName, ReplicaFit] | None:
        """Place one replica on the first cluster in fill order that takes it, commit it, and
        say where; None when none does. `owner` names the replica on a cluster (asked only
        where pods are logged); `avoid`, per cluster, the pools this deployment avoids (a
        failure there is its own, not shared with its explain profile)."""

        def attempt(cluster: ClusterName) -> ReplicaFit | None:
            ledger = ledgers[cluster]
            avoided = avoid.get(cluster) if avoid else None
            profile = self._profiles.get(ledger.shape)
            if profile is None:
                profile = explain_profile(ledger, deployment, memo)
                self._profiles[ledger.shape] = profile
            if not avoided and ledger.failures.get(profile) == ledger.version:
                return None
            name = owner(cluster) if ledger.records else ""
            compiled = memo.on_cluster(deployment, ledger)
            fitted = place_replica(ledger, deployment, compiled, owner=name, avoid=avoided)
            if fitted.engines is None:
                if not avoided:
                    ledger.failures[profile] = ledger.version
                return None
            commit(ledger, fitted)
            return fitted

        found = self._retry_zero(ledgers, attempt) or self._advance(ledgers, attempt)
        return found or self._try_levels(ledgers, attempt)

    def _retry_zero(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        attempt: Callable[[ClusterName], ReplicaFit | None],
    ) -> tuple[ClusterName, ReplicaFit] | None:
        zero = self._zero
        for i, (rank, cluster, version) in enumerate(zero):
            now = ledgers[cluster].version
            if now == version:
                continue
            fitted = attempt(cluster)
            if fitted is None:
                zero[i] = (rank, cluster, now)
                continue
            del zero[i]
            self._placed(cluster, rank, 0)
            return cluster, fitted
        return None

    def _advance(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        attempt: Callable[[ClusterName], ReplicaFit | None],
    ) -> tuple[ClusterName, ReplicaFit] | None:
        names, n = self.names, len(self.names)
        while self._cursor < n:
            rank = self._cursor
            cluster = names[(self._offset + rank) % n]
            self._cursor += 1
            if cluster in self._counts:
                continue
            fitted = attempt(cluster)
            if fitted is None:
                # Ranks grow with the cursor: appending keeps the list in rank order.
                self._zero.append((rank, cluster, ledgers[cluster].version))
                continue
            self._placed(cluster, rank, 0)
            return cluster, fitted
        return None

    def _try_levels(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        attempt: Callable[[ClusterName], ReplicaFit | None],
    ) -> tuple[ClusterName, ReplicaFit] | None:
        for count, rank, cluster in list(self._levels):
            version = ledgers[cluster].version
            if self._failed.get(cluster) == version:
                continue
            fitted = attempt(cluster)
            if fitted is None:
                self._failed[cluster] = version
                continue
            self._levels.remove((count, rank, cluster))
            self._failed.pop(cluster, None)
            self._placed(cluster, rank, count)
            return cluster, fitted
        return None

    def _placed(self, cluster: ClusterName, rank: int, count: int) -> None:
        self._counts[cluster] = count + 1
        bisect.insort(self._levels, (count + 1, rank, cluster))
