"""Diagnosing a deployment against the whole fleet: a `ClusterVerdict` per cluster (step 5 of
`schedule`, and a deployment's diagnosis at its first failure in the fill).

Model. A cluster's verdict for a deployment is, in order: `ClusterNotSelected` when the
deployment's selector does not take it; else its gates (untolerated NoSchedule/NoExecute
taints, not Ready, Expired: `gates`) with its pools' verdicts; else the verdict of
explaining a replica there (`place_replica(explain=True)`, never on a pool the deployment
avoids). A Stale cluster's age is a note after the reasons. `cluster_verdict` computes it,
`PlainDiagnoser` diagnoses with it cluster by cluster: `FRESH`'s (core/derive.py), the
specification. The reuse above the core (`Diagnoser`, core/reuse/diagnoser.py) shares
verdicts between deployments alike within a call and says the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gpufleet.core import diagnosis
from gpufleet.core.decision import ClusterVerdict, Diagnosis, ObservationState, Reason
from gpufleet.core.matching import REPELS_NEW, is_selected, untolerated
from gpufleet.core.model import ClusterName, Deployment, PoolName, SchedulingConfig
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    place_replica,
)


def gates(ledger: ClusterLedger, deployment: Deployment, expire_after_s: float) -> list[Reason]:
    """Why the cluster takes no new replica of the deployment, besides capacity."""
    reasons: list[Reason] = []
    cluster = ledger.cluster
    taints = untolerated(cluster.taints, deployment.tolerations, REPELS_NEW)
    if taints:
        reasons.append(diagnosis.tainted(taints))
    if not cluster.is_ready:
        reasons.append(diagnosis.not_ready())
    if ledger.freshness.state is ObservationState.EXPIRED:
        reasons.append(diagnosis.expired(ledger.freshness.age_s, expire_after_s))
    return reasons


def gate_profile(ledger: ClusterLedger, memo: PlacementMemo) -> int:
    """The id (`PlacementMemo.gate_id`, by value) of everything `is_selected` and whether
    `gates` says anything read of a cluster, with its shape: clusters of one profile take a
    deployment or not alike (and are gated by the same reasons, but for an expired cluster's
    age). Kept on the ledger: it never changes."""
    found = ledger.gate_profile
    if found is None:
        cluster = ledger.cluster
        profile = (
            ledger.shape,
            tuple(sorted(cluster.labels.items())),
            cluster.taints,
            cluster.is_ready,
            ledger.freshness.state is ObservationState.EXPIRED,
        )
        found = ledger.gate_profile = memo.gate_id(profile)
    return found


class Diagnosing(Protocol):
    """Diagnoses deployments against the fleet's ledgers as they are when asked (one call)."""

    def diagnose(
        self, deployment: Deployment, avoid: Mapping[ClusterName, Mapping[PoolName, Reason]]
    ) -> Diagnosis: ...


def cluster_verdict(
    ledger: ClusterLedger,
    deployment: Deployment,
    memo: PlacementMemo,
    config: SchedulingConfig,
    avoided: Mapping[PoolName, Reason] | None,
) -> tuple[bool, ClusterVerdict]:
    """Whether the deployment selects the cluster, and its verdict there (module docstring)."""
    name = ledger.cluster.name
    if not is_selected(ledger.cluster, deployment.cluster_selector):
        return False, ClusterVerdict(
            name, False, (diagnosis.not_selected(deployment.cluster_selector),)
        )
    gated = tuple(gates(ledger, deployment, config.expire_after_s))
    freshness = ledger.freshness
    notes: tuple[Reason, ...] = ()
    if freshness.state is ObservationState.STALE:
        notes = (diagnosis.stale(freshness.age_s, config.stale_after_s),)
    compiled = memo.on_cluster(deployment, ledger)
    fitted = place_replica(ledger, deployment, compiled, explain=True, avoid=avoided or None)
    fits = not gated and fitted.engines is not None
    reasons = gated or fitted.reasons
    return True, ClusterVerdict(name, fits, (*reasons, *notes), fitted.verdicts)


def wide_reasons(deployment: Deployment, selected: int, clusters: int) -> tuple[Reason, ...]:
    """The diagnosis's reasons beside its verdicts: no cluster selected, fill disabled."""
    wide: list[Reason] = []
    if selected == 0:
        wide.append(diagnosis.no_clusters(clusters))
    if not deployment.fill:
        wide.append(diagnosis.fill_disabled())
    return tuple(wide)


class PlainDiagnoser:
    """`Diagnosing` cluster by cluster with `cluster_verdict`, nothing reused: the
    specification (module docstring)."""

    __slots__ = ("_config", "_ledgers", "_memo")

    def __init__(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        memo: PlacementMemo,
        config: SchedulingConfig,
    ) -> None:
        self._ledgers = tuple(ledgers.values())
        self._memo = memo
        self._config = config

    def diagnose(
        self, deployment: Deployment, avoid: Mapping[ClusterName, Mapping[PoolName, Reason]]
    ) -> Diagnosis:
        """The deployment's diagnosis against the ledgers as they are now."""
        verdicts: list[ClusterVerdict] = []
        selected = 0
        for ledger in self._ledgers:
            avoided = avoid.get(ledger.cluster.name)
            is_in, verdict = cluster_verdict(ledger, deployment, self._memo, self._config, avoided)
            selected += is_in
            verdicts.append(verdict)
        return Diagnosis(tuple(verdicts), wide_reasons(deployment, selected, len(self._ledgers)))
