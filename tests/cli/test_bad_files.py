"""Issue 17.6: hostile and clumsy files end in one clear error naming the limit, never a traceback.

`validate`, `plan` and `explain` read files through the same loader; each case runs through all
three. A hypothesis fuzz test feeds arbitrary text and mutated manifests to the CLI.
"""

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from builders_api import edited, inference_class, inference_cluster, model_deployment
from gpufleet.api.loader import MAX_ALIAS_NODES, MAX_DEPTH, MAX_FILE_BYTES
from gpufleet.cli.main import app

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()
NOW = "2026-11-29T10:00:00Z"
MEMBER = "spec.template.spec.engines[0].members[0]"
COMMANDS = [
    ["validate"],
    ["plan", "--now", NOW],
    ["explain", "ml-team/llama", "--now", NOW],
]


def invoke(command: list[str], path: Path) -> Result:
    """`command` with `path` after its positional arguments (explain takes the deployment first)."""
    split = 2 if command[0] == "explain" else 1
    return runner.invoke(app, [*command[:split], str(path), *command[split:]])


def assert_no_traceback(result: Result) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


CASES = {
    "list as a key": ("? [a]\n: 1\n", 1, "a mapping key must be a string, not a list or a mapping"),
    "map as a key": (
        "? {a: 1}\n: 1\n",
        1,
        "a mapping key must be a string, not a list or a mapping",
    ),
    "kind is a list": (
        "apiVersion: gpufleet.io/v1alpha1\nkind: [ModelDeployment]\nmetadata: {name: x}\n",
        1,
        "kind: must be a string",
    ),
    "apiVersion is a map": (
        "apiVersion: {a: 1}\nkind: ModelDeployment\nmetadata: {name: x}\n",
        1,
        "apiVersion: must be a string",
    ),
    "600 levels of nesting": (
        "a: " + "[" * 600 + "]" * 600 + "\n",
        2,
        f"YAML nests deeper than {MAX_DEPTH} levels",
    ),
    "300 levels of mappings": (
        "".join(f"{' ' * i}k:\n" for i in range(300)) + " " * 300 + "k: 1\n",
        2,
        f"YAML nests deeper than {MAX_DEPTH} levels",
    ),
    "deep through aliases": (
        "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, MAX_DEPTH + 5)),
        2,
        f"YAML nests deeper than {MAX_DEPTH} levels",
    ),
    "8-level alias bomb": (
        "\n".join(
            ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
            + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
        )
        + "\n",
        2,
        f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes",
    ),
    "label key with a control character": (
        yaml.safe_dump(inference_class() | {"metadata": {"name": "c", "labels": {"a\x07b": "x"}}}),
        1,
        "metadata.labels[a\\x07b] (key): must be a qualified name",
    ),
    "integer beyond int64 in a template": (
        yaml.safe_dump(edited(model_deployment(), {f"{MEMBER}.template.spec.priority": 10**20})),
        1,
        f"{MEMBER}.template.spec.priority: must be an integer within int64",
    ),
    "integer beyond int64 in a field": (
        yaml.safe_dump(inference_cluster()).replace(
            "nodeCount: 2", "nodeCount: 99999999999999999999"
        ),
        1,
        "spec.nodePools[0].nodeCount: must be at most 10000",
    ),
}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_is_one_clear_error(tmp_path: Path, command: list[str], case: str) -> None:
    text, code, message = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    result = invoke(command, path)
    assert_no_traceback(result)
    assert result.exit_code == code, result.output
    assert message in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_file_over_the_size_limit_is_refused_before_parsing(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w", encoding="utf-8") as stream:
        stream.write("a: [" + "1, " * (MAX_FILE_BYTES // 3) + "1]\n")
    result = invoke(command, path)
    assert_no_traceback(result)
    assert result.exit_code == 2
    assert f"file is larger than {MAX_FILE_BYTES:,} bytes (the limit)" in result.output


def test_an_alias_bomb_in_a_pod_template_never_reaches_the_simulator(tmp_path: Path) -> None:
    body = edited(model_deployment(), {f"{MEMBER}.template.bomb": "PLACEHOLDER"})
    text = yaml.safe_dump(body, sort_keys=False)
    (line,) = [x for x in text.splitlines() if x.strip() == "bomb: PLACEHOLDER"]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    bomb = "".join(f"{indent}{x}\n" for x in CASES["8-level alias bomb"][0].splitlines())
    path = tmp_path / "bomb.yaml"
    path.write_text(text.replace(line, line.replace(" PLACEHOLDER", "") + "\n" + bomb.rstrip()))
    for command in (["validate"], ["plan", "--now", NOW]):
        result = invoke(command, path)
        assert_no_traceback(result)
        assert result.exit_code == 2
        assert "aliases expand to more than" in result.output


VALID = yaml.safe_dump_all([inference_class(), inference_cluster(), model_deployment()])
YAML_ALPHABET = st.sampled_from([*"{}[]:,-?&*!|>'\"%@` \n\t#abc019.", "\x00", "é", "\u2028"])


@st.composite
def hostile_files(draw: st.DrawFn) -> str:
    """Arbitrary YAML-ish text, or a valid fleet with a slice replaced by such text."""
    noise = draw(st.text(YAML_ALPHABET, max_size=200))
    if draw(st.booleans()):
        return noise
    start = draw(st.integers(0, len(VALID)))
    end = draw(st.integers(start, min(len(VALID), start + 40)))
    return VALID[:start] + noise + VALID[end:]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=hostile_files(), command=st.sampled_from(COMMANDS))
def test_fuzzed_files_never_end_in_a_traceback(
    tmp_path: Path, text: str, command: list[str]
) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_no_traceback(invoke(command, path))
