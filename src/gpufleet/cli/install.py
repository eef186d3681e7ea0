"""`gpufleet install hub|agent`: print install manifests, for `kubectl apply -f -`.

- `install hub [--image] [--replicas]`: on the hub: the CRDs, then the controller.
- `install agent --cluster NAME --hub-server URL [--image]`: on the workload cluster: the agent
  and the Secret its hub kubeconfig goes into.
- `install agent --cluster NAME --hub-access`: on the *hub*: the cluster's observation
  namespace and the agent's ServiceAccount, RBAC and token there.

The manifests come from `gpufleet.kube.install`; docs/operations.md walks through both sides.
"""

from typing import Annotated

import typer

from gpufleet.kube import install

app = typer.Typer(
    name="install",
    help="Print install manifests (pipe into `kubectl apply -f -`).",
    no_args_is_help=True,
)

_IMAGE = typer.Option("--image", help="The gpufleet container image.")


@app.command(name="hub")
def hub(
    image: Annotated[str, _IMAGE] = install.DEFAULT_IMAGE,
    replicas: Annotated[
        int, typer.Option("--replicas", min=1, help="Controller replicas (one leads).")
    ] = 2,
) -> None:
    """The hub: CRDs, namespace gpufleet-system, the controller and its RBAC and Service."""
    typer.echo(install.hub_yaml(image, replicas), nl=False)


@app.command(name="agent")
def agent(
    cluster: Annotated[
        str, typer.Option("--cluster", help="The InferenceCluster this agent reports for.")
    ],
    hub_server: Annotated[
        str | None,
        typer.Option("--hub-server", help="The hub API server URL (for the workload cluster)."),
    ] = None,
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
        if hub_access:
            text = install.agent_hub_yaml(cluster)
        elif hub_server is None:
            raise typer.BadParameter(
                "is required (or pass --hub-access for the hub side)",
                param_hint="'--hub-server'",
            )
        else:
            text = install.agent_yaml(cluster, hub_server, image)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--cluster'") from e
    typer.echo(text, nl=False)
