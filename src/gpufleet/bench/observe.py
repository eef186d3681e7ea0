"""B3, agent observe cost: `gpufleet.agent.observe.observe` on one large synthetic cluster.

Each node has 8 GPUs published in one ResourceSlice (a DRA pool per node, as node-local drivers
publish). There are 8 claims and 8 pods per node (40,000 of each at 5,000 nodes): one pod per
claim, one device per claim, 90% of claims allocated; pods belong to replicas of 8 Standalone
copies pinned to one of 10 pools. Inputs are built and garbage-collected beforehand; times are
the first and the best of R runs of `observe`; peak memory is tracemalloc's peak during one
more run (what observe allocates, not the input objects). Target: < 1 s at 5,000 nodes.

The last three columns are what the agent runs instead (`FreeDeviceTable`): its first snapshot
after a full listing (an agent's start, or a change feed that expired), a quiet snapshot (no
change), and a snapshot after one step's worth of changes (a claim released and its pod
finished, or both back). The last two cost what changed, not the cluster's size.
"""

from __future__ import annotations

import functools
import gc
import random
import time
from datetime import UTC, datetime
from typing import Any

from gpufleet.agent.observe import AllocationClock, ClusterObjects, ObserveConfig, observe
from gpufleet.agent.table import FreeDeviceTable
from gpufleet.bench.common import Figure, Section, Table, count, max_rss_mib, measure, seconds
from gpufleet.bench.svg import line_plot
from gpufleet.store.port import NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE, Change, ChangeType

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
                "metadata": {
                    "name": f"rep-{r:05d}",
                    "namespace": NS,
                    "uid": f"uid-rep-{r}",
                    "generation": 1,
                    "resourceVersion": "1",
                },
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


def _observe_once(
    objects: ClusterObjects, config: ObserveConfig, now: datetime
) -> tuple[Any, AllocationClock]:
    """One observe from an empty allocation clock (as a freshly started agent)."""
    return observe(objects, AllocationClock(), config, now)


def _table_steps(
    objects: ClusterObjects, config: ObserveConfig, now: datetime, repeats: int
) -> tuple[float, float, float]:
    """Seconds of the table's first snapshot after a listing, of a quiet one (best of
    `repeats`), and of one after one step's changes (best of `repeats`)."""
    table = FreeDeviceTable(config)
    listed = {
        NODE: objects.nodes,
        RESOURCE_SLICE: objects.slices,
        RESOURCE_CLAIM: objects.claims,
        POD: objects.pods,
    }
    started = time.perf_counter()
    table.relist(listed)
    table.snapshot(objects.replicas, now)
    first_s = time.perf_counter() - started
    quiet_s = changed_s = float("inf")
    claim, pod = dict(objects.claims[0]), dict(objects.pods[0])
    released = {**claim, "status": {}}
    finished = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}
    for i in range(repeats):
        started = time.perf_counter()
        table.snapshot(objects.replicas, now)
        quiet_s = min(quiet_s, time.perf_counter() - started)
        # One step: the claim released and its pod finished, or both back as they were.
        step = [(released, finished), (claim, pod)][i % 2]
        table.apply(
            [
                Change(2 * i + 1, ChangeType.MODIFIED, RESOURCE_CLAIM, step[0]),
                Change(2 * i + 2, ChangeType.MODIFIED, POD, step[1]),
            ]
        )
        started = time.perf_counter()
        table.snapshot(objects.replicas, now)
        changed_s = min(changed_s, time.perf_counter() - started)
    return first_s, quiet_s, changed_s


def run(quick: bool = False) -> Section:
    sizes = (50, 100, 200) if quick else (1250, 2500, 5000, 10_000)
    repeats = 1 if quick else 3
    config = ObserveConfig()
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    rows: list[tuple[str, ...]] = []
    points: list[tuple[float, float]] = []
    numbers: dict[str, float] = {}
    for n in sizes:
        objects = build(n)
        # Building leaves a full collection pending; don't bill it to the first observe.
        gc.collect()
        m = measure(functools.partial(_observe_once, objects, config, now), repeats)
        result, _ = m.value
        if len(result.pools) != POOLS:
            raise AssertionError(f"observe returned {len(result.pools)} pools, not {POOLS}")
        rows.append(
            (
                count(n),
                count(n * GPUS_PER_NODE),
                count(len(objects.claims)),
                count(len(objects.pods)),
                seconds(m.first_s),
                seconds(m.best_s),
                f"{m.best_s / n * 1e6:,.1f}",
                m.peak_text,
                f"{max_rss_mib():,.0f}",
            )
        )
        points.append((float(n), m.best_s))
        numbers[f"{n}/seconds"] = m.best_s
        first_s, quiet_s, changed_s = _table_steps(objects, config, now, max(3, repeats))
        rows[-1] = (
            *rows[-1],
            seconds(first_s),
            f"{quiet_s * 1e3:,.3f}",
            f"{changed_s * 1e3:,.3f}",
        )
        numbers[f"{n}/table_step_seconds"] = changed_s
        del objects, result
        gc.collect()
    table = Table(
        "B3: agent observe cost",
        (
            "nodes",
            "GPUs",
            "claims",
            "pods",
            "first s",
            "best s",
            "us/node",
            "peak MiB",
            "maxRSS MiB",
            "table first s",
            "table quiet ms",
            "table 1-change ms",
        ),
        tuple(rows),
    )
    figure = line_plot(
        "B3: observe() time by cluster size",
        {"observe (best)": points},
        x_label="nodes (8 GPUs, 8 claims, 8 pods each)",
        y_label="seconds",
    )
    return Section(
        key="B3",
        title="B3. Agent observe cost",
        intro=__doc__ or "",
        tables=(table,),
        figures=(Figure("b3-observe.svg", "observe() time by nodes: linear", figure),),
        notes=(
            "maxRSS is the whole process's high-water mark when the row finished (inputs and "
            "every earlier benchmark included), not the row's own.",
        ),
        numbers=numbers,
    )
