"""The monitoring files of deploy/: the Grafana dashboard queries only metrics the code exports,
both monitors scrape at the interval the alerts are written against, and no alert waits less
than two scrape intervals (one missed scrape must not fire it, nor keep it from resolving)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpufleet.kube import install
from gpufleet.kube.fleet_metrics import FleetCapacity
from gpufleet.kube.install_dashboard import dashboard, queries
from gpufleet.kube.metrics import AgentMetrics, ControllerMetrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCS = (ROOT / "docs" / "operations.md").read_text()
METRIC = re.compile(r"\bgpufleet_[a-z_]+\b")
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}


def exported() -> set[str]:
    """Every series name the controller's and an agent's registries can export."""
    fleet = FleetCapacity(pools=(), replicas=(), replicas_desired=0, unscheduled_deployments=())
    names: set[str] = set()
    for build in (
        lambda r: ControllerMetrics(r, lambda: datetime.now(UTC), lambda now: fleet),
        AgentMetrics,
    ):
        registry = CollectorRegistry()
        build(registry)
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + s for s in SUFFIXES.get(family.type, []))
    return names


def seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, f"not a duration: {duration!r}"
    return sum(int(n or 0) * units[u] for n, u in zip(parts.groups(), "hms", strict=True))


def test_the_exported_names_are_the_documented_ones() -> None:
    names = exported()
    assert {"gpufleet_pool_free_devices", "gpufleet_refusals_total"} <= names
    for name in names - {n + s for n in names for s in ("_bucket", "_sum", "_count")}:
        if not name.endswith("_total") and f"{name}_total" in names:
            continue  # a counter's family name; its series is `_total`
        assert f"`{name}`" in DOCS, f"docs/operations.md does not list {name}"


def test_every_dashboard_query_names_an_exported_metric() -> None:
    board = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    assert board == dashboard()
    names = exported()
    found = queries(board)
    assert len(found) > 20
    for expr in found:
        used = METRIC.findall(expr)
        assert used, f"a query names no gpufleet metric: {expr}"
        unknown = [m for m in used if m not in names]
        assert not unknown, f"{expr}: {unknown} are not exported"
    # Each exported family is charted somewhere (a new metric gets a panel).
    charted = {m.removesuffix("_bucket") for e in found for m in METRIC.findall(e)}
    families = {n for n in names if not n.endswith(("_sum", "_count", "_bucket"))}
    families -= {n.removesuffix("_total") for n in names if n.endswith("_total")}
    assert families <= charted, families - charted


def test_the_dashboard_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells
        assert g["x"] + g["w"] <= 24


def rules(path: str) -> list[dict[str, Any]]:
    (rule,) = yaml.safe_load_all((DEPLOY / path).read_text().split("\n", 1)[1])
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def intervals() -> list[int]:
    monitor = yaml.safe_load((DEPLOY / "overlays/monitoring/servicemonitor.yaml").read_text())
    pods = yaml.safe_load((DEPLOY / "overlays/monitoring-agent/podmonitor.yaml").read_text())
    endpoints = [*monitor["spec"]["endpoints"], *pods["spec"]["podMetricsEndpoints"]]
    return [seconds(e["interval"]) for e in endpoints]


@pytest.mark.parametrize(
    "path",
    ["overlays/monitoring/prometheusrule.yaml", "overlays/monitoring-agent/prometheusrule.yaml"],
)
def test_no_alert_waits_less_than_two_scrape_intervals(path: str) -> None:
    scrape = max(intervals())
    assert scrape == install.SCRAPE_INTERVAL_S
    names = exported()
    for alert in rules(path):
        assert seconds(alert["for"]) >= 2 * scrape, f"{alert['alert']}: for {alert['for']}"
        assert f"`{alert['alert']}`" in DOCS, f"docs/operations.md does not name {alert['alert']}"
        for metric in METRIC.findall(alert["expr"]):
            assert metric in names, f"{alert['alert']} uses {metric}, which is not exported"


def test_the_pod_monitor_selects_the_agent_pods_and_their_metrics_port() -> None:
    (deployment,) = [o for o in install.agent("a") if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    monitor = install.pod_monitor()
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    )
    ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    assert "metrics" in ports
