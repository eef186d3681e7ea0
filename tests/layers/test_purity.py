"""The core is pure: it imports only the standard library and itself.

import-linter (`make layers`) enforces the direction between our packages; this test closes
the gap it leaves: third-party imports inside `gpufleet.core` (pydantic, yaml, cel, clients).
"""

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).parents[2] / "src" / "gpufleet" / "core"


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_only_stdlib_and_core(path: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"gpufleet"}
    outside = imported_roots(path) - allowed
    assert not outside, f"{path.name} imports {sorted(outside)}"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpufleet"):
            assert node.module.startswith("gpufleet.core"), f"{path.name} imports {node.module}"


def test_the_scan_sees_core_modules() -> None:
    assert (CORE / "model.py") in set(CORE.glob("*.py"))
