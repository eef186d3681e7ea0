"""B1, decision speed and scaling: one `schedule` call over a large synthetic fleet.

Fleet: C clusters x 8 observed pools (4 classes: 8x H100, 8x A100, 4x L4, 4x T4) of N nodes
each (10% of them growth headroom up to maxNodeCount); every pool reports a seeded random
histogram of up to 9 buckets. Deployments (1,000, seeded): 1/2/4/8-GPU standalone engines with
1-2 copies, P/D pairs (2 x 2-GPU prefill + 4-GPU decode) and 2-pod 8-GPU gangs, some with a
region selector and a CEL selector on the GPU architecture, 1-3 replicas each.

Whole-node accounting is the same fleet with no observations (the whole-node rule: every
claiming pod costs one node of `maxNodeCount`). Time is the wall time of one `schedule` call
(best of R runs), with tracemalloc's peak of one more run beside it. The inputs are built,
collected and frozen (`gc.freeze`) before the calls, so the collector does not walk them: a
caller that keeps its snapshot (the controller) can do the same.

B1c holds the demand fixed (1,000 deployments) and triples the fleet: issue 24's goal is a call
on 3,000 clusters at most 1.3x the call on 1,000. B1d grows the demand with the fleet (10
deployments per cluster).
"""

from __future__ import annotations

import dataclasses
import gc
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from gpufleet.bench.common import Figure, Section, Table, count, measure, seconds
from gpufleet.bench.svg import line_plot
from gpufleet.cel import compile_selector
from gpufleet.core.decision import Decision
from gpufleet.core.model import (
    Attribute,
    AttributeKind,
    Bucket,
    ClaimMode,
    Cluster,
    ClusterName,
    Deployment,
    DeploymentKey,
    Device,
    DeviceRequest,
    DriverName,
    Engine,
    Member,
    Phase,
    Pool,
    PoolName,
    PoolObservation,
    Role,
    ServingMode,
    Snapshot,
)
from gpufleet.core.reuse import SHARED
from gpufleet.core.schedule import schedule

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
GPU = DriverName("gpu.nvidia.com")
CLASSES = (("h100", "Hopper", 8), ("a100", "Ampere", 8), ("l4", "Ada", 4), ("t4", "Turing", 4))
REGIONS = ("us-east", "us-west", "eu", "ap")
POOLS_PER_CLUSTER = 8
SEED = 172


def _device(arch: str, count: int) -> Device:
    return Device(
        name="gpu",
        driver=GPU,
        claim=ClaimMode.DRA,
        device_class_name="gpu.nvidia.com",
        count=count,
        attributes={"architecture": Attribute(AttributeKind.STRING, arch)},
    )


def fleet(clusters: int, nodes: int, buckets: int, rng: random.Random) -> tuple[Cluster, ...]:
    """`clusters` clusters of 8 observed pools of `nodes` nodes (seeded histograms)."""
    devices = {name: (_device(arch, n),) for name, arch, n in CLASSES}
    out = []
    for c in range(clusters):
        pools = []
        for p in range(POOLS_PER_CLUSTER):
            name, _, per_node = CLASSES[p % len(CLASSES)]
            observed = nodes - nodes // 10  # 10% growth headroom
            frees = rng.sample(range(per_node + 1), min(buckets, per_node + 1))
            weights = [rng.random() for _ in frees]
            total = sum(weights)
            counts = [int(observed * w / total) for w in weights]
            counts[0] += observed - sum(counts)
            hist = tuple(Bucket({GPU: f}, n) for f, n in zip(frees, counts, strict=True) if n)
            pools.append(
                Pool(
                    name=PoolName(f"{name}-{p}"),
                    class_name=name,
                    devices=devices[name],
                    node_count=observed,
                    max_node_count=nodes,
                    observation=PoolObservation(
                        observed_nodes=observed,
                        buckets=hist,
                        observed_at=NOW,
                        last_allocation_time=NOW,
                    ),
                )
            )
        out.append(
            Cluster(
                name=ClusterName(f"c{c:04d}"),
                labels={"region": REGIONS[c % len(REGIONS)]},
                gateway_address="10.0.0.1",
                pools=tuple(pools),
                agent_observed_at=NOW,
            )
        )
    return tuple(out)


def whole_node(clusters: tuple[Cluster, ...]) -> tuple[Cluster, ...]:
    """The same fleet as a controller without observations sees it."""
    return tuple(
        dataclasses.replace(
            c,
            agent_observed_at=None,
            pools=tuple(dataclasses.replace(p, observation=None) for p in c.pools),
        )
        for c in clusters
    )


def deployments(n: int, rng: random.Random) -> tuple[Deployment, ...]:
    is_gpu = compile_selector('device.driver == "gpu.nvidia.com"')
    archs = {
        a: compile_selector(f'device.attributes["gpu.nvidia.com"].architecture == "{a}"')
        for _, a, _ in CLASSES
    }

    def member(role: Role, gpus: int, arch: str | None, workers: int = 1) -> Member:
        selectors = (is_gpu, archs[arch]) if arch else (is_gpu,)
        return Member(role, workers, (DeviceRequest("gpu", gpus, selectors),))

    out = []
    for i in range(n):
        arch = rng.choice([None, None, "Hopper", "Ampere", "Ada"])
        shape = rng.choice(["1", "2", "4", "8", "pd", "gang"])
        mode = ServingMode.UNIFIED
        if shape == "pd":
            mode = ServingMode.PREFILL_DECODE
            engines: tuple[Engine, ...] = (
                Engine("prefill", (member(Role.STANDALONE, 2, arch),), 2, Phase.PREFILL),
                Engine("decode", (member(Role.STANDALONE, 4, arch),), 1, Phase.DECODE),
            )
        elif shape == "gang":
            engines = (
                Engine(
                    "main",
                    (member(Role.LEADER, 8, "Hopper"), member(Role.WORKER, 8, "Hopper")),
                ),
            )
        else:
            engines = (
                Engine("main", (member(Role.STANDALONE, int(shape), arch),), rng.randint(1, 2)),
            )
        selector = {"region": rng.choice(REGIONS)} if rng.random() < 0.3 else {}
        out.append(
            Deployment(
                key=DeploymentKey(f"team-{i % 20}", f"model-{i:04d}"),
                replicas=rng.randint(1, 3),
                engines=engines,
                cluster_selector=selector,
                serving_mode=mode,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SpeedRow:
    mode: str
    clusters: int
    nodes: int
    buckets: int
    deployments: int
    placed: int
    shortfall: int
    seconds: float
    peak_mib: float | None

    @property
    def rate(self) -> float:
        return self.placed / self.seconds if self.seconds else 0.0

    def cells(self) -> tuple[str, ...]:
        return (
            self.mode,
            count(self.clusters),
            count(POOLS_PER_CLUSTER),
            count(self.nodes),
            count(self.clusters * POOLS_PER_CLUSTER * self.nodes),
            count(self.deployments),
            count(self.placed),
            count(self.shortfall),
            seconds(self.seconds),
            count(self.rate),
            "-" if self.peak_mib is None else f"{self.peak_mib:,.1f}",
        )


HEADERS = (
    "accounting",
    "clusters",
    "pools",
    "nodes/pool",
    "nodes",
    "deploys",
    "placed",
    "short",
    "seconds",
    "placed/s",
    "peak MiB",
)


def run_one(
    clusters: int, nodes: int, n_deployments: int, *, free_gpu: bool, repeats: int, buckets: int = 9
) -> SpeedRow:
    rng = random.Random(SEED)
    deploys = deployments(n_deployments, rng)
    built = fleet(clusters, nodes, buckets, rng)
    snap = Snapshot(deployments=deploys, clusters=built if free_gpu else whole_node(built))

    def call() -> Decision:
        # SHARED: what a one-shot caller (`gpufleet plan`) passes; FRESH is the specification.
        return schedule(snap, NOW, derive=SHARED)

    # The inputs out of the collector's way (the caller's business, not the core's).
    gc.collect()
    gc.freeze()
    try:
        result = measure(call, repeats)
    finally:
        gc.unfreeze()
    decision = result.value
    placed = sum(len(d.created) for d in decision.deployments)
    shortfall = sum(d.shortfall for d in decision.deployments)
    return SpeedRow(
        "free-GPU" if free_gpu else "whole-node",
        clusters,
        nodes,
        buckets,
        n_deployments,
        placed,
        shortfall,
        result.best_s,
        result.peak_mib,
    )


def run(quick: bool = False) -> Section:
    cluster_grid: tuple[int, ...]
    node_grid: tuple[int, ...]
    flat_grid: tuple[int, int]
    grow_grid: tuple[int, ...]
    if quick:
        cluster_grid, node_grid, fixed_clusters, n_dep, repeats = (2, 4), (10, 100), 2, 40, 1
        flat_grid, grow_grid = (4, 12), (2, 4)
    else:
        flat_grid, grow_grid = (1000, 3000), (100, 1000, 3000)
        cluster_grid, node_grid, fixed_clusters, n_dep, repeats = (
            (10, 100, 1000),
            (100, 1000, 10_000),
            100,
            1000,
            3,
        )
    by_clusters: list[SpeedRow] = []
    by_nodes: list[SpeedRow] = []
    for free_gpu in (True, False):
        for c in cluster_grid:
            reps = 1 if c >= 1000 else repeats
            by_clusters.append(run_one(c, 1000, n_dep, free_gpu=free_gpu, repeats=reps))
        for n in node_grid:
            same = [r for r in by_clusters if (r.clusters, r.nodes) == (fixed_clusters, n)]
            mode = "free-GPU" if free_gpu else "whole-node"
            found = [r for r in same if r.mode == mode]
            by_nodes.append(
                found[0]
                if found
                else run_one(fixed_clusters, n, n_dep, free_gpu=free_gpu, repeats=repeats)
            )
    flat = [
        next(
            (r for r in by_clusters if r.mode == "free-GPU" and r.clusters == c),
            None,
        )
        or run_one(c, 1000, n_dep, free_gpu=True, repeats=1)
        for c in flat_grid
    ]
    grown = [run_one(c, 1000, 10 * c, free_gpu=True, repeats=1) for c in grow_grid]
    t1 = Table(
        "B1a: time by clusters (1,000 nodes per pool)",
        HEADERS,
        tuple(r.cells() for r in by_clusters),
    )
    t2 = Table(
        f"B1b: time by nodes ({fixed_clusters} clusters)",
        HEADERS,
        tuple(r.cells() for r in by_nodes),
    )
    fig1 = line_plot(
        "B1: schedule() time by fleet size",
        {
            f"{mode} (by clusters)": [
                (r.clusters, r.seconds) for r in by_clusters if r.mode == mode
            ]
            for mode in ("free-GPU", "whole-node")
        },
        x_label="clusters (x 8 pools x 1,000 nodes)",
        y_label="seconds per schedule() call",
        log_x=True,
        log_y=True,
    )
    fig2 = line_plot(
        f"B1: schedule() time by nodes per pool ({fixed_clusters} clusters)",
        {
            mode: [(r.nodes, r.seconds) for r in by_nodes if r.mode == mode]
            for mode in ("free-GPU", "whole-node")
        },
        x_label="nodes per pool",
        y_label="seconds per schedule() call",
        log_x=True,
    )
    small, large = flat
    ratio = large.seconds / small.seconds if small.seconds else 0.0
    t3 = Table(
        "B1c: flatness, demand fixed (free-GPU, 1,000 nodes per pool)",
        (*HEADERS, "x the smaller fleet"),
        (
            (*small.cells(), "1.00x"),
            (*large.cells(), f"{ratio:.2f}x (goal: at most 1.3x)"),
        ),
    )
    t4 = Table(
        "B1d: demand grows with the fleet (10 deployments per cluster, free-GPU)",
        HEADERS,
        tuple(r.cells() for r in grown),
    )
    numbers: dict[str, float] = {"flatness/ratio": ratio}
    for r in grown:
        numbers[f"grown/{r.clusters}c/seconds"] = r.seconds
        numbers[f"grown/{r.clusters}c/placed"] = r.placed
    for r in by_clusters + by_nodes:
        key = f"{r.mode}/{r.clusters}c/{r.nodes}n"
        numbers[f"{key}/seconds"] = r.seconds
        numbers[f"{key}/placed"] = r.placed
    return Section(
        key="B1",
        title="B1. Decision speed and scaling",
        intro=__doc__ or "",
        tables=(t1, t2, t3, t4),
        figures=(
            Figure("b1-clusters.svg", "schedule() time by number of clusters (log-log)", fig1),
            Figure("b1-nodes.svg", "schedule() time by nodes per pool: flat", fig2),
        ),
        numbers=numbers,
    )
