"""Reuse above the scheduling core: `Derive` implementations that keep or share what the
core would derive again (core/derive.py; `FRESH` is the specification they equal)."""

from gpufleet.core.reuse.schedule_memo import SHARED, ScheduleMemo, Shared

__all__ = ["SHARED", "ScheduleMemo", "Shared"]
