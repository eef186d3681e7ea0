"""`gpufleet install hub|agent`: print install manifests, for `kubectl apply -f -`.

- `install hub [--image] [--replicas]`: on the hub: the CRDs, then the controller.
- `install agent --cluster NAME [--image]`: on the workload cluster: the agent. Its hub
  credentials come from `gpufleet join` (the Secret `gpufleet-hub`), not from these manifests.
- `install agent --cluster NAME --hub-access`: the *hub* side of that agent (its namespace,
  ServiceAccount and RBAC) for GitOps; `gpufleet join` creates the same objects and a token.

The manifests come from `gpufleet.kube.install`; docs/operations.md walks through both sides.
"""

from typing import Annotated

import typer

from gpufleet.kube import install

app = typer.Typer(
    name="install",
    help="Print install manifests (pipe into `kubectl apply -f -`).",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

_IMAGE = typer.Option("--image", help="The gpufleet container image (default: this version's).")


@app.command(name="hub", short_help="The hub: CRDs, the controller, its RBAC.")
def hub(
    image: Annotated[str, _IMAGE] = install.DEFAULT_IMAGE,
    replicas: Annotated[
        int, typer.Option("--replicas", min=1, help="Controller replicas (one leads).")
    ] = 2,
    tenant_namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--tenant-namespace",
            metavar="NAMESPACE",
            help="A namespace of ModelDeployments: the controller may record Events there (repeat).",
        ),
    ] = None,
) -> None:
    """The hub: CRDs, namespace gpufleet-system, the controller and its RBAC and Service."""
    try:
        text = install.hub_yaml(image, replicas, tuple(tenant_namespaces or ()))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--tenant-namespace'") from e
    typer.echo(text, nl=False)


@app.command(name="agent", short_help="An agent (--hub-access: its hub side).")
def agent(
    cluster: Annotated[
        str, typer.Option("--cluster", help="The InferenceCluster this agent reports for.")
    ],
    image: Annotated[str, _IMAGE] = install.DEFAULT_IMAGE,
    hub_access: Annotated[
        bool,
        typer.Option(
            "--hub-access",
            help="Print the hub side instead: the cluster's namespace, ServiceAccount and RBAC.",
        ),
    ] = False,
) -> None:
    """An agent: the workload-cluster side, or with --hub-access the hub side."""
    try:
        text = install.agent_hub_yaml(cluster) if hub_access else install.agent_yaml(cluster, image)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--cluster'") from e
    typer.echo(text, nl=False)
