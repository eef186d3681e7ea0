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


def test_compare_is_a_comparison_naming_the_checks_that_differ(tmp_path: Path) -> None:
    report = tmp_path / "cmp.html"
    result = runner.invoke(
        app,
        ["simulate", "quickstart", "--compare", "whole-node,free-gpu", "--report", str(report)],
    )
    assert result.exit_code == 0, result.output
    out = result.output
    rows = {line.split("  ")[1].strip(): line for line in out.splitlines() if line.startswith("  ")}
    assert rows["replicas placed / wanted (end)"].split()[-3:] == ["1/4", "4/4", "differs"]
    assert rows["refusals"].split()[-3:] == ["4", "1", "differs"]
    assert "The modes make clusters Ready differently" in out
    assert "whole-node: Ready=True (PlatformReady) from 0s on solo" in out
    assert (
        "Checks (5, written for free-gpu): 4 differ between the modes, 0 fail in every mode" in out
    )
    assert "checks[0] at 45s differs:" in out and "checks[4] at 3m00s differs:" in out
    assert "free-gpu: holds" in out
    assert "1/1 (1 pod running)" in out
    page = report.read_text()
    assert 'id="checks-differ"' in page and "the modes differ" in page


def test_list_is_one_plain_sentence_per_scenario() -> None:
    result = runner.invoke(app, ["simulate", "--list"])
    assert result.exit_code == 0
    for line in result.output.splitlines():
        _name, sentence = line.split(maxsplit=1)
        assert sentence.endswith(".") and sentence.count(". ") == 0, line
        assert "reference" not in sentence.lower() and "scenario 5" not in sentence, line


def test_list_as_json() -> None:
    result = runner.invoke(app, ["simulate", "--list", "-o", "json"])
    assert result.exit_code == 0, result.output
    scenarios = json.loads(result.output)["scenarios"]
    by_name = {s["name"]: s for s in scenarios}
    assert "quickstart" in by_name and "stale-expired" in by_name
    quick = by_name["quickstart"]
    assert quick["description"].startswith(quick["summary"])
    assert len(quick["description"]) > len(quick["summary"])


def test_json_has_the_hub_view_samples() -> None:
    result = runner.invoke(app, ["simulate", "stale-expired", "-o", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    samples = body["samples"]
    assert len(samples["times"]) == len(body["series"]["times"])
    east = samples["clusters"]["east"]
    assert east["observation"][0] == "Fresh" and east["observation"][-1] == "Expired"
    assert east["agent"][-1] == "down" and samples["clusters"]["west"]["agent"][-1] == "up"
    assert samples["pools"]["east/l4"]["reportedFree"][-1] == 3


def test_compare_steering_runs_it_steered_and_not(tmp_path: Path) -> None:
    report = tmp_path / "steer.html"
    result = runner.invoke(
        app, ["simulate", "mixed-churn", "--compare", "steering", "--report", str(report)]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "compared: steering Preferred vs steering Off" in out
    rows = {line.split("  ")[1].strip(): line for line in out.splitlines() if line.startswith("  ")}
    assert rows["GPUs allocated / published (end)"].split()[-3:] == ["32/32", "16/32", "differs"]
    assert "steering Preferred: holds" in out
    assert "steering Preferred: event timeline" in report.read_text()


def test_compare_rejects_a_single_steering_mode() -> None:
    result = runner.invoke(app, ["simulate", "quickstart", "--compare", "Off"])
    assert result.exit_code == 2
    assert "give two steering modes" in result.output
