"""The HTML report: well-formed, with its sections, event flags and legends; the event timeline,
the samples behind it, the comparison's numbers, and the charts' promises."""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from gpufleet.cli.simulate import summary_sentence
from gpufleet.sim.report.charts import Line, histogram_chart, line_chart, nice_max
from gpufleet.sim.report.events import (
    MAX_MARKERS,
    Event,
    EventKind,
    marker_instants,
    run_events,
    shared_markers,
    tier,
)
from gpufleet.sim.report.headline import comparison_headline, run_headline
from gpufleet.sim.report.html import render_html
from gpufleet.sim.run.compare import check_outcomes, metrics, ready_differs, ready_story
from gpufleet.sim.run.runner import RunResult, Series, run_scenario
from gpufleet.sim.run.samples import expected_pods
from gpufleet.sim.scenario.load import builtin_names, load_scenario


@functools.cache
def _run(name: str, mode: str | None = None) -> RunResult:
    return run_scenario(load_scenario(name), mode)


def _parse(page: str) -> ET.Element:
    """The page without its doctype, as XML: it must be well-formed."""
    assert page.startswith("<!doctype html>\n")
    return ET.fromstring(page.split("\n", 1)[1])


def _ids(root: ET.Element) -> set[str]:
    return {e.attrib["id"] for e in root.iter() if "id" in e.attrib}


def _text(e: ET.Element) -> str:
    return "".join(e.itertext())


def _svg(tag: str) -> str:
    return "{http://www.w3.org/2000/svg}" + tag


def test_one_run_has_its_sections_flags_and_legends() -> None:
    root = _parse(render_html([_run("stale-expired")]))
    assert {"events", "charts", "end"} <= _ids(root)
    # The event table: the agent crash is there, numbered with a flag.
    rows = [[_text(td) for td in tr.iter("td")] for tr in root.iter("tr")]
    crash = [r for r in rows if r[3:] == ["killAgent east"]]
    assert crash and crash[0][0] == "2" and crash[0][2] == "agent"
    # The charts carry the same flags (a group with class marker and its number).
    flags = [
        _text(g)
        for g in root.iter(_svg("g"))
        if g.attrib.get("class") == "marker" and "killAgent east" in _text(g)
    ]
    assert flags and all("2" in f for f in flags)
    # Axis titles, a legend that says what dashed means, the freshness lanes.
    texts = [_text(t) for t in root.iter(_svg("text"))]
    assert "simulated time" in texts and "GPUs" in texts and "free GPUs" in texts
    legends = [_text(d) for d in root.iter("div") if d.attrib.get("class") == "legend"]
    assert any("dashed: GPUs published (capacity)" in text for text in legends)
    lane_titles = [_text(r) for r in root.iter(_svg("rect")) if r.attrib.get("class") == "lane"]
    assert any(t.startswith("east: agent report (hub's view): Expired from") for t in lane_titles)
    assert any(t.startswith("east: agent: down from 1m02s") for t in lane_titles)
    captions = [_text(c) for c in root.iter("figcaption")]
    assert "east/l4: free GPUs, agent's report vs ground truth" in captions
    assert "east/l4: 1 node with 3 free" in captions


def test_comparison_has_one_summary_shared_axes_and_differences() -> None:
    results = [_run("quickstart", "whole-node"), _run("quickstart", "free-gpu")]
    root = _parse(render_html(results))
    assert {"ready", "summary", "checks", "checks-differ", "charts", "runs"} <= _ids(root)
    assert "checks-fail" not in _ids(root)  # nothing fails the same way in both modes
    # Charts side by side: in pairs, the two GPU charts with the same y axis.
    pairs = [d for d in root.iter("div") if d.attrib.get("class") == "pair"]
    assert len(pairs) == 4
    first = [fig for fig in pairs[0] if fig.tag == "figure"]
    ticks = [
        sorted(
            _text(t)
            for t in fig.iter(_svg("text"))
            if _text(t).isdigit() and t.attrib.get("class") != "flag"  # event numbers differ
        )
        for fig in first
    ]
    assert len(first) == 2 and ticks[0] == ticks[1]
    # The checks that differ are not shown as failures, not even as the flags' colour.
    assert not [s for s in root.iter("span") if s.attrib.get("class") == "bad"]
    legends = " ".join(_text(d) for d in root.iter("div") if d.attrib.get("class") == "legend")
    assert "check differs" in legends and "check failed" not in legends


def test_every_builtin_renders_well_formed() -> None:
    for name in builtin_names():
        root = _parse(render_html([_run(name)]))
        assert "events" in _ids(root), name


def test_event_timeline_classifies_every_line_of_the_log() -> None:
    result = _run("eks-agent-down")
    events = run_events(result)
    kinds = {e.kind for e in events}
    assert EventKind.OTHER not in kinds
    assert {EventKind.AGENT, EventKind.PLACED, EventKind.REFUSED} <= kinds
    assert len(events) == len(result.log) + len(result.failures)  # no node came or went
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)


def test_a_drop_and_a_placement_at_one_instant_are_a_replacement() -> None:
    @dataclass
    class Fake:
        log: list[tuple[float, str]]
        failures: list[object]
        scenario: object
        series: Series

    fake = Fake(
        [
            (5.0, "dropped ns/a from east (Tainted)"),
            (5.0, "placed ns/b on west"),
            (5.0, "placed ns/a on west"),
        ],
        [],
        load_scenario("quickstart"),
        Series(),
    )
    events = run_events(fake)  # type: ignore[arg-type]
    assert [(e.kind, e.text) for e in events] == [
        (EventKind.REPLACED, "re-placed ns/a from east to west (Tainted)"),
        (EventKind.PLACED, "placed ns/b on west"),
    ]


def test_busy_runs_flag_the_causes_first_and_spread_the_rest() -> None:
    events = run_events(_run("stale-expired"))
    markers = marker_instants(events)
    assert [m.number for m in markers] == list(range(1, len(markers) + 1))
    assert len({e.at_s for e in events}) == len(markers) <= MAX_MARKERS
    placements = [
        Event(1000.0 + i, EventKind.PLACED, f"placed x/y on z{i}") for i in range(3 * MAX_MARKERS)
    ]
    applies = [Event(2000.0 + i, EventKind.ACTION, "apply x/y", "x/y") for i in range(100)]
    busy = marker_instants([*events, *placements, *applies])
    assert len(busy) == MAX_MARKERS
    at = [m.at_s for m in busy]
    assert {e.at_s for e in events if e.kind is EventKind.AGENT} <= set(at)
    # Deployment actions outrank placements, and the ones that fit are spread over the run.
    assert not [t for t in at if 1000 <= t < 2000]
    applied = [t for t in at if t >= 2000]
    assert applied[0] < 2005 and applied[-1] > 2080
    assert tier(Event(0, EventKind.ACTION, "cordon a/b-0", "", "a")) < tier(applies[0])


def test_a_pool_growing_is_an_event() -> None:
    events = [e for e in run_events(_run("autoscale")) if e.kind is EventKind.NODES]
    assert [e.text for e in events] == [
        "aws/a10g grew from 0 to 1 node",
        "aws/l4 grew from 1 to 3 nodes",
    ]
    assert all(e.at_s > 60 for e in events)  # a minute after the placements at 0s


def test_samples_are_aligned_and_show_the_hub_lagging() -> None:
    result = _run("eks-validation")
    s, samples = result.series, result.samples
    assert samples.times_s == s.times_s
    key = ("eks", "t4")
    reported = samples.reported_free[key]
    assert len(reported) == len(s.times_s)
    assert reported[0] is None  # nothing on the hub before the first report arrives
    assert reported[-1] == s.pool_free[key][-1]
    lagging = [i for i, v in enumerate(reported) if v is not None and v != s.pool_free[key][i]]
    assert lagging  # the agent's report trails the ground truth at times


def test_replicas_running_counts_whole_replicas() -> None:
    result = _run("gang")
    running = result.samples.replicas_running["ml/llama-405b"][-1]
    assert running == 1 and result.series.running["ml/llama-405b"][-1] == 2  # two pods
    assert expected_pods({"engines": [{"copies": 2, "members": [{"role": "Standalone"}]}]}) == 2
    leader_worker = {
        "engines": [{"members": [{"role": "Leader"}, {"role": "Worker", "worker": {"nodes": 3}}]}]
    }
    assert expected_pods(leader_worker) == 4


def test_the_fingerprinted_series_is_unchanged_by_the_samples() -> None:
    assert set(Series.__slots__) == {  # type: ignore[attr-defined]
        "times_s",
        "pool_allocated",
        "pool_free",
        "pool_nodes",
        "desired",
        "placed",
        "running",
        "pending",
    }


def test_comparison_numbers_and_ready() -> None:
    results = [_run("quickstart", "whole-node"), _run("quickstart", "free-gpu")]
    rows = {m.name: m for m in metrics(results)}
    assert rows["replicas placed / wanted (end)"].values == ("1/4", "4/4")
    assert rows["refusals"].values == ("4", "1")
    assert rows["time to place"].values[0].endswith("4 never fully placed")
    outcomes = check_outcomes(results)
    assert [o.path for o in outcomes] == ["checks[0]", "checks[1]", "checks[2]", "checks[4]"]
    assert all(o.is_different and o.per_run[1] == () for o in outcomes)
    stories = [ready_story(r) for r in results]
    assert ready_differs(stories)
    assert stories[0].states == (("True", "PlatformReady", 0.0, ("solo",)),)
    same = [_run("stale-expired"), _run("stale-expired")]
    assert not ready_differs([ready_story(r) for r in same])
    assert not any(m.is_different for m in metrics(same))


@pytest.mark.parametrize("value", [0.5, 1, 3, 4, 7, 40, 1000, 12345])
def test_axis_top_holds_the_value_with_whole_ticks(value: float) -> None:
    top, step = nice_max(value)
    assert top >= value and step >= 1 and top / step <= 7 and float(top / step).is_integer()


def test_lines_are_drawn_at_their_true_values() -> None:
    # Equal lines are told apart by width and dash, never moved off their value: a capacity of
    # 4 sits on the 4 tick, and 0 on the frame's floor.
    svg = line_chart(
        [0.0, 10.0],
        [Line("a", [4, 0], "#000", width=4.0), Line("b", [4, 0], "#111", True, 1.5)],
        y_title="GPUs",
    )
    root = ET.fromstring(svg)
    ticks = {
        _text(t): float(t.attrib["y"]) - 3.5
        for t in root.iter(_svg("text"))
        if t.attrib.get("text-anchor") == "end"
    }
    paths = [p for p in root.iter(_svg("path"))]
    assert len(paths) == 2 and paths[0].attrib["d"] == paths[1].attrib["d"]
    ys = [float(v) for v in re.findall(r"[,V](-?[\d.]+)", paths[0].attrib["d"])]
    assert ys == pytest.approx([ticks["4"], ticks["0"]], abs=0.05)
    assert [p.attrib["stroke-width"] for p in paths] == ["4.0", "1.5"]


def test_no_text_under_12_px() -> None:
    page = render_html([_run("stale-expired")])
    sizes = [float(px) for px in re.findall(r"font-size:([\d.]+)px", page)]
    assert sizes and min(sizes) >= 12


def test_a_single_run_opens_with_what_happened_and_why() -> None:
    lines = run_headline(_run("quickstart"))
    assert lines[0].startswith("4 of 4 wanted replicas placed on 1 cluster and 4 running")
    assert any(
        line.startswith("ml-team/qwen-2-7b waited: InsufficientGPU: 1 pod requests 1 device")
        and "best node has 0 free" in line
        and line.endswith("it was placed after 1m15s.")
        for line in lines
    )
    assert lines[-1] == "All 5 checks hold."
    root = _parse(render_html([_run("quickstart")]))
    first_div = next(d for d in root.iter("div") if "headline" in d.attrib.get("class", ""))
    assert "ml-team/qwen-2-7b waited" in _text(first_div)


def test_a_comparison_says_why_the_runs_end_apart() -> None:
    results = [_run("quickstart", "whole-node"), _run("quickstart", "free-gpu")]
    lines = comparison_headline(results)
    assert lines[0].startswith("whole-node: 1 of 4 wanted replicas placed")
    assert lines[1].startswith("free-gpu: 4 of 4 wanted replicas placed")
    why = [line for line in lines if line.startswith("Why:")]
    assert why == [
        "Why: under whole-node, ml-team/llama-3-8b, ml-team/mistral-7b and ml-team/qwen-2-7b "
        "are short at the end (0 of 1 placed each): InsufficientNodes: needs 1 whole nodes; "
        "0 of 1 free (cluster solo, pool l4)."
    ]
    # The checks whole-node misses are written for free-gpu: one sentence with counts.
    assert any(
        line.startswith("whole-node misses 4 of 5 checks written for free-gpu accounting")
        for line in lines
    )


def test_compared_panels_share_flag_numbers_and_lane_order() -> None:
    results = [_run("quickstart", "whole-node"), _run("quickstart", "free-gpu")]
    events = [run_events(r, is_compared=True) for r in results]
    markers = shared_markers(events)
    numbers = [{m.at_s: m.number for m in run} for run in markers]
    common = set(numbers[0]) & set(numbers[1])
    assert common and all(numbers[0][t] == numbers[1][t] for t in common)
    root = _parse(render_html(results))
    pairs = [d for d in root.iter("div") if d.attrib.get("class") == "pair"]
    lanes = [
        [_text(t) for t in fig.iter(_svg("text")) if _text(t).startswith("ml-team/")]
        for fig in pairs[2]
        if fig.tag == "figure"
    ]
    assert len(lanes) == 2 and lanes[0] == lanes[1]


def test_histogram_bars_say_nodes_in_words() -> None:
    svg = ET.fromstring(histogram_chart({0: 1, 2: 3}, {4: 1}, 4))
    titles = [_text(t) for t in svg.iter(_svg("title"))]
    assert "truth: 1 node with 0 free" in titles
    assert "truth: 3 nodes with 2 free" in titles
    assert "agent's report: 1 node with 4 free" in titles


@pytest.mark.parametrize(
    ("description", "sentence"),
    [
        ("One thing. Then another.", "One thing."),
        ("Four 4x T4 nodes (4x NVIDIA L4). Five more", "Four 4x T4 nodes (4x NVIDIA L4)."),
        ("No stop", "No stop."),
        ("Version 3.11 is fine. Next", "Version 3.11 is fine."),
    ],
)
def test_summary_sentence(description: str, sentence: str) -> None:
    assert summary_sentence(description) == sentence
