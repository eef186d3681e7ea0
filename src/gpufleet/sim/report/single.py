"""The HTML report of one run, and the parts the comparison (report_compare.py) shares: the
page, tables, the event timeline and the charts of a run. report.py puts them together.

One run, top to bottom:

- the verdict and every failed check;
- the **event timeline**: every action, agent crash or partition, placement, drop,
  re-placement, refusal and failed check, numbered by instant; the same numbers flag the charts,
  so a dip has a visible cause;
- **over time**: GPUs allocated per pool (ground truth, solid) under each pool's published
  capacity (dashed); replicas fleet-wide (wanted, placed, running); per deployment a lane of
  placed vs running; per pool the agent's report as the hub holds it next to the ground truth;
  per cluster lanes of the hub's freshness (Fresh / Stale / Expired), the `Ready` condition and
  the agent (up, partitioned, down);
- each pool's final histogram of nodes by free GPUs, ground truth beside the agent's report;
- deployments, pools and refusals as tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gpufleet.sim.report.charts import (
    DEFS,
    Lane,
    Line,
    esc,
    histogram_chart,
    lane_chart,
    legend,
    line_chart,
    nodes_text,
)
from gpufleet.sim.report.colours import (
    COLOURS,
    DEGRADED,
    FAILING,
    GOOD,
    NOTHING,
    REPORTED,
    STARTING,
    TRUTH,
    WANTED,
)
from gpufleet.sim.report.events import (
    KIND_COLOURS,
    Event,
    EventKind,
    Marker,
    marker_instants,
    run_events,
)
from gpufleet.sim.report.headline import run_headline
from gpufleet.sim.run.runner import RunResult
from gpufleet.sim.scenario.load import format_duration

#: Chart widths: a chart across the page, and one of a row of small ones.
WIDE = 1180
SMALL = 380
#: At most this many pools get their own chart (agent vs truth), deployments and clusters a lane.
MAX_SMALL = 12
MAX_LANES = 40
#: At most this many rows in the event and refusal tables.
MAX_ROWS = 500

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;color:#222;
max-width:1240px;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:3px 10px;
text-align:left;font-size:.9em;vertical-align:top}th{background:#f4f4f4;white-space:nowrap}
table.summary td:first-child{white-space:nowrap}
td.num{text-align:right}.ok{color:#1a7f37}.bad{color:#cf222e}.diff{color:#9a6700}
.charts{display:flex;flex-wrap:wrap;gap:18px 24px}figure{margin:0 0 1.4em}
figcaption{font-size:.95em;font-weight:600;color:#333;margin:.4em 0 0}
svg text{font-size:12px;fill:#444}svg text.axis-title{font-size:13px;fill:#222}
svg text.flag{font-size:12px;fill:#fff;font-weight:bold}svg text.on-lane{font-size:12px;fill:#fff}
.legend{font-size:.85em;margin:2px 0 4px}.legend .item{margin-right:14px;white-space:nowrap}
.legend svg{vertical-align:middle;margin-right:4px}.legend .note{color:#555}
.kind{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:.8em;white-space:nowrap}
.flagno{display:inline-block;min-width:1.4em;text-align:center;border-radius:3px;color:#fff;
font-size:.8em;font-weight:bold}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:12px}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}
.headline{border-left:4px solid #1f77b4;background:#f4f8fc;padding:.5em 1em;margin:1em 0}
.headline h2{border:0;margin:.2em 0 .4em;font-size:1.15em}.headline ul{margin:.2em 0;padding-left:1.2em}
.headline li{margin:.25em 0}
"""

#: States of the lanes and their colours.
FRESHNESS_COLOURS = {"Fresh": GOOD, "Stale": DEGRADED, "Expired": FAILING, "None": NOTHING}
AGENT_COLOURS = {"up": GOOD, "partitioned": DEGRADED, "down": FAILING}
READY_COLOURS = {"True": GOOD, "False": FAILING, "Unknown": NOTHING}
REPLICA_COLOURS = {
    "running": GOOD,
    "starting": STARTING,
    "short": FAILING,
    "none wanted": NOTHING,
}
FRESHNESS_NOTE = (
    "The hub's freshness of the cluster's last agent report, as the controller published it "
    "(None: no observation in use, as in whole-node accounting)."
)


def page(title: str, body: Sequence[str]) -> str:
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!doctype html>\n<html lang="en"><head>'
        f'<meta charset="utf-8"/><title>{esc(title)}</title><style>{CSS}</style></head><body>'
        + DEFS
        + "".join(body)
        + f'<p class="note">Report written {made}.</p></body></html>'
    )


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, raw: Sequence[int] = ()
) -> str:
    """An HTML table; the cells of the columns in `raw` are HTML already, the rest are escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c if i in raw else esc(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(svg: str, caption: str, legend_html: str = "") -> str:
    return f"<figure><figcaption>{esc(caption)}</figcaption>{svg}{legend_html}</figure>"


def headline_box(sentences: Sequence[str]) -> str:
    """What happened and why, with the numbers: the top of every report."""
    items = "".join(f"<li>{esc(s)}</li>" for s in sentences)
    return f'<div class="headline" id="headline"><h2>What happened</h2><ul>{items}</ul></div>'


def header(result: RunResult, subtitle: str) -> list[str]:
    s = result.scenario
    clusters = len(s.fleet.clusters)
    return [
        f"<h1>gpufleet simulate: {esc(s.name)}{esc(subtitle)}</h1>",
        f"<p>{esc(s.description)}</p>",
        f"<p>Seed {s.seed}, {esc(format_duration(s.end_s))} simulated, {clusters} "
        f"cluster{'' if clusters == 1 else 's'}, {len(s.deployment_names())} deployment"
        f"{'' if len(s.deployment_names()) == 1 else 's'}.</p>",
    ]


# --- the event timeline -------------------------------------------------------------------


def kind_badge(kind: EventKind) -> str:
    return f'<span class="kind" style="background:{KIND_COLOURS[kind]}">{esc(kind.value)}</span>'


def kinds_legend(events: Sequence[Event]) -> str:
    """The colours of the kinds these events have."""
    present = {e.kind for e in events}
    return legend(
        [(k.value, KIND_COLOURS[k], "box") for k in EventKind if k in present],
        "Flags on the charts are numbered as in the first column; a flag takes the colour of "
        "its instant's first cause.",
    )


def timeline_section(events: Sequence[Event], markers: Sequence[Marker]) -> list[str]:
    """The event timeline: open when short, folded when long (the charts come first then)."""
    instants = len({e.at_s for e in events})
    note = (
        f"<p>{len(events)} events at {instants} instants; {len(markers)} instants are flagged "
        "on the charts (agent events and failed checks first, then actions on nodes and "
        "clusters, then on deployments, each kind spread over the run).</p>"
        if len(markers) < instants
        else ""
    )
    is_open = ' open="open"' if len(events) <= 60 else ""
    return [
        '<h2 id="events">Event timeline</h2>',
        kinds_legend(events),
        note,
        f"<details{is_open}><summary>{len(events)} event{'' if len(events) == 1 else 's'}"
        "</summary>",
        event_table(events, markers),
        "</details>",
    ]


def event_table(events: Sequence[Event], markers: Sequence[Marker]) -> str:
    numbers = {m.at_s: m for m in markers}
    rows = []
    for event in events[:MAX_ROWS]:
        marker = numbers.get(event.at_s)
        flag = (
            f'<span class="flagno" style="background:{marker.colour}">{marker.number}</span>'
            if marker
            else ""
        )
        rows.append((flag, format_duration(event.at_s), kind_badge(event.kind), event.text))
    out = table(["flag", "at", "kind", "what happened"], rows, raw=(0, 2))
    if len(events) > MAX_ROWS:
        out += f"<p>... {len(events) - MAX_ROWS} more events (see --output json).</p>"
    return out


# --- charts of one run --------------------------------------------------------------------


def pool_keys(result: RunResult) -> list[tuple[str, str]]:
    return sorted(result.series.pool_allocated)


def gpu_chart(
    result: RunResult,
    markers: Sequence[Marker],
    *,
    width: int,
    y_max: float | None = None,
    label: str = "",
) -> str:
    """GPUs allocated (solid) and published (dashed) per pool; per cluster with many pools."""
    s = result.series
    allocated: dict[str, list[float | None]] = {}
    capacity: dict[str, list[float | None]] = {}
    per_cluster = len(s.pool_allocated) > len(COLOURS)
    for c, p in sorted(s.pool_allocated):
        name = c if per_cluster else f"{c}/{p}"
        acc = allocated.setdefault(name, [0.0] * len(s.times_s))
        cap = capacity.setdefault(name, [0.0] * len(s.times_s))
        for i, (a, f) in enumerate(zip(s.pool_allocated[(c, p)], s.pool_free[(c, p)], strict=True)):
            acc[i] = (acc[i] or 0.0) + a
            cap[i] = (cap[i] or 0.0) + a + f
    lines = []
    entries = []
    for i, name in enumerate(allocated):
        colour = COLOURS[i % len(COLOURS)]
        # At their true values: the wide allocation under its dashed capacity, so a full pool
        # shows both.
        lines.append(Line(f"{name}: GPUs allocated", allocated[name], colour, False, 4.0))
        lines.append(Line(f"{name}: GPUs published", capacity[name], colour, True, 1.6))
        entries.append((name, colour, "solid"))
    svg = line_chart(
        s.times_s,
        lines,
        y_title="GPUs",
        width=width,
        t_max=result.scenario.end_s,
        y_max=y_max,
        markers=markers,
    )
    note = "wide solid: GPUs allocated (ground truth) · dashed: GPUs published (capacity)"
    return figure(
        svg,
        label + "GPUs allocated per " + ("cluster" if per_cluster else "pool") + " over time",
        legend(entries, note),
    )


def gpu_axis_top(result: RunResult) -> float:
    s = result.series
    return max(
        [1.0]
        + [
            float(a + f)
            for k in s.pool_allocated
            for a, f in zip(s.pool_allocated[k], s.pool_free[k], strict=True)
        ]
    )


def replica_lines(result: RunResult) -> list[Line]:
    s = result.series
    n = len(s.times_s)
    desired = [float(sum(col[i] for col in s.desired.values())) for i in range(n)]
    placed = [float(sum(col[i] for col in s.placed.values())) for i in range(n)]
    running_cols = list(result.samples.replicas_running.values())
    running = [float(sum(col[i] for col in running_cols if i < len(col))) for i in range(n)]
    # At their true values, widest first: equal lines stay visible, one inside the other.
    return [
        Line("replicas placed (ModelReplicas)", placed, TRUTH, False, 6.0),
        Line("replicas running (every pod Running)", running, GOOD, False, 2.5),
        Line("replicas wanted", desired, WANTED, True, 1.4),
    ]


def replica_chart(
    result: RunResult,
    markers: Sequence[Marker],
    *,
    width: int,
    y_max: float | None = None,
    label: str = "",
) -> str:
    lines = replica_lines(result)
    svg = line_chart(
        result.series.times_s,
        lines,
        y_title="replicas",
        width=width,
        t_max=result.scenario.end_s,
        y_max=y_max,
        markers=markers,
    )
    entries = [("wanted (spec.replicas)", WANTED, "dashed")]
    entries += [("placed (wide)", TRUTH, "solid"), ("running", GOOD, "solid")]
    return figure(
        svg,
        label + "Replicas, fleet-wide: wanted, placed on a cluster, and running there",
        legend(entries, "dashed: what the deployments ask for"),
    )


def replica_state(desired: int, placed: int, running: int) -> str:
    if desired == 0 and placed == 0:
        return "none wanted"
    if placed < desired:
        return "short"
    return "running" if running >= placed else "starting"


def lane_order(results: Sequence[RunResult]) -> list[str]:
    """The deployments' lanes in order: those ever short of replicas in any of the runs first
    (in a busy run they are the story), then by name; compared runs share one order."""

    def was_short(result: RunResult, d: str) -> bool:
        s = result.series
        return any(p < w for p, w in zip(s.placed[d], s.desired[d], strict=True))

    names = sorted({d for r in results for d in r.series.desired})
    return sorted(
        names, key=lambda d: not any(was_short(r, d) for r in results if d in r.series.desired)
    )


def deployment_lanes(
    result: RunResult,
    markers: Sequence[Marker],
    *,
    width: int,
    label: str = "",
    order: Sequence[str] | None = None,
) -> str:
    s = result.series
    lanes = []
    shown = [d for d in (order or lane_order([result])) if d in s.desired][:MAX_LANES]
    for dep in shown:
        running = result.samples.replicas_running.get(dep, [])
        values = [
            replica_state(
                s.desired[dep][i], s.placed[dep][i], running[i] if i < len(running) else 0
            )
            for i in range(len(s.times_s))
        ]
        lanes.append(Lane(dep, values))
    svg = lane_chart(
        s.times_s,
        lanes,
        REPLICA_COLOURS,
        width=width,
        t_max=result.scenario.end_s,
        markers=markers,
        title="replicas per deployment",
    )
    entries = [
        ("every wanted replica placed and running", REPLICA_COLOURS["running"], "box"),
        ("placed, not every pod Running yet", REPLICA_COLOURS["starting"], "box"),
        ("fewer replicas placed than wanted", REPLICA_COLOURS["short"], "box"),
        ("none wanted", REPLICA_COLOURS["none wanted"], "box"),
    ]
    more = len(s.desired) - MAX_LANES
    caption = (
        label
        + "Per deployment: replicas placed vs running"
        + (f" (first {MAX_LANES}; {more} more in --output json)" if more > 0 else "")
    )
    return figure(svg, caption, legend(entries))


def agent_vs_truth(
    result: RunResult, key: tuple[str, str], markers: Sequence[Marker], *, width: int = SMALL
) -> str:
    s = result.series
    truth = [float(v) for v in s.pool_free[key]]
    reported = [None if v is None else float(v) for v in result.samples.reported_free[key]]
    lines = [
        Line("ground truth: free GPUs", truth, TRUTH, False, 4.0),
        Line("agent's report on the hub: free GPUs", reported, REPORTED, True, 1.8),
    ]
    svg = line_chart(
        s.times_s,
        lines,
        y_title="free GPUs",
        width=width,
        height=220 if width == SMALL else 250,
        t_max=result.scenario.end_s,
        y_max=max(
            [1.0]
            + [float(a + f) for a, f in zip(s.pool_allocated[key], s.pool_free[key], strict=True)]
        ),
        markers=markers,
    )
    return figure(svg, f"{key[0]}/{key[1]}: free GPUs, agent's report vs ground truth")


def agent_vs_truth_section(result: RunResult, markers: Sequence[Marker]) -> list[str]:
    keys = [k for k in pool_keys(result) if k in result.samples.reported_free]
    out = [
        "<h3>Per pool: what the agent reported next to the ground truth</h3>",
        legend(
            [
                ("ground truth (the cluster's claims)", TRUTH, "solid"),
                ("agent's last report, as the hub holds it", REPORTED, "dashed"),
            ],
            "A gap in the dashed line: no report on the hub yet. The report lags by the agent's "
            "report interval and its delay in transit.",
        ),
        "<div class='charts'>",
    ]
    # One or two pools get the page's width: their chart is the point of a small scenario.
    width = {1: WIDE, 2: WIDE // 2 - 12}.get(len(keys), SMALL)
    out += [agent_vs_truth(result, k, markers, width=width) for k in keys[:MAX_SMALL]]
    out.append("</div>")
    if len(keys) > MAX_SMALL:
        out.append(f"<p>First {MAX_SMALL} of {len(keys)} pools.</p>")
    return out


def cluster_lanes(
    result: RunResult, markers: Sequence[Marker], *, width: int, label: str = ""
) -> str:
    samples = result.samples
    lanes = []
    for cluster in sorted(samples.observation)[: MAX_LANES // 3]:
        lanes.append(Lane(f"{cluster}: agent report (hub's view)", samples.observation[cluster]))
        lanes.append(Lane(f"{cluster}: Ready", [status for status, _ in samples.ready[cluster]]))
        lanes.append(Lane(f"{cluster}: agent", samples.agent[cluster]))
    palette = {**FRESHNESS_COLOURS, **AGENT_COLOURS, **READY_COLOURS}
    svg = lane_chart(
        samples.times_s,
        lanes,
        palette,
        width=width,
        t_max=result.scenario.end_s,
        markers=markers,
        title="clusters over time",
    )
    entries = [
        ("Fresh / Ready True / agent up", GOOD, "box"),
        ("Stale / agent partitioned", DEGRADED, "box"),
        ("Expired / Ready False / agent down", FAILING, "box"),
        ("None / Unknown", NOTHING, "box"),
    ]
    return figure(
        svg,
        label + "Per cluster: freshness, Ready (" + ready_reasons(result) + ") and the agent",
        legend(entries, FRESHNESS_NOTE),
    )


def ready_reasons(result: RunResult) -> str:
    reasons = sorted({r for lane in result.samples.ready.values() for _, r in lane if r})
    return "reasons: " + ", ".join(reasons) if reasons else "never set"


def histograms(result: RunResult) -> list[str]:
    out = [
        "<h3>Pools at the end: nodes by free GPUs</h3>",
        legend(
            [
                ("ground truth", TRUTH, "box"),
                ("agent's last report", REPORTED, "hatched"),
            ],
            "Each bar: how many nodes have that many GPUs free; the number above it says so.",
        ),
        "<div class='charts'>",
    ]
    for pool in result.pools[:40]:
        per_node = max(pool.histogram, default=0)
        if pool.nodes:
            per_node = max(per_node, pool.gpus_total // pool.nodes)
        text = ", ".join(
            f"{nodes_text(n)} with {k} free" for k, n in sorted(pool.histogram.items())
        )
        out.append(
            figure(
                histogram_chart(pool.histogram, pool.observed_histogram, per_node),
                f"{pool.key}: {text or 'no nodes'}",
            )
        )
    out.append("</div>")
    return out


def histogram_text(histogram: object) -> str:
    if histogram is None:
        return "-"
    assert isinstance(histogram, dict)
    return (
        ", ".join(f"{nodes_text(n)} with {k} free" for k, n in sorted(histogram.items()))
        or "no nodes"
    )


def tables(result: RunResult) -> list[str]:
    out = ["<h3>Deployments at the end</h3>"]
    out.append(
        table(
            ["deployment", "wanted", "placed", "pods running", "clusters", "condition"],
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
        table(
            ["pool", "nodes", "GPUs", "allocated", "free", "nodes by free GPUs", "agent's report"],
            [
                (
                    p.key,
                    p.nodes,
                    p.gpus_total,
                    p.gpus_allocated,
                    p.gpus_free,
                    histogram_text(dict(p.histogram)),
                    histogram_text(
                        None if p.observed_histogram is None else dict(p.observed_histogram)
                    ),
                )
                for p in result.pools
            ],
        )
    )
    if result.refusals:
        out.append(f"<h3>Refusals ({len(result.refusals)})</h3>")
        out.append(
            table(
                ["at", "deployment", "placed/wanted", "reason", "detail", "where"],
                [
                    (
                        format_duration(r.at_s),
                        r.deployment,
                        f"{r.placed}/{r.desired}",
                        r.reason,
                        r.detail or r.message,
                        r.where,
                    )
                    for r in result.refusals[:MAX_ROWS]
                ],
            )
        )
    return out


def verdict(result: RunResult, *, is_compared: bool = False) -> str:
    """The run's verdict; in a comparison a check that does not hold is a difference (amber),
    not a failure (red)."""
    n = len(result.failures)
    if result.is_passed:
        text = (
            f'<span class="ok">all {result.checks_run} checks hold</span>'
            if result.checks_run
            else "no checks"
        )
    elif is_compared:
        text = (
            f'<span class="diff">{n} check result{"" if n == 1 else "s"} not as written '
            "(see Checks above)</span>"
        )
    else:
        text = f'<span class="bad">{n} check failure{"" if n == 1 else "s"}</span>'
    return (
        f"<p>{text} · {esc(result.accounting.value)} accounting · simulated "
        f"{esc(format_duration(result.scenario.end_s))} in {result.wall_s:.2f}s · "
        f"{result.controller_steps} controller steps</p>"
    )


def failures_table(result: RunResult) -> str:
    return table(
        ["at", "check", "what", "expected", "got"],
        [(format_duration(f.at_s), f.path, f.what, f.expected, f.got) for f in result.failures],
    )


def single(result: RunResult) -> list[str]:
    events = run_events(result)
    markers = marker_instants(events)
    out = header(result, "")
    out.insert(1, headline_box(run_headline(result)))
    out.append(verdict(result))
    if result.failures:
        out.append(failures_table(result))
    out += timeline_section(events, markers)
    out.append('<h2 id="charts">Over time</h2>')
    out.append(gpu_chart(result, markers, width=WIDE))
    out.append(replica_chart(result, markers, width=WIDE))
    out.append(deployment_lanes(result, markers, width=WIDE))
    out.append(cluster_lanes(result, markers, width=WIDE))
    out += agent_vs_truth_section(result, markers)
    out.append('<h2 id="end">At the end</h2>')
    out += histograms(result)
    out += tables(result)
    return out
