"""`gpufleet explain` through typer's CliRunner: every cluster and pool, unknown deployments."""

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from gpufleet.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ONE_NODE = EXAMPLES / "one-node"
FLEET = EXAMPLES / "fleet"
NOW = "2026-11-29T10:00:05Z"
PLAIN_ENV: dict[str, str | None] = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None}

runner = CliRunner()

INSUFFICIENT = (
    "InsufficientGPU: 1 pod requests 1 device (largest pod 1); best node has 0 free, "
    "0 free on 1 node"
)
FREE = "0 free on 1 node, best node 0"
NUMBERS = (
    "pods=1 requested_devices=1 largest_pod_devices=1 failed_pod_devices=1 "
    "nodes_fitting_failed_pod=0 nodes=1 free_devices=0 best_node_free=0"
)


def invoke(*args: str | Path) -> Result:
    result = runner.invoke(app, [str(a) for a in args], env=PLAIN_ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_refused_deployment_on_one_node_shows_cluster_and_pool_verdicts() -> None:
    result = invoke("explain", "ml-team/qwen-2-7b", ONE_NODE, "--now", NOW)
    assert (result.exit_code, result.stderr) == (0, "")
    message = INSUFFICIENT.removeprefix("InsufficientGPU: ")
    assert result.stdout.splitlines() == [
        "explain at 2026-11-29T10:00:05Z",
        "",
        "ml-team/qwen-2-7b: desired 1, placed 0, shortfall 1",
        "  0/1 clusters fit: 1 InsufficientGPU",
        f"  top reason (cluster solo, pool l4): {INSUFFICIENT}",
        f"    {NUMBERS}",
        "  condition ReplicasScheduled=False InsufficientGPU: 0 of 1 replicas scheduled: "
        "0/1 clusters fit: 1 InsufficientGPU",
        "",
        "clusters: 0/1 fit",
        "CLUSTER  FIT  REASON           MESSAGE" + " " * (len(message) - 5) + "DETAILS",
        f"solo     no   InsufficientGPU  {message}  {NUMBERS}",
        "",
        "pools",
        f"CLUSTER  POOL  ENGINE  ACCOUNTING  FIT  {'FREE':<{len(FREE)}}  REASON"
        + " " * (len(INSUFFICIENT) - 4)
        + "DETAILS",
        f"solo     l4    engine  FreeGPU     no   {FREE}  {INSUFFICIENT}  {NUMBERS}",
        "",
        "what would change it",
        "  InsufficientGPU (solo): nobody (wait): devices free up as other replicas leave; or "
        "the platform team grows the pool (spec.nodePools[].maxNodeCount)",
    ]


def test_refused_deployment_in_the_fleet_lists_every_cluster_and_pool() -> None:
    result = invoke("explain", "ml-team/llama-70b-pd", FLEET, "--now", NOW)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    clusters = lines[lines.index("clusters: 0/2 fit") + 1 : lines.index("pools") - 1]
    assert [line.split()[:3] for line in clusters] == [
        ["CLUSTER", "FIT", "REASON"],
        ["eks-us-east", "no", "ClusterNotSelected"],
        ["gke-eu-west", "no", "InsufficientNodes"],
    ]
    assert clusters[1].endswith(
        "labels do not match clusterSelector gpufleet.io/region=eu-west  "
        "selector=gpufleet.io/region=eu-west"
    )
    assert clusters[2].endswith(
        "needs 3 whole nodes; 2 of 4 free                                "
        "requested_nodes=3 free_nodes=2 nodes=4"
    )
    pools = lines[lines.index("pools") + 1 : lines.index("what would change it") - 1]
    assert [line.split()[:5] for line in pools] == [
        ["CLUSTER", "POOL", "ENGINE", "ACCOUNTING", "FIT"],
        ["eks-us-east", "l4", "-", "WholeNode", "-"],
        ["eks-us-east", "t4", "-", "FreeGPU", "-"],
        ["gke-eu-west", "h100", "prefill", "WholeNode", "yes"],
        ["gke-eu-west", "h100", "decode", "WholeNode", "no"],
        ["gke-eu-west", "l4", "prefill", "WholeNode", "no"],
        ["gke-eu-west", "l4", "decode", "WholeNode", "no"],
    ]
    assert "not evaluated: cluster ClusterNotSelected" in pools[1]
    assert " ".join(pools[4].split()).endswith(
        "2 of 4 nodes free InsufficientNodes: needs 3 whole nodes; 2 of 4 free "
        "requested_nodes=3 free_nodes=2 nodes=4"
    )
    # One format for what is free, evaluated or not; the selector named as the cause.
    assert " ".join(pools[2].split()).startswith(
        "eks-us-east t4 - FreeGPU - 10 free on 3 nodes, best node 4 not evaluated"
    )
    assert "no device of the pool matches its selectors" in pools[5]
    assert "enough count" not in result.stdout


def test_explain_json_is_the_deployment_and_the_pools() -> None:
    result = invoke("explain", "ml-team/qwen-2-7b", ONE_NODE, "--now", NOW, "-o", "json")
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    plan = json.loads(invoke("plan", ONE_NODE, "--now", NOW, "-o", "json").stdout)
    assert body == {
        "now": NOW,
        "deployment": plan["deployments"][-1],
        "clusters": ["solo"],
        "pools": plan["pools"],
        "fixes": [
            {
                "code": "InsufficientGPU",
                "clusters": ["solo"],
                "who": "nobody (wait)",
                "what": "devices free up as other replicas leave; or the platform team grows "
                "the pool (spec.nodePools[].maxNodeCount)",
            }
        ],
    }


def test_a_placed_deployment_shows_where_one_more_replica_could_go() -> None:
    result = invoke("explain", "ml-team/qwen-7b", FLEET, "--now", NOW)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    start = lines.index("no shortfall (3 of 3 replicas placed); replicas per cluster:")
    assert lines[start + 1 : start + 8] == [
        "CLUSTER      REPLICAS",
        "eks-us-east  3",
        "gke-eu-west  0",
        "",
        "where one more replica could go now:",
        "clusters: 1/2 fit",
        "CLUSTER      FIT  REASON   MESSAGE                                                   "
        "DETAILS",
    ]
    # Why none went to gke-eu-west: its taint, with the numbers.
    assert lines[start + 9].startswith(
        "gke-eu-west  no   Tainted  untolerated taints: gpufleet.io/dedicated=llm:NoSchedule"
    )
    body = json.loads(
        invoke("explain", "ml-team/qwen-7b", FLEET, "--now", NOW, "-o", "json").stdout
    )
    assert [(c["cluster"], c["fits"]) for c in body["oneMore"]["clusters"]] == [
        ("eks-us-east", True),
        ("gke-eu-west", False),
    ]


def test_explaining_does_not_change_the_decision() -> None:
    plan_body = json.loads(invoke("plan", FLEET, "--now", NOW, "-o", "json").stdout)
    body = json.loads(
        invoke("explain", "ml-team/qwen-7b", FLEET, "--now", NOW, "-o", "json").stdout
    )
    assert body["pools"] == plan_body["pools"]
    qwen = [d for d in plan_body["deployments"] if d["name"] == "qwen-7b"]
    assert [body["deployment"]] == qwen


def test_unknown_deployment_exits_1_naming_the_deployments() -> None:
    result = invoke("explain", "ml-team/nope", ONE_NODE, "--now", NOW)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "✗ no deployment ml-team/nope in the manifests; deployments: ml-team/gemma-2-9b, "
        "ml-team/llama-3-8b, ml-team/mistral-7b, ml-team/phi-4, ml-team/qwen-2-7b\n"
    )


def test_a_name_without_namespace_means_default() -> None:
    result = invoke("explain", "qwen-2-7b", ONE_NODE, "--now", NOW)
    assert result.exit_code == 1
    assert result.stderr.startswith("✗ no deployment default/qwen-2-7b in the manifests; ")


def test_invalid_manifests_exit_1_with_the_errors() -> None:
    result = invoke("explain", "ml-team/qwen-2-7b", ONE_NODE, EXAMPLES / "invalid", "--now", NOW)
    assert (result.exit_code, result.stdout) == (1, "")
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert sum(line.startswith("✗") for line in lines) == 10
    assert lines[-1] == "6 invalid (10 errors): nothing scheduled"


def test_a_cluster_that_is_not_ready_says_who_fixes_it(tmp_path: Path) -> None:
    """Not Ready (no agent ever reported, as after an install without one): explain names the
    platform team and the agent, in the table and in JSON; a missing gateway refuses nothing."""
    for source in ONE_NODE.iterdir():
        text = source.read_text()
        if "kind: InferenceCluster" in text:
            text = text.replace(
                'status: "True", reason: AgentReporting',
                'status: "False", reason: AgentNotReporting',
            )
            text = text.replace("  gateway: {address: 10.0.0.1}\n", "")
        (tmp_path / source.name).write_text(text)
    result = invoke("explain", "ml-team/qwen-2-7b", tmp_path, "--now", NOW)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "what would change it" in lines
    hint = lines[lines.index("what would change it") + 1]
    assert hint.startswith("  ClusterNotReady (solo): platform team: the controller sets Ready")
    assert "NoGateway" not in result.stdout
    data = json.loads(
        invoke("explain", "ml-team/qwen-2-7b", tmp_path, "--now", NOW, "-o", "json").stdout
    )
    assert [(f["code"], f["clusters"], f["who"]) for f in data["fixes"]] == [
        ("ClusterNotReady", ["solo"], "platform team")
    ]
