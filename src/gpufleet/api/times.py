"""Times as the Kubernetes API server writes them (RFC 3339, `Z` for UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object, *, offset_required: bool = False) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it; None when absent or unparsable. A
    time without an offset is read as UTC, or, with `offset_required` (where the API's schema
    requires one), is no time (None)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        return parsed
    return None if offset_required else parsed.replace(tzinfo=UTC)
