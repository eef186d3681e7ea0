"""Duration flags: `--debounce 500ms`, `--expire-after 5m`, `--resync-period 30` (plain numbers
stay seconds), parsed by `gpufleet.core.durations.parse_duration`; a bad value is a usage error
(exit 2) naming the flag and the rule. `--help` shows `DURATION` and the default as a duration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from gpufleet.core.durations import format_duration, parse_duration


def duration_parser(
    min_s: float = 0.0, max_s: float | None = None, *, is_whole: bool = False
) -> Callable[[Any], float | int]:
    """A typer `parser`: seconds as a float (`is_whole`: an int, for fields Kubernetes keeps
    in whole seconds) within [min_s, max_s]; else `typer.BadParameter` with the rule."""

    def parse(value: Any) -> float | int:
        if isinstance(value, bool):
            raise typer.BadParameter(f"{value!r} is not a duration")
        try:
            seconds = float(value) if isinstance(value, int | float) else parse_duration(str(value))
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
        if seconds < min_s or (max_s is not None and seconds > max_s):
            bound = f"at least {format_duration(min_s)}"
            if max_s is not None:
                bound += f" and at most {format_duration(max_s)}"
            raise typer.BadParameter(f"{value!r} must be {bound}")
        if is_whole:
            if seconds != int(seconds):
                raise typer.BadParameter(f"{value!r} must be whole seconds")
            return int(seconds)
        return seconds

    return parse


def duration_option(
    flag: str,
    help_text: str,
    default_s: float,
    min_s: float = 0.0,
    max_s: float | None = None,
    *,
    is_whole: bool = False,
) -> Any:
    """A typer option of a duration; its help ends with the default, like `[default: 30s]`."""
    return typer.Option(
        flag,
        parser=duration_parser(min_s, max_s, is_whole=is_whole),
        metavar="DURATION",
        show_default=False,
        help=f"{help_text}  [default: {format_duration(default_s)}]",
    )
