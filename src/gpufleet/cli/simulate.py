"""`gpufleet simulate [SCENARIO]`: run a scenario on the simulated fleet with the real agent and
controller, and say what happened.

With no argument it runs the built-in `quickstart`. `SCENARIO` is a path to a scenario file or
the name of a built-in (`--list` lists them). Prints a summary: per deployment desired, placed
and running; per pool GPUs allocated and free and the final histogram; every refusal with its
reason and numbers; then the checks. `--output json` prints the whole result (with the metrics
over time) as JSON instead; `--report PATH` writes a self-contained HTML report with charts.
`--compare whole-node,free-gpu` runs the scenario under both accounting modes and prints the
differences side by side (checks are reported, not enforced, in that mode).

Exit codes: 0 when every check passed, 1 when a check failed (each failure is printed: what,
expected, got, at what time), 2 when the scenario is invalid (every problem is printed).
A progress bar over simulated time is shown on a terminal only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.paths import writable
from gpufleet.cli.render import OutputFormat, Printer, Table
from gpufleet.sim.report import render_html
from gpufleet.sim.run import RunResult, run_scenario
from gpufleet.sim.scenario import (
    Accounting,
    Scenario,
    ScenarioInvalid,
    builtin_names,
    format_duration,
    load_scenario,
)

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
    for at_s, line in result.log[:30]:
        printer.line(f"{format_duration(at_s):>8}  {line}", indent=2)
    if len(result.log) > 30:
        printer.line(f"... {len(result.log) - 30} more (see --output json)", indent=2)
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
        printer.line(f"Refusals ({len(result.refusals)})", style="bold")
        for r in result.refusals[:50]:
            printer.line(
                f"{format_duration(r.at_s):>8}  {r.deployment}: placed {r.placed} of "
                f"{r.desired}, {r.reason}",
                indent=2,
            )
            if r.detail:
                where = f" ({r.where})" if r.where else ""
                printer.line(f"{r.detail}{where}", indent=12)
            if r.numbers:
                printer.line(_numbers(dict(r.numbers)), style="dim", indent=12)
        if len(result.refusals) > 50:
            printer.line(f"... {len(result.refusals) - 50} more (see --output json)", indent=2)
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


def _print_checks(printer: Printer, result: RunResult) -> None:
    if result.is_passed:
        printer.line(f"✓ {result.checks_run} checks passed", style="green")
        return
    printer.line(
        f"✗ {len(result.failures)} check failures ({result.checks_run} checks)", style="bold red"
    )
    for failure in result.failures:
        printer.line(
            f"at {format_duration(failure.at_s)} ({failure.path}) {failure.what}", indent=2
        )
        printer.line(f"expected: {failure.expected}", indent=6)
        printer.line(f"got:      {failure.got}", indent=6)


def print_comparison(printer: Printer, results: list[RunResult]) -> None:
    names = [r.accounting.value for r in results]
    s = results[0].scenario
    printer.line(
        f"{s.name}: {format_duration(s.end_s)} simulated, compared: {' vs '.join(names)}",
        style="bold",
    )
    printer.line()
    deployments = sorted({d.name for r in results for d in r.deployments})
    placed = [{d.name: d for d in r.deployments} for r in results]
    rows = []
    for dep in deployments:
        cells = [dep]
        for by_name in placed:
            d = by_name.get(dep)
            cells.append("-" if d is None else f"{d.placed}/{d.desired} ({d.running} running)")
        rows.append(tuple(cells))
    totals = ["TOTAL placed"]
    for r in results:
        totals.append(
            f"{sum(d.placed for d in r.deployments)}/{sum(d.desired for d in r.deployments)}"
        )
    rows.append(tuple(totals))
    printer.line("Placed replicas (placed/desired)", style="bold")
    printer.table(_table(("DEPLOYMENT", *(n.upper() for n in names)), rows), indent=2)
    printer.line()
    pools = sorted({p.key for r in results for p in r.pools})
    by_pool = [{p.key: p for p in r.pools} for r in results]
    rows = []
    for key in pools:
        cells = [key]
        for pools_of in by_pool:
            p = pools_of.get(key)
            cells.append("-" if p is None else f"{p.gpus_allocated}/{p.gpus_total}")
        rows.append(tuple(cells))
    totals = ["TOTAL allocated"]
    for r in results:
        totals.append(
            f"{sum(p.gpus_allocated for p in r.pools)}/{sum(p.gpus_total for p in r.pools)}"
        )
    rows.append(tuple(totals))
    printer.line("GPUs allocated at the end (allocated/published)", style="bold")
    printer.table(_table(("POOL", *(n.upper() for n in names)), rows), indent=2)
    printer.line()
    printer.line("Refusals", style="bold")
    reasons = sorted({x.reason for r in results for x in r.refusals})
    rows = [
        (reason, *(str(sum(1 for x in r.refusals if x.reason == reason)) for r in results))
        for reason in reasons
    ]
    rows.append(("TOTAL", *(str(len(r.refusals)) for r in results)))
    printer.table(_table(("REASON", *(n.upper() for n in names)), rows), indent=2)
    printer.line()
    for r in results:
        verdict = (
            f"{r.checks_run} checks passed"
            if r.is_passed
            else f"{len(r.failures)} of the scenario's checks differ"
        )
        printer.line(f"{r.accounting.value}: {verdict}", indent=2)


def _parse_compare(value: str) -> list[Accounting]:
    modes: list[Accounting] = []
    for part in value.split(","):
        part = part.strip()
        try:
            modes.append(Accounting(part))
        except ValueError:
            choices = ", ".join(a.value for a in Accounting)
            raise typer.BadParameter(
                f"{part!r} is not an accounting mode ({choices})", param_hint="--compare"
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
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report", callback=writable, help="Write a self-contained HTML report here."
        ),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="table or json.")
    ] = OutputFormat.TABLE,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare", metavar="MODE,MODE", help="Run under both modes: whole-node,free-gpu."
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
        for name in builtin_names():
            loaded = load_scenario(name)
            first = loaded.description.split(". ")[0].rstrip(".")
            printer.line(f"{name:<20} {first}.")
        return
    modes = _parse_compare(compare) if compare else None
    try:
        loaded = load_scenario(scenario or DEFAULT_SCENARIO)
    except ScenarioInvalid as error:
        errors.print(f"✗ {error}", markup=False)
        raise typer.Exit(code=2) from None
    progress_console = errors
    if modes is None:
        results = [_run(progress_console, loaded, None)]
    else:
        results = [_run(progress_console, loaded, m) for m in modes]
    if report is not None:
        report.write_text(render_html(results), encoding="utf-8")
    if output is OutputFormat.JSON:
        body = results[0].to_json() if modes is None else {"runs": [r.to_json() for r in results]}
        console.print_json(json.dumps(body))
    elif modes is None:
        print_summary(printer, results[0])
    else:
        print_comparison(printer, results)
    if report is not None and output is not OutputFormat.JSON:
        printer.line(f"Report: {report}")
    if modes is None and not results[0].is_passed:
        raise typer.Exit(code=1)
