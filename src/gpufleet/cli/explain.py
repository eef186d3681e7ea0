"""`gpufleet explain NAMESPACE/DEPLOYMENT FILE_OR_DIR...`: why one deployment got what it got.

Schedules the fleet exactly as `gpufleet plan` does, then prints the deployment's decision and,
as kube-scheduler reports its per-node filters, every cluster of the fleet with its verdict and
reasons (codes, messages, numbers) and every pool with its accounting, fit, reasons and free
summary, then "what would change it": per refusal code, who can lift it (the platform team,
the deployment's owner, or nobody: wait) and how (cli/fixes.py). A pool's FREE is its capacity when the verdict was taken; a pool that no verdict
covers (its cluster was refused before its pools were looked at) shows its state after the plan.

The scheduler diagnoses only deployments with a shortfall; for a deployment that got every
replica, explain says so and lists where its replicas are.

An unknown deployment exits 1 naming the deployments that exist. `DEPLOYMENT` alone means
`default/DEPLOYMENT`, as kubectl reads a name without a namespace, unless `-n NAMESPACE` says
otherwise (`explain DEPLOYMENT -n NAMESPACE FILE_OR_DIR...`, as kubectl takes it). A deployment
given after the manifests is a usage error (exit 2) that shows the order to use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.api.convert import DEFAULT_NAMESPACE
from gpufleet.cli.fixes import fixes
from gpufleet.cli.plan import (
    NowOption,
    OutputOption,
    PathsArgument,
    RecursiveOption,
    load_and_schedule,
    stderr,
    stdout,
)
from gpufleet.cli.render import (
    DecisionFormat,
    Printer,
    Table,
    clusters_table,
    data_text,
    deployment_json,
    diagnosis_json,
    plural,
    pool_state_json,
    pool_verdicts_table,
    print_deployment,
    rfc3339,
)
from gpufleet.core.decision import DeploymentDecision, Diagnosis
from gpufleet.core.model import ClusterName, DeploymentKey


def parse_key(value: str, namespace: str | None = None) -> DeploymentKey:
    """`NAMESPACE/NAME`, or `NAME` in `namespace` (`-n`), else in `default`."""
    given, slash, name = value.rpartition("/")
    if slash and namespace is not None and given != namespace:
        raise typer.BadParameter(
            f"{value!r} names namespace {given!r} but -n says {namespace!r}",
            param_hint="'--namespace'",
        )
    return DeploymentKey(given or namespace or DEFAULT_NAMESPACE, name)


def check_order(deployment: str, paths: Sequence[Path]) -> None:
    """A deployment given after the manifests (`explain DIR NS/NAME`) is a usage error with the
    order to use, rather than "no such file" for the deployment's name."""
    missing = [p for p in paths if not p.exists()]
    if missing and Path(deployment).exists():
        order = " ".join([str(missing[0]), deployment, *(str(p) for p in paths if p != missing[0])])
        raise typer.BadParameter(
            f"{deployment!r} is a file or directory and {str(missing[0])!r} is not: the "
            f"deployment comes first: gpufleet explain {order}",
            param_hint="'NAMESPACE/DEPLOYMENT'",
        )


def command(
    deployment: Annotated[
        str, typer.Argument(metavar="NAMESPACE/DEPLOYMENT", help="The deployment to explain.")
    ],
    paths: PathsArgument,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="The deployment's namespace, when DEPLOYMENT has none (default: default).",
        ),
    ] = None,
    output: OutputOption = DecisionFormat.TABLE,
    now: NowOption = None,
    recursive: RecursiveOption = False,
) -> None:
    """Explain one deployment's decision: every cluster's verdict and every pool's fit."""
    check_order(deployment, paths)
    key = parse_key(deployment, namespace)
    scheduled = load_and_schedule(paths, now, recursive=recursive, explain=frozenset({key}))
    decision = scheduled.decision
    try:
        chosen = decision.for_deployment(key)
    except KeyError:
        existing = ", ".join(str(d.key) for d in decision.deployments) or "none"
        stderr().print(f"✗ no deployment {key} in the manifests; deployments: {existing}")
        raise typer.Exit(code=1) from None
    pools = list(decision.pools)
    if output is not DecisionFormat.TABLE:
        body = {
            "now": rfc3339(scheduled.now),
            "deployment": deployment_json(chosen),
            "clusters": [c.name for c in scheduled.snapshot.clusters],
            "pools": [pool_state_json(p) for p in pools],
        }
        if key in scheduled.one_more:
            body["oneMore"] = diagnosis_json(scheduled.one_more[key])
        found = chosen.diagnosis or scheduled.one_more.get(key)
        if found is not None:
            body["fixes"] = fixes_json(found)
        typer.echo(data_text(body, output))
        return
    printer = Printer(stdout())
    printer.line(f"explain at {rfc3339(scheduled.now)}")
    printer.line()
    print_deployment(printer, chosen)
    printer.line(
        f"condition {chosen.condition.type}={chosen.condition.status} "
        f"{chosen.condition.reason}: {chosen.condition.message}",
        indent=2,
    )
    printer.line()
    clusters = [c.name for c in scheduled.snapshot.clusters]
    diagnosis = chosen.diagnosis
    if diagnosis is None:
        _print_placed(printer, chosen, clusters)
        diagnosis = scheduled.one_more.get(key)
        if diagnosis is None:
            return
        printer.line()
        printer.line("where one more replica could go now:", style="bold")
    fitting = sum(1 for v in diagnosis.clusters if v.fits)
    printer.line(f"clusters: {fitting}/{len(diagnosis.clusters)} fit", style="bold")
    printer.table(clusters_table(diagnosis.clusters))
    for reason in diagnosis.reasons:
        printer.line(f"deployment-wide: {reason.code.value}: {reason.message}")
    printer.line()
    printer.line("pools", style="bold")
    refused = {v.cluster: ", ".join(r.code.value for r in v.reasons) for v in diagnosis.clusters}
    printer.table(pool_verdicts_table(diagnosis, pools, refused))
    _print_fixes(printer, diagnosis)


def fixes_json(diagnosis: Diagnosis) -> list[dict[str, object]]:
    return [
        {"code": fix.code.value, "clusters": names, "who": fix.who, "what": fix.what}
        for fix, names in fixes(diagnosis)
    ]


def _print_fixes(printer: Printer, diagnosis: Diagnosis) -> None:
    """Who can lift each refusal, and how (cli/fixes.py)."""
    found = fixes(diagnosis)
    if not found:
        return
    printer.line()
    printer.line("what would change it", style="bold")
    for fix, names in found:
        printer.line(f"{fix.code.value} ({', '.join(names)}): {fix.who}: {fix.what}", indent=2)


def _print_placed(
    printer: Printer, chosen: DeploymentDecision, clusters: Sequence[ClusterName]
) -> None:
    """No shortfall, so no diagnosis: where the deployment's replicas are, cluster by cluster."""
    placed = len(chosen.placements)
    printer.line(
        f"no shortfall ({placed} of {plural(chosen.desired, 'replica')} placed); replicas per "
        "cluster:",
        style="bold",
    )
    counts = Counter(p.cluster for p in chosen.placements)
    rows = tuple((name, str(counts[name])) for name in clusters)
    printer.table(Table(("CLUSTER", "REPLICAS"), rows))
