"""`gpufleet crds` and `gpufleet install`: what they print, their errors, and that the
Deployments they print run commands the real CLI accepts."""

from __future__ import annotations

from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.kube import crds, install

pytestmark = pytest.mark.timeout(30)

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.output


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_crds_prints_the_generated_crds() -> None:
    code, output = invoke("crds")
    assert code == 0
    assert output == crds.crds_yaml()
    assert [d["spec"]["names"]["kind"] for d in documents(output)] == [
        "InferenceClass",
        "InferenceCluster",
        "ModelDeployment",
        "ModelReplica",
        "PoolObservation",
        "ReplicaObservation",
    ]


def test_install_hub_prints_crds_then_the_controller_with_image_and_replicas() -> None:
    code, output = invoke("install", "hub", "--image", "reg.example/gpufleet:9", "--replicas", "3")
    assert code == 0
    assert output == install.hub_yaml("reg.example/gpufleet:9", 3)
    deployment = next(d for d in documents(output) if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg.example/gpufleet:9"


def test_install_agent_prints_both_sides() -> None:
    code, workload_side = invoke("install", "agent", "--cluster", "gke-1")
    assert code == 0
    assert workload_side == install.agent_yaml("gke-1")
    code, hub_side = invoke("install", "agent", "--cluster", "gke-1", "--hub-access")
    assert code == 0
    assert hub_side == install.agent_hub_yaml("gke-1")
    assert documents(hub_side)[0]["metadata"]["name"] == "gpufleet-cluster-gke-1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["install", "agent"], "--cluster"),
        (["install", "agent", "--cluster", "Bad_Name", "--hub-access"], "DNS label"),
        (["install", "hub", "--replicas", "0"], "--replicas"),
    ],
    ids=["cluster-required", "bad-cluster-name", "no-replicas"],
)
def test_install_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, output = invoke(*args)
    assert code == 2
    assert message in " ".join(output.split())  # rich wraps the error box


def container_args(text: str, name: str) -> list[str]:
    deployment = next(
        d for d in documents(text) if d["kind"] == "Deployment" and d["metadata"]["name"] == name
    )
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # The kubelet expands $(POD_NAME) from the env the manifest declares.
    return [a.replace("$(POD_NAME)", "gpufleet-abc-123") for a in args]


@pytest.mark.parametrize(
    ("text", "deployment"),
    [
        (install.hub_yaml(), "gpufleet-controller"),
        (install.agent_yaml("gke-1"), "gpufleet-agent"),
    ],
    ids=["controller", "agent"],
)
def test_the_installed_containers_run_commands_the_cli_accepts(text: str, deployment: str) -> None:
    args = container_args(text, deployment)
    group: Any = typer.main.get_command(app)  # typer vendors click: no public Group type
    with group.make_context("gpufleet", args[:1]) as ctx:
        command = group.get_command(ctx, args[0])
        assert command is not None
        parsed = command.make_context(args[0], args[1:], parent=ctx)  # raises on unknown flags
    assert parsed.params["leader_elect"] is True
    assert parsed.params["lease_identity"] == "gpufleet-abc-123"
    assert parsed.params["metrics_address"] == f":{install.METRICS_PORT}"
    assert parsed.params["health_address"] == f":{install.HEALTH_PORT}"
    if deployment == "gpufleet-agent":
        assert parsed.params["cluster"] == "gke-1"
        assert str(parsed.params["hub_kubeconfig"]) == "/etc/gpufleet/hub/kubeconfig"
