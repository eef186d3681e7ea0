"""Benchmark `gpufleet.core.schedule.schedule` on a large synthetic fleet.

    .venv/bin/python bench/bench_schedule.py            # the full table
    .venv/bin/python bench/bench_schedule.py --quick    # the headline row only

Fleet: C clusters x 8 observed pools (4 classes: 8x H100, 8x A100, 4x L4, 4x T4) of N nodes
each; every pool reports a seeded random histogram of up to B buckets. Deployments (D, seeded):
1/2/4/8-GPU standalone engines, P/D pairs and 2-pod gangs, some with a region selector and a
CEL selector on the GPU architecture, 1-3 replicas each. Time is wall time of one `schedule`
call (best of R runs); peak memory is measured on a separate run under tracemalloc.
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime

from gpufleet.cel import compile_selector
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
from gpufleet.core.schedule import schedule

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
GPU = DriverName("gpu.nvidia.com")
CLASSES = (("h100", "Hopper", 8), ("a100", "Ampere", 8), ("l4", "Ada", 4), ("t4", "Turing", 4))
REGIONS = ("us-east", "us-west", "eu", "ap")


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
    devices = {name: (_device(arch, count),) for name, arch, count in CLASSES}
    out = []
    for c in range(clusters):
        pools = []
        for p in range(8):
            name, _, count = CLASSES[p % len(CLASSES)]
            observed = nodes - nodes // 10  # 10% growth headroom
            frees = rng.sample(range(count + 1), min(buckets, count + 1))
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
                name=ClusterName(f"c{c:03d}"),
                labels={"region": REGIONS[c % len(REGIONS)]},
                gateway_address="10.0.0.1",
                pools=tuple(pools),
                agent_observed_at=NOW,
            )
        )
    return tuple(out)


def deployments(count: int, rng: random.Random) -> tuple[Deployment, ...]:
    is_gpu = compile_selector('device.driver == "gpu.nvidia.com"')
    archs = {
        a: compile_selector(f'device.attributes["gpu.nvidia.com"].architecture == "{a}"')
        for _, a, _ in CLASSES
    }

    def member(role: Role, gpus: int, arch: str | None, workers: int = 1) -> Member:
        selectors = (is_gpu, archs[arch]) if arch else (is_gpu,)
        return Member(role, workers, (DeviceRequest("gpu", gpus, selectors),))

    out = []
    for i in range(count):
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


@dataclass(frozen=True)
class Row:
    clusters: int
    nodes: int
    buckets: int
    deployments: int
    placed: int
    shortfall: int
    seconds: float
    peak_mib: float

    @property
    def rate(self) -> float:
        return self.placed / self.seconds if self.seconds else 0.0


def run(clusters: int, nodes: int, buckets: int, count: int, repeats: int) -> Row:
    rng = random.Random(172)
    snap = Snapshot(
        deployments=deployments(count, rng), clusters=fleet(clusters, nodes, buckets, rng)
    )
    best = float("inf")
    decision = None
    for _ in range(repeats):
        start = time.perf_counter()
        decision = schedule(snap, NOW)
        best = min(best, time.perf_counter() - start)
    assert decision is not None
    tracemalloc.start()
    schedule(snap, NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    placed = sum(len(d.created) for d in decision.deployments)
    shortfall = sum(d.shortfall for d in decision.deployments)
    return Row(clusters, nodes, buckets, count, placed, shortfall, best, peak / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the headline row only")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    grid = [(100, 1000, 9, 1000)]
    if not args.quick:
        grid += [
            (100, 100, 9, 1000),
            (100, 10_000, 9, 1000),
            (10, 1000, 9, 1000),
            (100, 1000, 3, 1000),
            (100, 1000, 5, 1000),
            (100, 3, 9, 1000),  # a nearly full fleet: most deployments fail and get diagnosed
        ]
    print(
        f"{'clusters':>8} {'pools':>5} {'nodes/pool':>10} {'buckets':>7} {'deploys':>7} "
        f"{'placed':>6} {'short':>5} {'seconds':>8} {'placed/s':>9} {'peak MiB':>8}"
    )
    for clusters, nodes, buckets, count in grid:
        row = run(clusters, nodes, buckets, count, args.repeats)
        print(
            f"{row.clusters:>8} {8:>5} {row.nodes:>10} {row.buckets:>7} {row.deployments:>7} "
            f"{row.placed:>6} {row.shortfall:>5} {row.seconds:>8.3f} {row.rate:>9.0f} "
            f"{row.peak_mib:>8.1f}"
        )


if __name__ == "__main__":
    main()
