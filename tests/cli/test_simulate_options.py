"""`gpufleet simulate -o yaml`, `--seed`, `--end`, and completion of built-in scenario names."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app

ENV = {"COLUMNS": "1000", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
runner = CliRunner()


def test_yaml_is_the_json_as_yaml() -> None:
    as_json = runner.invoke(app, ["simulate", "mixed-sizes", "-o", "json"], env=ENV)
    as_yaml = runner.invoke(app, ["simulate", "mixed-sizes", "-o", "yaml"], env=ENV)
    assert (as_json.exit_code, as_yaml.exit_code) == (0, 0)
    body = yaml.safe_load(as_yaml.stdout)
    expected = json.loads(as_json.stdout)
    for run in (body, expected):  # the wall time differs between the two runs
        run["stats"].pop("wallSeconds", None)
    assert body == expected
    listed = yaml.safe_load(runner.invoke(app, ["simulate", "--list", "-o", "yaml"]).stdout)
    assert {"mixed-sizes", "quickstart"} <= {s["name"] for s in listed["scenarios"]}


def test_seed_and_end_override_the_scenario() -> None:
    result = runner.invoke(app, ["simulate", "mixed-sizes", "--seed", "7", "--end", "40s"], env=ENV)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("mixed-sizes: 40s simulated")
    assert "seed 7" in result.stdout.splitlines()[0]
    body = json.loads(
        runner.invoke(app, ["simulate", "mixed-sizes", "--end", "2m", "-o", "json"], env=ENV).stdout
    )
    assert body["end"] == 120
    # A plain number is seconds; a check the shorter run no longer reaches is dropped.
    short = json.loads(
        runner.invoke(app, ["simulate", "mixed-sizes", "--end", "10", "-o", "json"], env=ENV).stdout
    )
    assert short["end"] == 10 and short["checks"]["run"] < body["checks"]["run"]


def test_a_bad_end_or_seed_is_a_usage_error() -> None:
    for args, expected in (
        (["--end", "5x"], "'--end': '5x' must be a duration"),
        (["--end", "0"], "'--end': '0' must be at least 1s"),
        (["--seed", "-1"], "'--seed'"),
    ):
        result = runner.invoke(app, ["simulate", "mixed-sizes", *args], env=ENV)
        assert result.exit_code == 2, result.output
        assert expected in " ".join(result.output.split())


def test_completion_offers_the_built_in_scenario_names() -> None:
    result = runner.invoke(
        app,
        [],
        prog_name="gpufleet",
        env={
            "_GPUFLEET_COMPLETE": "complete_bash",
            "COMP_WORDS": "gpufleet simulate mix",
            "COMP_CWORD": "2",
        },
    )
    assert result.stdout.split() == ["mixed-churn", "mixed-sizes"]
