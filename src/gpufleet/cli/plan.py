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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
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
    DecisionFormat,
    Printer,
    data_text,
    decision_json,
    plural,
    pools_table,
    print_deployment,
    rfc3339,
)
from gpufleet.cli.validate import count_of, error_lines, exit_code, skipped_line
from gpufleet.core.decision import Decision, Diagnosis, ObservationState
from gpufleet.core.model import DeploymentKey, Snapshot
from gpufleet.core.reuse import SHARED
from gpufleet.core.schedule import SnapshotError, plan

PathsArgument = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILE_OR_DIR", help="Manifest files, or directories of *.yaml/*.yml files."
    ),
]
OutputOption = Annotated[
    DecisionFormat,
    typer.Option("--output", "-o", help="How to print the decision: table, json or yaml."),
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
        planned = plan(snapshot, moment, explain=explain, derive=SHARED)
    except SnapshotError as error:
        errors.print(f"✗ {error}: nothing scheduled")
        raise typer.Exit(code=1) from None
    scheduled = Scheduled(snapshot, moment, planned.decision, planned.one_more)
    hint = now_hint(scheduled) if now is None else None
    if hint is not None:
        errors.print(hint)
    return scheduled


def explain_hint(paths: list[Path]) -> str | None:
    """`plan NS/NAME DIR` reads the deployment as a path: say that `explain` takes it."""
    missing = [p for p in paths if not p.exists()]
    looks_like_key = [p for p in missing if len(p.parts) == 2 and not p.parent.exists()]
    if len(looks_like_key) != 1 or len(missing) == len(paths):
        return None
    key = looks_like_key[0]
    rest = " ".join(str(p) for p in paths if p != key)
    return f"note: plan takes no deployment; to explain {key}: gpufleet explain {key} {rest}"


#: How long after the newest observation `now_hint` suggests scheduling.
HINT_AFTER_S = 5


def now_hint(scheduled: Scheduled) -> str | None:
    """Without `--now`, observations written into manifests are usually hours old and read as
    Stale or Expired: say so, and suggest a `--now` just after the newest of them."""
    old = [
        p
        for p in scheduled.decision.pools
        if p.observation in (ObservationState.STALE, ObservationState.EXPIRED)
    ]
    times = [
        t
        for cluster in scheduled.snapshot.clusters
        for t in (
            cluster.agent_observed_at,
            *(p.observation.observed_at for p in cluster.pools if p.observation is not None),
        )
        if t is not None
    ]
    if not old or not times:
        return None
    newest = max(times)
    states = ", ".join(sorted({p.observation.value for p in old}))
    suggested = rfc3339(newest + timedelta(seconds=HINT_AFTER_S))
    return (
        f"note: {plural(len(old), 'pool')} read as {states} at the current time (newest "
        f"observedAt {rfc3339(newest)}); to schedule as of the manifests, pass --now {suggested}"
    )


def command(
    paths: PathsArgument,
    output: OutputOption = DecisionFormat.TABLE,
    now: NowOption = None,
    recursive: RecursiveOption = False,
) -> None:
    """Schedule the fleet's manifests and print every deployment's decision and the pools."""
    hint = explain_hint(paths)
    if hint is not None:
        stderr().print(hint)
    scheduled = load_and_schedule(paths, now, recursive=recursive)
    decision = scheduled.decision
    if output is not DecisionFormat.TABLE:
        typer.echo(data_text(decision_json(decision, scheduled.now), output))
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
