"""`gpufleet crds`: print the CustomResourceDefinitions, for `kubectl apply -f -`.

The same YAML as `deploy/crds/` (generated from the API models by `gpufleet.kube.crds`).
"""

import typer

from gpufleet.kube.crds import crds_yaml


def command() -> None:
    """Print the gpufleet.io CRDs as YAML (pipe into `kubectl apply --server-side -f -`)."""
    typer.echo(crds_yaml(), nl=False)
