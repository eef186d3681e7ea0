"""The HTML comparison of runs of one scenario under different accounting modes (`--compare`).

Top to bottom: how the modes differ in making a cluster Ready (when they do), one summary
table (a column per mode, differing rows marked), the checks whose outcome differs between
the modes (a difference, not a failure of one run) and those that fail the same way in every
mode, then each chart of the runs side by side on shared axes (same time span, same y range),
then each run's event timeline and end tables, folded.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.sim.report.charts import esc
from gpufleet.sim.report.events import Event, Marker, run_events, shared_markers
from gpufleet.sim.report.headline import comparison_headline, expected_misses
from gpufleet.sim.report.single import (
    cluster_lanes,
    deployment_lanes,
    event_table,
    gpu_axis_top,
    gpu_chart,
    header,
    headline_box,
    histograms,
    kinds_legend,
    lane_order,
    replica_chart,
    replica_lines,
    table,
    tables,
    verdict,
)
from gpufleet.sim.run.compare import (
    READY_MEANING,
    check_outcomes,
    metrics,
    ready_differs,
    ready_story,
    run_names,
)
from gpufleet.sim.run.runner import RunResult
from gpufleet.sim.scenario.load import format_duration

#: Width of each of two charts side by side.
HALF = 590


def _modes(results: Sequence[RunResult]) -> list[str]:
    return run_names(results)


def ready_section(results: Sequence[RunResult]) -> list[str]:
    stories = [ready_story(r, n) for r, n in zip(results, _modes(results), strict=True)]
    if not ready_differs(stories):
        return [
            '<h2 id="ready">How a cluster becomes Ready</h2>',
            "<p>The same in every mode: " + esc(stories[0].text()) + ".</p>",
        ]
    items = "".join(f"<li><b>{esc(s.mode)}</b>: {esc(s.text())}.</li>" for s in stories)
    reasons = sorted({r for s in stories for _, r, _, _ in s.states if r in READY_MEANING})
    meaning = "".join(f"<li><b>{esc(r)}</b>: {esc(READY_MEANING[r])}.</li>" for r in reasons)
    return [
        '<h2 id="ready">How a cluster becomes Ready: the modes differ</h2>',
        f'<p class="diff">The modes do not make clusters Ready the same way, so a difference '
        f"in placements can come from Ready alone (a cluster that is not Ready takes no new "
        f"replicas).</p><ul>{items}</ul><p>What the reasons mean:</p><ul>{meaning}</ul>",
    ]


def summary_section(results: Sequence[RunResult]) -> list[str]:
    modes = _modes(results)
    rows = []
    for m in metrics(results):
        mark = '<span class="diff">differs</span>' if m.is_different else "same"
        rows.append((esc(m.name), *(esc(v) for v in m.values), mark, esc(m.note)))
    raw = tuple(range(len(modes) + 3))
    return [
        '<h2 id="summary">Summary</h2>',
        table(["", *modes, "", "what it counts"], rows, raw=raw).replace(
            "<table>", '<table class="summary">', 1
        ),
    ]


def checks_section(results: Sequence[RunResult]) -> list[str]:
    modes = _modes(results)
    outcomes = check_outcomes(results)
    differ = [o for o in outcomes if o.is_different]
    same = [o for o in outcomes if not o.is_different]
    checks = results[0].checks_run
    out = [
        '<h2 id="checks">Checks</h2>',
        f"<p>The scenario has {checks} check{'' if checks == 1 else 's'}, written for "
        f"{esc(results[0].scenario.controller.accounting.value)} accounting. "
        f"{len(differ)} differ between the modes; {len(same)} fail the same way in every "
        "mode; the rest hold in every mode.</p>",
    ]

    out += [f"<p>{esc(s)}</p>" for s in expected_misses(results, modes)]

    def cell(failures: tuple[str, ...]) -> str:
        # The first failure of a check; the rest folded (a check of a whole fleet can miss
        # many expectations at once, and each is the same story).
        if not failures:
            return '<span class="ok">holds</span>'
        if len(failures) == 1:
            return esc(failures[0])
        rest = "<br/>".join(esc(f) for f in failures[1:])
        return (
            f"{esc(failures[0])}<details><summary>{len(failures) - 1} more</summary>"
            f"{rest}</details>"
        )

    if differ:
        out.append('<h3 id="checks-differ">Checks that differ between the modes</h3>')
        out.append(
            table(
                ["check", "at", *modes],
                [
                    (esc(o.path), esc(format_duration(o.at_s)), *(cell(f) for f in o.per_run))
                    for o in differ
                ],
                raw=tuple(range(2 + len(modes))),
            )
        )
    if same:
        out.append('<h3 id="checks-fail">Checks that fail in every mode</h3>')
        out.append(
            table(
                ["check", "at", "failure"],
                [
                    (
                        esc(o.path),
                        esc(format_duration(o.at_s)),
                        f'<span class="bad">{cell(o.per_run[0])}</span>',
                    )
                    for o in same
                ],
                raw=(0, 1, 2),
            )
        )
    return out


def charts_section(
    results: Sequence[RunResult],
    events: Sequence[Sequence[Event]],
    markers: Sequence[Sequence[Marker]],
) -> list[str]:
    gpu_top = max(gpu_axis_top(r) for r in results)
    replica_top = max(
        [1.0]
        + [v for r in results for line in replica_lines(r) for v in line.values if v is not None]
    )
    out = [
        '<h2 id="charts">Over time, side by side</h2>',
        "<p>Each pair shares its axes, its flags' numbers (a number is one instant in both "
        "panels and in each run's event timeline below) and its lanes' order.</p>",
        kinds_legend([e for run in events for e in run]),
    ]
    order = lane_order(results)
    runs = list(zip(results, markers, run_names(results), strict=True))
    pairs = [
        [gpu_chart(r, m, width=HALF, y_max=gpu_top, label=f"{n}: ") for r, m, n in runs],
        [replica_chart(r, m, width=HALF, y_max=replica_top, label=f"{n}: ") for r, m, n in runs],
        [deployment_lanes(r, m, width=HALF, label=f"{n}: ", order=order) for r, m, n in runs],
        [cluster_lanes(r, m, width=HALF, label=f"{n}: ") for r, m, n in runs],
    ]
    for pair in pairs:
        out.append('<div class="pair">' + "".join(pair) + "</div>")
    return out


def comparison(results: Sequence[RunResult]) -> list[str]:
    """The body of the comparison page."""
    modes = _modes(results)
    out = header(results[0], " (" + " vs ".join(modes) + ")")
    out.insert(1, headline_box(comparison_headline(results)))
    out += ready_section(results)
    out += summary_section(results)
    out += checks_section(results)
    events = [run_events(r, is_compared=True) for r in results]
    markers = shared_markers(events)
    out += charts_section(results, events, markers)
    out.append('<h2 id="runs">Each run</h2>')
    for r, e, m, name in zip(results, events, markers, modes, strict=True):
        out.append(f"<details><summary>{esc(name)}: event timeline and tables")
        out.append("</summary>")
        out.append(verdict(r, is_compared=True))
        out.append(event_table(e, m))
        out += histograms(r)
        out += tables(r)
        out.append("</details>")
    return out
