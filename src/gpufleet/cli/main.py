"""The `gpufleet` command line: one typer `app`, one module per command.

To add a command, write `gpufleet/cli/<name>.py` with a function `command(...)` (typer
parameters, docstring as help) and register it below with one line.
"""

from importlib import metadata
from typing import Annotated

import typer

from gpufleet.cli import (
    agent,
    bench,
    controller,
    crds,
    explain,
    install,
    join,
    plan,
    simulate,
    validate,
)

app = typer.Typer(
    name="gpufleet",
    help="Schedule model-serving replicas across Kubernetes GPU clusters by free GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufleet {metadata.version('gpufleet')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Schedule model-serving replicas across Kubernetes GPU clusters by free GPUs."""


app.command(name="validate")(validate.command)
app.command(name="plan")(plan.command)
app.command(name="explain")(explain.command)
app.command(name="simulate")(simulate.command)
app.command(name="crds")(crds.command)
app.add_typer(install.app, name="install")
app.command(name="join")(join.join)
app.command(name="unjoin")(join.unjoin)
app.command(name="controller")(controller.command)
app.command(name="agent")(agent.command)
app.command(name="bench")(bench.command)
