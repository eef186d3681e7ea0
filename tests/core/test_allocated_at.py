"""A pool ledger reads its observation's allocation time once (`PoolLedger.allocated_at`),
and charging's `allocation_time` is that time as UTC: the oracle is the plain conversion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from builders import cluster, observed
from gpufleet.core.capacity import PoolLedger, as_utc
from gpufleet.core.charging import allocation_time
from gpufleet.core.model import ClusterName, SchedulingConfig

ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))])


@given(
    st.one_of(st.none(), st.datetimes(min_value=datetime(2020, 1, 1), timezones=ZONES)),
    st.booleans(),
    st.booleans(),
)
def test_allocation_time_is_the_observations_time_as_utc(
    at: datetime | None, has_observation: bool, has_buckets: bool
) -> None:
    observation = observed({8: 1} if has_buckets else None, last_allocation=at)
    built = (
        cluster("a")
        .pool("p0", nodes=2, gpus=8, observation=observation if has_observation else None)
        .build()
    )
    ledger = PoolLedger(ClusterName("a"), built.pools[0], 1, SchedulingConfig())
    want = as_utc(at) if at is not None and has_observation else None
    for pool in (ledger, ledger.copy(), ledger.copy(record=True)):
        got = allocation_time(pool)
        assert got == want
        if got is not None:
            assert got.tzinfo is UTC or got.utcoffset() is None
