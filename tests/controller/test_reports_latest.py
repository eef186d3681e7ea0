"""Oracle: the latest report stamp `FleetReports` keeps per cluster (for `judge`'s horizon
check) is the max of the stamps of the cluster's reports, after any sequence of puts
(new reports, heartbeats that replace them with earlier or later stamps, errors, removals)."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.controller.index import Observation
from gpufleet.controller.reports import FleetReports
from gpufleet.controller.status import AgentReport

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = ("PoolObservation", "ReplicaObservation")

put_ = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(["a", "b"]),  # observation name
    st.sampled_from(["east", "east", "east", "west"]),  # cluster
    st.one_of(st.none(), st.integers(-5, 5)),  # stamp offset; None: the object is gone
    st.sampled_from([1, 1, 1, 2]),  # lease epoch
    st.sampled_from([False, False, False, True]),  # has an error
)


def observation(
    kind: str, name: str, cluster: str, at: int, epoch: int, error: bool
) -> Observation:
    report = AgentReport(
        kind, name, f"obs-{cluster}", "agent", epoch, T0 + timedelta(seconds=at), {}
    )
    replica = ("default", "r") if kind == "ReplicaObservation" else None
    return Observation(cluster, None if error else report, "bad" if error else "", replica)


@settings(max_examples=200, deadline=None)
@given(st.lists(put_, max_size=40))
def test_the_latest_stamp_is_the_max_of_the_reports(puts: list[tuple]) -> None:  # type: ignore[type-arg]
    reports = FleetReports()
    for kind, name, cluster, at, epoch, error in puts:
        read = None if at is None else observation(kind, name, cluster, at, epoch, error)
        reports.put(kind, (f"obs-{cluster}", name), read)
        for entry in reports._clusters.values():
            stamps = [r.observed_at for r in entry.reports.values()]
            assert entry.latest_stamp() == (max(stamps) if stamps else None)


def test_a_heartbeat_stamped_earlier_lowers_the_latest_stamp() -> None:
    reports = FleetReports()
    for at in (5, 1):
        reports.put(
            "PoolObservation",
            ("obs-east", "a"),
            observation("PoolObservation", "a", "east", at, 1, False),
        )
        assert reports._clusters["east"].latest_stamp() == T0 + timedelta(seconds=at)
