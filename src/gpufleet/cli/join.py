"""`gpufleet join` and `gpufleet unjoin`: connect a workload cluster's agent to the hub, or
disconnect it, in one command (`gpufleet.kube.join` does the work; docs/operations.md, "Join a
workload cluster").

Each side is a kubeconfig context: `--hub-context`/`--member-context` name a context of the
kubeconfig (`--hub-kubeconfig`/`--member-kubeconfig`, default `$KUBECONFIG`, then
`~/.kube/config`); without a context, the file's current context. Bad input (a missing file or
context, a bad cluster name, pool or lifetime) exits 2 before anything is written, as does a
hostile kubeconfig (too large, not a regular file, too deep, wrong types; see
`gpufleet.cli.join_kubeconfig`) and an insecure hub (plain `http://`, `insecure-skip-tls-verify`)
unless `--allow-insecure-hub`, which warns; an API server
refusing a step exits 1 and says which side, which object and the answer.

With `--token ID.SECRET --hub URL [--hub-ca FILE]` it is the pull-style join
(`gpufleet.cli.join_pull_cli`): no hub credentials, the bootstrap token only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import httpx2
import typer
from lightkube import Client
from lightkube.config.kubeconfig import SingleConfig

from gpufleet.cli import join_pull_cli as pull
from gpufleet.cli.join_kubeconfig import KubeconfigInvalid, check_hub, load_context
from gpufleet.kube import install, join_pull
from gpufleet.kube import join as joining

ClusterOption = Annotated[
    str, typer.Option("--cluster", help="The InferenceCluster (DNS label, at most 46 chars).")
]
HubContextOption = Annotated[
    str | None, typer.Option("--hub-context", help="Kubeconfig context of the hub.")
]
MemberContextOption = Annotated[
    str | None,
    typer.Option("--member-context", help="Kubeconfig context of the workload cluster."),
]
HubKubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--hub-kubeconfig", help="Kubeconfig of the hub (default: $KUBECONFIG, ~/.kube/config)."
    ),
]
MemberKubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--member-kubeconfig",
        help="Kubeconfig of the workload cluster (default: $KUBECONFIG, ~/.kube/config).",
    ),
]
_TIMEOUT_S = 30.0


def _default_kubeconfig() -> tuple[Path, str]:
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    if first:
        return Path(first), "$KUBECONFIG"
    return Path("~/.kube/config").expanduser(), "~/.kube/config"


def _context(path: Path | None, context: str | None, side: str) -> SingleConfig:
    """The kubeconfig context of one side, or a usage error naming the option."""
    hint = f"'--{side}-kubeconfig'" if context is None else f"'--{side}-context'"
    where = "--" + side + "-kubeconfig"
    if path is None:
        path, where = _default_kubeconfig()
    if not path.exists():
        raise typer.BadParameter(f"no kubeconfig at {path} (from {where})", param_hint=hint)
    try:
        return load_context(path, context)
    except KubeconfigInvalid as e:
        raise typer.BadParameter(str(e), param_hint=hint) from None


def _client(config: SingleConfig, side: str) -> Client:
    try:
        return Client(config, timeout=httpx2.Timeout(_TIMEOUT_S), field_manager="gpufleet-join")
    except Exception as e:
        message = f"{config.fname}: context {config.context_name} is not usable: {e}"
        raise typer.BadParameter(message, param_hint=f"'--{side}-kubeconfig'") from None


def _endpoint(config: SingleConfig, server: str | None, allow: bool) -> joining.HubEndpoint:
    """The hub the agent's credentials name, refused when insecure unless `allow`."""
    hint = "'--hub-server'" if server else "'--hub-kubeconfig'"
    field = (
        "--hub-server" if server else f"{config.fname}: cluster {config.context.cluster}: server"
    )
    try:
        endpoint = joining.HubEndpoint.of(config, server)
        check_hub(
            endpoint.server,
            field,
            is_insecure=endpoint.is_insecure,
            allow=allow,
            warn=lambda line: typer.echo(line, err=True),
        )
    except KubeconfigInvalid as e:
        raise typer.BadParameter(str(e), param_hint=hint) from None
    except joining.JoinError as e:
        raise typer.BadParameter(str(e), param_hint=hint) from None
    return endpoint


def _pool(text: str) -> joining.Pool:
    name, _, rest = text.partition("=")
    class_name, _, count = rest.partition(":")
    if not (name and class_name and count.isdigit()):
        raise typer.BadParameter(
            f"{text!r} is not NAME=CLASS:NODES (e.g. l4=l4-4x:2)", param_hint="'--pool'"
        )
    return joining.Pool(name, class_name, int(count))


def _labels(texts: list[str]) -> dict[str, str]:
    labels = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="'--label'")
        labels[key] = value
    return labels


def _check_cluster(cluster: str) -> None:
    try:
        install.agent_hub_access(cluster)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--cluster'") from e


def _print(report: joining.Report) -> None:
    for line in report.lines:
        typer.echo(line)


def join(
    cluster: ClusterOption,
    hub_context: HubContextOption = None,
    member_context: MemberContextOption = None,
    hub_kubeconfig: HubKubeconfigOption = None,
    member_kubeconfig: MemberKubeconfigOption = None,
    hub_server: Annotated[
        str | None,
        typer.Option(
            "--hub-server",
            help="The hub's URL as the workload cluster reaches it (default: the hub context's).",
        ),
    ] = None,
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
    token_ttl: Annotated[
        int | None,
        typer.Option(
            "--token-ttl",
            metavar="SECONDS",
            min=joining.MIN_TOKEN_TTL_S,
            max=joining.MAX_TOKEN_TTL_S,
            help="Lifetime of the agent's hub token (default: 30 days; with --token, a day). "
            "The agent renews it at 80 % of its lifetime.",
        ),
    ] = None,
    allow_insecure_hub: Annotated[
        bool,
        typer.Option(
            "--allow-insecure-hub",
            help="Accept a plain http:// hub or insecure-skip-tls-verify (warns; tests only).",
        ),
    ] = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="ID.SECRET",
            help="Pull-style: the bootstrap token from `gpufleet token create` on the hub; "
            "only the member's credentials are used (with --hub, not --hub-context).",
        ),
    ] = None,
    hub_url: Annotated[
        str | None,
        typer.Option("--hub", metavar="URL", help="Pull-style: the hub's https:// URL."),
    ] = None,
    hub_ca: Annotated[
        Path | None,
        typer.Option(
            "--hub-ca", help="Pull-style: the hub's CA certificate (PEM); default: system CAs."
        ),
    ] = None,
) -> None:
    """Join a workload cluster: its InferenceCluster and agent identity on the hub, a token, and
    the agent's hub kubeconfig Secret on the cluster. Re-run to rotate the token.

    Pull-style, with --token and --hub: the bootstrap token from `gpufleet token create` gets
    the agent's hub token, and only the member's credentials are used."""
    _check_cluster(cluster)
    if token is not None or hub_url is not None or hub_ca is not None:
        pushed = {
            "--hub-context": hub_context,
            "--hub-kubeconfig": hub_kubeconfig,
            "--hub-server": hub_server,
            "--pool": pools,
            "--label": labels,
        }
        pull.check_only_pull(token, hub_url, [k for k, v in pushed.items() if v])
        member_config = _context(member_kubeconfig, member_context, "member")
        pull.join(
            cluster,
            pull.bootstrap_config(token, hub_url, hub_ca, allow_insecure_hub),
            _client(member_config, "member"),
            token_ttl or join_pull.DEFAULT_PULL_TOKEN_TTL_S,
        )
        return
    token_ttl = token_ttl or joining.DEFAULT_TOKEN_TTL_S
    hub_config = _context(hub_kubeconfig, hub_context, "hub")
    member_config = _context(member_kubeconfig, member_context, "member")
    parsed_pools = [_pool(p) for p in pools or []]
    parsed_labels = _labels(labels or [])
    try:
        if parsed_pools:
            joining.inference_cluster(cluster, parsed_pools, parsed_labels)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--pool'") from e
    endpoint = _endpoint(hub_config, hub_server, allow_insecure_hub)
    hub, member = _client(hub_config, "hub"), _client(member_config, "member")
    try:
        report = joining.join(
            hub,
            member,
            cluster,
            endpoint,
            pools=parsed_pools,
            labels=parsed_labels,
            token_ttl_s=token_ttl,
        )
    except ValueError as e:  # no InferenceCluster and no pools to make one
        raise typer.BadParameter(str(e), param_hint="'--pool'") from e
    except joining.JoinError as e:
        typer.echo(f"gpufleet join: {e}", err=True)
        raise typer.Exit(1) from e
    _print(report)
    typer.echo(f"joined {cluster}; the agent's hub token expires {report.token_expires_at}")


def unjoin(
    cluster: ClusterOption,
    hub_context: HubContextOption = None,
    member_context: MemberContextOption = None,
    hub_kubeconfig: HubKubeconfigOption = None,
    member_kubeconfig: MemberKubeconfigOption = None,
    keep_cluster: Annotated[
        bool,
        typer.Option("--keep-cluster", help="Keep the InferenceCluster even if join created it."),
    ] = False,
) -> None:
    """Disconnect a workload cluster: delete the agent's hub identity (its namespace, with the
    cluster's observations) and its Secret on the cluster."""
    _check_cluster(cluster)
    hub_config = _context(hub_kubeconfig, hub_context, "hub")
    member_config = _context(member_kubeconfig, member_context, "member")
    hub, member = _client(hub_config, "hub"), _client(member_config, "member")
    try:
        report = joining.unjoin(hub, member, cluster, keep_cluster=keep_cluster)
    except joining.JoinError as e:
        typer.echo(f"gpufleet unjoin: {e}", err=True)
        raise typer.Exit(1) from e
    _print(report)
    typer.echo(f"unjoined {cluster}")
