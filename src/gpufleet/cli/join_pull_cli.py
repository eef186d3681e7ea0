"""The member side of `gpufleet join --token ID.SECRET --hub URL [--hub-ca FILE]`: the
pull-style join (`gpufleet.kube.join_pull`; docs/operations.md, "Join a workload cluster:
pull-style").

Every input is hostile until checked, and every refusal is one usage error (exit 2) naming the
option, never a traceback: a token not of the form ID.SECRET (its secret is never echoed), a
hub URL that is not `https://` (unless `--allow-insecure-hub`, which warns), a CA file that is
missing, too large, not a regular file or not PEM, a push-style option mixed in, and a
bootstrap token the hub refuses (unknown, expired, deleted, or issued for another cluster).
"""

from __future__ import annotations

import base64
from pathlib import Path

import httpx2
import typer
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from gpufleet.cli.join_kubeconfig import KubeconfigInvalid, check_hub, check_url, read_regular
from gpufleet.kube import join as joining
from gpufleet.kube import join_pull

_TIMEOUT_S = 30.0
MAX_CA_BYTES = 256 * 1024


def check_only_pull(token: str | None, hub: str | None, pushed: list[str]) -> None:
    """`--token` and `--hub` together, and no push-style option beside them."""
    if pushed:
        raise typer.BadParameter(
            f"{', '.join(pushed)}: push-style; the pull-style join uses the bootstrap token "
            "and the member's credentials only",
            param_hint="'--token'",
        )
    if token is None:
        raise typer.BadParameter("required with --hub/--hub-ca", param_hint="'--token'")
    if hub is None:
        raise typer.BadParameter("required with --token", param_hint="'--hub'")


def _ca_data(path: Path) -> str:
    try:
        data = read_regular(path, MAX_CA_BYTES)
    except KubeconfigInvalid as e:
        raise typer.BadParameter(str(e), param_hint="'--hub-ca'") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise typer.BadParameter(
            f"{path}: not a PEM certificate (no BEGIN CERTIFICATE line)", param_hint="'--hub-ca'"
        )
    return base64.b64encode(data).decode()


def bootstrap_config(
    token: str | None, hub: str | None, hub_ca: Path | None, allow_insecure: bool
) -> tuple[join_pull.BootstrapToken, joining.HubEndpoint, KubeConfig]:
    """The checked token, the hub endpoint the agent will use, and a kubeconfig that
    authenticates to the hub with the bootstrap token."""
    assert token is not None and hub is not None  # check_only_pull
    try:
        parsed = join_pull.BootstrapToken.parse(token)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--token'") from None
    try:
        check_url(hub, "--hub")
        check_hub(
            hub,
            "--hub",
            is_insecure=False,
            allow=allow_insecure,
            warn=lambda line: typer.echo(line, err=True),
        )
    except KubeconfigInvalid as e:
        raise typer.BadParameter(str(e), param_hint="'--hub'") from None
    ca_data = _ca_data(hub_ca) if hub_ca is not None else None
    endpoint = joining.HubEndpoint(hub, ca_data)
    config = KubeConfig.from_one(
        cluster=Cluster(server=hub, certificate_auth_data=ca_data),
        user=User(token=str(parsed)),
    )
    return parsed, endpoint, config


def join(
    cluster: str,
    bootstrap: tuple[join_pull.BootstrapToken, joining.HubEndpoint, KubeConfig],
    member: Client,
    token_ttl_s: int,
) -> None:
    """Run the pull join and print what it did; a refused token exits 2, any other refusal 1."""
    _, endpoint, config = bootstrap
    try:
        hub = Client(config, timeout=httpx2.Timeout(_TIMEOUT_S), field_manager="gpufleet-join")
    except Exception as e:
        raise typer.BadParameter(
            f"cannot reach {endpoint.server}: {e}", param_hint="'--hub'"
        ) from None
    try:
        report = join_pull.pull_join(hub, member, cluster, endpoint, token_ttl_s=token_ttl_s)
    except join_pull.BootstrapRefused as e:
        typer.echo(f"gpufleet join: {e}", err=True)
        raise typer.Exit(2) from e
    except joining.JoinError as e:
        typer.echo(f"gpufleet join: {e}", err=True)
        raise typer.Exit(1) from e
    finally:
        hub.close()
    for line in report.lines:
        typer.echo(line)
    typer.echo(
        f"joined {cluster} (pull-style); the agent's hub token expires "
        f"{report.token_expires_at} and the agent renews it"
    )
