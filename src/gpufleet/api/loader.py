"""Reading manifests from files and directories, as `kubectl apply -f` reads them.

A path is a file, a directory (its `*.yaml` and `*.yml` files, sorted by name; with
`recursive`, its subdirectories too), or `-` for standard input (read once; named `stdin`). A
file holds one or more YAML documents; empty documents are skipped and a `kind: List` (or
`<Kind>List`) document is unwrapped into its `items`. Each object is tagged with its `Source`:
the file, the line its object starts on (`deploy.yaml:12`, what an editor shows), the
document's 1-based position in the file (counting empty documents) and the item index inside
a List. A `ValidationFailed` for an object carries, beside each error, where the field the
error names is (`error_sources`, `path:line`: the deepest part of its path the file spells
out).

YAML is read as Kubernetes reads it: as JSON-shaped data. Timestamps stay strings (the models
parse them), a duplicate key in a mapping is an error rather than a silent overwrite, and a key
that is a list or a mapping (`? [a]`) is an error.

Every input bound is explicit and named when hit (`LimitExceeded`; the CLI exits 2):

- a file is at most `MAX_FILE_BYTES` (3 MiB, the API server's request limit): checked before
  parsing, so a 50 MB file is refused at once;
- YAML nests at most `MAX_DEPTH` (100) levels, aliases included, checked while composing, so
  deep input ends in this error, not in a RecursionError;
- aliases add at most `MAX_ALIAS_NODES` (100,000) nodes to what the file spells out (counting
  each alias as the whole node it stands for), so an alias bomb ("billion laughs") is refused
  before anything is built from it.

`load_yaml_documents(text, source)` applies these rules to any YAML text; other readers of YAML
(the scenario loader) can share them.

An object of another API group (an `apps/v1` Deployment in a GitOps folder) is not an error:
`check_paths` returns it as `Skipped`, so a folder that mixes gpufleet manifests with others can
be checked and planned as it is. An object of the `gpufleet.io` group with an unknown kind or
version is an error (a typo, not someone else's object).

Nothing here raises a traceback for bad input: `check_paths` returns a `ValidationFailed` in
place of each unreadable file, malformed file or invalid object (and keeps going), and
`load_manifests` raises them all at once as `ManifestsInvalid`.
"""

import sys
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpufleet.api.errors import FieldError, LimitExceeded, ManifestsInvalid, ValidationFailed
from gpufleet.api.kinds import ApiObject
from gpufleet.api.models import API_GROUP
from gpufleet.api.validation import parse_object

MANIFEST_SUFFIXES = (".yaml", ".yml")

MAX_FILE_BYTES: Final = 3 * 1024 * 1024
MAX_DEPTH: Final = 100
MAX_ALIAS_NODES: Final = 100_000
#: The path that means standard input, and the name its objects are read from.
STDIN: Final = "-"
STDIN_NAME: Final = "stdin"


@dataclass(frozen=True, slots=True)
class Source:
    """Where an object was read: `path:line` (the line its object starts on), else
    `path#document`, plus ` items[i]` inside a List without a line."""

    path: str
    document: int
    item: int | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.path}:{self.line}"
        where = f"{self.path}#{self.document}"
        return where if self.item is None else f"{where} items[{self.item}]"


def line_of(node: Node | None, path: str) -> int | None:
    """The 1-based line of the field `path` (`spec.engines[0].count`) under `node`: of the
    deepest part of the path the YAML spells out (a missing field: its parent's line)."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in _path_parts(path):
        found: Node | None = None
        if isinstance(part, int) and isinstance(node, SequenceNode):
            found = node.value[part] if 0 <= part < len(node.value) else None
        elif isinstance(part, str) and isinstance(node, MappingNode):
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.value == part:
                    line, found = key.start_mark.line + 1, value
                    break
        if found is None:
            return line
        node = found
        if isinstance(part, int):
            line = node.start_mark.line + 1
    return line


def _path_parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name_index in path.split(".") if path else []:
        name, *indexes = name_index.split("[")
        if name:
            parts.append(name)
        parts.extend(int(i.rstrip("]")) for i in indexes if i.rstrip("]").isdigit())
    return parts


@dataclass(frozen=True, slots=True)
class Manifest:
    """A valid object and where it was read (`node`: its YAML, for `line_of`)."""

    source: Source
    obj: ApiObject
    node: Node | None = field(default=None, compare=False, repr=False)

    def where(self, path: str) -> str:
        """`file:line` of the field `path` of this object, else its source."""
        line = line_of(self.node, path)
        return f"{self.source.path}:{line}" if line is not None else str(self.source)


class YamlLimitError(yaml.YAMLError):
    """The YAML breaks an input bound: `limit` names it, `value` is the bound."""

    def __init__(self, message: str, *, limit: str, value: int) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit
        self.value = value


@dataclass(frozen=True, slots=True)
class Skipped:
    """An object of another API (not `gpufleet.io`), read and left alone."""

    source: Source
    api_version: str
    kind: str
    name: str

    def note(self) -> str:
        """`skipped apps/v1 Deployment web: not a gpufleet.io object  (path#1)`."""
        named = f"{self.kind} {self.name}".rstrip()
        return f"skipped {self.api_version} {named}: not a {API_GROUP} object  ({self.source})"


def _foreign(body: object, source: Source) -> Skipped | None:
    """The body as a Skipped object when it belongs to another API group."""
    if not isinstance(body, dict):
        return None
    api_version, kind, metadata = body.get("apiVersion"), body.get("kind"), body.get("metadata")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
        return None
    group = api_version.rpartition("/")[0]
    if group == API_GROUP:
        return None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return Skipped(source, api_version, kind, name if isinstance(name, str) else "")


class _KubernetesYamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML timestamps (they stay strings), with duplicate and non-scalar
    keys refused, and with nesting depth and alias expansion bounded while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._deepest = 0  # the deepest level reached under the node being composed
        self._nodes = 0  # nodes composed, each alias counted as the node it stands for
        self._alias_nodes = 0
        self._anchored: dict[str, tuple[int, int]] = {}  # anchor: (nodes, height)

    def compose_document(self) -> Node | None:
        self._anchored = {}
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent) and event.anchor in self._anchored:
            nodes, height = self._anchored[event.anchor]
            self._alias_nodes += nodes
            self._nodes += nodes
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise self._limit(
                    f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes",
                    "aliasNodes",
                    MAX_ALIAS_NODES,
                    event,
                )
            self._reach(self._depth + height, event)
            return super().compose_node(parent, index)
        self._depth += 1
        self._reach(self._depth, event)
        outer_deepest, self._deepest = self._deepest, self._depth
        first = self._nodes
        node = super().compose_node(parent, index)
        self._nodes += 1
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._anchored[anchor] = (self._nodes - first, self._deepest - self._depth + 1)
        self._depth -= 1
        self._deepest = max(outer_deepest, self._deepest)
        return node

    def _reach(self, depth: int, event: Any) -> None:
        self._deepest = max(self._deepest, depth)
        if depth > MAX_DEPTH:
            raise self._limit(f"nests deeper than {MAX_DEPTH} levels", "depth", MAX_DEPTH, event)

    @staticmethod
    def _limit(message: str, limit: str, value: int, event: Any) -> YamlLimitError:
        mark = event.start_mark
        return YamlLimitError(
            f"{message} (at line {mark.line + 1}, column {mark.column + 1}; "
            f"the limit is {value:,})",
            limit=limit,
            value=value,
        )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            mark = key_node.start_mark
            if not isinstance(key_node, ScalarNode):
                message = "a mapping key must be a string, not a list or a mapping"
                raise yaml.constructor.ConstructorError(None, None, message, mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _file_error(path: Path, message: str) -> ValidationFailed:
    return ValidationFailed((FieldError("", message),), source=_name(path))


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


def load_yaml_documents(text: str, source: str) -> list[object]:
    """Every document of `text` (None for an empty one), read with the bounds above.

    Raises `LimitExceeded` for a broken bound and `ValidationFailed` for malformed YAML, both
    naming `source`. `text` is expected to be at most `MAX_FILE_BYTES` long (see `read_bounded`).
    """
    return [data for data, _ in load_yaml_nodes(text, source)]


def load_yaml_nodes(text: str, source: str) -> list[tuple[object, Node | None]]:
    """`load_yaml_documents` with each document's composed node (for `line_of`)."""
    try:
        loader = _KubernetesYamlLoader(text)
        try:
            documents: list[tuple[object, Node | None]] = []
            while loader.check_node():
                node = loader.get_node()
                data = loader.construct_document(node) if node is not None else None
                documents.append((data, node))
            return documents
        finally:
            loader.dispose()
    except YamlLimitError as error:
        message = f"YAML {error.message}"
        raise LimitExceeded(message, limit=error.limit, value=error.value, source=source) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "unparsable"
        message = f"malformed YAML{where}: {problem}"
        raise ValidationFailed((FieldError("", message),), source=source) from None
    except yaml.YAMLError as error:
        message = f"malformed YAML: {error}"
        raise ValidationFailed((FieldError("", message),), source=source) from None


def read_bounded(path: Path) -> str:
    """The file's text (standard input for `-`); `LimitExceeded` past `MAX_FILE_BYTES`,
    ValidationFailed if unreadable."""
    try:
        if str(path) == STDIN:
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            message = f"file is larger than {MAX_FILE_BYTES:,} bytes (the limit)"
            raise LimitExceeded(
                message, limit="fileBytes", value=MAX_FILE_BYTES, source=_name(path)
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _file_error(path, f"cannot read: {error}") from None


def _name(path: Path) -> str:
    return STDIN_NAME if str(path) == STDIN else str(path)


def _documents(path: Path) -> list[tuple[int, object, Node | None]]:
    """The file's non-empty documents with their 1-based positions and nodes."""
    loaded = load_yaml_nodes(read_bounded(path), _name(path))
    documents = [
        (index, doc, node) for index, (doc, node) in enumerate(loaded, start=1) if doc is not None
    ]
    if not documents:
        raise _file_error(path, "contains no objects")
    return documents


def _objects(path: Path) -> Iterator[tuple[Source, object, Node | None]]:
    name = _name(path)
    for document, body, node in _documents(path):
        kind = body.get("kind") if isinstance(body, dict) else None
        items = body.get("items") if isinstance(body, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            items_node = _child(node, "items")
            for item, item_body in enumerate(items):
                item_node = (
                    items_node.value[item]
                    if isinstance(items_node, SequenceNode) and item < len(items_node.value)
                    else None
                )
                line = item_node.start_mark.line + 1 if item_node is not None else None
                yield Source(name, document, item, line), item_body, item_node
        else:
            line = node.start_mark.line + 1 if node is not None else None
            yield Source(name, document, None, line), body, node


def _child(node: Node | None, key: str) -> Node | None:
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode) and k.value == key:
                found: Node = v
                return found
    return None


def _with_lines(failure: ValidationFailed, source: Source, node: Node | None) -> ValidationFailed:
    """`failure` with where each error's field is (`error_sources`: `path:line`)."""
    lines = (line_of(node, e.path) for e in failure.errors)
    failure.error_sources = tuple(
        f"{source.path}:{line}" if line is not None else str(source) for line in lines
    )
    return failure


def _identity_key(obj: ApiObject) -> tuple[str, str, str]:
    return obj.kind, obj.metadata.namespace or "", obj.metadata.name


Result = Manifest | ValidationFailed | Skipped


def check_paths(paths: Iterable[str | Path], *, recursive: bool = False) -> list[Result]:
    """Every object under the paths: a Manifest, the ValidationFailed that rejects it, or a
    Skipped object of another API.

    Never raises for bad input: an unreadable path or a malformed file is one
    ValidationFailed in the list, and checking goes on with the next. An object repeating the
    kind, namespace and name of an earlier one is rejected.
    """
    results: list[Result] = []
    first_seen: dict[tuple[str, str, str], Source] = {}
    for raw in paths:
        if str(raw) == STDIN:
            results.extend(_check_file(Path(STDIN), first_seen))
            continue
        try:
            files = _manifest_files(Path(raw), recursive=recursive)
        except ValidationFailed as failure:
            results.append(failure)
            continue
        for path in files:
            results.extend(_check_file(path, first_seen))
    return results


def _check_file(path: Path, first_seen: dict[tuple[str, str, str], Source]) -> list[Result]:
    try:
        objects = list(_objects(path))
    except ValidationFailed as failure:
        return [failure]
    results: list[Result] = []
    for source, body, node in objects:
        skipped = _foreign(body, source)
        if skipped is not None:
            results.append(skipped)
            continue
        try:
            obj = parse_object(body, source=str(source))
        except ValidationFailed as failure:
            results.append(_with_lines(failure, source, node))
            continue
        key = _identity_key(obj)
        if key in first_seen:
            message = f"duplicate object: also defined at {first_seen[key]}"
            duplicate = ValidationFailed(
                (FieldError("metadata.name", message),),
                kind=obj.kind,
                name=obj.display_name,
                source=str(source),
            )
            results.append(_with_lines(duplicate, source, node))
            continue
        first_seen[key] = source
        results.append(Manifest(source, obj, node))
    return results


def load_manifests(paths: Iterable[str | Path], *, recursive: bool = False) -> list[Manifest]:
    """Every object under the paths; raise ManifestsInvalid listing every failure if any."""
    results = check_paths(paths, recursive=recursive)
    failures = tuple(r for r in results if isinstance(r, ValidationFailed))
    if failures:
        raise ManifestsInvalid(failures)
    return [r for r in results if isinstance(r, Manifest)]
