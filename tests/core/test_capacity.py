"""Capacity: `as_utc` converts every time the core compares to UTC, which changes no
comparison; a copied ledger is the ledger built again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from builders import cluster, observed
from gpufleet.core.capacity import PoolLedger, as_utc
from gpufleet.core.decision import ObservationState
from gpufleet.core.model import ClusterName, SchedulingConfig

#: Fixed offsets, each its own tzinfo object (as pydantic gives each parsed time its own).
zones = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(
    min_value=datetime(2000, 1, 2), max_value=datetime(2100, 1, 1), timezones=zones
)


@given(moments, moments)
def test_as_utc_keeps_the_instant_and_every_comparison(a: datetime, b: datetime) -> None:
    ua, ub = as_utc(a), as_utc(b)
    assert ua.tzinfo is UTC and ub.tzinfo is UTC
    assert ua == a and ub == b
    assert (ua < ub, ua <= ub, ua == ub) == (a < b, a <= b, a == b)
    assert ua - ub == a - b


@given(st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2100, 1, 1)))
def test_as_utc_reads_a_naive_time_as_utc(moment: datetime) -> None:
    assert as_utc(moment) == moment.replace(tzinfo=UTC)
    utc = as_utc(moment)
    assert as_utc(utc) is utc


@given(
    st.lists(st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.integers(0, 3)), max_size=5),
    st.integers(0, 6),
    st.booleans(),
    st.integers(1, 4),
)
def test_a_copied_ledger_is_the_ledger_built_again(
    buckets: list[tuple[int, int]], nodes: int, is_observed: bool, cap: int
) -> None:
    histogram: dict[int, int] = {}
    for free, count in buckets:
        histogram[free] = histogram.get(free, 0) + count
    obs = observed(histogram) if is_observed else None
    pool = cluster("a").pool("p0", nodes=nodes, gpus=8, observation=obs).build().pools[0]
    config = SchedulingConfig(max_histogram_buckets=cap)
    built = PoolLedger(ClusterName("a"), pool, 3, config)
    copied = PoolLedger(ClusterName("a"), pool, 3, config).copy(record=True)
    for name in PoolLedger.__slots__:
        if name not in ("origin", "log", "memo"):
            assert getattr(copied, name) == getattr(built, name), name
    assert copied.log == [] and copied.memo == {}
    assert copied.free is not built.free
    assert copied.state(ObservationState.FRESH) == built.state(ObservationState.FRESH)
