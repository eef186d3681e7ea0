"""`gpufleet simulate [SCENARIO]`: run a scenario on the simulated fleet with the real agent and
controller, and say what happened.

With no argument it runs the built-in `quickstart`. `SCENARIO` is a path to a scenario file or
the name of a built-in (`--list` lists them). Prints a summary: per deployment desired, placed
and running; per pool GPUs allocated and free and the final histogram; every refusal with its
reason and numbers; then the checks. `--output json` prints the whole result (with the metrics
over time and the hub's view over time, `samples`) as JSON instead; `--report PATH` writes a
self-contained HTML report with an event timeline and charts. `--compare whole-node,free-gpu`
runs the scenario under both accounting modes and compares them: one summary table, how each
mode makes a cluster Ready when they differ, and the checks whose outcome differs between the
modes (a difference, not a failure: checks are reported, not enforced, in that mode).
`--compare steering` (or steering modes, `--compare Required,Off`) runs it with every cluster's
steering set to each mode instead (`Preferred,Off` for `steering`), the same way.
`--list` names the built-in scenarios with one sentence each (`-o json`: name, summary and
the whole description).

Exit codes: 0 when every check passed, 1 when a check failed (each failure is printed: what,
expected, got, at what time), 2 when the scenario is invalid (every problem is printed).
A progress bar over simulated time is shown on a terminal only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.durations import duration_parser
from gpufleet.cli.paths import writable
from gpufleet.cli.render import Printer, Table, camel_keys, plural
from gpufleet.core.model import Steering
from gpufleet.sim.report.html import render_html
from gpufleet.sim.run.compare import (
    READY_MEANING,
    check_outcomes,
    metrics,
    ready_differs,
    ready_story,
    run_names,
    with_steering,
)
from gpufleet.sim.run.runner import RunResult, run_scenario
from gpufleet.sim.scenario.load import (
    Accounting,
    Scenario,
    ScenarioInvalid,
    builtin_names,
    format_duration,
    load_scenario,
)
from gpufleet.sim.scenario.model import MAX_DURATION_S

DEFAULT_SCENARIO = "quickstart"


def _histogram_text(histogram: dict[int, int] | None) -> str:
    if histogram is None:
        return "-"
    parts = [f"{n} node{'s' if n != 1 else ''} with {k} free" for k, n in sorted(histogram.items())]
    return ", ".join(parts) or "no nodes"


def _table(headers: tuple[str, ...], rows: Iterable[Iterable[str]]) -> Table:
    return Table(headers, tuple(tuple(row) for row in rows))


def _numbers(numbers: dict[str, int | str]) -> str:
    return " ".join(f"{k}={v}" for k, v in numbers.items())


@contextmanager
def _progress(
    console: Console, scenario: Scenario, label: str
) -> Iterator[Callable[[float], None] | None]:
    if not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[at]} / " + format_duration(scenario.end_s)),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=scenario.end_s, at="0s")

        def advance(at_s: float) -> None:
            bar.update(task, completed=at_s, at=format_duration(at_s))

        yield advance


def _run(console: Console, scenario: Scenario, mode: Accounting | None) -> RunResult:
    label = f"{scenario.name} ({(mode or scenario.controller.accounting).value})"
    with _progress(console, scenario, label) as advance:
        return run_scenario(scenario, mode, progress=advance)


def print_summary(printer: Printer, result: RunResult) -> None:
    s = result.scenario
    printer.line(
        f"{s.name}: {format_duration(s.end_s)} simulated in {result.wall_s:.1f}s "
        f"({result.accounting.value} accounting, seed {s.seed})",
        style="bold",
    )
    if s.description:
        printer.line(s.description)
    printer.line()
    printer.line("What happened", style="bold")
    _print_timeline(printer, result)
    printer.line()
    printer.line("Deployments", style="bold")
    printer.table(
        _table(
            ("DEPLOYMENT", "DESIRED", "PLACED", "RUNNING", "CLUSTERS", "CONDITION"),
            [
                (
                    d.name,
                    str(d.desired),
                    str(d.placed),
                    str(d.running),
                    ", ".join(f"{c}: {n}" for c, n in sorted(d.clusters.items())) or "-",
                    d.condition_reason or "-",
                )
                for d in result.deployments
            ],
        ),
        indent=2,
    )
    printer.line()
    printer.line("Pools (ground truth; histogram: nodes by free GPUs)", style="bold")
    printer.table(
        _table(
            ("POOL", "NODES", "GPUS", "USED", "FREE", "HISTOGRAM", "AGENT REPORTED"),
            [
                (
                    p.key,
                    str(p.nodes),
                    str(p.gpus_total),
                    str(p.gpus_allocated),
                    str(p.gpus_free),
                    _histogram_text(dict(p.histogram)),
                    _histogram_text(
                        None if p.observed_histogram is None else dict(p.observed_histogram)
                    ),
                )
                for p in result.pools
            ],
        ),
        indent=2,
    )
    printer.line()
    if result.refusals:
        by_reason = Counter(r.reason for r in result.refusals)
        counts = ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items()))
        printer.line(f"Refusals: {len(result.refusals)} ({counts}; each under What happened)")
    else:
        printer.line("No refusals.", style="bold")
    printer.line()
    if result.controller_errors:
        printer.line(
            f"The controller reported {len(result.controller_errors)} step errors "
            "(stats.controllerErrors in --output json); first: "
            f"{result.controller_errors[0]}",
            style="yellow",
        )
    _print_checks(printer, result)


#: Lines of "What happened" shown besides refusals, and refusals shown (each with its reason).
MAX_EVENTS, MAX_REFUSALS = 30, 50


def _print_timeline(printer: Printer, result: RunResult) -> None:
    """The run's log in time order, each refusal once, with its reason and numbers under it
    (the simulator logs a refusal and records it in `result.refusals` together, in order)."""
    refusals = iter(result.refusals)
    events = shown_refusals = 0
    for at_s, line in result.log:
        is_refusal = line.startswith("refused ")
        refusal = next(refusals, None) if is_refusal else None
        if (is_refusal and shown_refusals >= MAX_REFUSALS) or (
            not is_refusal and events >= MAX_EVENTS
        ):
            continue
        printer.line(f"{format_duration(at_s):>8}  {line}", indent=2)
        if refusal is None:
            events += 1
            continue
        shown_refusals += 1
        if refusal.detail:
            where = f" ({refusal.where})" if refusal.where else ""
            printer.line(f"{refusal.detail}{where}", indent=12)
        if refusal.numbers:
            printer.line(_numbers(dict(refusal.numbers)), style="dim", indent=12)
    hidden = len(result.log) - events - shown_refusals
    if hidden > 0:
        printer.line(f"... {hidden} more (see --output json)", indent=2)


def _print_checks(printer: Printer, result: RunResult) -> None:
    if result.is_passed:
        printer.line(f"✓ {result.checks_run} checks passed", style="green")
        return
    printer.line(
        f"✗ {plural(len(result.failures), 'check failure')} ({result.checks_run} checks)",
        style="bold red",
    )
    for failure in result.failures:
        printer.line(
            f"at {format_duration(failure.at_s)} ({failure.path}) {failure.what}", indent=2
        )
        printer.line(f"expected: {failure.expected}", indent=6)
        printer.line(f"got:      {failure.got}", indent=6)


def print_comparison(printer: Printer, results: list[RunResult]) -> None:
    names = run_names(results)
    s = results[0].scenario
    printer.line(
        f"{s.name}: {format_duration(s.end_s)} simulated, compared: {' vs '.join(names)}",
        style="bold",
    )
    printer.line()
    printer.table(
        _table(
            ("", *(n.upper() for n in names), ""),
            [(m.name, *m.values, "differs" if m.is_different else "") for m in metrics(results)],
        ),
        indent=2,
    )
    printer.line()
    _print_ready(printer, results)
    _print_deployments(printer, results)
    _print_compared_checks(printer, results)


def _print_ready(printer: Printer, results: list[RunResult]) -> None:
    stories = [ready_story(r, n) for r, n in zip(results, run_names(results), strict=True)]
    if not ready_differs(stories):
        return
    printer.line("The modes make clusters Ready differently", style="bold")
    for story in stories:
        printer.line(f"{story.mode}: {story.text()}", indent=2)
    for reason in sorted({r for st in stories for _, r, _, _ in st.states if r in READY_MEANING}):
        printer.line(f"{reason}: {READY_MEANING[reason]}", style="dim", indent=2)
    printer.line()


def _print_deployments(printer: Printer, results: list[RunResult]) -> None:
    names = run_names(results)
    deployments = sorted({d.name for r in results for d in r.deployments})
    placed = [{d.name: d for d in r.deployments} for r in results]
    rows = []
    for dep in deployments:
        cells = [dep]
        for by_name in placed:
            d = by_name.get(dep)
            cells.append(
                "-"
                if d is None
                else f"{d.placed}/{d.desired} ({d.running} pod{'' if d.running == 1 else 's'} running)"
            )
        rows.append(tuple(cells))
    printer.line("Placed replicas at the end (placed/wanted)", style="bold")
    printer.table(_table(("DEPLOYMENT", *(n.upper() for n in names)), rows), indent=2)
    printer.line()
    reasons = sorted({x.reason for r in results for x in r.refusals})
    if reasons:
        printer.line("Refusals by reason", style="bold")
        rows = [
            (reason, *(str(sum(1 for x in r.refusals if x.reason == reason)) for r in results))
            for reason in reasons
        ]
        printer.table(_table(("REASON", *(n.upper() for n in names)), rows), indent=2)
        printer.line()


def _print_compared_checks(printer: Printer, results: list[RunResult]) -> None:
    outcomes = check_outcomes(results)
    differ = [o for o in outcomes if o.is_different]
    same = [o for o in outcomes if not o.is_different]
    written_for = results[0].scenario.controller.accounting.value
    checks = results[0].checks_run
    printer.line(
        f"Checks ({checks}, written for {written_for}): {len(differ)} differ between the modes, "
        f"{len(same)} fail in every mode",
        style="bold",
    )
    for outcome in differ:
        printer.line(f"{outcome.path} at {format_duration(outcome.at_s)} differs:", indent=2)
        for name, failures in zip(run_names(results), outcome.per_run, strict=True):
            first = failures[0] if failures else "holds"
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            printer.line(f"{name}: {first}{more}", indent=6)
    for outcome in same:
        printer.line(
            f"{outcome.path} at {format_duration(outcome.at_s)} fails in every mode: "
            f"{outcome.per_run[0][0]}",
            style="red",
            indent=2,
        )


class SimulateOutput(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


#: The built-in scenarios' folder: completion lists it without loading any scenario.
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "sim" / "scenario" / "builtin"


def complete_scenario(incomplete: str) -> list[str]:
    """Shell completion of SCENARIO: the built-in names starting with what was typed."""
    names = sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))
    return [n for n in names if n.startswith(incomplete)]


def with_overrides(scenario: Scenario, seed: int | None, end_s: float | None) -> Scenario:
    """The scenario with `--seed` and `--end` applied. A shorter end drops the timeline
    actions and the checks it no longer reaches (a check runs only inside the run)."""
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    if end_s is not None:
        scenario = dataclasses.replace(
            scenario,
            end_s=end_s,
            timeline=tuple(a for a in scenario.timeline if a.at_s <= end_s),
            checks=tuple(c for c in scenario.checks if c.at_s <= end_s and c.until_s <= end_s),
        )
    return scenario


def _json(result: RunResult) -> dict[str, object]:
    body = {**result.to_json(), "samples": result.samples.to_json()}
    refusals = body.get("refusals")
    if isinstance(refusals, list):  # the core's numbers, with camelCase keys as elsewhere
        body["refusals"] = [
            {**r, "numbers": camel_keys(r.get("numbers") or {})} if isinstance(r, dict) else r
            for r in refusals
        ]
    return body


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def summary_sentence(description: str) -> str:
    """The first sentence of a scenario's description (the `--list` line)."""
    first = _SENTENCE_END.split(" ".join(description.split()), maxsplit=1)[0]
    return first if first.endswith((".", "!", "?")) or not first else first + "."


def _print_list(console: Console, printer: Printer, output: SimulateOutput) -> None:
    rows = []
    for name in builtin_names():
        description = " ".join(load_scenario(name).description.split())
        rows.append(
            {"name": name, "summary": summary_sentence(description), "description": description}
        )
    if output is SimulateOutput.JSON:
        console.print_json(json.dumps({"scenarios": rows}))
        return
    if output is SimulateOutput.YAML:
        typer.echo(yaml.safe_dump({"scenarios": rows}, sort_keys=False), nl=False)
        return
    width = max(len(r["name"]) for r in rows) + 2
    for row in rows:
        printer.line(f"{row['name']:<{width}}{row['summary']}")


def _parse_steering(value: str) -> list[Steering] | None:
    """`steering` (Preferred,Off) or a list of steering modes; None: not a steering comparison."""
    parts = [p.strip() for p in value.split(",")]
    if parts == ["steering"]:
        return [Steering.PREFERRED, Steering.OFF]
    choices = {s.value for s in Steering}
    if not all(p in choices for p in parts):
        return None
    if len(parts) < 2:
        raise typer.BadParameter(
            "give two steering modes, e.g. Preferred,Off", param_hint="--compare"
        )
    return [Steering(p) for p in parts]


def _parse_compare(value: str) -> list[Accounting]:
    modes: list[Accounting] = []
    for part in value.split(","):
        part = part.strip()
        try:
            modes.append(Accounting(part))
        except ValueError:
            choices = ", ".join(a.value for a in Accounting)
            raise typer.BadParameter(
                f"{part!r} is not an accounting mode ({choices}); or compare steering: "
                "'steering' or steering modes (Preferred, Required, Gated, Off)",
                param_hint="--compare",
            ) from None
    if len(modes) < 2:
        raise typer.BadParameter("give two modes, e.g. whole-node,free-gpu", param_hint="--compare")
    return modes


def command(
    scenario: Annotated[
        str | None,
        typer.Argument(
            metavar="[SCENARIO]",
            help="A scenario file, or the name of a built-in (default: quickstart).",
            autocompletion=complete_scenario,
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report", callback=writable, help="Write a self-contained HTML report here."
        ),
    ] = None,
    output: Annotated[
        SimulateOutput, typer.Option("--output", "-o", help="table, json or yaml.")
    ] = SimulateOutput.TABLE,
    seed: Annotated[
        int | None,
        typer.Option("--seed", min=0, help="Run with this seed instead of the scenario's."),
    ] = None,
    end: Annotated[
        float | None,
        typer.Option(
            "--end",
            parser=duration_parser(1, MAX_DURATION_S),
            metavar="DURATION",
            help="Stop at this time instead of the scenario's end (like 10m; checks after it "
            "are dropped).",
        ),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="MODE,MODE",
            help="Run under both accounting modes (whole-node,free-gpu), or with steering on "
            "and off ('steering', or steering modes: Preferred,Required,Gated,Off).",
        ),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the built-in scenarios and exit.")
    ] = False,
) -> None:
    """Run a scenario on the simulated fleet (real agent and controller) and report it."""
    console = Console(highlight=False, soft_wrap=True)
    errors = Console(highlight=False, soft_wrap=True, stderr=True)
    # The controller logs its step errors; the run collects them (stats.controllerErrors).
    logging.getLogger("gpufleet").addHandler(logging.NullHandler())
    printer = Printer(console)
    if list_:
        _print_list(console, printer, output)
        return
    steerings = _parse_steering(compare) if compare else None
    modes = _parse_compare(compare) if compare and steerings is None else None
    try:
        loaded = with_overrides(load_scenario(scenario or DEFAULT_SCENARIO), seed, end)
    except ScenarioInvalid as error:
        errors.print(f"✗ {error}", markup=False)
        raise typer.Exit(code=2) from None
    progress_console = errors
    if steerings is not None:
        results = [_run(progress_console, with_steering(loaded, s), None) for s in steerings]
    elif modes is None:
        results = [_run(progress_console, loaded, None)]
    else:
        results = [_run(progress_console, loaded, m) for m in modes]
    is_compared = modes is not None or steerings is not None
    if report is not None:
        report.write_text(render_html(results), encoding="utf-8")
    if output is not SimulateOutput.TABLE:
        body = _json(results[0]) if not is_compared else {"runs": [_json(r) for r in results]}
        if output is SimulateOutput.JSON:
            console.print_json(json.dumps(body))
        else:
            typer.echo(yaml.safe_dump(json.loads(json.dumps(body)), sort_keys=False), nl=False)
    elif not is_compared:
        print_summary(printer, results[0])
    else:
        print_comparison(printer, results)
    if report is not None and output is SimulateOutput.TABLE:
        printer.line(f"Report: {report}")
    if not is_compared and not results[0].is_passed:
        raise typer.Exit(code=1)
