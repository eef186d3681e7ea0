"""Issue 30, 1: a deep selector through `validate`, `plan`, `explain` and `simulate` is one clear
error at its field path naming the limit (it used to be a RecursionError traceback).

`validate`, `plan` and `explain` report it as an invalid manifest (exit 1, as every field's
bound, the selector's 10 KiB among them); `simulate` refuses the scenario (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from builders_api import edited, inference_class, inference_cluster, model_deployment
from gpufleet.cel.syntax import MAX_DEPTH
from gpufleet.cli.main import app

runner = CliRunner()
NOW = "2026-11-29T10:00:00Z"
PATH = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
SCENARIOS = (
    Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "sim" / "scenario" / "builtin"
)
SHAPES = {
    "250-plus": " + ".join(["1"] * 250) + " > 0",
    "300-selections": "device.attributes" + ".a" * 300 + " == 1",
    "300-indexes": "device.attributes" + '["a"]' * 300 + " == 1",
}
COMMANDS = [
    ["validate"],
    ["plan", "--now", NOW],
    ["explain", "ml-team/llama", "--now", NOW],
]


def _assert_no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_deep_selector_is_one_error_at_its_path(
    tmp_path: Path, command: list[str], shape: str
) -> None:
    body = edited(model_deployment(), {PATH: SHAPES[shape]})
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([inference_class(), inference_cluster(), body]))
    split = 2 if command[0] == "explain" else 1
    result = runner.invoke(app, [*command[:split], str(path), *command[split:]])
    _assert_no_traceback(result)
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("✗")]
    assert line.startswith(f"✗ ModelDeployment ml-team/llama: {PATH}: does not compile: ")
    assert f"limit {MAX_DEPTH} (cel-go's maxRecursionDepth)" in line


def test_simulate_refuses_a_scenario_with_a_deep_selector(tmp_path: Path) -> None:
    deep = SHAPES["250-plus"]
    text = (SCENARIOS / "gang.yaml").read_text()
    assert text.count("'device.driver == \"gpu.nvidia.com\"'") == 2
    path = tmp_path / "deep.yaml"
    path.write_text(text.replace("'device.driver == \"gpu.nvidia.com\"'", f"'{deep}'"))
    result = runner.invoke(app, ["simulate", str(path)])
    _assert_no_traceback(result)
    assert result.exit_code == 2, result.output
    refusals = [x for x in result.output.splitlines() if f"limit {MAX_DEPTH}" in x]
    assert len(refusals) == 2
    assert all(".selectors[0].cel: does not compile: " in x for x in refusals)
