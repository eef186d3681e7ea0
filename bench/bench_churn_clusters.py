"""Re-placements per stuck deployment per hour on a multi-cluster fleet (issue 30.3).

Builds the builtin scenario `churn-bounded` scaled out: `--deployments` unrunnable 1-GPU
deployments of namespace noisy (their pods ask for a node label no node has) on `--clusters`
clusters of one 8-GPU pool each, runs it for an hour with `gpufleet simulate --output json`,
and counts the log's `dropped noisy/...` lines per deployment (each is one re-placement).

    .venv/bin/python bench/bench_churn_clusters.py                      # 50 on 20 clusters
    .venv/bin/python bench/bench_churn_clusters.py --clusters 1 --deployments 24

It fails (exit 1) when no re-placement happened at all: the work did not happen.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BUILTIN = Path(__file__).parent.parent / "src/gpufleet/sim/scenario/builtin/churn-bounded.yaml"


def scenario(clusters: int, deployments: int) -> str:
    source = BUILTIN.read_text()
    head = source[: source.index("fleet:")].replace("name: churn-bounded", "name: churn-clusters")
    head = re.sub(
        r"description: >\n(  .*\n)+",
        "description: Unrunnable deployments on many clusters, re-placed with backoff.\n",
        head,
    )
    fleet = "".join(
        f"  - name: c{i:02d}\n"
        "    behaviour: {reportInterval: 5s, podStartDelay: 5s, autoscalerScan: 10s, "
        "stockout: true}\n"
        "    pools:\n"
        "    - {name: l4, class: l4-8x, nodeCount: 1}\n"
        for i in range(clusters)
    )
    manifests = source[source.index("- apiVersion: gpufleet.io/v1alpha1") :]
    one = manifests[: manifests.index("- apiVersion", 5)]
    stuck = "".join(one.replace("stuck-00", f"stuck-{i:02d}") for i in range(deployments))
    return (
        f"{head}fleet:\n  clusters:\n{fleet}\ncontroller: {{interval: 5s}}\n\nmanifests:\n{stuck}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--deployments", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "churn-clusters.yaml"
        path.write_text(scenario(args.clusters, args.deployments))
        gpufleet = Path(sys.executable).parent / "gpufleet"
        out = subprocess.run(
            [str(gpufleet), "simulate", str(path), "--output", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
    report = json.loads(out.stdout)
    drops = collections.Counter(
        m.group(1)
        for entry in report["log"]
        if (m := re.match(r"dropped noisy/(\S+) from", str(entry.get("event", ""))))
    )
    hours = 1.0  # the scenario's `end: 1h`
    per = sorted(drops.values())
    print(
        f"{args.deployments} stuck deployments on {args.clusters} clusters: "
        f"{sum(per)} re-placements in {hours:g} h, per deployment "
        f"min {per[0] if per else 0} max {per[-1] if per else 0}"
    )
    return 0 if per else 1


if __name__ == "__main__":
    raise SystemExit(main())
