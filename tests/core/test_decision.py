"""Decision helpers: replica names, the summary roll-up, invalid snapshots."""

from __future__ import annotations

import hashlib
import re

import pytest

from builders import NOW, cluster, deployment, snapshot
from gpufleet.core.decision import (
    ClusterVerdict,
    Diagnosis,
    Reason,
    ReasonCode,
    replica_name,
)
from gpufleet.core.model import ClusterName
from gpufleet.core.schedule import SnapshotError, schedule

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize(
    ("deployment_name", "prefix"),
    [
        ("llama-pd", "llama-pd"),
        ("m" * 70, "m" * 57),
        ("a" * 56 + "-b", "a" * 56),
        ("a" * 55 + ".-b", "a" * 55),
    ],
    ids=["short", "truncated", "no-trailing-dash", "no-trailing-dot"],
)
def test_replica_name(deployment_name: str, prefix: str) -> None:
    name = replica_name(deployment_name, "eks-us-east", 3)
    digest = hashlib.sha256(f"{deployment_name}-eks-us-east-3".encode()).hexdigest()[:5]
    assert name == f"{prefix}-{digest}"
    assert len(name) <= 63
    assert DNS_SUBDOMAIN.fullmatch(name)


def _verdict(name: str, *codes: ReasonCode, fits: bool = False) -> ClusterVerdict:
    return ClusterVerdict(ClusterName(name), fits, tuple(Reason(c, c.value) for c in codes))


def test_summary_counts_each_cluster_once_under_its_root_cause_and_sorts() -> None:
    diag = Diagnosis(
        (
            _verdict("a", ReasonCode.TAINTED, ReasonCode.CLUSTER_NOT_READY),
            _verdict("b", ReasonCode.INSUFFICIENT_GPU, ReasonCode.OBSERVATION_STALE),
            _verdict("c", ReasonCode.INSUFFICIENT_GPU),
            _verdict("d", ReasonCode.OBSERVATION_STALE, fits=True),
            _verdict("e", ReasonCode.CLUSTER_NOT_SELECTED),
        )
    )
    assert diag.summary() == (
        # a: Tainted (nearer the root cause than its NotReady); the counts add up to the 4
        # clusters that do not fit.
        "1/5 clusters fit: 2 InsufficientGPU, 1 ClusterNotSelected, 1 Tainted"
    )
    assert diag.dominant_code() is ReasonCode.INSUFFICIENT_GPU


@pytest.mark.parametrize(
    ("verdicts", "dominant"),
    [
        # A silent agent is the root cause of the NotReady the controller sets for it.
        (
            (_verdict("east", ReasonCode.CLUSTER_NOT_READY, ReasonCode.OBSERVATION_EXPIRED),),
            ReasonCode.OBSERVATION_EXPIRED,
        ),
        # Frequency still comes first.
        (
            (
                _verdict("a", ReasonCode.INSUFFICIENT_GPU),
                _verdict("b", ReasonCode.INSUFFICIENT_GPU),
                _verdict("c", ReasonCode.TAINTED),
            ),
            ReasonCode.INSUFFICIENT_GPU,
        ),
        # A tie between a taint and capacity: the taint explains more.
        (
            (_verdict("a", ReasonCode.INSUFFICIENT_GPU), _verdict("b", ReasonCode.TAINTED)),
            ReasonCode.TAINTED,
        ),
        # Not being selected is never the condition's reason while another code exists.
        (
            (
                _verdict("a", ReasonCode.CLUSTER_NOT_SELECTED),
                _verdict("b", ReasonCode.CLUSTER_NOT_SELECTED),
                _verdict("c", ReasonCode.NO_MATCHING_POOL),
            ),
            ReasonCode.NO_MATCHING_POOL,
        ),
    ],
    ids=["expired-before-not-ready", "most-frequent", "taint-before-capacity", "not-selected"],
)
def test_the_dominant_code_prefers_frequency_then_the_root_cause(
    verdicts: tuple[ClusterVerdict, ...], dominant: ReasonCode
) -> None:
    assert Diagnosis(verdicts).dominant_code() is dominant


def test_duplicate_deployment_key_is_invalid_input() -> None:
    with pytest.raises(SnapshotError) as error:
        schedule(snapshot([], [deployment("ml/x"), deployment("ml/x")]), NOW)
    assert error.value.field == "deployments[ml/x]"


def test_duplicate_cluster_name_is_invalid_input() -> None:
    with pytest.raises(SnapshotError) as error:
        schedule(snapshot([cluster("a"), cluster("a")], []), NOW)
    assert error.value.field == "clusters[a]"
