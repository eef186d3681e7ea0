"""A self-contained HTML report of scenario runs: tables and inline SVG charts, no scripts,
no network (everything is in the one file).

Charts: GPUs allocated over time per pool (ground truth from the workload clusters' claims, with
the pool's capacity as a dashed line), pending replicas over time, and each pool's final
histogram of nodes by free GPUs. With several runs (`--compare`) each run gets its own section.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from gpufleet.sim.run import RunResult
from gpufleet.sim.scenario import format_duration

_W = 640
_H = 200
_PAD_L = 44
_PAD_B = 28
_PAD_T = 12
_PAD_R = 12
_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.6em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:3px 10px;
text-align:left;font-size:.9em}th{background:#f4f4f4}.ok{color:#1a7f37}.bad{color:#cf222e}
.charts{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}figcaption{font-size:.85em;color:#555}
svg text{font-size:10px;fill:#444}.legend span{display:inline-block;margin-right:12px;font-size:.85em}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def _esc(value: object) -> str:
    return html.escape(str(value))


def _scale(value: float, low: float, high: float, out_low: float, out_high: float) -> float:
    if high <= low:
        return out_low
    return out_low + (value - low) * (out_high - out_low) / (high - low)


def line_chart(
    times_s: Sequence[float],
    lines: Mapping[str, Sequence[float]],
    *,
    dashed: Mapping[str, Sequence[float]] | None = None,
    y_label: str = "",
) -> str:
    """An SVG step chart of `lines` over `times_s` (optional dashed reference lines)."""
    dashed = dashed or {}
    values = [v for series in (*lines.values(), *dashed.values()) for v in series]
    y_max = max([1.0, *values])
    if all(float(v).is_integer() for v in values):
        # Counts (GPUs, replicas): whole-number gridlines, four of them.
        y_max = float(max(4, math.ceil(y_max / 4) * 4))
    t_max = max([1.0, *times_s])
    x0, x1 = _PAD_L, _W - _PAD_R
    y0, y1 = _H - _PAD_B, _PAD_T
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}">']
    parts.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#fafafa"/>')
    for i in range(5):
        v = y_max * i / 4
        y = _scale(v, 0, y_max, y0, y1)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{x0 - 4}" y="{y + 3:.1f}" text-anchor="end">{v:g}</text>')
    for i in range(5):
        t = t_max * i / 4
        x = _scale(t, 0, t_max, x0, x1)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{y0 + 14}" text-anchor="{anchor}">{format_duration(t)}</text>'
        )
    if y_label:
        parts.append(f'<text x="{x0}" y="{y1 - 2}">{_esc(y_label)}</text>')

    def path(series: Sequence[float]) -> str:
        points: list[str] = []
        for i, (t, v) in enumerate(zip(times_s, series, strict=False)):
            x = _scale(t, 0, t_max, x0, x1)
            y = _scale(v, 0, y_max, y0, y1)
            if i:
                points.append(f"H{x:.1f}V{y:.1f}")
            else:
                points.append(f"M{x:.1f},{y:.1f}")
        return "".join(points)

    for i, (name, series) in enumerate(lines.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        parts.append(
            f'<path d="{path(series)}" fill="none" stroke="{colour}" stroke-width="1.8">'
            f"<title>{_esc(name)}</title></path>"
        )
    for i, (name, series) in enumerate(dashed.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        parts.append(
            f'<path d="{path(series)}" fill="none" stroke="{colour}" stroke-width="1" '
            f'stroke-dasharray="4 3" opacity="0.7"><title>{_esc(name)}</title></path>'
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><i class="sw" style="background:{_COLOURS[i % len(_COLOURS)]}"></i>'
        f"{_esc(name)}</span>"
        for i, name in enumerate(lines)
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def bar_chart(histogram: Mapping[int, int], gpus_per_node: int) -> str:
    """An SVG bar chart: nodes by free GPUs, 0..gpus_per_node."""
    width, height = 260, 150
    x0, y0, y1 = 30, height - 24, 10
    top = max([1, *histogram.values()])
    keys = list(range(0, max([gpus_per_node, *histogram.keys(), 0]) + 1))
    bar_w = (width - x0 - 8) / max(1, len(keys))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    parts.append(f'<text x="{x0 - 4}" y="{y1 + 4}" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y0}" text-anchor="end">0</text>')
    for i, k in enumerate(keys):
        n = histogram.get(k, 0)
        h = _scale(n, 0, top, 0, y0 - y1)
        x = x0 + i * bar_w + 2
        parts.append(
            f'<rect x="{x:.1f}" y="{y0 - h:.1f}" width="{bar_w - 4:.1f}" height="{h:.1f}" '
            f'fill="#1f77b4"><title>{n} nodes with {k} free</title></rect>'
        )
        parts.append(
            f'<text x="{x + (bar_w - 4) / 2:.1f}" y="{y0 + 12}" text-anchor="middle">{k}</text>'
        )
    parts.append(f'<text x="{x0}" y="{height - 1}">free GPUs per node → nodes</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _histogram_text(histogram: Mapping[int, int] | None) -> str:
    if histogram is None:
        return "-"
    return ", ".join(f"{n}×{k} free" for k, n in sorted(histogram.items())) or "no nodes"


def _section(result: RunResult) -> str:
    s = result.series
    out: list[str] = [f"<h2>Accounting: {_esc(result.accounting.value)}</h2>"]
    verdict = (
        f'<span class="ok">all {result.checks_run} checks passed</span>'
        if result.is_passed
        else f'<span class="bad">{len(result.failures)} check failures</span>'
    )
    out.append(
        f"<p>{verdict} · simulated {format_duration(result.scenario.end_s)} in "
        f"{result.wall_s:.2f}s · {result.controller_steps} controller steps</p>"
    )
    if result.failures:
        out.append(
            _table(
                ["at", "check", "what", "expected", "got"],
                [
                    (format_duration(f.at_s), f.path, f.what, f.expected, f.got)
                    for f in result.failures
                ],
            )
        )
    out.append("<h3>Deployments</h3>")
    out.append(
        _table(
            ["deployment", "desired", "placed", "running", "clusters", "condition"],
            [
                (
                    d.name,
                    d.desired,
                    d.placed,
                    d.running,
                    ", ".join(f"{c}: {n}" for c, n in sorted(d.clusters.items())) or "-",
                    d.condition_reason,
                )
                for d in result.deployments
            ],
        )
    )
    out.append("<h3>Pools at the end</h3>")
    out.append(
        _table(
            ["pool", "nodes", "GPUs", "allocated", "free", "histogram (actual)", "agent's report"],
            [
                (
                    p.key,
                    p.nodes,
                    p.gpus_total,
                    p.gpus_allocated,
                    p.gpus_free,
                    _histogram_text(p.histogram),
                    _histogram_text(p.observed_histogram),
                )
                for p in result.pools
            ],
        )
    )
    out.append("<h3>Over time</h3><div class='charts'>")
    pool_lines: Mapping[str, Sequence[float]] = {
        f"{c}/{p}": v for (c, p), v in s.pool_allocated.items()
    }
    capacity: Mapping[str, Sequence[float]] = {
        f"{c}/{p} capacity": [a + f for a, f in zip(v, s.pool_free[(c, p)], strict=True)]
        for (c, p), v in s.pool_allocated.items()
    }
    if len(pool_lines) > len(_COLOURS):
        # Many pools: one line per cluster keeps the chart readable.
        per_cluster: dict[str, list[float]] = {}
        cap_cluster: dict[str, list[float]] = {}
        for (c, p), v in s.pool_allocated.items():
            acc = per_cluster.setdefault(c, [0.0] * len(v))
            cap = cap_cluster.setdefault(f"{c} capacity", [0.0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
                cap[i] += x + s.pool_free[(c, p)][i]
        pool_lines, capacity = per_cluster, cap_cluster
    out.append(
        "<figure>"
        + line_chart(s.times_s, pool_lines, dashed=capacity, y_label="GPUs allocated")
        + "<figcaption>GPUs allocated (solid) and published (dashed)</figcaption></figure>"
    )
    out.append(
        "<figure>"
        + line_chart(s.times_s, {"pending replicas": s.pending}, y_label="replicas")
        + "<figcaption>Replicas asked for and not placed, fleet-wide</figcaption></figure>"
    )
    out.append("</div><h3>Final histograms (nodes by free GPUs, ground truth)</h3>")
    out.append("<div class='charts'>")
    for pool in result.pools[:40]:
        per_node = pool.gpus_total // pool.nodes if pool.nodes else 0
        out.append(
            f"<figure>{bar_chart(pool.histogram, per_node)}"
            f"<figcaption>{_esc(pool.key)}</figcaption></figure>"
        )
    out.append("</div>")
    if result.refusals:
        out.append("<h3>Refusals</h3>")
        out.append(
            _table(
                ["at", "deployment", "placed/desired", "reason", "detail", "where"],
                [
                    (
                        format_duration(r.at_s),
                        r.deployment,
                        f"{r.placed}/{r.desired}",
                        r.reason,
                        r.detail or r.message,
                        r.where,
                    )
                    for r in result.refusals[:500]
                ],
            )
        )
    return "".join(out)


def render_html(results: Sequence[RunResult]) -> str:
    """One self-contained HTML page for one scenario run under one or more accounting modes."""
    scenario = results[0].scenario
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>gpufleet simulate: {_esc(scenario.name)}</title><style>{_CSS}</style></head>"
    )
    body = [
        f"<body><h1>gpufleet simulate: {_esc(scenario.name)}</h1>",
        f"<p>{_esc(scenario.description)}</p>",
        f"<p>Seed {scenario.seed}, {format_duration(scenario.end_s)} simulated, "
        f"{len(scenario.fleet.clusters)} cluster{'' if len(scenario.fleet.clusters) == 1 else 's'}."
        f" Report written {made}.</p>",
    ]
    body += [_section(r) for r in results]
    body.append("</body></html>")
    return head + "".join(body)
