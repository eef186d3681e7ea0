"""`gpufleet validate FILE_OR_DIR...`: check manifests and list every error of every object.

Prints one line per valid object (`ok   InferenceCluster/gke-us-central  fleet.yaml#2`), one
line per error of each invalid object, file or path
(`✗ ModelDeployment ml/llama: spec.replicas: must be at most 1000  (deploy.yaml#1)`), one note
per object of another API that it skipped (`- skipped apps/v1 Deployment web: not a gpufleet.io
object  (app.yaml#1)`), then a summary. Colour only on a terminal; the text is the same either
way, so it greps and diffs. `--output json|yaml` prints the same verdicts as one document
(docs/cli.md).

Exits 0 when everything is valid, 1 otherwise, and 2 when a file breaks an input bound (size,
nesting depth, alias expansion: the error names the limit).
"""

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.text import Text

from gpufleet.api import LimitExceeded, Manifest, Skipped, ValidationFailed, check_paths


class ValidateOutput(StrEnum):
    TEXT = "text"
    JSON = "json"
    YAML = "yaml"


Result = Manifest | ValidationFailed | Skipped


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


def skipped_line(skipped: Skipped) -> Text:
    return Text(f"- {skipped.note()}", style="dim")


def exit_code(results: list[Result]) -> int:
    """2 when a file broke an input bound (unusable input), else 1 for invalid manifests."""
    return 2 if any(isinstance(r, LimitExceeded) for r in results) else 1


def summary(results: list[Result]) -> str:
    """`4 valid, 1 invalid, 2 skipped (3 errors)`; parts with nothing to say are left out."""
    valid = sum(isinstance(r, Manifest) for r in results)
    failures = [r for r in results if isinstance(r, ValidationFailed)]
    skipped = sum(isinstance(r, Skipped) for r in results)
    text = f"{valid} valid, {len(failures)} invalid"
    if skipped:
        text += f", {skipped} skipped"
    if failures:
        text += f" ({count_of(sum(len(f.errors) for f in failures), 'error')})"
    return text


def result_json(result: Result) -> dict[str, Any]:
    """One verdict as a JSON object (docs/cli.md)."""
    if isinstance(result, Manifest):
        obj = result.obj
        return {
            "source": str(result.source),
            "kind": obj.kind,
            "name": obj.display_name,
            "valid": True,
        }
    if isinstance(result, Skipped):
        return {
            "source": str(result.source),
            "apiVersion": result.api_version,
            "kind": result.kind,
            "name": result.name,
            "skipped": True,
            "reason": "not a gpufleet.io object",
        }
    body: dict[str, Any] = {
        "source": result.source,
        "kind": result.kind,
        "name": result.name,
        "valid": False,
        "errors": [{"path": e.path, "message": e.message} for e in result.errors],
    }
    if isinstance(result, LimitExceeded):
        body["limit"] = {"name": result.limit, "value": result.value}
    return body


def report_json(results: list[Result]) -> dict[str, Any]:
    failures = [r for r in results if isinstance(r, ValidationFailed)]
    return {
        "valid": sum(isinstance(r, Manifest) for r in results),
        "invalid": len(failures),
        "skipped": sum(isinstance(r, Skipped) for r in results),
        "errors": sum(len(f.errors) for f in failures),
        "objects": [result_json(r) for r in results],
    }


def command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE_OR_DIR", help="Manifest files, or directories of *.yaml/*.yml files."
        ),
    ],
    recursive: Annotated[
        bool, typer.Option("--recursive", "-R", help="Also read subdirectories.")
    ] = False,
    output: Annotated[
        ValidateOutput,
        typer.Option("--output", "-o", help="How to print the verdicts: text, json or yaml."),
    ] = ValidateOutput.TEXT,
) -> None:
    """Validate manifests: list every error of every object; exit 1 if any is invalid."""
    results = check_paths(paths, recursive=recursive)
    failed = any(isinstance(r, ValidationFailed) for r in results)
    if output is ValidateOutput.TEXT:
        _print_text(results)
    elif output is ValidateOutput.JSON:
        typer.echo(json.dumps(report_json(results), indent=2))
    else:
        typer.echo(yaml.safe_dump(report_json(results), sort_keys=False), nl=False)
    if failed:
        raise typer.Exit(code=exit_code(results))


def _print_text(results: list[Result]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    for result in results:
        if isinstance(result, Manifest):
            console.print(_ok_line(result))
        elif isinstance(result, Skipped):
            console.print(skipped_line(result))
        else:
            for line in error_lines(result):
                console.print(line)
    console.print(summary(results))
