"""Small self-contained SVG plots for docs/performance.md (no plotting library).

Two shapes: `line_plot` (points joined by lines, optional log10 axes, one series per label)
and `bar_plot` (grouped bars). Output is deterministic text: the same numbers give the same
bytes, so regenerated plots diff cleanly.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

WIDTH = 560
HEIGHT = 320
PAD_LEFT = 64
PAD_RIGHT = 150
PAD_TOP = 30
PAD_BOTTOM = 44
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
STYLE = "font-family:sans-serif;font-size:11px"


def _esc(value: object) -> str:
    return html.escape(str(value))


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:g}"
    return f"{value:.3g}"


def _ticks(low: float, high: float, is_log: bool) -> list[float]:
    if is_log:
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        return [10.0**e for e in range(first, last + 1)]
    step = (high - low) / 4 if high > low else 1.0
    return [low + step * i for i in range(5)]


class _Axis:
    def __init__(self, values: Sequence[float], out: tuple[float, float], is_log: bool) -> None:
        self.is_log = is_log
        positive = [v for v in values if v > 0] or [1.0]
        if is_log:
            self.low = 10.0 ** math.floor(math.log10(min(positive)))
            self.high = 10.0 ** math.ceil(math.log10(max(positive)))
            if self.high <= self.low:
                self.high = self.low * 10
        else:
            self.low = min(0.0, *values) if values else 0.0
            self.high = max(1e-9, *values) if values else 1.0
            self.high *= 1.05
        self.out = out

    def __call__(self, value: float) -> float:
        if self.is_log:
            value = max(value, self.low)
            lo, hi, v = math.log10(self.low), math.log10(self.high), math.log10(value)
        else:
            lo, hi, v = self.low, self.high, value
        a, b = self.out
        return a + (v - lo) * (b - a) / (hi - lo) if hi > lo else a


def _frame(title: str, x_label: str, y_label: str) -> list[str]:
    x0, x1, y0, y1 = PAD_LEFT, WIDTH - PAD_RIGHT, HEIGHT - PAD_BOTTOM, PAD_TOP
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" style="{STYLE}">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#fafafa" '
        'stroke="#cccccc"/>',
        f'<text x="{WIDTH / 2:.0f}" y="18" text-anchor="middle" font-weight="bold">'
        f"{_esc(title)}</text>",
        f'<text x="{(x0 + x1) / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{_esc(x_label)}</text>",
        f'<text x="14" y="{(y0 + y1) / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(y0 + y1) / 2:.0f})">{_esc(y_label)}</text>',
    ]


def _legend(labels: Sequence[str], dashed: Sequence[bool] | None = None) -> list[str]:
    x = WIDTH - PAD_RIGHT + 10
    out = []
    for i, label in enumerate(labels):
        y = PAD_TOP + 8 + 16 * i
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="5 3"' if dashed and dashed[i] else ""
        out.append(
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2.5"{dash}/>'
        )
        out.append(f'<text x="{x + 23}" y="{y + 4}">{_esc(label)}</text>')
    return out


def line_plot(
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    log_y: bool = False,
    dashed: Sequence[str] = (),
) -> str:
    """Points (x, y) per labelled series, joined in x order; `dashed` names reference lines."""
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    x0, x1, y0, y1 = PAD_LEFT, WIDTH - PAD_RIGHT, HEIGHT - PAD_BOTTOM, PAD_TOP
    ax = _Axis(xs, (x0, x1), log_x)
    ay = _Axis(ys, (y0, y1), log_y)
    parts = _frame(title, x_label, y_label)
    for t in _ticks(ay.low, ay.high, log_y):
        y = ay(t)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    x_ticks = sorted(set(xs)) if log_x or len(set(xs)) <= 8 else _ticks(ax.low, ax.high, False)
    for t in x_ticks:
        x = ax(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#eeeeee"/>')
        parts.append(f'<text x="{x:.1f}" y="{y0 + 15}" text-anchor="middle">{_fmt(t)}</text>')
    labels = list(series)
    for i, label in enumerate(labels):
        points = sorted(series[label])
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="5 3"' if label in dashed else ""
        path = " ".join(
            f"{'M' if k == 0 else 'L'}{ax(x):.1f},{ay(y):.1f}" for k, (x, y) in enumerate(points)
        )
        parts.append(
            f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}>'
            f"<title>{_esc(label)}</title></path>"
        )
        for x, y in points:
            parts.append(
                f'<circle cx="{ax(x):.1f}" cy="{ay(y):.1f}" r="3" fill="{colour}">'
                f"<title>{_esc(label)}: {_fmt(x)}, {_fmt(y)}</title></circle>"
            )
    parts += _legend(labels, [label in dashed for label in labels])
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def bar_plot(
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    y_label: str,
    y_max: float | None = None,
) -> str:
    """Grouped bars: one group per entry of `groups`, one bar per series within it."""
    x0, x1, y0, y1 = PAD_LEFT, WIDTH - PAD_RIGHT, HEIGHT - PAD_BOTTOM, PAD_TOP
    values = [v for vs in series.values() for v in vs]
    top = y_max if y_max is not None else max([1e-9, *values]) * 1.05
    ay = _Axis([0.0, top], (y0, y1), False)
    ay.high = top
    parts = _frame(title, "", y_label)
    for t in _ticks(0.0, top, False):
        y = ay(t)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    labels = list(series)
    group_w = (x1 - x0) / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(labels))
    for g, group in enumerate(groups):
        gx = x0 + g * group_w + group_w * 0.1
        parts.append(
            f'<text x="{x0 + (g + 0.5) * group_w:.1f}" y="{y0 + 15}" text-anchor="middle">'
            f"{_esc(group)}</text>"
        )
        for i, label in enumerate(labels):
            value = series[label][g]
            y = ay(value)
            parts.append(
                f'<rect x="{gx + i * bar_w:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" '
                f'height="{max(0.0, y0 - y):.1f}" fill="{COLOURS[i % len(COLOURS)]}">'
                f"<title>{_esc(label)} {_esc(group)}: {_fmt(value)}</title></rect>"
            )
    parts += _legend(labels)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
