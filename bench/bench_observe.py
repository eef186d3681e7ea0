"""Benchmark the agent's observe core on a large synthetic cluster (not a test).

    .venv/bin/python bench/bench_observe.py            # 1,250 / 2,500 / 5,000 / 10,000 nodes
    .venv/bin/python bench/bench_observe.py 5000       # one size

Each node has 8 GPUs published in one ResourceSlice (a DRA pool per node, as node-local drivers
publish). There are 8 claims and 8 pods per node (40,000 of each at 5,000 nodes): one pod per
claim, one device per claim, 90% of claims allocated; pods belong to replicas of 8 Standalone
copies pinned to one of 10 pools. Times are the first and the best of 3 runs of `observe`
(inputs built and garbage-collected beforehand). Peak memory is tracemalloc's peak during one
more run (what observe allocates; the input objects are not counted), and the process's max
RSS at the end (inputs included).
"""

from __future__ import annotations

import gc
import random
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

from gpufleet.agent.observe import AllocationClock, ClusterObjects, ObserveConfig, observe

GPUS_PER_NODE = 8
POOLS = 10
DRIVER = "gpu.nvidia.com"
NS = "ml-team"


def build(n_nodes: int, seed: int = 0) -> ClusterObjects:
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        nodes.append(
            {
                "metadata": {
                    "name": name,
                    "uid": f"uid-node-{i}",
                    "labels": {
                        "gpufleet.io/pool": f"pool-{i % POOLS}",
                        "kubernetes.io/hostname": name,
                    },
                },
                "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "0"},
                },
            }
        )
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRIVER}-abcde"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{g}",
                            "attributes": {
                                "productName": {"string": "NVIDIA H100"},
                                "index": {"int": g},
                            },
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for g in range(GPUS_PER_NODE)
                    ],
                },
            }
        )
    devices = [(f"node-{i:05d}", g) for i in range(n_nodes) for g in range(GPUS_PER_NODE)]
    rng.shuffle(devices)
    n_claims = n_nodes * GPUS_PER_NODE
    claims: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    replicas: list[dict[str, Any]] = []
    copies = 8
    for r in range(n_claims // copies):
        pool = f"pool-{r % POOLS}"
        replicas.append(
            {
                "metadata": {"name": f"rep-{r:05d}", "namespace": NS, "generation": 1},
                "spec": {
                    "engines": [
                        {
                            "name": "main",
                            "copies": copies,
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodePoolName": pool,
                                    "deviceRequests": [
                                        {"name": "gpu", "driver": DRIVER, "count": 1}
                                    ],
                                }
                            ],
                        }
                    ]
                },
            }
        )
    for c in range(n_claims):
        node, g = devices[c]
        is_allocated = rng.random() < 0.9
        claim: dict[str, Any] = {
            "metadata": {"name": f"pod-{c:06d}-gpu", "namespace": NS, "uid": f"uid-claim-{c}"},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
            "status": {},
        }
        if is_allocated:
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{g}"}
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [
                    {"resource": "pods", "name": f"pod-{c:06d}", "uid": f"uid-pod-{c}"}
                ],
            }
        claims.append(claim)
        pods.append(
            {
                "metadata": {
                    "name": f"pod-{c:06d}",
                    "namespace": NS,
                    "uid": f"uid-pod-{c}",
                    "labels": {
                        "gpufleet.io/replica": f"rep-{c // copies:05d}",
                        "gpufleet.io/engine": "main",
                        "gpufleet.io/member": "Standalone",
                        "gpufleet.io/replica-generation": "1",
                    },
                },
                "spec": {
                    "nodeName": node if is_allocated else None,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
                },
                "status": {
                    "phase": "Running" if is_allocated else "Pending",
                    "resourceClaimStatuses": [
                        {"name": "gpu", "resourceClaimName": f"pod-{c:06d}-gpu"}
                    ],
                },
            }
        )
    return ClusterObjects(tuple(nodes), tuple(slices), tuple(claims), tuple(pods), tuple(replicas))


def run(n_nodes: int) -> tuple[int, int, int, float, float, float, float]:
    objects = build(n_nodes)
    # Building leaves a full collection pending; don't bill it to the first observe.
    gc.collect()
    config = ObserveConfig()
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    times = []
    clock = AllocationClock()
    for _ in range(3):
        start = time.perf_counter()
        result, clock = observe(objects, AllocationClock(), config, now)
        times.append(time.perf_counter() - start)
    assert len(result.pools) == POOLS
    tracemalloc.start()
    observe(objects, clock, config, now)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (
        n_nodes,
        len(objects.claims),
        len(objects.pods),
        times[0],
        min(times),
        peak / 2**20,
        rss_mib,
    )


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1250, 2500, 5000, 10000]
    header = ("nodes", "claims", "pods", "first s", "best s", "us/node", "peak MiB", "maxRSS MiB")
    print("{:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>9} {:>11}".format(*header))
    for n in sizes:
        nodes, claims, pods, first, best, peak, rss = run(n)
        print(
            f"{nodes:>7} {claims:>7} {pods:>7} {first:>8.3f} {best:>8.3f}"
            f" {best / nodes * 1e6:>8.1f} {peak:>9.1f} {rss:>11.0f}"
        )


if __name__ == "__main__":
    main()
