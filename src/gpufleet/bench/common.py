"""What every benchmark shares: timing with peak memory beside it, result tables, sections.

A benchmark returns a `Section`: a title, prose (markdown), tables of text cells, figures (SVG
text with a file name and a caption) and notes. The runner prints the tables and writes the
whole section into docs/performance.md; nothing here knows about markdown files or the CLI.

Timing is wall time (`time.perf_counter`) of the measured call, best of `repeats` runs. Peak
memory is tracemalloc's peak over one more run of the same call (Python allocations made by
the call, not the inputs it reads), measured separately because tracemalloc slows the call
down two to three times. `max_rss_mib` is the process's high-water resident set (ru_maxrss), so
it includes the inputs and everything measured before it.
"""

from __future__ import annotations

import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Measured(Generic[T]):
    """The value of the last run, its best and first wall time, and tracemalloc's peak."""

    value: T
    best_s: float
    first_s: float
    peak_mib: float | None

    @property
    def peak_text(self) -> str:
        return "-" if self.peak_mib is None else f"{self.peak_mib:,.1f}"


def measure(call: Callable[[], T], repeats: int = 3, *, trace_memory: bool = True) -> Measured[T]:
    """Run `call` `repeats` times (best wall time), then once more under tracemalloc."""
    gc.collect()
    times: list[float] = []
    value: T | None = None
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        value = call()
        times.append(time.perf_counter() - start)
    peak: float | None = None
    if trace_memory:
        gc.collect()
        tracemalloc.start()
        try:
            value = call()
            peak = tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()
    assert value is not None
    return Measured(value, min(times), times[0], peak)


def max_rss_mib() -> float:
    """The process's resident-set high-water mark, in MiB (ru_maxrss is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


@dataclass(frozen=True, slots=True)
class Table:
    """A result table: text cells, numbers right-aligned when rendered."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def plain(self) -> str:
        widths = [
            max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
            for i, h in enumerate(self.headers)
        ]
        lines = [self.title]
        lines.append("  ".join(h.rjust(w) for h, w in zip(self.headers, widths, strict=True)))
        for row in self.rows:
            lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        return "\n".join(lines)

    def markdown(self) -> str:
        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        align = ["---" if i == 0 else "---:" for i in range(len(self.headers))]
        out = [line(self.headers), "|" + "|".join(align) + "|"]
        out += [line(r) for r in self.rows]
        return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Figure:
    """An SVG plot: `name` is its file name under docs/performance/."""

    name: str
    caption: str
    svg: str


@dataclass(frozen=True, slots=True)
class Section:
    key: str
    title: str
    intro: str
    tables: tuple[Table, ...]
    figures: tuple[Figure, ...] = ()
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0
    #: Machine-readable headline numbers, for tests and the summary table.
    numbers: dict[str, float] = field(default_factory=dict)


def seconds(value: float) -> str:
    """Seconds with three significant-ish digits: 0.00123, 0.0412, 1.23, 41.2."""
    if value < 0.01:
        return f"{value:.5f}"
    if value < 1:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:,.0f}"


def count(value: float) -> str:
    return f"{value:,.0f}"


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"
