"""A self-contained HTML report of scenario runs (`gpufleet simulate --report PATH`): tables and
inline SVG charts, no scripts, no network (everything is in the one file, and the page is
well-formed XML, so a test can parse it with the standard library).

- One run: report_run.py (event timeline, charts over time with the events flagged, the
  agent's view next to the ground truth, freshness and Ready lanes, final histograms, tables).
- Several runs of one scenario (`--compare`): report_compare.py (how each mode makes a
  cluster Ready, one summary table, the checks that differ, the charts side by side on shared
  axes).

Charts are in charts.py, the event timeline in events.py, the comparison's numbers in
compare.py, and the samples the charts need beyond `Series` in samples.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.sim.report.compare import comparison
from gpufleet.sim.report.single import page, single
from gpufleet.sim.run.runner import RunResult


def render_html(results: Sequence[RunResult]) -> str:
    """One HTML page: one run, or a comparison of runs of one scenario."""
    name = results[0].scenario.name
    if len(results) == 1:
        return page(f"gpufleet simulate: {name}", single(results[0]))
    return page(f"gpufleet simulate --compare: {name}", comparison(results))
