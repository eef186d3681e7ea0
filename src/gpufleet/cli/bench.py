"""`gpufleet bench`: run the benchmarks (B1-B5), print their tables, optionally write
docs/performance.md and its SVG plots.

`--quick` runs every benchmark at a tiny size (seconds); `--only B1,B3` picks benchmarks;
`--write PATH` writes the page (figures go to `performance/` next to it). The date written
into the page is today's (UTC) unless `--date` gives one. `make bench` runs
`gpufleet bench --write docs/performance.md`.
"""

from __future__ import annotations

import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.bench.runner import (
    Machine,
    UnknownBenchmark,
    parse_only,
    plain_text,
    render_markdown,
    run_benchmarks,
    targets,
    write_report,
)
from gpufleet.cli.paths import writable


def command(
    quick: Annotated[
        bool, typer.Option("--quick", help="Every benchmark at a tiny size (seconds).")
    ] = False,
    only: Annotated[
        str | None, typer.Option("--only", help="Comma-separated benchmarks, e.g. B1,B3.")
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option(
            "--write", callback=writable, help="Write the markdown report here (plots beside it)."
        ),
    ] = None,
    date: Annotated[
        str | None,
        typer.Option("--date", help="The date written into the report (default: today, UTC)."),
    ] = None,
) -> None:
    """Run the benchmarks and print their tables; optionally write docs/performance.md."""
    try:
        keys = parse_only(only)
    except UnknownBenchmark as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    started = time.perf_counter()

    def show(section: object) -> None:
        typer.echo(plain_text(section))  # type: ignore[arg-type]
        typer.echo("")

    sections = run_benchmarks(keys, quick, on_section=show)
    total = time.perf_counter() - started
    summary = targets(sections)
    if summary.rows:
        typer.echo(summary.plain())
    typer.echo(f"\ntotal {total:,.1f} s")
    if write is not None:
        argv = ["gpufleet", *sys.argv[1:]] if sys.argv and sys.argv[0] else ["gpufleet", "bench"]
        markdown = render_markdown(
            sections,
            command=shlex.join(argv),
            date=date or datetime.now(UTC).date().isoformat(),
            machine=Machine.current(),
            quick=quick,
            total_s=total,
        )
        for path in write_report(write, markdown, sections):
            typer.echo(f"wrote {path}")
