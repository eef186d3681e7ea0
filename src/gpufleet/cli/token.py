"""`gpufleet token create`: on the hub, a short-lived bootstrap token for one workload cluster,
for the pull-style join (`gpufleet.kube.join_pull`; docs/operations.md, "Join a workload
cluster: pull-style").

It uses the hub's credentials only (`--hub-context`/`--hub-kubeconfig`, as `gpufleet join`),
makes the cluster's InferenceCluster (from `--pool`, if missing) and the agent's hub identity,
and prints the token and the command to run on the workload cluster. `--quiet` prints the
token alone (for a script). Bad input exits 2 before anything is written; a hub refusing a
step exits 1 and says which object and the answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from gpufleet.cli.durations import duration_option
from gpufleet.cli.join import (
    ClusterOption,
    HubContextOption,
    HubKubeconfigOption,
    _check_cluster,
    _client,
    _context,
    _labels,
    _pool,
)
from gpufleet.core.durations import format_duration
from gpufleet.kube import join as joining
from gpufleet.kube import join_pull

app = typer.Typer(
    name="token",
    help="Bootstrap tokens for the pull-style join (on the hub).",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Bootstrap tokens for the pull-style join (on the hub)."""


@app.command(name="create", short_help="Issue a bootstrap token for one cluster's join.")
def create(
    cluster: ClusterOption,
    hub_context: HubContextOption = None,
    hub_kubeconfig: HubKubeconfigOption = None,
    ttl: Annotated[
        int,
        duration_option(
            "--ttl",
            "How long the bootstrap token is accepted (at most a day).",
            join_pull.DEFAULT_BOOTSTRAP_TTL_S,
            join_pull.MIN_BOOTSTRAP_TTL_S,
            join_pull.MAX_BOOTSTRAP_TTL_S,
            is_whole=True,
        ),
    ] = join_pull.DEFAULT_BOOTSTRAP_TTL_S,
    pools: Annotated[
        list[str] | None,
        typer.Option(
            "--pool",
            metavar="NAME=CLASS:NODES",
            help="A node pool, if the hub has no InferenceCluster of that name yet (repeat).",
        ),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option("--label", metavar="KEY=VALUE", help="A label of a new InferenceCluster."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the token only.")] = False,
) -> None:
    """Issue a bootstrap token that lets one workload cluster's `gpufleet join --token` get its
    agent's hub identity, and nothing else, until it expires."""
    _check_cluster(cluster)
    hub_config = _context(hub_kubeconfig, hub_context, "hub")
    parsed_pools = [_pool(p) for p in pools or []]
    parsed_labels = _labels(labels or [])
    try:
        if parsed_pools:
            joining.inference_cluster(cluster, parsed_pools, parsed_labels)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--pool'") from e
    hub = _client(hub_config, "hub")
    try:
        report, token, expires_at = join_pull.issue_token(
            hub,
            cluster,
            ttl,
            datetime.now(UTC),
            pools=parsed_pools,
            labels=parsed_labels,
        )
    except ValueError as e:  # no InferenceCluster and no pools to make one
        raise typer.BadParameter(str(e), param_hint="'--pool'") from e
    except joining.JoinError as e:
        typer.echo(f"gpufleet token create: {e}", err=True)
        raise typer.Exit(1) from e
    finally:
        hub.close()
    if quiet:
        typer.echo(str(token))
        return
    for line in report.lines:
        typer.echo(line)
    expires = expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    typer.echo(f"token: {token} (expires {expires}, in {format_duration(ttl)})")
    typer.echo("On the workload cluster, with its credentials only:")
    typer.echo(
        f"  gpufleet join --cluster {cluster} --token {token} --hub {hub_config.cluster.server}"
        " --hub-ca HUB_CA.crt"
    )
