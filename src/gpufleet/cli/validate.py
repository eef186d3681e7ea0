"""`gpufleet validate FILE_OR_DIR...`: check manifests and list every error of every object.

Prints one line per valid object (`ok   InferenceCluster/gke-us-central  fleet.yaml#2`) and one
line per error of each invalid object, file or path
(`✗ ModelDeployment ml/llama: spec.replicas: must be at most 1000  (deploy.yaml#1)`), then a
summary. Exits 0 when everything is valid, 1 otherwise. Colour only on a terminal; the text is
the same either way, so it greps and diffs. Exits 2 instead when a file breaks an input bound
(size, nesting depth, alias expansion: the error names the limit).
"""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gpufleet.api import LimitExceeded, Manifest, ValidationFailed, check_paths


def _ok_line(manifest: Manifest) -> Text:
    obj = manifest.obj
    line = Text()
    line.append("ok", style="green")
    line.append(f"   {obj.kind}/{obj.display_name}  {manifest.source}")
    return line


def count_of(n: int, noun: str) -> str:
    """`1 error`, `2 errors`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def error_lines(failure: ValidationFailed) -> list[Text]:
    """One line per error; the source follows the first line, continuation lines indent."""
    where = f"  ({failure.source})" if failure.kind and failure.source else ""
    lines = []
    for text in failure.lines():
        first, *rest = text.split("\n")
        line = Text()
        line.append("✗", style="bold red")
        line.append(f" {first}{where}")
        for continuation in rest:
            line.append(f"\n    {continuation}")
        lines.append(line)
    return lines


def command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Manifest files, or directories of *.yaml/*.yml files."),
    ],
    recursive: Annotated[
        bool, typer.Option("--recursive", "-R", help="Also read subdirectories.")
    ] = False,
) -> None:
    """Validate manifests: list every error of every object; exit 1 if any is invalid."""
    console = Console(highlight=False, soft_wrap=True)
    results = check_paths(paths, recursive=recursive)
    valid = invalid = errors = 0
    for result in results:
        if isinstance(result, Manifest):
            valid += 1
            console.print(_ok_line(result))
        else:
            invalid += 1
            errors += len(result.errors)
            for line in error_lines(result):
                console.print(line)
    summary = f"{valid} valid, {invalid} invalid"
    if invalid:
        console.print(f"{summary} ({count_of(errors, 'error')})")
        raise typer.Exit(code=exit_code(results))
    console.print(summary)


def exit_code(results: list[Manifest | ValidationFailed]) -> int:
    """2 when a file broke an input bound (unusable input), else 1 for invalid manifests."""
    return 2 if any(isinstance(r, LimitExceeded) for r in results) else 1
