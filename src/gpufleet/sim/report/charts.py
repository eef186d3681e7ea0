"""Inline SVG charts for the simulator's HTML report: step lines over time, lanes of states
over time, and bar charts of nodes by free GPUs. No scripts; every element is well-formed XML.

Every time chart has the same frame: the y-axis title rotated left of the tick labels, the
x-axis title ("simulated time") under its tick labels, and a band above the plot for event
markers (a numbered flag and a thin vertical rule per marked instant; the number is the one the
event table shows). Two charts given the same `t_max` and `y_max` share their axes, which is
how `--compare` puts two runs side by side.

Every line is drawn at its true value. Lines that carry equal values are told apart by width
and dash, not by moving them: the caller draws the wider line first, and a narrower or dashed
one on top of it stays visible.

Each colour has one meaning on the page. The states (lanes, badges, flags) take `GOOD`,
`STARTING`, `DEGRADED`, `FAILING` and `NOTHING`; the agent's report is always `REPORTED`, the
ground truth `TRUTH`; pools and clusters take `COLOURS`, which holds none of those.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.sim.report.colours import REPORTED, TRUTH
from gpufleet.sim.report.events import Marker
from gpufleet.sim.scenario.load import format_duration

X_TITLE = "simulated time"
_PAD_L = 64
_PAD_R = 30
_PAD_T = 38  # the marker band
_PAD_B = 44
_BAND_ROW = 16
#: Tick steps for the time axis, in seconds.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


#: Shared SVG definitions (the hatching of the agent's bars): put once on the page.
DEFS = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="0" height="0" style="position:absolute">'
    '<defs><pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="5" height="5" fill="#fdebd3"/>'
    '<line x1="0" y1="0" x2="0" y2="5" stroke="'
    + REPORTED
    + '" stroke-width="2"/></pattern></defs></svg>'
)


def esc(value: object) -> str:
    return html.escape(str(value))


@dataclass(frozen=True, slots=True)
class Line:
    """One step line; a None value is a gap (nothing known then)."""

    name: str
    values: Sequence[float | None]
    colour: str
    is_dashed: bool = False
    width: float = 1.8


def nice_max(value: float, *, is_count: bool = True) -> tuple[float, float]:
    """An axis top at or above `value` and a tick step (1, 2 or 5 times a power of ten, at
    least 1 for counts): the smallest step that needs at most six ticks above zero."""
    if value <= 0:
        return 4.0, 1.0
    power = 10 ** math.floor(math.log10(value / 6))
    step = next(m * power for m in (1, 2, 5, 10) if value / (m * power) <= 6)
    if is_count:
        step = max(1.0, step)
    return step * math.ceil(value / step - 1e-9), step


def _time_step(t_max: float, width: float) -> float:
    """A tick step that gives at most one tick per 70 px (and at most 8)."""
    ticks = max(2, min(8, int(width // 70)))
    for step in _TIME_STEPS:
        if t_max / step <= ticks:
            return float(step)
    return float(math.ceil(t_max / ticks / 21600) * 21600)


@dataclass(frozen=True, slots=True)
class _Frame:
    width: int
    height: int
    t_max: float
    y_max: float

    @property
    def x0(self) -> float:
        return _PAD_L

    @property
    def x1(self) -> float:
        return self.width - _PAD_R

    @property
    def y0(self) -> float:
        return self.height - _PAD_B

    @property
    def y1(self) -> float:
        return _PAD_T

    def x(self, t: float) -> float:
        return self.x0 + (t / self.t_max if self.t_max > 0 else 0) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        return self.y0 - (v / self.y_max if self.y_max > 0 else 0) * (self.y0 - self.y1)


def _time_axis(frame: _Frame) -> list[str]:
    parts = []
    step = _time_step(frame.t_max, frame.x1 - frame.x0)
    t = 0.0
    while t <= frame.t_max + 1e-9:
        x = frame.x(t)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.y0:.1f}" y2="{frame.y0 + 4:.1f}" '
            'stroke="#999"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{frame.y0 + 16:.1f}" text-anchor="middle">'
            f"{esc(format_duration(t))}</text>"
        )
        t += step
    mid = (frame.x0 + frame.x1) / 2
    parts.append(
        f'<text class="axis-title" x="{mid:.1f}" y="{frame.height - 6}" '
        f'text-anchor="middle">{X_TITLE}</text>'
    )
    return parts


def _markers(frame: _Frame, markers: Sequence[Marker]) -> list[str]:
    """A dotted rule per marker, and its numbered flag in the band above the plot on one of
    two rows; a flag with no room on either row is left out (the rule and its tooltip stay)."""
    parts: list[str] = []
    last_x = [-100.0, -100.0]
    for m in markers:
        if m.at_s > frame.t_max + 1e-9:
            continue
        x = frame.x(m.at_s)
        free = [row for row in (0, 1) if x - last_x[row] >= 22]
        flag = ""
        if free:
            row = free[0]
            last_x[row] = x
            y = 4 + row * _BAND_ROW
            flag = (
                f'<rect x="{x - 10:.1f}" y="{y:.1f}" width="20" height="15" rx="2" '
                f'fill="{m.colour}"/>'
                f'<text class="flag" x="{x:.1f}" y="{y + 11.5:.1f}" text-anchor="middle">'
                f"{m.number}</text>"
            )
        parts.append(
            f'<g class="marker"><title>{m.number} at {esc(format_duration(m.at_s))}: '
            f"{esc(m.title)}</title>"
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.y1:.1f}" y2="{frame.y0:.1f}" '
            f'stroke="{m.colour}" stroke-width="1" stroke-dasharray="2 3" opacity="0.55"/>'
            f"{flag}</g>"
        )
    return parts


def _open(frame: _Frame, label: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{frame.width}" height="{frame.height}" '
        f'viewBox="0 0 {frame.width} {frame.height}" role="img" aria-label="{esc(label)}">',
        f'<rect x="{frame.x0}" y="{frame.y1}" width="{frame.x1 - frame.x0}" '
        f'height="{frame.y0 - frame.y1}" fill="#fafafa" stroke="#ddd"/>',
    ]


def _path(frame: _Frame, times_s: Sequence[float], line: Line) -> str:
    points: list[str] = []
    is_open = False
    for t, v in zip(times_s, line.values, strict=False):
        if v is None:
            is_open = False
            continue
        x = frame.x(t)
        y = frame.y(v)
        points.append(f"H{x:.1f}V{y:.1f}" if is_open else f"M{x:.1f},{y:.1f}")
        is_open = True
    return "".join(points)


def line_chart(
    times_s: Sequence[float],
    lines: Sequence[Line],
    *,
    y_title: str,
    width: int = 620,
    height: int = 250,
    t_max: float | None = None,
    y_max: float | None = None,
    markers: Sequence[Marker] = (),
) -> str:
    """An SVG step chart of `lines` over `times_s`."""
    values = [v for line in lines for v in line.values if v is not None]
    # Headroom over the largest value, so a line at the top is not drawn on the frame.
    top, step = nice_max(max([y_max or 0.0, *values, 1.0]) * 1.1)
    frame = _Frame(width, height, t_max or max([1.0, *times_s]), top)
    parts = _open(frame, y_title)
    v = 0.0
    while v <= top + 1e-9:
        y = frame.y(v)
        parts.append(
            f'<line x1="{frame.x0}" x2="{frame.x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>'
        )
        parts.append(f'<text x="{frame.x0 - 6}" y="{y + 3.5:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    mid = (frame.y0 + frame.y1) / 2
    parts.append(
        f'<text class="axis-title" x="14" y="{mid:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid:.1f})">{esc(y_title)}</text>'
    )
    parts += _time_axis(frame)
    for line in lines:
        dash = ' stroke-dasharray="6 4"' if line.is_dashed else ""
        parts.append(
            f'<path d="{_path(frame, times_s, line)}" fill="none" stroke="{line.colour}" '
            f'stroke-width="{line.width}"{dash}><title>{esc(line.name)}</title></path>'
        )
    parts += _markers(frame, markers)
    parts.append("</svg>")
    return "".join(parts)


def axis_top(values: Sequence[float | None]) -> float:
    """The y-axis top `line_chart` would choose for these values (to share it between charts)."""
    return nice_max(max([1.0, *(v for v in values if v is not None)]) * 1.1)[0]


@dataclass(frozen=True, slots=True)
class Lane:
    """One row of states over time: `values[i]` holds from `times_s[i]` to the next sample."""

    label: str
    values: Sequence[str]


def lane_chart(
    times_s: Sequence[float],
    lanes: Sequence[Lane],
    palette: Mapping[str, str],
    *,
    width: int = 620,
    t_max: float | None = None,
    markers: Sequence[Marker] = (),
    title: str = "states over time",
) -> str:
    """An SVG of lanes: each a bar coloured by its state over time, its label above it."""
    lane_h, label_h = 17, 15
    height = _PAD_T + len(lanes) * (lane_h + label_h + 4) + _PAD_B - 4
    t_end = t_max or max([1.0, *times_s])
    frame = _Frame(width, height, t_end, 1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
    ]
    y = float(_PAD_T)
    for lane in lanes:
        parts.append(f'<text x="{frame.x0 + 4}" y="{y + 12:.1f}">{esc(lane.label)}</text>')
        y += label_h
        for start, end, state in _runs(times_s, lane.values, t_end):
            x_a, x_b = frame.x(start), frame.x(end)
            parts.append(
                f'<rect class="lane" x="{x_a:.1f}" y="{y:.1f}" width="{max(0.5, x_b - x_a):.1f}" '
                f'height="{lane_h}" fill="{palette.get(state, "#bbbbbb")}">'
                f"<title>{esc(lane.label)}: {esc(state)} from {esc(format_duration(start))} to "
                f"{esc(format_duration(end))}</title></rect>"
            )
            if x_b - x_a > 7.5 * len(state) + 8:
                parts.append(
                    f'<text class="on-lane" x="{x_a + 4:.1f}" y="{y + 13:.1f}">{esc(state)}</text>'
                )
        y += lane_h + 4
    parts += _time_axis(frame)
    parts += _markers(frame, markers)
    parts.append("</svg>")
    return "".join(parts)


def _runs(
    times_s: Sequence[float], values: Sequence[str], t_end: float
) -> list[tuple[float, float, str]]:
    runs: list[tuple[float, float, str]] = []
    for i, (t, v) in enumerate(zip(times_s, values, strict=False)):
        end = times_s[i + 1] if i + 1 < len(times_s) else t_end
        if runs and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], end, v)
        else:
            runs.append((t, end, v))
    return runs


def histogram_chart(
    truth: Mapping[int, int], reported: Mapping[int, int] | None, gpus_per_node: int
) -> str:
    """Nodes by free GPUs on the node, 0..gpus_per_node: the ground truth, and beside each bar
    the agent's last report (hatched) when there is one."""
    width, height = 380, 240
    x0, x1, y0, y1 = 56.0, width - 12.0, height - 44.0, 22.0
    keys = list(range(max([gpus_per_node, *truth, *(reported or {}), 0]) + 1))
    top, step = nice_max(max([1, *truth.values(), *(reported or {}).values()]))
    frame_h = y0 - y1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="nodes by free GPUs">',
    ]
    v = 0.0
    while v <= top + 1e-9:
        y = y0 - v / top * frame_h
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 3.5:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    slot = (x1 - x0) / len(keys)
    bar = slot * (0.4 if reported is not None else 0.7)
    for i, k in enumerate(keys):
        left = x0 + i * slot + (slot - bar * (2 if reported is not None else 1)) / 2
        bars = [("truth", truth.get(k, 0), TRUTH)]
        if reported is not None:
            bars.append(("agent's report", reported.get(k, 0), "url(#hatch)"))
        for j, (who, n, fill) in enumerate(bars):
            h = n / top * frame_h
            x = left + j * bar
            parts.append(
                f'<rect x="{x:.1f}" y="{y0 - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" '
                f'fill="{fill}" stroke="{REPORTED if j else TRUTH}">'
                f"<title>{esc(who)}: {nodes_text(n)} with {k} free</title></rect>"
            )
            if n:
                parts.append(
                    f'<text x="{x + bar / 2:.1f}" y="{y0 - h - 3:.1f}" '
                    f'text-anchor="middle">{n}</text>'
                )
        parts.append(
            f'<text x="{x0 + i * slot + slot / 2:.1f}" y="{y0 + 15:.1f}" '
            f'text-anchor="middle">{k}</text>'
        )
    mid = (y0 + y1) / 2
    parts.append(
        f'<text class="axis-title" x="14" y="{mid:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid:.1f})">nodes</text>'
    )
    parts.append(
        f'<text class="axis-title" x="{(x0 + x1) / 2:.1f}" y="{height - 8}" '
        'text-anchor="middle">free GPUs on the node</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def nodes_text(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def legend(entries: Sequence[tuple[str, str, str]], note: str = "") -> str:
    """An HTML legend: (name, colour, style) with style `solid`, `dashed`, `hatched` or `box`,
    each drawn as the chart draws it; `note` after the entries."""
    items = []
    for name, colour, style in entries:
        if style == "box":
            swatch = f'<rect x="2" y="1" width="24" height="10" fill="{colour}"/>'
        elif style == "hatched":
            swatch = (
                f'<rect x="2" y="1" width="24" height="10" fill="#fdebd3" stroke="{colour}" '
                'stroke-dasharray="2 2"/>'
            )
        else:
            dash = ' stroke-dasharray="6 4"' if style == "dashed" else ""
            swatch = (
                f'<line x1="1" x2="27" y1="6" y2="6" stroke="{colour}" stroke-width="2"{dash}/>'
            )
        items.append(
            f'<span class="item"><svg xmlns="http://www.w3.org/2000/svg" width="28" height="12">'
            f"{swatch}</svg>{esc(name)}</span>"
        )
    tail = f'<span class="note">{esc(note)}</span>' if note else ""
    return f'<div class="legend">{"".join(items)}{tail}</div>'
