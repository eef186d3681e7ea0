"""Oracle: the Trust `FleetReports.judge` keeps per cluster (judged again in full, or only from
the replaced reports: `Trust.moved`) is the one `status.judge` finds of the cluster's reports,
field by field (newest, heard_at, pools and fence included), after any sequence of puts: new
reports, heartbeats stamped or received earlier or later, other epochs and incarnations,
errors and removals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.controller.fence import Fence
from gpufleet.controller.index import Observation
from gpufleet.controller.reports import FleetReports
from gpufleet.controller.status import AgentReport, Trust, judge

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = ("PoolObservation", "ReplicaObservation")

put_ = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(["a", "b", "c"]),  # observation name
    st.sampled_from(["east", "east", "east", "west"]),  # cluster
    st.one_of(st.none(), st.integers(-5, 20)),  # stamp offset; None: the object is gone
    st.one_of(st.none(), st.integers(-5, 20)),  # receipt offset; None: not known
    st.sampled_from([1, 1, 1, 1, 2]),  # lease epoch
    st.sampled_from(["u", "u", "u", "v"]),  # lease incarnation
    st.sampled_from([False, False, False, False, True]),  # has an error
    st.booleans(),  # judge after this put
)
KNOWN = st.sampled_from([None, None, Fence("u", 1), Fence("", 0)])


def _observation(
    kind: str, name: str, cluster: str, at: int, received: int | None, epoch: int, uid: str
) -> AgentReport:
    return AgentReport(
        kind,
        name,
        f"obs-{cluster}",
        "agent-" + uid,
        epoch,
        T0 + timedelta(seconds=at),
        {"status": {"n": at}},
        uid,
        None if received is None else T0 + timedelta(seconds=received),
    )


def _fields(trust: Trust) -> tuple[object, ...]:
    return (trust, trust.newest, trust.heard_at, trust.pools, trust.fence)


@settings(max_examples=300, deadline=None)
@given(st.lists(put_, max_size=50), KNOWN)
def test_each_judgement_is_the_plain_judgement_of_the_reports(
    puts: list[tuple],  # type: ignore[type-arg]
    known: Fence | None,
) -> None:
    reports = FleetReports()
    for kind, name, cluster, at, received, epoch, uid, error, is_judged in puts:
        read = None
        if at is not None:
            report = _observation(kind, name, cluster, at, received, epoch, uid)
            replica = ("default", name) if kind == "ReplicaObservation" else None
            read = Observation(cluster, None if error else report, "bad" if error else "", replica)
        reports.put(kind, (f"obs-{cluster}", name), read)
        if not is_judged:
            continue
        for each, entry in reports._clusters.items():
            got = reports.judge(each, known)
            assert _fields(got) == _fields(judge(entry.reports.values(), known)), each


def test_a_heartbeat_is_judged_from_the_moved_reports_alone() -> None:
    """The case `Trust.moved` serves: every report accepted, one replaced by a later one."""
    reports = FleetReports()
    for at in (0, 5):
        for name in ("a", "b"):
            report = _observation("PoolObservation", name, "east", at + (name == "b"), at, 1, "u")
            reports.put(
                "PoolObservation", ("obs-east", name), Observation("east", report, "", None)
            )
        trust = reports.judge("east", None)
        assert trust.newest is not None and trust.newest.name == "b"
        assert trust.heard_at == T0 + timedelta(seconds=at)
        plain = judge(reports._clusters["east"].reports.values(), None)
        assert _fields(trust) == _fields(plain)
