"""What users read carries no internal references (sections of a review or of the system
gpufleet replaces), and the words it uses in a sense of its own are in docs/glossary.md,
which README links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from gpufleet.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BUILTIN = ROOT / "src" / "gpufleet" / "sim" / "scenario" / "builtin"
#: "reference 3.11", "reference scenario 56", "Modelplane HEAD", "review point 1".
INTERNAL = re.compile(
    r"\breference (scenarios? )?\d|\bModelplane\b|\breview point\b|(?-i:\bOn main\b)", re.I
)
runner = CliRunner()


def user_documents() -> list[Path]:
    # docs/design holds design notes for contributors, not user documentation.
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", user_documents(), ids=lambda p: p.name)
def test_documents_carry_no_internal_references(path: Path) -> None:
    found = [m.group(0) for m in INTERNAL.finditer(path.read_text())]
    assert not found, f"{path.name}: {found}"


@pytest.mark.parametrize("path", sorted(BUILTIN.glob("*.yaml")), ids=lambda p: p.stem)
def test_scenario_descriptions_carry_no_internal_references(path: Path) -> None:
    description = yaml.safe_load(path.read_text())["description"]
    assert not INTERNAL.search(description), description


def help_texts() -> list[tuple[str, str]]:
    command = get_command(app)
    found = [("gpufleet", runner.invoke(app, ["--help"]).output)]
    for name in sorted(getattr(command, "commands", {})):
        found.append((name, runner.invoke(app, [name, "--help"]).output))
    return found


def test_help_and_the_scenario_list_carry_no_internal_references() -> None:
    texts = [*help_texts(), ("simulate --list", runner.invoke(app, ["simulate", "--list"]).output)]
    for name, text in texts:
        assert text.strip(), name
        assert not INTERNAL.search(text), f"{name}: {text}"


def test_the_glossary_defines_the_terms_users_meet_and_readme_links_it() -> None:
    glossary = (DOCS / "glossary.md").read_text()
    terms = set(re.findall(r"\*\*([^*]+)\*\*", glossary))
    for term in ("charging", "fence", "incarnation", "published", "epoch", "pool", "steering"):
        assert any(term in t for t in terms), f"the glossary does not define {term!r}"
    assert "(docs/glossary.md)" in (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\(([a-z]+\.md)\)", glossary):
        assert (DOCS / link).is_file(), link
