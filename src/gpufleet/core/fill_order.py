"""Where one deployment tries its next replica during the fill (schedule.py step 4): its
candidate clusters in fill order, and the first that takes the replica.

Model. The candidates (clusters that may ever host the deployment, in name order) are tried
by (the deployment's replicas there, rank), rank being the position in the name order counted
from an offset (wrapping around): spread before pack, ties dealt like cards. The first where
`place_replica` fits is committed. `PlainFill` does exactly that, trying every candidate in
that order on every placement: it is `FRESH`'s (core/derive.py), the specification; the
reuse above the core (`FillIndex`, core/reuse/fill_index.py) places the same, for less.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from gpufleet.core.decision import Reason
from gpufleet.core.model import ClusterName, Deployment, PoolName
from gpufleet.core.placement import ClusterLedger, PlacementMemo, ReplicaFit, commit, place_replica


class Filling(Protocol):
    """One deployment's candidates in fill order, for one call (mutable: its counts)."""

    #: The candidates in name order.
    names: tuple[ClusterName, ...]

    def place(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        deployment: Deployment,
        memo: PlacementMemo,
        owner: Callable[[ClusterName], str],
        avoid: Mapping[ClusterName, Mapping[PoolName, Reason]] | None = None,
    ) -> tuple[ClusterName, ReplicaFit] | None:
        """Place one replica on the first candidate in fill order that takes it, commit it
        and say where; None when none does. `owner` names the replica on a cluster (asked
        only where pods are logged); `avoid`, per cluster, the pools the deployment avoids."""
        ...


class PlainFill:
    """`Filling` that tries every candidate in fill order on every placement (the
    specification: see the module docstring)."""

    __slots__ = ("_counts", "_offset", "_ranks", "names")

    def __init__(
        self,
        names: tuple[ClusterName, ...],
        ranks: Mapping[ClusterName, int],
        counts: Mapping[ClusterName, int],
        offset: int = 0,
    ) -> None:
        self.names = names
        self._ranks = ranks
        self._offset = offset % len(names) if names else 0
        self._counts = {c: n for c, n in counts.items() if n > 0 and c in ranks}

    def place(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        deployment: Deployment,
        memo: PlacementMemo,
        owner: Callable[[ClusterName], str],
        avoid: Mapping[ClusterName, Mapping[PoolName, Reason]] | None = None,
    ) -> tuple[ClusterName, ReplicaFit] | None:
        n, counts = len(self.names), self._counts
        order = sorted(
            self.names, key=lambda c: (counts.get(c, 0), (self._ranks[c] - self._offset) % n)
        )
        for cluster in order:
            ledger = ledgers[cluster]
            avoided = avoid.get(cluster) if avoid else None
            name = owner(cluster) if ledger.records else ""
            compiled = memo.on_cluster(deployment, ledger)
            fitted = place_replica(ledger, deployment, compiled, owner=name, avoid=avoided)
            if fitted.engines is not None:
                commit(ledger, fitted)
                counts[cluster] = counts.get(cluster, 0) + 1
                return cluster, fitted
        return None
