"""`Snapshot.avoid` as `schedule` reads it: per deployment, the entries standing at `now`.

Split from schedule.py (which reads it once per call): the replicas to drop for re-placement
and, per cluster, the pools its new replicas avoid, each with its reason. A function of the
snapshot's entries, `now` and the ledgers' pools; the order of the entries changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from gpufleet.core import diagnosis
from gpufleet.core.decision import Reason, ReasonCode
from gpufleet.core.model import Avoid, ClusterName, PoolName, Snapshot
from gpufleet.core.placement import ClusterLedger

#: Drop reasons of a replica re-placed because it could not run (`Snapshot.avoid`).
REPLACED: Final = frozenset({ReasonCode.PODS_UNSCHEDULABLE, ReasonCode.POLICY_DENIED})


@dataclass(frozen=True, slots=True)
class Avoiding:
    """One deployment's share of `Snapshot.avoid` that stands at `now`: the replicas to drop
    (by name, with the reason) and, per cluster, the pools to avoid (with the verdict)."""

    doomed: Mapping[str, Reason]
    pools: Mapping[ClusterName, Mapping[PoolName, Reason]]


NOT_AVOIDING: Final = Avoiding({}, {})


def avoiding_at(
    snapshot: Snapshot, now: datetime, ledgers: Mapping[ClusterName, ClusterLedger]
) -> dict[tuple[str, str], Avoiding]:
    """`Snapshot.avoid` per deployment, the entries whose `until` is after `now` (in a
    canonical order, so the order of the input changes nothing; of two entries for one pool
    the later `until` speaks)."""
    doomed: dict[tuple[str, str], dict[str, Reason]] = {}
    pools: dict[tuple[str, str], dict[ClusterName, dict[PoolName, Reason]]] = {}
    for entry in sorted(snapshot.avoid, key=_avoid_order):
        if entry.until <= now:
            continue
        key = (entry.deployment.namespace, entry.deployment.name)
        if entry.replica:
            code = ReasonCode(entry.cause) if entry.cause in REPLACED else _STUCK
            doomed.setdefault(key, {})[entry.replica] = diagnosis.stuck(
                code, entry.message, entry.replica
            )
        reason = diagnosis.backing_off(entry.cause, entry.message, entry.until)
        # Cluster "": every pool of every cluster (a deployment stuck again backs off whole).
        for cluster in sorted(ledgers) if not entry.cluster else [entry.cluster]:
            ledger = ledgers.get(cluster)
            if ledger is None:
                continue
            names = [entry.pool] if entry.pool else [p.pool.name for p in ledger.pools]
            avoided = pools.setdefault(key, {}).setdefault(cluster, {})
            for name in names:
                avoided[name] = reason
    keys = doomed.keys() | pools.keys()
    return {k: Avoiding(doomed.get(k, {}), pools.get(k, {})) for k in keys}


_STUCK: Final = ReasonCode.PODS_UNSCHEDULABLE


def _avoid_order(entry: Avoid) -> tuple[object, ...]:
    return (
        entry.deployment.namespace,
        entry.deployment.name,
        entry.cluster,
        entry.pool or "",
        entry.until,
        entry.replica,
        entry.cause,
        entry.message,
    )
