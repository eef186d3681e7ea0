"""The `gpufleet` command line: one typer `app`, one module per command.

To add a command, write `gpufleet/cli/<name>.py` with a function `command(...)` (typer
parameters, docstring as help) and register it below with one line.

`--version` prints `gpufleet <version>` (the installed package's); typer's
`--install-completion` / `--show-completion` give shell completion. A command name after its
arguments (`gpufleet examples/one-node plan`) fails with the order to use. Usage lines spell
arguments the POSIX way: `FILE_OR_DIR...` (one or more), `[SCENARIO]` (optional).
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

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

PACKAGE = "gpufleet"


def version() -> str:
    """The installed package's version ("unknown" when it is not installed)."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def usage_name(param: Any) -> str:
    """An argument in a usage line: `NAME`, `[NAME]`, `NAME...`, `[NAME]...`."""
    name = str(param.metavar or str(param.name).upper()).strip("[]")
    if not param.required:
        name = f"[{name}]"
    return f"{name}..." if param.nargs != 1 else name


class Command(TyperCommand):
    """A typer command whose usage line reads `gpufleet plan [OPTIONS] FILE_OR_DIR...`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(usage_name(param))
        return pieces


class Group(TyperGroup):
    """The root group: a command name given after arguments gets the order to use."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            later = [a for a in args[1:] if a in self.commands]
            if later:
                rest = list(args)
                rest.remove(later[0])
                ctx.fail(
                    f"No such command {args[0]!r}. The command comes first: "
                    f"gpufleet {later[0]} {' '.join(rest)}"
                )
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="gpufleet",
    cls=Group,
    help="Schedule model-serving replicas across Kubernetes GPU clusters by free GPUs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufleet {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Schedule model-serving replicas across Kubernetes GPU clusters by free GPUs."""


app.command(name="validate", cls=Command)(validate.command)
app.command(name="plan", cls=Command)(plan.command)
app.command(name="explain", cls=Command)(explain.command)
app.command(name="simulate", cls=Command)(simulate.command)
app.command(name="crds", cls=Command)(crds.command)
app.add_typer(install.app, name="install")
app.command(name="join", cls=Command)(join.join)
app.command(name="unjoin", cls=Command)(join.unjoin)
app.command(name="controller", cls=Command)(controller.command)
app.command(name="agent", cls=Command)(agent.command)
app.command(name="bench", cls=Command)(bench.command)
