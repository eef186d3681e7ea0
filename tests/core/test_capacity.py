"""Capacity: `as_utc` converts every time the core compares to UTC, which changes no
comparison; a copied ledger is the ledger built again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from builders import cluster, gpu, observed
from gpufleet.core.capacity import PoolLedger, as_utc
from gpufleet.core.decision import ObservationState, ReasonCode
from gpufleet.core.model import ClaimMode, ClusterName, DriverName, SchedulingConfig

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


def test_a_class_shared_driver_names_its_first_two_devices() -> None:
    """`class_facts` (per class, once a call) gives the reason the per-pool scan gave: the
    first device of the driver and the first that repeats it."""
    devices = [gpu(2, name="g1"), gpu(2, name="g2"), gpu(2, name="g3")]
    pool = cluster("a").pool("l4", nodes=1, devices=devices, observation=observed({4: 1}))
    built = pool.build().pools[0]
    ledger = PoolLedger(ClusterName("a"), built, 1, SchedulingConfig())
    (reason,) = ledger.reasons
    assert reason.code is ReasonCode.AMBIGUOUS_DRIVER
    assert reason.message == (
        "devices g1 and g2 of pool l4 share driver gpu.nvidia.com: whole-node accounting"
    )
    assert reason.details == {"driver": "gpu.nvidia.com", "devices": "g1,g2"}
    assert ledger.drivers == ("gpu.nvidia.com",) and ledger.full == (6,)
    assert not ledger.is_free_gpu


@given(
    st.lists(
        st.tuples(st.sampled_from(["a.com", "b.com"]), st.integers(-1, 3), st.booleans()),
        max_size=4,
    ),
    st.lists(st.tuples(st.integers(-1, 4), st.integers(-1, 4), st.integers(-1, 3)), max_size=5),
)
def test_a_ledger_reads_its_class_as_the_plain_scan(
    kinds: list[tuple[str, int, bool]], buckets: list[tuple[int, int, int]]
) -> None:
    """Drivers, full vector and histogram (one driver or several) as read device by device
    and bucket by bucket."""
    devices = [
        replace(gpu(count, name=f"d{i}"), driver=DriverName(driver), claim=ClaimMode.DRA)
        if is_dra
        else replace(gpu(count, name=f"d{i}"), claim=ClaimMode.SYNTHETIC)
        for i, (driver, count, is_dra) in enumerate(kinds)
    ]
    obs = observed([({"a.com": a, "b.com": b}, n) for a, b, n in buckets])
    pool = cluster("a").pool("p", nodes=2, devices=devices, observation=obs).build().pools[0]
    ledger = PoolLedger(ClusterName("a"), pool, 1, SchedulingConfig())
    full: dict[str, int] = {}
    for d in devices:
        if d.claim is ClaimMode.DRA:
            full[d.driver] = full.get(d.driver, 0) + max(0, d.count)
    drivers = tuple(sorted(full))
    assert ledger.drivers == drivers
    assert ledger.full == tuple(full[d] for d in drivers)
    if ledger.is_free_gpu:
        free: dict[tuple[int, ...], int] = {}
        for a, b, n in buckets:
            if n > 0:
                vector = tuple(max(0, {"a.com": a, "b.com": b}[d]) for d in drivers)
                free[vector] = free.get(vector, 0) + n
        assert ledger.free == free
