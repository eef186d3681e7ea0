"""Issue 30.4: `gpufleet simulate` estimates a scenario's size before running and refuses past
the documented bounds (docs/scenarios.md, "Size bounds") naming the field that makes it large;
a file too large or not a regular file is refused unread. Exit 2, no traceback, no run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.sim.scenario.load import MAX_SCENARIO_BYTES
from gpufleet.sim.scenario.size import MAX_ACTIONS, MAX_NODES, MAX_REPLICAS, MAX_WORK

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()

TEMPLATE = {
    "spec": {
        "engines": [
            {
                "name": "engine",
                "members": [
                    {
                        "role": "Standalone",
                        "nodeSelector": {
                            "devices": [{"name": "gpu", "count": 1, "selectors": [{"cel": "true"}]}]
                        },
                        "template": {"spec": {"containers": [{"name": "e", "image": "x:1"}]}},
                    }
                ],
            }
        ]
    }
}


def scenario(
    clusters: int = 1, nodes: int = 1, deployments: int = 1, replicas: int = 1, end: int = 60
) -> dict[str, Any]:
    gpu = {"name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com"}
    return {
        "name": "big",
        "end": end,
        "classes": {"l4": {"devices": [{**gpu, "count": 4}]}},
        "fleet": {
            "clusters": [
                {"name": f"c{i}", "pools": [{"name": "l4", "class": "l4", "nodeCount": nodes}]}
                for i in range(clusters)
            ]
        },
        "manifests": [
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "ModelDeployment",
                "metadata": {"name": f"d{i}", "namespace": "ml"},
                "spec": {"replicas": replicas, "template": TEMPLATE},
            }
            for i in range(deployments)
        ],
    }


def simulate(path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split())


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_too_many_nodes_names_the_largest_pool(tmp_path: Path) -> None:
    data = scenario(clusters=2, nodes=10)
    data["fleet"]["clusters"][1]["pools"][0]["nodeCount"] = MAX_NODES
    code, output = simulate(write(tmp_path, data))
    assert code == 2
    assert "fleet.clusters[1].pools[0].nodeCount: the fleet has 5,010 nodes" in output
    assert f"more than {MAX_NODES:,}" in output


def test_too_many_replicas_names_the_largest_deployment(tmp_path: Path) -> None:
    data = scenario(deployments=3, replicas=1000)
    data["manifests"] = [
        {**m, "metadata": {"name": f"d{i}", "namespace": "ml"}}
        for i, m in enumerate(data["manifests"] * 8)
    ]
    code, output = simulate(write(tmp_path, data))
    assert code == 2
    assert f"asks for 24,000 replicas (this deployment the most), more than {MAX_REPLICAS:,}" in (
        output
    )
    assert "manifests[0].spec.replicas" in output


def test_too_many_actions(tmp_path: Path) -> None:
    data = scenario()
    action = {"at": 1, "action": "scale", "deployment": "d0", "replicas": 0}
    data["timeline"] = [action] * (MAX_ACTIONS + 1)
    code, output = simulate(write(tmp_path, data))
    assert code == 2
    assert f"timeline: {MAX_ACTIONS + 1:,} actions, more than {MAX_ACTIONS:,}" in output


def test_too_much_work_names_end(tmp_path: Path) -> None:
    # Within every count bound, but 2,000 nodes ticked every second for 2 hours.
    code, output = simulate(write(tmp_path, scenario(clusters=2, nodes=1000, end=7200)))
    assert code == 2
    assert "end: the run would read about" in output and f"more than {MAX_WORK:,}" in output


def test_a_large_file_and_a_fifo_are_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (MAX_SCENARIO_BYTES + 1))
    code, output = simulate(huge)
    assert code == 2 and f"file is larger than {MAX_SCENARIO_BYTES:,} bytes" in output
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    code, output = simulate(fifo)
    assert code == 2 and "not a regular file" in output


def test_a_scenario_within_the_bounds_runs(tmp_path: Path) -> None:
    code, output = simulate(write(tmp_path, scenario(nodes=2, deployments=2)))
    assert code == 0, output
