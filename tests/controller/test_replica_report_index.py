"""A cluster's index of replica reports made by replacing the reports that changed in place
(`_replaced_reports`) is the index made from scratch (`_cluster_replica_reports`), entry
for entry, and keeps every other entry as the same object; when the reports changed in
another way it declines."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller.loop import _cluster_replica_reports, _replaced_reports
from gpufleet.controller.status import AgentReport, Trust

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _report(name: str, replica: str, epoch: int = 1, second: int = 0) -> AgentReport:
    body = {"spec": {"replicaNamespace": "ns", "replicaName": replica}, "status": {}}
    return AgentReport(
        "ReplicaObservation",
        name,
        "gpufleet-cluster-a",
        "agent",
        epoch,
        _AT + timedelta(seconds=second),
        body,
    )


@pytest.mark.parametrize("seed", range(30))
def test_replacing_reports_in_place_gives_the_index_made_afresh(seed: int) -> None:
    rng = random.Random(seed)
    # Some replicas have two reports (the first is the one the index holds).
    replicas = [f"r{rng.randrange(12)}" for _ in range(16)]
    reports = [_report(f"o{i:02d}", r) for i, r in enumerate(replicas)]
    rejected = (_report("old", "r3", epoch=0),) if seed % 3 == 0 else ()
    index = _cluster_replica_reports("a", Trust(1, tuple(reports), rejected))
    declined = 0
    for step in range(20):
        now = list(reports)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(now))
            # Mostly a new report about the same replica; sometimes about another one.
            replica = replicas[i] if rng.random() < 0.8 else f"r{rng.randrange(12)}"
            now[i] = _report(now[i].name, replica, second=step + 1)
        trust = Trust(1, tuple(now), rejected)
        afresh = _cluster_replica_reports("a", trust, index)
        replaced = _replaced_reports("a", reports, now, index)
        if replaced is None:
            declined += 1
        else:
            made, keys = replaced
            assert made == afresh
            assert list(made) == list(afresh)
            for key, entry in made.items():
                assert entry is afresh[key] or key in keys
                if key not in keys:
                    assert entry is index[key]
        reports, index = now, afresh
        replicas = [r.body["spec"]["replicaName"] for r in reports]
    assert declined < 20


def test_a_report_added_is_declined() -> None:
    reports = [_report("o1", "r1"), _report("o2", "r2")]
    index = _cluster_replica_reports("a", Trust(1, tuple(reports), ()))
    assert _replaced_reports("a", reports, [*reports, _report("o3", "r3")], index) is None
