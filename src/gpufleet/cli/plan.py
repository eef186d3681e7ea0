"""`gpufleet plan FILE_OR_DIR...`: schedule a fleet's manifests once and print the decision.

Reads classes, clusters (with their published status and observations), deployments and
replicas; invalid input is reported exactly as `gpufleet validate` reports it (on stderr) and
exits 1 (2 for a file that breaks an input bound). Objects of other APIs (an `apps/v1`
Deployment in the same folder) are skipped with a note on stderr. Otherwise it calls `schedule(snapshot, now)` and prints, per deployment, desired /
placed / shortfall, each placement, each dropped replica, and for a shortfall the roll-up and
the top reason with its numbers; then the fleet's pools after the decision. `--output json`
prints the whole decision as JSON (docs/cli.md). A shortfall is an answer, not an error: exit 0.

The clock lives here, at the edge: `now` is the current UTC time unless `--now` says otherwise
(tests and reproducible runs pass it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.api import (
    Manifest,
    Skipped,
    ValidationFailed,
    check_paths,
    snapshot_from_manifests,
)
from gpufleet.cli.render import (
    OutputFormat,
    Printer,
    decision_json,
    plural,
    pools_table,
    print_deployment,
    rfc3339,
)
from gpufleet.cli.validate import count_of, error_lines, exit_code, skipped_line
from gpufleet.core.decision import Decision, Diagnosis
from gpufleet.core.model import DeploymentKey, Snapshot
from gpufleet.core.schedule import SnapshotError, plan

PathsArgument = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILE_OR_DIR", help="Manifest files, or directories of *.yaml/*.yml files."
    ),
]
OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", help="How to print the decision: table or json.")
]
NowOption = Annotated[
    str | None,
    typer.Option(
        "--now",
        help="The time to schedule at, RFC 3339 (2026-11-29T10:00:05Z); default: the current "
        "UTC time.",
        show_default=False,
    ),
]
RecursiveOption = Annotated[
    bool, typer.Option("--recursive", "-R", help="Also read subdirectories.")
]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """What `plan` and `explain` print from: the snapshot, the time and the decision."""

    snapshot: Snapshot
    now: datetime
    decision: Decision
    #: For deployments asked about that got every replica: the verdicts for one more.
    one_more: Mapping[DeploymentKey, Diagnosis] = field(default_factory=dict)


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=True)


def stderr() -> Console:
    return Console(highlight=False, soft_wrap=True, stderr=True)


def parse_now(value: str | None) -> datetime:
    """`--now` as an aware UTC datetime; the current time when absent."""
    if value is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise typer.BadParameter(
            f"{value!r} is not an RFC 3339 time with a zone, e.g. 2026-11-29T10:00:05Z",
            param_hint="--now",
        )
    return moment.astimezone(UTC)


def load_and_schedule(
    paths: list[Path],
    now: str | None,
    *,
    recursive: bool,
    explain: frozenset[DeploymentKey] = frozenset(),
) -> Scheduled:
    """Validate, convert and schedule; on invalid input print every error and exit 1."""
    moment = parse_now(now)
    results = check_paths(paths, recursive=recursive)
    failures = [r for r in results if isinstance(r, ValidationFailed)]
    errors = stderr()
    for skipped in (r for r in results if isinstance(r, Skipped)):
        errors.print(skipped_line(skipped))
    if failures:
        for failure in failures:
            for line in error_lines(failure):
                errors.print(line)
        count = sum(len(f.errors) for f in failures)
        errors.print(f"{len(failures)} invalid ({count_of(count, 'error')}): nothing scheduled")
        raise typer.Exit(code=exit_code(results))
    snapshot = snapshot_from_manifests(r for r in results if isinstance(r, Manifest))
    try:
        planned = plan(snapshot, moment, explain=explain)
    except SnapshotError as error:
        errors.print(f"✗ {error}: nothing scheduled")
        raise typer.Exit(code=1) from None
    return Scheduled(snapshot, moment, planned.decision, planned.one_more)


def command(
    paths: PathsArgument,
    output: OutputOption = OutputFormat.TABLE,
    now: NowOption = None,
    recursive: RecursiveOption = False,
) -> None:
    """Schedule the fleet's manifests and print every deployment's decision and the pools."""
    scheduled = load_and_schedule(paths, now, recursive=recursive)
    decision = scheduled.decision
    if output is OutputFormat.JSON:
        typer.echo(json.dumps(decision_json(decision, scheduled.now), indent=2))
        return
    printer = Printer(stdout())
    printer.line(
        f"plan at {rfc3339(scheduled.now)}: {plural(len(decision.deployments), 'deployment')}, "
        f"{plural(len(scheduled.snapshot.clusters), 'cluster')}"
    )
    for deployment in decision.deployments:
        printer.line()
        print_deployment(printer, deployment)
    printer.line()
    printer.line("pools after this plan", style="bold")
    printer.table(pools_table(decision.pools))
