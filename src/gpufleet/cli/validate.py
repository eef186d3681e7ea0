"""`gpufleet validate FILE_OR_DIR...`: check manifests and list every error of every object.

Reads files, directories, and `-` (standard input). Prints one line per valid object
(`ok   InferenceCluster/gke-us-central  fleet.yaml:14`, the line it starts on), one line per
error of each invalid object, file or path, with the line of the field it names
(`✗ ModelDeployment ml/llama: spec.replicas: must be at most 1000  (deploy.yaml:7)`), one
warning per field of a pod template that an agent with its default policy would refuse
(`! ... hostNetwork: ... (HostNamespace; refused by the agent's default policy)  (deploy.yaml:31)`,
`gpufleet.cli.templates`; warnings do not change the exit code), one note per object of another
API that it skipped (`- skipped apps/v1 Deployment web: not a gpufleet.io object
(app.yaml:1)`), then a summary. Colour only on a terminal; the text is the same either
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
from gpufleet.cli.templates import TemplateWarning, template_warnings


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
    """One line per error; where its field is (`file:line`) follows the first line,
    continuation lines indent."""
    lines = []
    for text, source in zip(failure.lines(), failure.error_sources, strict=True):
        where = f"  ({source})" if failure.kind and source else ""
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


def summary(results: list[Result], warnings: int = 0) -> str:
    """`4 valid, 1 invalid, 2 skipped (3 errors, 1 warning)`; parts with nothing to say are
    left out."""
    valid = sum(isinstance(r, Manifest) for r in results)
    failures = [r for r in results if isinstance(r, ValidationFailed)]
    skipped = sum(isinstance(r, Skipped) for r in results)
    text = f"{valid} valid, {len(failures)} invalid"
    if skipped:
        text += f", {skipped} skipped"
    counts = []
    if failures:
        counts.append(count_of(sum(len(f.errors) for f in failures), "error"))
    if warnings:
        counts.append(count_of(warnings, "warning"))
    return text + (f" ({', '.join(counts)})" if counts else "")


def warning_json(warning: TemplateWarning) -> dict[str, str]:
    return {
        "path": warning.path,
        "code": warning.code,
        "message": warning.message,
        "source": warning.source,
    }


def result_json(result: Result) -> dict[str, Any]:
    """One verdict as a JSON object (docs/cli.md)."""
    if isinstance(result, Manifest):
        obj = result.obj
        verdict: dict[str, Any] = {
            "source": str(result.source),
            "kind": obj.kind,
            "name": obj.display_name,
            "valid": True,
        }
        warnings = template_warnings(result)
        if warnings:
            verdict["warnings"] = [warning_json(w) for w in warnings]
        return verdict
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
        "errors": [
            {"path": e.path, "message": e.message, "source": source}
            for e, source in zip(result.errors, result.error_sources, strict=True)
        ],
    }
    if isinstance(result, LimitExceeded):
        body["limit"] = {"name": result.limit, "value": result.value}
    return body


def report_json(results: list[Result]) -> dict[str, Any]:
    failures = [r for r in results if isinstance(r, ValidationFailed)]
    objects = [result_json(r) for r in results]
    return {
        "valid": sum(isinstance(r, Manifest) for r in results),
        "invalid": len(failures),
        "skipped": sum(isinstance(r, Skipped) for r in results),
        "errors": sum(len(f.errors) for f in failures),
        "warnings": sum(len(o.get("warnings", [])) for o in objects),
        "objects": objects,
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
    warned = 0
    for result in results:
        if isinstance(result, Manifest):
            console.print(_ok_line(result))
            for warning in template_warnings(result):
                warned += 1
                line = Text()
                line.append("!", style="bold yellow")
                line.append(f" {warning.line()}")
                console.print(line)
        elif isinstance(result, Skipped):
            console.print(skipped_line(result))
        else:
            for line in error_lines(result):
                console.print(line)
    console.print(summary(results, warned))
