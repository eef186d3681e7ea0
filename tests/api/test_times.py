from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpufleet.api.times import parse_time


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        (
            "2026-12-01T12:00:00+02:00",
            datetime(2026, 12, 1, 12, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("2026-12-01T10:00:00", datetime(2026, 12, 1, 10, tzinfo=UTC)),  # no offset: UTC
        ("yesterday", None),
        ("", None),
        (None, None),
        (1764583200, None),
    ],
)
def test_parse_time_reads_what_the_api_server_writes(value: object, want: datetime | None) -> None:
    assert parse_time(value) == want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        (
            "2026-12-01T12:00:00+02:00",
            datetime(2026, 12, 1, 12, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("2026-12-01T10:00:00", None),  # no offset: not a time where the schema wants one
        ("yesterday", None),
        (None, None),
    ],
)
def test_parse_time_with_an_offset_required(value: object, want: datetime | None) -> None:
    assert parse_time(value, offset_required=True) == want
