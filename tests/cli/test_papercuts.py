"""The first hour's papercuts (issue 28, section 6), each as a user meets it: a refusal prints
once, the roll-up counts each cluster once, and a selector that matches nothing says so."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLEET = EXAMPLES / "fleet"
ENV = {"COLUMNS": "1000", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
runner = CliRunner()


def test_a_refusal_prints_once_with_its_reason_and_numbers() -> None:
    result = runner.invoke(app, ["simulate", "mixed-sizes"], env=ENV)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("refused ml/big") == 1, out
    assert out.count("best node has 3 free, 12 free on 4 nodes") == 1
    assert out.count("best_node_free=3") == 1
    # Under the refusal line, in the timeline.
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "refused ml/big" in line)
    assert "best node has 3 free, 12 free" in lines[at + 1]
    assert "Refusals: 1 (1 InsufficientGPU" in out


def test_the_roll_up_counts_each_cluster_once() -> None:
    # No --now: every pool reads as Expired, and eks-us-east is also tainted for mistral.
    result = runner.invoke(app, ["plan", str(FLEET)], env=ENV)
    assert result.exit_code == 0, result.output
    for fit, total, counts in re.findall(r"(\d+)/(\d+) clusters fit: ([^\n]+)", result.stdout):
        counted = sum(int(n) for n in re.findall(r"(\d+) [A-Z]\w+", counts))
        assert counted == int(total) - int(fit), counts


def test_a_selector_that_matches_no_device_is_named_as_the_cause() -> None:
    result = runner.invoke(
        app,
        ["explain", "ml-team/mistral-24b", str(FLEET), "--now", "2026-11-29T10:00:06Z"],
        env=ENV,
    )
    assert result.exit_code == 0, result.output
    assert "pool t4: Standalone request gpu: no device of the pool matches its selectors" in (
        result.stdout
    )
    assert "enough count" not in result.stdout


def _snake_keys(value: object, path: str = "") -> list[str]:
    if isinstance(value, dict):
        found = [f"{path}.{k}" for k in value if "_" in k]
        for k, v in value.items():
            found += _snake_keys(v, f"{path}.{k}")
        return found
    if isinstance(value, list):
        return [k for v in value for k in _snake_keys(v, f"{path}[]")]
    return []


def test_json_keys_are_camel_case_everywhere() -> None:
    import json

    now = "2026-11-29T10:00:06Z"
    for args in (
        ["plan", str(FLEET), "-o", "json"],
        ["plan", str(FLEET), "--now", now, "-o", "json"],
        ["explain", "ml-team/llama-70b-pd", str(FLEET), "--now", now, "-o", "json"],
        ["simulate", "mixed-sizes", "-o", "json"],
        ["validate", str(FLEET), "-o", "json"],
    ):
        result = runner.invoke(app, args, env=ENV)
        assert result.exit_code in (0, 1), result.output
        assert _snake_keys(json.loads(result.stdout)) == [], args
