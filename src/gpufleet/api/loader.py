"""Reading manifests from files and directories, as `kubectl apply -f` reads them.

A path is a file or a directory (its `*.yaml` and `*.yml` files, sorted by name; with
`recursive`, its subdirectories too). A file holds one or more YAML documents; empty documents
are skipped and a `kind: List` (or `<Kind>List`) document is unwrapped into its `items`. Each
object is tagged with its `Source`: the file, the document's 1-based position in the file
(counting empty documents, so it matches what an editor shows), and the item index inside a
List.

YAML is read as Kubernetes reads it: as JSON-shaped data. Timestamps stay strings (the models
parse them), and a duplicate key in a mapping is an error rather than a silent overwrite.

Nothing here raises a traceback for bad input: `check_paths` returns a `ValidationFailed` in
place of each unreadable file, malformed file or invalid object (and keeps going), and
`load_manifests` raises them all at once as `ManifestsInvalid`.
"""

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode

from gpufleet.api.errors import FieldError, ManifestsInvalid, ValidationFailed
from gpufleet.api.models import ApiObject
from gpufleet.api.validation import parse_object

MANIFEST_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class Source:
    """Where an object was read: `path#document`, plus ` items[i]` inside a List."""

    path: str
    document: int
    item: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}#{self.document}"
        return where if self.item is None else f"{where} items[{self.item}]"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A valid object and where it was read."""

    source: Source
    obj: ApiObject


class _KubernetesYamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML timestamps (they stay strings) and with duplicate keys refused."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _file_error(path: Path, message: str) -> ValidationFailed:
    return ValidationFailed((FieldError("", message),), source=str(path))


def _manifest_files(path: Path, *, recursive: bool) -> list[Path]:
    """The manifest files a path names; raise ValidationFailed when it names none."""
    if path.is_dir():
        pattern = "**/*" if recursive else "*"
        found = sorted(
            p for p in path.glob(pattern) if p.suffix in MANIFEST_SUFFIXES and p.is_file()
        )
        if not found:
            raise _file_error(path, "no *.yaml or *.yml files in this directory")
        return found
    if path.exists():
        return [path]
    raise _file_error(path, "no such file or directory")


def _documents(path: Path) -> list[tuple[int, object]]:
    """The file's non-empty documents with their 1-based positions."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _file_error(path, f"cannot read: {error}") from None
    try:
        loaded = list(yaml.load_all(text, Loader=_KubernetesYamlLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "unparsable"
        raise _file_error(path, f"malformed YAML{where}: {problem}") from None
    except yaml.YAMLError as error:
        raise _file_error(path, f"malformed YAML: {error}") from None
    documents = [(index, doc) for index, doc in enumerate(loaded, start=1) if doc is not None]
    if not documents:
        raise _file_error(path, "contains no objects")
    return documents


def _objects(path: Path) -> Iterator[tuple[Source, object]]:
    for document, body in _documents(path):
        kind = body.get("kind") if isinstance(body, dict) else None
        items = body.get("items") if isinstance(body, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            for item, item_body in enumerate(items):
                yield Source(str(path), document, item), item_body
        else:
            yield Source(str(path), document), body


def _identity_key(obj: ApiObject) -> tuple[str, str, str]:
    return obj.kind, obj.metadata.namespace or "", obj.metadata.name


def check_paths(
    paths: Iterable[str | Path], *, recursive: bool = False
) -> list[Manifest | ValidationFailed]:
    """Every object under the paths, each a Manifest or the ValidationFailed that rejects it.

    Never raises for bad input: an unreadable path or a malformed file is one
    ValidationFailed in the list, and checking goes on with the next. An object repeating the
    kind, namespace and name of an earlier one is rejected.
    """
    results: list[Manifest | ValidationFailed] = []
    first_seen: dict[tuple[str, str, str], Source] = {}
    for raw in paths:
        try:
            files = _manifest_files(Path(raw), recursive=recursive)
        except ValidationFailed as failure:
            results.append(failure)
            continue
        for path in files:
            results.extend(_check_file(path, first_seen))
    return results


def _check_file(
    path: Path, first_seen: dict[tuple[str, str, str], Source]
) -> list[Manifest | ValidationFailed]:
    try:
        objects = list(_objects(path))
    except ValidationFailed as failure:
        return [failure]
    results: list[Manifest | ValidationFailed] = []
    for source, body in objects:
        try:
            obj = parse_object(body, source=str(source))
        except ValidationFailed as failure:
            results.append(failure)
            continue
        key = _identity_key(obj)
        if key in first_seen:
            message = f"duplicate object: also defined at {first_seen[key]}"
            results.append(
                ValidationFailed(
                    (FieldError("metadata.name", message),),
                    kind=obj.kind,
                    name=obj.display_name,
                    source=str(source),
                )
            )
            continue
        first_seen[key] = source
        results.append(Manifest(source, obj))
    return results


def load_manifests(paths: Iterable[str | Path], *, recursive: bool = False) -> list[Manifest]:
    """Every object under the paths; raise ManifestsInvalid listing every failure if any."""
    results = check_paths(paths, recursive=recursive)
    failures = tuple(r for r in results if isinstance(r, ValidationFailed))
    if failures:
        raise ManifestsInvalid(failures)
    return [r for r in results if isinstance(r, Manifest)]
