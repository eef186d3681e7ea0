"""`as_utc`: every time the core compares is converted to UTC, which changes no comparison."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.capacity import as_utc

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
