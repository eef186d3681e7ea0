"""`gpufleet plan` through typer's CliRunner: whole outputs on the examples, JSON, bad input."""

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from gpufleet.cli.main import app
from gpufleet.cli.render import Printer, Table, plain_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ONE_NODE = EXAMPLES / "one-node"
FLEET = EXAMPLES / "fleet"
#: Five seconds after the examples' observations: Fresh.
NOW = "2026-11-29T10:00:05Z"
#: Plain text whatever the environment says about terminals and colour.
PLAIN_ENV: dict[str, str | None] = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None}

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    result = runner.invoke(app, [str(a) for a in args], env=PLAIN_ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_one_node_places_four_and_refuses_the_fifth_with_numbers() -> None:
    result = invoke("plan", ONE_NODE, "--now", NOW)
    assert (result.exit_code, result.stderr) == (0, "")
    placed = "  CLUSTER  INDEX  REPLICA{pad}  ACTION  ENGINE → POOL  PODS  DEVICES/POD"
    row = "  solo     0      {name}  create  engine → l4    1     1 gpu"
    assert result.stdout.splitlines() == [
        "plan at 2026-11-29T10:00:05Z: 5 deployments, 1 cluster",
        "",
        "ml-team/gemma-2-9b: desired 1, placed 1, shortfall 0",
        placed.format(pad="         "),
        row.format(name="gemma-2-9b-10cac"),
        "",
        "ml-team/llama-3-8b: desired 1, placed 1, shortfall 0",
        placed.format(pad="         "),
        row.format(name="llama-3-8b-74085"),
        "",
        "ml-team/mistral-7b: desired 1, placed 1, shortfall 0",
        placed.format(pad="         "),
        row.format(name="mistral-7b-5306a"),
        "",
        "ml-team/phi-4: desired 1, placed 1, shortfall 0",
        placed.format(pad="    "),
        row.format(name="phi-4-4710b"),
        "",
        "ml-team/qwen-2-7b: desired 1, placed 0, shortfall 1",
        "  0/1 clusters fit: 1 InsufficientGPU",
        "  top reason (cluster solo, pool l4): InsufficientGPU: 1 pod requests 1 device "
        "(largest pod 1); best node has 0 free, 0 free on 1 node",
        "    pods=1 requested_devices=1 largest_pod_devices=1 failed_pod_devices=1 "
        "nodes_fitting_failed_pod=0 nodes=1 free_devices=0 best_node_free=0",
        "",
        "pools after this plan",
        "CLUSTER  POOL  ACCOUNTING  OBSERVATION  NODES  FREE                NOTES",
        "solo     l4    FreeGPU     Fresh        1      1 node with 0 free  -",
    ]


def _placements(body: dict[str, Any]) -> list[tuple[str, str, int, str, str, str, int]]:
    return [
        (
            d["name"],
            p["cluster"],
            p["index"],
            p["name"],
            p["action"],
            m["pool"],
            m["deviceRequests"][0]["count"],
        )
        for d in body["deployments"]
        for p in d["placements"]
        for e in p["engines"]
        for m in e["members"]
    ]


def test_one_node_json_has_every_placement_and_the_refusal() -> None:
    result = invoke("plan", ONE_NODE, "--now", NOW, "--output", "json")
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    assert list(body) == ["now", "deployments", "pools"]
    assert body["now"] == NOW
    assert _placements(body) == [
        ("gemma-2-9b", "solo", 0, "gemma-2-9b-10cac", "create", "l4", 1),
        ("llama-3-8b", "solo", 0, "llama-3-8b-74085", "create", "l4", 1),
        ("mistral-7b", "solo", 0, "mistral-7b-5306a", "create", "l4", 1),
        ("phi-4", "solo", 0, "phi-4-4710b", "create", "l4", 1),
    ]
    assert [
        (d["name"], d["desired"], d["placed"], d["shortfall"]) for d in body["deployments"]
    ] == [
        ("gemma-2-9b", 1, 1, 0),
        ("llama-3-8b", 1, 1, 0),
        ("mistral-7b", 1, 1, 0),
        ("phi-4", 1, 1, 0),
        ("qwen-2-7b", 1, 0, 1),
    ]
    refused = body["deployments"][-1]
    assert refused["condition"] == {
        "type": "ReplicasScheduled",
        "status": "False",
        "reason": "InsufficientGPU",
        "message": "0 of 1 replicas scheduled: 0/1 clusters fit: 1 InsufficientGPU",
    }
    reason = {
        "code": "InsufficientGPU",
        "message": "1 pod requests 1 device (largest pod 1); best node has 0 free, "
        "0 free on 1 node",
        "details": {  # camelCase, as every JSON key
            "pods": 1,
            "requestedDevices": 1,
            "largestPodDevices": 1,
            "failedPodDevices": 1,
            "nodesFittingFailedPod": 0,
            "nodes": 1,
            "freeDevices": 0,
            "bestNodeFree": 0,
        },
    }
    assert refused["diagnosis"] == {
        "summary": "0/1 clusters fit: 1 InsufficientGPU",
        "dominantCode": "InsufficientGPU",
        "reasons": [],
        "clusters": [
            {
                "cluster": "solo",
                "fits": False,
                "reasons": [reason],
                "pools": [
                    {
                        "pool": "l4",
                        "engine": "engine",
                        "accounting": "FreeGPU",
                        "fits": False,
                        "reasons": [reason],
                        "free": {"nodes": 1, "freeDevices": 0, "bestNodeFree": 0},
                    }
                ],
            }
        ],
    }
    assert body["pools"] == [
        {
            "cluster": "solo",
            "pool": "l4",
            "accounting": "FreeGPU",
            "observation": "Fresh",
            "nodes": 1,
            "histogram": [{"free": {"gpu.nvidia.com": 0}, "nodes": 1}],
            "freeNodes": None,
            "reasons": [],
        }
    ]


def test_json_is_byte_for_byte_reproducible() -> None:
    first = invoke("plan", FLEET, "--now", NOW, "-o", "json").stdout
    assert first == invoke("plan", FLEET, "--now", NOW, "-o", "json").stdout
    assert json.loads(first)["now"] == NOW


def test_fleet_plan_lists_every_deployment_and_pool() -> None:
    result = invoke("plan", FLEET, "--now", NOW)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("ml-team/")] == [
        "ml-team/deepseek-v3: desired 1, placed 1, shortfall 0",
        "ml-team/llama-70b-pd: desired 1, placed 0, shortfall 1",
        "ml-team/mistral-24b: desired 2, placed 2, shortfall 0",
        "ml-team/qwen-7b: desired 3, placed 3, shortfall 0",
    ]
    assert lines[0] == "plan at 2026-11-29T10:00:05Z: 4 deployments, 2 clusters"
    assert (
        "  gke-eu-west  0      deepseek-v3-dccc6  create  engine/Leader → h100  1     8 gpu"
        in lines
    )
    assert (
        "  gke-eu-west  0      deepseek-v3-dccc6  create  engine/Worker → h100  1     8 gpu"
        in lines
    )
    assert "  0/2 clusters fit: 1 ClusterNotSelected, 1 InsufficientNodes" in lines
    assert lines[lines.index("pools after this plan") :] == [
        "pools after this plan",
        "CLUSTER      POOL  ACCOUNTING  OBSERVATION  NODES  FREE" + " " * 37 + "NOTES",
        "eks-us-east  l4    WholeNode   None         6      1 of 6 nodes free" + " " * 24 + "-",
        "eks-us-east  t4    FreeGPU     Fresh        3      "
        + "2 nodes with 4 free, 1 node with 2 free  -",
        "gke-eu-west  h100  WholeNode   None         4      2 of 4 nodes free" + " " * 24 + "-",
        "gke-eu-west  l4    WholeNode   None         8      8 of 8 nodes free" + " " * 24 + "-",
    ]


def test_an_old_observation_is_explained_not_hidden() -> None:
    result = invoke("plan", ONE_NODE, "--now", "2026-11-29T11:00:00+00:00")
    assert result.exit_code == 0
    assert "  0/1 clusters fit: 1 ObservationExpired" in result.stdout.splitlines()


def test_invalid_manifests_list_every_error_and_exit_1() -> None:
    validate = invoke("validate", ONE_NODE, EXAMPLES / "invalid")
    result = invoke("plan", ONE_NODE, EXAMPLES / "invalid", "--now", NOW)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "Traceback" not in result.output
    errors = [line for line in validate.stdout.splitlines() if not line.startswith("ok ")]
    assert result.stderr.splitlines() == [*errors[:-1], "6 invalid (10 errors): nothing scheduled"]
    assert sum(line.startswith("✗") for line in errors) == 10


def test_a_missing_path_is_one_error(tmp_path: Path) -> None:
    result = invoke("plan", tmp_path / "nowhere", "--now", NOW)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"✗ {tmp_path}/nowhere: no such file or directory",
        "1 invalid (1 error): nothing scheduled",
    ]


@pytest.mark.parametrize("value", ["yesterday", "2026-11-29T10:00:05"], ids=["prose", "no zone"])
def test_now_must_be_rfc3339_with_a_zone(value: str) -> None:
    result = invoke("plan", ONE_NODE, "--now", value)
    assert result.exit_code == 2
    words = " ".join(result.output.replace("│", " ").split())
    assert f"Invalid value for --now: '{value}' is not an RFC 3339 time with a zone" in words


def test_plain_tables_align_and_continue_multi_line_cells() -> None:
    table = Table(("A", "LONGER"), (("x\ny", "1"), ("wide cell", "2\n3")))
    assert plain_lines(table) == [
        "A          LONGER",
        "x          1",
        "y",
        "wide cell  2",
        "           3",
    ]


def test_a_terminal_gets_a_rich_table() -> None:
    console = Console(force_terminal=True, width=60, record=True, color_system=None)
    Printer(console).table(Table(("CLUSTER", "FIT"), (("solo", "no"),)))
    text = console.export_text()
    assert "CLUSTER" in text
    assert "solo" in text
    assert "─" in text


REPLICA = """apiVersion: gpufleet.io/v1alpha1
kind: ModelReplica
metadata:
  name: {name}
  namespace: ml-team
  labels:
    gpufleet.io/deployment: phi-4
    gpufleet.io/cluster: {cluster}
    gpufleet.io/replica-index: "0"
spec:
  deploymentName: phi-4
  clusterName: {cluster}
  engines:
  - name: engine
    members:
    - role: Standalone
      nodePoolName: l4
      deviceRequests:
      - {{name: gpu, deviceClassName: gpu.nvidia.com, driver: gpu.nvidia.com, count: 1}}
      template: {{spec: {{containers: [{{name: engine, image: "vllm/vllm-openai:v0.23.0"}}]}}}}
"""


def test_retained_and_dropped_replicas_are_shown(tmp_path: Path) -> None:
    for source in ONE_NODE.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "replicas.yaml").write_text(
        REPLICA.format(name="phi-4-4710b", cluster="solo")
        + "---\n"
        + REPLICA.format(name="phi-4-0ld00", cluster="gone"),
        encoding="utf-8",
    )
    lines = invoke("plan", tmp_path, "--now", NOW).stdout.splitlines()
    start = lines.index(
        "ml-team/phi-4: desired 1, placed 1 (1 retained, 0 created), shortfall 0, dropped 1"
    )
    assert lines[start + 1 : start + 5] == [
        "  CLUSTER  INDEX  REPLICA      ACTION  ENGINE → POOL  PODS  DEVICES/POD",
        "  solo     0      phi-4-4710b  retain  engine → l4    1     1 gpu",
        "  CLUSTER  INDEX  DROPPED      REASON          MESSAGE",
        "  gone     0      phi-4-0ld00  ClusterMissing  cluster gone is not in the fleet",
    ]
