"""`Diagnoser`: diagnosis reuse within one call, above the core (`FRESH` diagnoses with
`PlainDiagnoser`, core/verdicts.py, the specification).

Everything a verdict reads of the deployment is its selector, its tolerations and its engines
(by value: equal engines have the same explain profile on every cluster shape, placement.py),
plus the pools it avoids; everything it reads of a cluster is fixed for the call but its
ledger's `version`. So deployments with equal (selector, tolerations, engines) and nothing
avoided get the same verdicts, and a later one asks again only for the clusters whose version
moved since the earlier one was diagnosed (the others' verdicts are the very same values).
Verdicts are explained once per (explain profile, cluster version) (`ungated_verdict`). The
oracle is `PlainDiagnoser`: tests/core/test_diagnoser.py and every `Derive` against `FRESH`
(tests/core/test_derive_properties.py).

Mutable: a `Diagnoser` (its kept scans), for one call; every verdict is frozen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.core import diagnosis
from gpufleet.core.decision import ClusterVerdict, Diagnosis, ObservationState, Reason
from gpufleet.core.matching import is_selected
from gpufleet.core.model import ClusterName, Deployment, PoolName, SchedulingConfig
from gpufleet.core.placement import (
    ClusterLedger,
    PlacementMemo,
    explain_cluster,
    place_replica,
    ungated_verdict,
)
from gpufleet.core.verdicts import gate_profile, gates, wide_reasons


def _avoided_verdict(
    ledger: ClusterLedger,
    deployment: Deployment,
    memo: PlacementMemo,
    avoided: Mapping[PoolName, Reason],
    gated: tuple[Reason, ...],
    notes: tuple[Reason, ...],
) -> ClusterVerdict:
    """The verdict on a cluster where the deployment avoids pools: explained for this
    deployment alone (the verdicts shared per explain profile know nothing of its backoff)."""
    compiled = memo.on_cluster(deployment, ledger)
    fitted = place_replica(ledger, deployment, compiled, explain=True, avoid=avoided)
    fits = not gated and fitted.engines is not None
    reasons = gated or fitted.reasons
    return ClusterVerdict(ledger.cluster.name, fits, (*reasons, *notes), fitted.verdicts)


class _Scan:
    """One deployment's scan of the fleet (mutable, for one call): per cluster (ledger
    order) its verdict and the cluster's version when it was given; what the deployment's
    selector and gates say per gate profile; its explain profile per cluster shape."""

    __slots__ = ("deployment", "gated", "not_selected", "profiles", "selected", "verdicts")

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        #: Per gate profile: whether the deployment selects such a cluster, and its gates.
        self.gated: dict[int, tuple[bool, tuple[Reason, ...]]] = {}
        #: The `ClusterNotSelected` verdicts of its selector, per cluster (`Diagnoser`).
        self.not_selected: dict[ClusterName, ClusterVerdict] = {}
        #: The deployment's explain profile per cluster shape (`placement._profile`).
        self.profiles: dict[int, int] = {}
        self.selected = 0
        self.verdicts: list[ClusterVerdict] = []


@dataclass(frozen=True, slots=True)
class _Kept:
    """A scan kept for deployments alike, with each cluster's version at its verdict."""

    scan: _Scan
    versions: list[int]


class Diagnoser:
    """Diagnoses deployments against the fleet's ledgers within one call (module docstring):
    a deployment alike an earlier one (selector, tolerations, engines; nothing avoided) is
    answered from that one's scan, asked again only on the clusters whose version moved.

    Mutable: its kept scans, for one call (the ledgers it reads change between asks)."""

    __slots__ = ("_config", "_kept", "_ledgers", "_memo", "_not_selected")

    def __init__(
        self,
        ledgers: Mapping[ClusterName, ClusterLedger],
        memo: PlacementMemo,
        config: SchedulingConfig,
    ) -> None:
        self._ledgers = tuple(ledgers.values())
        self._memo = memo
        self._config = config
        self._kept: dict[tuple[object, ...], _Kept] = {}
        #: Per selector: its `ClusterNotSelected` reason and verdicts by cluster.
        self._not_selected: dict[
            tuple[tuple[str, str], ...],
            tuple[tuple[Reason, ...], dict[ClusterName, ClusterVerdict]],
        ] = {}

    def diagnose(
        self, deployment: Deployment, avoid: Mapping[ClusterName, Mapping[PoolName, Reason]]
    ) -> Diagnosis:
        """The deployment's diagnosis against the ledgers as they are now."""
        if avoid:
            return self._finish(deployment, self.scan(deployment, avoid))
        key = (
            tuple(sorted(deployment.cluster_selector.items())),
            deployment.tolerations,
            deployment.engines,
        )
        versions = [ledger.version for ledger in self._ledgers]
        kept = self._kept.get(key)
        if kept is None:
            scan = self.scan(deployment, {})
        else:
            scan = kept.scan
            for i, (was, now) in enumerate(zip(kept.versions, versions, strict=True)):
                if was != now:
                    scan.verdicts[i] = self._verdict(scan, self._ledgers[i], {})[1]
        self._kept[key] = _Kept(scan, versions)
        return self._finish(deployment, scan)

    def scan(
        self, deployment: Deployment, avoid: Mapping[ClusterName, Mapping[PoolName, Reason]]
    ) -> _Scan:
        """Every cluster's verdict, one by one (the plain computation)."""
        scan = _Scan(deployment)
        for ledger in self._ledgers:
            is_in, verdict = self._verdict(scan, ledger, avoid)
            scan.selected += is_in
            scan.verdicts.append(verdict)
        return scan

    def _unselected(self, scan: _Scan, name: ClusterName) -> ClusterVerdict:
        """The verdict on a cluster the scan's deployment does not select: a function of the
        cluster's name and the selector, shared by every scan with that selector."""
        selector = scan.deployment.cluster_selector
        key = tuple(sorted(selector.items()))
        shared = self._not_selected.get(key)
        if shared is None:
            shared = self._not_selected[key] = ((diagnosis.not_selected(selector),), {})
        reasons, verdicts = shared
        scan.not_selected = verdicts
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = verdicts[name] = ClusterVerdict(name, False, reasons)
        return verdict

    def _finish(self, deployment: Deployment, scan: _Scan) -> Diagnosis:
        wide = wide_reasons(deployment, scan.selected, len(self._ledgers))
        return Diagnosis(tuple(scan.verdicts), wide)

    def _verdict(
        self,
        scan: _Scan,
        ledger: ClusterLedger,
        avoid: Mapping[ClusterName, Mapping[PoolName, Reason]],
    ) -> tuple[bool, ClusterVerdict]:
        """Whether the scan's deployment selects the cluster, and its verdict there."""
        deployment, memo, config = scan.deployment, self._memo, self._config
        name = ledger.cluster.name
        freshness = ledger.freshness
        profile = ledger.gate_profile or gate_profile(ledger, memo)
        found = scan.gated.get(profile)
        if found is None or (found[1] and freshness.state is ObservationState.EXPIRED):
            # An expired cluster's gate names its own age: not shared.
            is_in = is_selected(ledger.cluster, deployment.cluster_selector)
            gated = tuple(gates(ledger, deployment, config.expire_after_s)) if is_in else ()
            found = scan.gated[profile] = (is_in, gated)
        if not found[0]:
            found_verdict = scan.not_selected.get(name)
            if found_verdict is None:
                found_verdict = self._unselected(scan, name)
            return False, found_verdict
        gated = found[1]
        notes: tuple[Reason, ...] = ()
        if freshness.state is ObservationState.STALE:
            notes = (diagnosis.stale(freshness.age_s, config.stale_after_s),)
        avoided = avoid.get(name)
        if avoided:
            return True, _avoided_verdict(ledger, deployment, memo, avoided, gated, notes)
        if not gated:
            return True, ungated_verdict(ledger, deployment, memo, scan.profiles, notes)
        _, _, pools = explain_cluster(ledger, deployment, memo, scan.profiles)
        return True, ClusterVerdict(name, False, (*gated, *notes), pools)
