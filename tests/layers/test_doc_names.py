"""Every code name the docs put in backticks names something in the code (issue 24: docs/
described `SettledCache`, `_quiet_record` and code long gone).

The rule, for inline code spans in docs/*.md and docs/design/*.md (fenced blocks are
commands and files, not names):

- A span is checked token by token. A token is checked only when it looks like a code name:
  CamelCase with two humps or more (`WorkloadCluster`), a name with an underscore
  (`free_devices`, `_quiet_record`, `GPU_TAINT`), a call (`next_due()`), a dotted name with
  such a part or under `gpufleet` (`gpufleet.sim.emulated.dra`, `MemoryStore.changes_after`:
  each part is checked; `spec.replicas` or `q.sign()` are fields and CEL, not checked) or a
  CLI flag (`--visit-all`). A span with `/`, `:` or `=` in a token is a path, URL, label or setting:
  only a path ending `.py` is checked, that the file exists (under the repo, `src/` or
  `src/gpufleet/`).
- A name is known when the code defines or uses it: any identifier in src/, bench/ or
  tests/ (modules, classes, functions, arguments, attributes, names), or any word of a
  string literal in src/ or bench/ other than a docstring (metric names, reason codes, CLI
  flags, YAML and CRD fields, Kubernetes kinds). Docstrings do not count: they are prose, and
  stale prose is what this check looks for. A Prometheus series `<name>_total` (or `_bucket`,
  `_sum`, `_count`) is known when `<name>` is, as prometheus_client adds the suffix.
- `ALLOWED` holds the few names the docs may use that are none of those (other projects'
  code), each with why.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = sorted([*ROOT.glob("docs/*.md"), *ROOT.glob("docs/design/*.md")])

#: Names the docs may use that the code does not: other projects' identifiers, each with why.
ALLOWED: frozenset[str] = frozenset(
    {
        # Other projects' code the docs compare with: client-go, kube-scheduler, typer's own
        # flags, kubectl's and pip's flags, Kubernetes' reasons and cluster-autoscaler's taint.
        "HandleCrash",
        "UpdateSnapshot",
        "DefaultSelector",
        "--help",
        "--install-completion",
        "--show-completion",
        "--field-selector",
        "--ignore-daemonsets",
        "--timeout",
        "--no-index",
        "CreateContainerConfigError",
        "ToBeDeletedByClusterAutoscaler",
        # An invalid pool name, the example of docs/api.md's error report.
        "GPU_pool",
    }
)

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_TOKEN = re.compile(r"--?[A-Za-z][\w-]*|[A-Za-z_][\w./:=-]*(?:\(\))?")
_CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_WORD = re.compile(r"--[A-Za-z][\w-]*|[A-Za-z_][\w-]*")


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def known_names(tree: ast.AST, *, with_strings: bool) -> set[str]:
    """The identifiers `tree` defines or uses, and the words of its non-docstring strings."""
    names: set[str] = set()
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
            if node.asname:
                names.add(node.asname)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
        elif (
            with_strings
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
        ):
            names.update(_WORD.findall(node.value))
            names.update(w.strip(".") for w in re.findall(r"[\w.-]+", node.value))
    return names


def code_names() -> set[str]:
    names: set[str] = set()
    for top, with_strings in (("src", True), ("bench", True), ("tests", False)):
        for path in (ROOT / top).rglob("*.py"):
            names |= known_names(ast.parse(path.read_text()), with_strings=with_strings)
            names.update(path.relative_to(ROOT / top).with_suffix("").parts)
    return names


def is_code_name(token: str) -> bool:
    """Whether `token` looks like a code name (the shapes the module docstring lists)."""
    if token.startswith("-"):
        return token.startswith("--")
    if "." in token:
        parts = token.removesuffix("()").split(".")
        return all(_IDENT.match(p) for p in parts) and (
            parts[0] == "gpufleet" or any(_is_name_shape(p) for p in parts)
        )
    if token.endswith("()"):
        return True
    return _is_name_shape(token)


def _is_name_shape(token: str) -> bool:
    return bool(_CAMEL.match(token) or ("_" in token.strip("_") and _IDENT.match(token)))


def _is_known(part: str, known: set[str]) -> bool:
    if part in known:
        return True
    base, _, suffix = part.rpartition("_")
    return suffix in ("total", "bucket", "sum", "count") and base in known


def stale_in(text: str, known: set[str]) -> list[str]:
    """The code names in `text`'s inline spans that name nothing in `known`, in order."""
    stale: list[str] = []
    for span in _SPAN.findall(_FENCE.sub("", text)):
        for token in _TOKEN.findall(span):
            token = token.rstrip(".-")
            if any(c in token for c in "/:="):
                if token.endswith(".py") and not _path_exists(token):
                    stale.append(token)
                continue
            if not is_code_name(token) or token.removesuffix("()") in ALLOWED:
                continue
            parts = token.removesuffix("()").split(".")
            if token.startswith("--"):
                parts = [token]
            if any(part and not _is_known(part, known) for part in parts):
                stale.append(token)
    return stale


def _path_exists(path: str) -> bool:
    return any((base / path).exists() for base in (ROOT, ROOT / "src", ROOT / "src" / "gpufleet"))


def test_the_rule_checks_code_shapes_only() -> None:
    text = (
        "`SettledCache` and `_quiet_record()` are gone; `Ready`, `kubectl get pods` and "
        "`maxNodeCount` are not code names; `WorkloadCluster.tick()` and `--visit-all` are, "
        "`sim/gone.py` is a path, `nvidia.com/gpu` a resource.\n"
        "```\n`NotChecked`\n```\n"
    )
    known = {"WorkloadCluster", "tick"}
    assert stale_in(text, known) == [
        "SettledCache",
        "_quiet_record()",
        "--visit-all",
        "sim/gone.py",
    ]


def test_docs_name_only_code_that_exists() -> None:
    known = code_names()
    stale = {
        str(doc.relative_to(ROOT)): names
        for doc in DOCS
        if (names := sorted(set(stale_in(doc.read_text(), known))))
    }
    assert stale == {}, f"backticked code names that name nothing in the code: {stale}"
