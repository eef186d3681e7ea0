"""`gpufleet simulate`: summary, JSON, HTML report, comparison, failures and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()

FAILING = """
name: failing
end: 1m
fleet:
  clusters:
  - name: a
    pools:
    - name: l4
      class: {devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com, count: 4}]}
checks:
- at: 30s
  expect: {freeGPUs: {a/l4: 3}, nodes: {a/l4: 2}}
"""


def test_default_runs_the_quickstart() -> None:
    result = runner.invoke(app, ["simulate"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "quickstart: 3m00s simulated" in out
    assert "refused ml-team/qwen-2-7b: placed 0 of 1, InsufficientGPU" in out
    assert "best node has 0 free" in out
    assert "placed ml-team/qwen-2-7b on solo" in out
    assert "solo/l4  1      4     4     0     1 node with 0 free" in out
    assert "✓ 5 checks passed" in out


def test_list() -> None:
    result = runner.invoke(app, ["simulate", "--list"])
    assert result.exit_code == 0
    names = [line.split()[0] for line in result.output.splitlines()]
    assert "quickstart" in names and "race" in names


def test_json_and_report(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    result = runner.invoke(app, ["simulate", "race", "-o", "json", "--report", str(report)])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["passed"] is True
    assert body["series"]["pools"]["solo/l4"]["allocated"][-1] == 4
    page = report.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_failing_check_exits_1_and_says_what_differed(tmp_path: Path) -> None:
    path = tmp_path / "failing.yaml"
    path.write_text(FAILING)
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 1
    assert "at 30s (checks[0]) free GPUs in a/l4 (actual)" in result.output
    assert "expected: 3" in result.output and "got:      4" in result.output
    assert "nodes in a/l4" in result.output


def test_invalid_scenario_exits_2_listing_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nend: soon\nfleet: {clusters: []}\n")
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "end: 'soon' is not a duration" in result.output
    assert "fleet.clusters: must have at least one cluster" in result.output


def test_compare_prints_both_modes() -> None:
    result = runner.invoke(app, ["simulate", "quickstart", "--compare", "whole-node,free-gpu"])
    assert result.exit_code == 0, result.output
    assert "WHOLE-NODE" in result.output and "FREE-GPU" in result.output
    assert [line.split()[2:] for line in result.output.splitlines() if "TOTAL placed" in line] == [
        ["1/4", "4/4"]
    ]
