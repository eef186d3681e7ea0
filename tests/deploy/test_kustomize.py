"""The Kustomize base under deploy/: up to date with `gpufleet install` (`make deploy`), rendered
by `kubectl kustomize` into the same objects as `gpufleet install` plus the production additions
(a PodDisruptionBudget, a ServiceMonitor, a PrometheusRule with the alerts the docs describe),
and every object valid (kubernetes-validate; the monitoring.coreos.com kinds by shape).

`kubectl` is Debian's `kubernetes-client` (.ci/run installs it); `KUBECTL=path` picks another.
The base is written for kustomize v2 (Debian's kubectl 1.20) and v5 alike."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.kube import crds, install

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCS = (ROOT / "docs" / "operations.md").read_text()
KUBERNETES_VERSION = "1.37.0"
Obj = dict[str, Any]


def kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl not found: .ci/run installs Debian's kubernetes-client")
        pytest.skip("kubectl not found (apt-get install kubernetes-client)")
    return found


def render(directory: str) -> list[Obj]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def key(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def by_key(objs: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    keys = Counter(key(o) for o in objs)
    assert max(keys.values()) == 1, "an object twice"
    return {key(o): o for o in objs}


def hub_install() -> list[Obj]:
    return [d for d in yaml.safe_load_all(install.hub_yaml()) if d]


def test_the_committed_files_are_what_make_deploy_writes() -> None:
    crd_files = sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml"))
    assert crd_files == sorted(crds.files())
    expected = install.deploy_files(crd_files)
    stale = [
        name
        for name, text in expected.items()
        if not (DEPLOY / name).is_file() or (DEPLOY / name).read_text() != text
    ]
    assert not stale, f"deploy/ is out of date ({stale}): run `make deploy`"


def test_the_hub_base_renders_gpufleet_install_hub_with_its_disruption_budget() -> None:
    rendered = by_key(render("hub"))
    assert rendered == by_key(hub_install())
    assert (
        "policy/v1",
        "PodDisruptionBudget",
        "gpufleet-system",
        "gpufleet-controller",
    ) in rendered


def test_the_agent_overlay_renders_gpufleet_install_agent_for_its_cluster() -> None:
    rendered = by_key(render("overlays/agent-example"))
    assert rendered == by_key(install.agent(install.EXAMPLE_CLUSTER))


def test_an_overlay_for_another_cluster_is_the_example_with_one_name_changed(
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "deploy" / "overlays" / "agent-gke-us-central"
    overlay.mkdir(parents=True)
    for name, text in install.agent_overlay("gke-us-central").items():
        (overlay / name).write_text(text)
    shutil.copytree(DEPLOY / "agent", tmp_path / "deploy" / "agent")
    example = (DEPLOY / "overlays/agent-example/cluster.yaml").read_text()
    assert (overlay / "cluster.yaml").read_text() == example.replace(
        "--cluster=example", "--cluster=gke-us-central"
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert by_key(rendered) == by_key(install.agent("gke-us-central"))


def test_the_monitoring_overlay_adds_a_service_monitor_and_the_documented_alerts() -> None:
    rendered = by_key(render("overlays/monitoring"))
    additions = [install.service_monitor(), install.prometheus_rule()]
    assert rendered == by_key([*hub_install(), *additions])


def test_the_agent_monitoring_overlay_adds_a_pod_monitor_and_the_agent_alerts() -> None:
    rendered = by_key(render("overlays/monitoring-agent"))
    assert rendered == by_key([install.pod_monitor(), install.agent_prometheus_rule()])


def test_every_rendered_object_is_valid() -> None:
    objs = [*render("overlays/monitoring"), *render("overlays/agent-example")]
    validated = 0
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not in kubernetes-validate's schemas: checked by shape below
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        validated += 1
    assert validated == len(objs) - 2


def test_the_disruption_budget_and_the_spread_cover_the_controller_pods() -> None:
    objs = by_key(render("hub"))
    pdb = objs[("policy/v1", "PodDisruptionBudget", "gpufleet-system", "gpufleet-controller")]
    deployment = objs[("apps/v1", "Deployment", "gpufleet-system", "gpufleet-controller")]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    for spread in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()


def test_the_service_monitor_scrapes_the_metrics_service() -> None:
    objs = by_key(render("overlays/monitoring"))
    monitor = objs[
        ("monitoring.coreos.com/v1", "ServiceMonitor", "gpufleet-system", "gpufleet-controller")
    ]
    service = objs[("v1", "Service", "gpufleet-system", "gpufleet-controller-metrics")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert ports == {"metrics"} and monitor["spec"]["endpoints"][0]["path"] == "/metrics"


DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def test_the_prometheus_rule_holds_the_alerts_the_docs_describe() -> None:
    objs = by_key(render("overlays/monitoring"))
    rule = objs[("monitoring.coreos.com/v1", "PrometheusRule", "gpufleet-system", "gpufleet")]
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {"GpufleetObservationExpired", "GpufleetControllerLeader"}
    assert "GpufleetAgentLeader" in DOCS and "GpufleetAgentReportsFailing" in DOCS
    for name, alert in alerts.items():
        assert set(alert) <= {"alert", "expr", "for", "labels", "annotations"}
        assert DURATION.match(alert["for"]) and alert["labels"]["severity"]
        assert name in DOCS, f"docs/operations.md does not name alert {name}"
        for metric in re.findall(r"gpufleet_[a-z_]+", alert["expr"]):
            assert f"`{metric}" in DOCS, f"alert {name} uses {metric}, which no doc lists"
    # The prose: the observation age past the expiry (--expire-after, 300 s by default) ...
    expired = alerts["GpufleetObservationExpired"]["expr"]
    assert expired == "gpufleet_observation_age_seconds > 300"
    assert "--expire-after" in DOCS and "| 1m, 5m |" in DOCS
    # ... and not exactly one controller leading for longer than the lease duration (15 s) and
    # two scrapes (30 s each): 1 m.
    leader = alerts["GpufleetControllerLeader"]
    assert 'sum(gpufleet_leader{component="controller"}) != 1' in leader["expr"]
    assert leader["for"] == "1m"
    assert 'sum(gpufleet_leader{component="controller"})' in DOCS
