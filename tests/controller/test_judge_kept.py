"""A cluster's Trust made from the last one when its reports were only replaced in place
(`Controller._judge_cluster`) is the Trust `judge` makes: for heartbeats, new contents,
new lease epochs, reports added, removed or out of order, and known epochs that change."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller.loop import Controller
from gpufleet.controller.status import AgentReport, judge
from gpufleet.store import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _report(kind: str, name: str, epoch: int, second: int) -> AgentReport:
    return AgentReport(
        kind, name, "gpufleet-cluster-a", "agent", epoch, T0 + timedelta(seconds=second), {}
    )


@pytest.mark.parametrize("seed", range(20))
def test_the_trust_kept_is_the_trust_judged(seed: int) -> None:
    rng = random.Random(seed)
    controller = Controller(MemoryStore(clock=lambda: T0))
    names = [("PoolObservation", f"p{i}") for i in range(4)]
    names += [("ReplicaObservation", f"r{i:02d}") for i in range(20)]
    reports = [_report(kind, name, 1, 0) for kind, name in names]
    known: int | None = None
    for step in range(1, 200):
        reports = list(reports)
        what = rng.random()
        if what < 0.7:  # heartbeats and new contents, in place
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(reports))
                r = reports[i]
                reports[i] = _report(r.kind, r.name, r.lease_epoch, step)
        elif what < 0.8:  # a new lease epoch for some
            i = rng.randrange(len(reports))
            r = reports[i]
            reports[i] = _report(r.kind, r.name, r.lease_epoch + rng.choice([-1, 1]), step)
        elif what < 0.85:
            known = rng.choice([None, 0, 1, 2])
        elif what < 0.9 and len(reports) > 2:
            del reports[rng.randrange(len(reports))]
        elif what < 0.95:
            reports.append(_report("ReplicaObservation", f"x{step}", 1, step))
        else:
            rng.shuffle(reports)
        got = controller._judge_cluster("a", reports, known)
        assert got == judge(reports, known)
        assert got.newest == judge(reports, known).newest
