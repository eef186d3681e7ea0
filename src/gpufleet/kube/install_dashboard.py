"""The Grafana dashboard of the fleet (deploy/monitoring/grafana-dashboard.json, `make deploy`).

One row per question an operator asks, each panel one PromQL query over the metrics of
`gpufleet.kube.metrics` (docs/operations.md, "Metrics"); tests/deploy/test_dashboard.py checks
that every metric a query names is one the controller or the agent exports. Variables: the
Prometheus data source and the clusters (`label_values(gpufleet_pool_nodes, cluster)`).

Import it in Grafana (Dashboards, New, Import) or load it with the Grafana sidecar's ConfigMap
label; it has no data-source uid of its own (`${datasource}`), so it works on any Prometheus.
"""

from __future__ import annotations

import json
from typing import Any

Panel = dict[str, Any]

_DS = {"type": "prometheus", "uid": "${datasource}"}
_CLUSTER = 'cluster=~"$cluster"'

#: (title, [(query, legend)], unit, kind) per panel, by row. Kind: "timeseries" or "stat".
_ROWS: list[tuple[str, list[tuple[str, list[tuple[str, str]], str, str]]]] = [
    (
        "Scheduling",
        [
            (
                "Replicas desired, placed, running",
                [
                    ("gpufleet_replicas_desired", "desired"),
                    (f"sum(gpufleet_replicas_placed{{{_CLUSTER}}})", "placed"),
                    (f"sum(gpufleet_replicas_running{{{_CLUSTER}}})", "running"),
                ],
                "short",
                "timeseries",
            ),
            (
                "Unplaced replicas",
                [("gpufleet_unplaced_replicas", "unplaced")],
                "short",
                "stat",
            ),
            (
                "Refusals by reason (per second)",
                [("sum by (reason) (rate(gpufleet_refusals_total[5m]))", "{{reason}}")],
                "ops",
                "timeseries",
            ),
            (
                "Deployments short or unscheduled, by reason",
                [
                    ("sum by (reason) (gpufleet_short_deployments)", "short {{reason}}"),
                    (
                        "sum by (reason) (gpufleet_unscheduled_deployments)",
                        "unscheduled {{reason}}",
                    ),
                ],
                "short",
                "timeseries",
            ),
            (
                "Placements by cluster (per second)",
                [
                    (
                        f"sum by (cluster) (rate(gpufleet_placements_total{{{_CLUSTER}}}[5m]))",
                        "{{cluster}}",
                    )
                ],
                "ops",
                "timeseries",
            ),
            (
                "Scheduling pass, p50 and p99",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) "
                        "(rate(gpufleet_decision_duration_seconds_bucket[5m])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(gpufleet_decision_duration_seconds_bucket[5m])))",
                        "p99",
                    ),
                ],
                "s",
                "timeseries",
            ),
        ],
    ),
    (
        "Capacity",
        [
            (
                "GPUs free, allocated, out of service",
                [
                    (f"sum(gpufleet_pool_free_devices{{{_CLUSTER}}})", "free"),
                    (f"sum(gpufleet_pool_allocated_devices{{{_CLUSTER}}})", "allocated"),
                    (f"sum(gpufleet_pool_unavailable_devices{{{_CLUSTER}}})", "out of service"),
                ],
                "short",
                "timeseries",
            ),
            (
                "Utilisation by pool",
                [
                    (
                        f"gpufleet_pool_allocated_devices{{{_CLUSTER}}} / "
                        f"(gpufleet_pool_devices{{{_CLUSTER}}} - "
                        f"gpufleet_pool_unavailable_devices{{{_CLUSTER}}})",
                        "{{cluster}}/{{pool}}",
                    )
                ],
                "percentunit",
                "timeseries",
            ),
            (
                "Largest free block by pool (devices on one node)",
                [
                    (
                        f"gpufleet_pool_largest_free_block_devices{{{_CLUSTER}}}",
                        "{{cluster}}/{{pool}}",
                    )
                ],
                "short",
                "timeseries",
            ),
            (
                "Nodes by free devices",
                [
                    (
                        f"sum by (free) (gpufleet_pool_nodes_by_free_devices{{{_CLUSTER}}})",
                        "{{free}} free",
                    )
                ],
                "short",
                "timeseries",
            ),
            (
                "Nodes observed, excluded, reachable",
                [
                    (f"sum by (cluster) (gpufleet_pool_nodes{{{_CLUSTER}}})", "{{cluster}} nodes"),
                    (
                        f"sum by (cluster, reason) (gpufleet_pool_excluded_nodes{{{_CLUSTER}}})",
                        "{{cluster}} excluded {{reason}}",
                    ),
                    (
                        f"sum by (cluster) (gpufleet_pool_max_nodes{{{_CLUSTER}}})",
                        "{{cluster}} max",
                    ),
                ],
                "short",
                "timeseries",
            ),
        ],
    ),
    (
        "Health",
        [
            (
                "Oldest observation by cluster",
                [
                    (
                        f"max by (cluster) (gpufleet_observation_age_seconds{{{_CLUSTER}}})",
                        "{{cluster}}",
                    )
                ],
                "s",
                "timeseries",
            ),
            (
                "Leaders (1 per component)",
                [("sum by (component) (gpufleet_leader)", "{{component}}")],
                "short",
                "stat",
            ),
            (
                "Lease epoch",
                [("max by (component) (gpufleet_lease_epoch)", "{{component}}")],
                "short",
                "timeseries",
            ),
            (
                "Reconcile errors (per second)",
                [
                    (
                        "sum by (component) (rate(gpufleet_reconcile_errors_total[5m]))",
                        "{{component}}",
                    ),
                    (
                        "sum by (component) (rate(gpufleet_reconciles_total[5m]))",
                        "{{component}} steps",
                    ),
                ],
                "ops",
                "timeseries",
            ),
            (
                "Rejected reports (per second)",
                [("rate(gpufleet_rejected_reports_total[5m])", "rejected")],
                "ops",
                "timeseries",
            ),
            (
                "Agent steps by result (per second)",
                [
                    (
                        "sum by (result) (rate(gpufleet_agent_reports_total[5m]))",
                        "{{result}}",
                    )
                ],
                "ops",
                "timeseries",
            ),
            (
                "Agent step, p99",
                [
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(gpufleet_agent_report_duration_seconds_bucket[5m])))",
                        "p99",
                    )
                ],
                "s",
                "timeseries",
            ),
        ],
    ),
]


def _panel(
    panel_id: int, title: str, queries: list[tuple[str, str]], unit: str, kind: str, x: int, y: int
) -> Panel:
    return {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": _DS,
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [
            {"datasource": _DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    panels: list[Panel] = []
    y = 0
    for row_title, row in _ROWS:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for i, (title, queries, unit, kind) in enumerate(row):
            x = (i % 3) * 8
            if i and i % 3 == 0:
                y += 8
            panels.append(_panel(len(panels) + 1, title, queries, unit, kind, x, y))
        y += 8
    variables = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
        },
        {
            "name": "cluster",
            "label": "Cluster",
            "type": "query",
            "datasource": _DS,
            "query": "label_values(gpufleet_pool_nodes, cluster)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
        },
    ]
    return {
        "title": "gpufleet",
        "uid": "gpufleet",
        "tags": ["gpufleet"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": variables},
        "panels": panels,
    }


def queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of `board` (its panels' targets and its query variables)."""
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    found += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return found


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"
