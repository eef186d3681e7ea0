"""Durations as people read and write them: `2d14h`, `3m45s`, `15s` (pure, no clock).

- `format_duration(seconds)`: the two largest non-zero units of days, hours, minutes and
  seconds (`2d14h`, `5h30m`, `3m45s`, `45s`, `0s`), whole seconds rounded down above a minute
  and kept to one decimal below it (`1.5s`), as kubectl's ages are read. It errs short: the
  dropped smaller unit is never rounded up, so "silent for 2d14h" is never more than it was.
- `parse_duration(text)`: a plain number of seconds (`15`, `2.5`) or a sequence of
  number+unit (`15s`, `2m`, `1h30m`, `500ms`, `2d`), Go's `time.ParseDuration` units plus `d`.
  A negative or unparseable value raises `ValueError` naming the rule.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["DURATION_RULE", "format_duration", "parse_duration"]

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
DURATION_RULE: Final = "must be a duration: seconds (15, 2.5) or like 15s, 2m, 1h30m, 2d"


def parse_duration(text: str) -> float:
    """Seconds in `text` (see the module docstring)."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(f"{text!r} {DURATION_RULE}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} {DURATION_RULE} (finite, not negative)")
    return seconds


def format_duration(seconds: float) -> str:
    """`seconds` in the two largest units (see the module docstring); negative as `-3m45s`."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 60:
        whole = math.floor(seconds * 10) / 10
        return f"{whole:g}s"
    rest = math.floor(seconds)
    amounts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        amounts.append((n, unit))
    first = next(i for i, (n, _) in enumerate(amounts) if n)
    shown = [f"{n}{u}" for n, u in amounts[first : first + 2] if n]
    return "".join(shown)
