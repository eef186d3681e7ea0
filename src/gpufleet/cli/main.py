"""The `gpufleet` command line: one typer `app`, one module per command, each loaded on use.

To add a command, write `gpufleet/cli/<name>.py` with a function `command(...)` (typer
parameters, docstring as help) and add one `Entry` to `COMMANDS` below: its module, the
function (or a `typer.Typer` sub-app), the one-line summary `gpufleet --help` lists, and
examples (shown under the command's own `--help`). tests/cli/test_main.py checks that each
summary is the first sentence of its command's help.

**Lazy.** A command's module (and what it imports: pydantic models, the CEL engine, the
simulator, lightkube) is imported only when that command runs or shows its own help: `gpufleet
--help`, `--version` and completing a command name import typer and this module alone
(docs/performance.md, "CLI start-up"). Help is click's plain layout (`rich_markup_mode=None`):
placeholders are click's (`TEXT`, `INTEGER`, `[table|json|yaml]`), never Python types.

`--version` prints `gpufleet <version>` (the installed package's); typer's
`--install-completion` / `--show-completion` give shell completion. A command name after its
arguments (`gpufleet examples/one-node plan`) fails with the order to use. Usage lines spell
arguments the POSIX way: `FILE_OR_DIR...` (one or more), `[SCENARIO]` (optional).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Annotated, Any, Final

import typer
import typer.main
from typer._click.shell_completion import CompletionItem
from typer.core import TyperCommand, TyperGroup

PACKAGE = "gpufleet"


@dataclass(frozen=True, slots=True)
class Entry:
    """One command: where it lives, its summary and its examples."""

    module: str
    attribute: str
    summary: str
    examples: tuple[str, ...] = ()


COMMANDS: Final = {
    "validate": Entry(
        "gpufleet.cli.validate",
        "command",
        "Validate manifests: list every error of every object; exit 1 if any is invalid.",
        (
            "gpufleet validate examples/fleet",
            "kubectl get mdep -A -o yaml | gpufleet validate -",
        ),
    ),
    "plan": Entry(
        "gpufleet.cli.plan",
        "command",
        "Schedule the fleet's manifests and print every deployment's decision and the pools.",
        (
            "gpufleet plan examples/one-node --now 2026-11-29T10:00:05Z",
            "gpufleet plan examples/fleet -o json",
        ),
    ),
    "explain": Entry(
        "gpufleet.cli.explain",
        "command",
        "Explain one deployment's decision: every cluster's verdict and every pool's fit.",
        (
            "gpufleet explain ml-team/qwen-2-7b examples/one-node --now 2026-11-29T10:00:05Z",
            "gpufleet explain llama -n ml fleet.yaml -o yaml",
        ),
    ),
    "simulate": Entry(
        "gpufleet.cli.simulate",
        "command",
        "Run a scenario on the simulated fleet (real agent and controller) and report it.",
        (
            "gpufleet simulate",
            "gpufleet simulate --list",
            "gpufleet simulate eks-validation --report /tmp/eks.html",
            "gpufleet simulate mixed-churn --compare steering",
        ),
    ),
    "crds": Entry(
        "gpufleet.cli.crds",
        "command",
        "Print the gpufleet.io CRDs as YAML (pipe into `kubectl apply --server-side -f -`).",
        ("gpufleet crds | kubectl apply --server-side -f -",),
    ),
    "install": Entry(
        "gpufleet.cli.install",
        "app",
        "Print install manifests (pipe into `kubectl apply -f -`).",
        (
            "gpufleet install hub | kubectl --context hub apply --server-side -f -",
            "gpufleet install agent --cluster gke-us-central | kubectl --context gke-us-central "
            "apply --server-side -f -",
        ),
    ),
    "join": Entry(
        "gpufleet.cli.join",
        "join",
        "Join a workload cluster: its identity and token on the hub, its agent's Secret.",
        (
            "gpufleet join --cluster gke-us-central --hub-context hub --member-context "
            "gke-us-central --pool l4=l4-4x:2",
            "gpufleet join --cluster gke-us-central --member-context gke-us-central "
            "--token abcdef.0123456789abcdef --hub https://hub.example:6443 --hub-ca hub-ca.crt",
        ),
    ),
    "token": Entry(
        "gpufleet.cli.token",
        "app",
        "Bootstrap tokens for the pull-style join (on the hub).",
        (
            "gpufleet token create --cluster gke-us-central --ttl 1h --hub-context hub "
            "--pool l4=l4-4x:2",
        ),
    ),
    "unjoin": Entry(
        "gpufleet.cli.join",
        "unjoin",
        "Disconnect a workload cluster: delete its agent's hub identity and its Secret.",
        (
            "gpufleet unjoin --cluster gke-us-central --hub-context hub --member-context gke-us-central",
        ),
    ),
    "controller": Entry(
        "gpufleet.cli.controller",
        "command",
        "Run the hub controller: publish cluster status, schedule the fleet (leader only).",
        ("gpufleet controller --kubeconfig hub.yaml --no-leader-elect --log-format text",),
    ),
    "agent": Entry(
        "gpufleet.cli.agent",
        "command",
        "Run a workload cluster's agent: report free GPUs to the hub, materialize replicas.",
        ("gpufleet agent --cluster gke-us-central --hub-kubeconfig hub-agent.yaml",),
    ),
    "bench": Entry(
        "gpufleet.cli.bench",
        "command",
        "Run the benchmarks and print their tables; optionally write docs/performance.md.",
        ("gpufleet bench", "gpufleet bench --write docs/performance.md"),
    ),
}


def version() -> str:
    """The installed package's version ("unknown" when it is not installed)."""
    from importlib import metadata

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


def epilog(entry: Entry) -> str | None:
    """The examples, kept as lines (click's `\\b` stops it re-wrapping the paragraph)."""
    if not entry.examples:
        return None
    return "\b\nExamples:\n" + "\n".join(f"  {e}" for e in entry.examples)


#: A placeholder per type typer would show (`<str>`): what `--help` shows after an option.
PLACEHOLDERS: Final = {
    "str": "TEXT",
    "int": "INTEGER",
    "int range": "INTEGER",
    "float": "NUMBER",
    "float range": "NUMBER",
    "Path": "PATH",
    "path": "PATH",
    "file": "PATH",
    "directory": "DIR",
    "list[Path]": "PATH",
    "list[str]": "TEXT",
    "datetime": "TIME",
}


def placeholder(shown: str | None) -> str | None:
    """`<str>` -> `TEXT`, `<list[Path]>` -> `PATH`, `<table|json|yaml>` -> `table|json|yaml`."""
    if shown is None or not shown.startswith("<"):
        return shown
    inner = shown.removesuffix("...").strip("<>")
    return PLACEHOLDERS.get(inner, inner if "|" in inner else inner.upper())


def _no_type(ctx: Any) -> None:
    return None


def plain_placeholders(command: Any) -> None:
    """Give every option that takes a value a click-style placeholder (`TEXT`, `PATH`,
    `table|json|yaml`) where typer would show a Python type (`<str>`, `<list[Path]>`), and
    arguments none (their name is their placeholder). A metavar a command sets is kept."""
    for param in command.params:
        if param.param_type_name == "argument":
            object.__setattr__(param, "display_type_rich", _no_type)
        elif param.param_type_name == "option" and param.metavar is None:
            shown = param.display_type_rich

            def plain(ctx: Any, shown: Any = shown) -> str | None:
                return placeholder(shown(ctx))

            object.__setattr__(param, "display_type_rich", plain)
    for sub in getattr(command, "commands", {}).values():
        plain_placeholders(sub)


def load(name: str) -> Any:
    """The click command of `name`, importing its module now."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        command: Any = typer.main.get_command(target)
        command.epilog = epilog(entry)
    else:
        holder = typer.Typer(rich_markup_mode=None, add_completion=False)
        holder.command(name=name, cls=Command, epilog=epilog(entry))(target)
        command = typer.main.get_command(holder)
    plain_placeholders(command)
    return command


class Group(TyperGroup):
    """The root group: commands load on use (`load`); the command list in `--help` and name
    completion come from `COMMANDS` without loading any. A command name given after arguments
    gets the order to use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        return load(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, entry.summary) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[CompletionItem]:
        return [
            CompletionItem(name, help=entry.summary)
            for name, entry in COMMANDS.items()
            if name.startswith(incomplete)
        ]

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            later = [a for a in args[1:] if a in COMMANDS]
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
    rich_markup_mode=None,
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
