"""`gpufleet validate` through typer's CliRunner: verdict lines, every error, exit codes."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def run(*args: str | Path) -> tuple[int, list[str]]:
    result = runner.invoke(app, ["validate", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.output.splitlines()


def test_valid_fleet_exits_0_with_one_line_per_object() -> None:
    code, lines = run(EXAMPLES / "fleet" / "clusters.yaml")
    assert code == 0
    assert lines == [
        f"ok   InferenceCluster/eks-us-east  {EXAMPLES}/fleet/clusters.yaml:3",
        f"ok   InferenceCluster/gke-eu-west  {EXAMPLES}/fleet/clusters.yaml:35",
        "2 valid, 0 invalid",
    ]


def test_invalid_input_lists_every_error_and_exits_1() -> None:
    code, lines = run(EXAMPLES / "fleet" / "classes.yaml", EXAMPLES / "invalid")
    invalid = f"{EXAMPLES}/invalid"
    assert code == 1
    errors = [line for line in lines if line.startswith("✗")]
    assert sum("several-errors.yaml" in line for line in errors) == 5
    assert [line for line in errors if "broken-cel" not in line and "several" not in line] == [
        f"✗ InferenceCluster aks-west-europe: spec.nodePools[0].name: must be a DNS label "
        f"(lowercase letters, digits and '-', starting and ending with a letter or digit)  "
        f"({invalid}/bad-pool-name.yaml:7)",
        f"✗ InferenceClass a100-8x: spec.devices[0].driver: is required  ({invalid}/missing-field.yaml:7)",
        "✗ ModelDeployment ml-team/negative: spec.template.spec.engines[0].members[0].nodeSelector"
        f".devices[0].count: must be at least 1  ({invalid}/negative-count.yaml:15)",
        f"✗ ModelDeployment ml-team/typo: spec.replica: unknown field  ({invalid}/unknown-field.yaml:6)",
    ]
    assert sum(line.startswith("ok   InferenceClass/") for line in lines) == 4
    assert lines[-1] == "4 valid, 6 invalid (10 errors)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: [\n",
            ": malformed YAML at line 2, column 1: expected the node content, but found '<stream end>'",
        ),
        ("- a\n- b\n", ":1: must be a mapping with apiVersion, kind, metadata and spec"),
        ("", ": contains no objects"),
        (
            "apiVersion: gpufleet.io/v1alpha1\nkind: Pool\nmetadata: {name: x}\n",
            ":1: kind: unknown kind Pool: supported kinds are InferenceClass, InferenceCluster, "
            "ModelDeployment, ModelReplica, PoolObservation, ReplicaObservation",
        ),
    ],
    ids=["malformed YAML", "non-mapping document", "empty file", "unknown kind"],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    code, lines = run(path)
    assert (code, lines) == (1, [f"✗ {path}{expected}", "0 valid, 1 invalid (1 error)"])


def test_wrong_types_and_unknown_fields_are_listed_together(tmp_path: Path) -> None:
    path = tmp_path / "class.yaml"
    path.write_text(
        "apiVersion: gpufleet.io/v1alpha1\nkind: InferenceClass\nmetadata: {name: c}\n"
        "spec:\n  devices:\n  - {name: gpu, driver: d, deviceClassName: d, count: four, colour: red}\n",
        encoding="utf-8",
    )
    code, lines = run(path)
    assert (code, lines) == (
        1,
        [
            f"✗ InferenceClass c: spec.devices[0].count: must be an integer  ({path}:6)",
            f"✗ InferenceClass c: spec.devices[0].colour: unknown field  ({path}:6)",
            "0 valid, 1 invalid (2 errors)",
        ],
    )


def test_unreadable_path_is_one_line(tmp_path: Path) -> None:
    code, lines = run(tmp_path / "missing.yaml")
    assert (code, lines) == (
        1,
        [f"✗ {tmp_path}/missing.yaml: no such file or directory", "0 valid, 1 invalid (1 error)"],
    )


def gitops_folder(tmp_path: Path) -> Path:
    """A folder as a GitOps repository holds it: gpufleet manifests next to other objects."""
    (tmp_path / "app.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1}\n",
        encoding="utf-8",
    )
    one_node = EXAMPLES / "one-node"
    for path in one_node.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_objects_of_other_apis_are_skipped_with_a_note(tmp_path: Path) -> None:
    folder = gitops_folder(tmp_path)
    code, lines = run(folder)
    assert code == 0
    assert (
        f"- skipped apps/v1 Deployment web: not a gpufleet.io object  ({folder}/app.yaml:1)"
        in lines
    )
    assert lines[-1].endswith(", 0 invalid, 1 skipped")


def test_plan_skips_objects_of_other_apis_with_a_note(tmp_path: Path) -> None:
    folder = gitops_folder(tmp_path)
    result = runner.invoke(app, ["plan", str(folder), "--now", "2026-11-29T10:00:05Z"])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"- skipped apps/v1 Deployment web: not a gpufleet.io object  ({folder}/app.yaml:1)"
    ]
    assert result.stdout.startswith("plan at 2026-11-29T10:00:05Z")


def test_one_error_is_singular(tmp_path: Path) -> None:
    code, lines = run(EXAMPLES / "invalid" / "missing-field.yaml")
    assert (code, lines[-1]) == (1, "0 valid, 1 invalid (1 error)")


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_output_json_and_yaml_carry_every_verdict(tmp_path: Path, output: str) -> None:
    folder = gitops_folder(tmp_path)
    (folder / "zz-bad.yaml").write_text(
        (EXAMPLES / "invalid" / "several-errors.yaml").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    result = runner.invoke(app, ["validate", str(folder), "-o", output])
    assert result.exit_code == 1
    report = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
    assert {k: report[k] for k in ("invalid", "skipped", "errors")} == {
        "invalid": 1,
        "skipped": 1,
        "errors": 5,
    }
    assert report["valid"] == sum(o.get("valid") is True for o in report["objects"]) > 0
    (skipped,) = [o for o in report["objects"] if o.get("skipped")]
    assert skipped == {
        "source": f"{folder}/app.yaml:1",
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "skipped": True,
        "reason": "not a gpufleet.io object",
    }
    (invalid,) = [o for o in report["objects"] if o.get("valid") is False]
    assert invalid["kind"] == "InferenceCluster" and invalid["name"] == "aks-west-europe"
    assert invalid["errors"][1] == {
        "path": "spec.nodePools[0].name",
        "message": "must be a DNS label (lowercase letters, digits and '-', starting and ending "
        "with a letter or digit)",
        "source": invalid["errors"][1]["source"],
    }
    assert invalid["errors"][1]["source"].endswith("zz-bad.yaml:10")


def test_output_json_names_the_limit_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 200 + "]" * 200 + "\n", encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path), "-o", "json"])
    assert result.exit_code == 2
    (failure,) = json.loads(result.stdout)["objects"]
    assert failure["limit"] == {"name": "depth", "value": 100}
    assert failure["errors"][0]["message"].startswith("YAML nests deeper than 100 levels")
