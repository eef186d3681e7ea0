"""`gpufleet agent --policy FILE`: a bad policy file is one message and exit code 2, read before
anything connects; a good one is the policy the agent enforces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.agent.policy import RESTRICTED_CAPABILITIES, ClusterPolicy, PodSecurityLabels
from gpufleet.cli.agent import MAX_POLICY_FILE_BYTES, load_policy
from gpufleet.cli.main import app

runner = CliRunner()

BAD = {
    "not YAML": "namespaces: [\n",
    "policy: must be a map": "- ml\n",
    "allow.privileged: must be true or false": "allow: {privileged: maybe}\n",
    "policy.namespace: unknown field": "namespace: [ml]\n",
    "namespaces[0]: must be a namespace name": "namespaces: [Kube_System]\n",
    "podSecurity.enforce: must be privileged (or null) when allow.hostPath": (
        "allow: {hostPath: true}\n"
    ),
    f"larger than {MAX_POLICY_FILE_BYTES} bytes": "#" * (MAX_POLICY_FILE_BYTES + 1),
}


@pytest.mark.parametrize("problem", list(BAD))
def test_a_bad_policy_file_is_one_message_before_connecting(tmp_path: Path, problem: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BAD[problem])
    # No kubeconfig anywhere: the policy is read (and refused) first.
    result = runner.invoke(
        app,
        ["agent", "--cluster", "a", "--policy", str(path)],
        env={"HOME": str(tmp_path), "KUBECONFIG": "", "COLUMNS": "1000"},
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "'--policy'" in text and problem in text, text
    assert "Traceback" not in result.output


def test_a_missing_policy_file_is_named(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["agent", "--cluster", "a", "--policy", str(tmp_path / "nope")],
        env={"COLUMNS": "1000"},
    )
    assert result.exit_code == 2
    assert "No such file" in " ".join(result.output.replace("│", " ").split())


def test_a_policy_file_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "namespaces: [ml]\n"
        "allow:\n"
        "  capabilities: [NET_RAW]\n"
        "  serviceAccounts: [default, vllm]\n"
        "podSecurity: {enforce: privileged, warn: baseline, audit: null}\n"
    )
    assert load_policy(path) == ClusterPolicy(
        namespaces=("ml",),
        allowed_capabilities=RESTRICTED_CAPABILITIES | {"NET_RAW"},
        allowed_service_accounts=("default", "vllm"),
        pod_security=PodSecurityLabels("privileged", "baseline", None),
    )
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_policy(empty) == ClusterPolicy() == load_policy(None)


def _invoke_with_policy(tmp_path: Path, path: Path) -> str:
    result = runner.invoke(
        app,
        ["agent", "--cluster", "a", "--policy", str(path)],
        env={"HOME": str(tmp_path), "KUBECONFIG": "", "COLUMNS": "1000"},
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.replace("│", " ").split())


def test_deep_nesting_is_one_message(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 20_000 + "]" * 20_000)
    text = _invoke_with_policy(tmp_path, path)
    assert "nests deeper than 100 levels" in text, text


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    text = _invoke_with_policy(tmp_path, path)
    assert "not a regular file" in text, text


def test_serving_kube_system_warns_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("excludedNamespaces: []\n")
    policy = load_policy(path)
    assert policy.serves("kube-system")
    err = capsys.readouterr().err
    assert "warning:" in err and "kube-system" in err, err
    path.write_text(
        "excludedNamespaces: [kube-system, kube-public, kube-node-lease, gpufleet-system]\n"
    )
    load_policy(path)
    assert capsys.readouterr().err == ""
