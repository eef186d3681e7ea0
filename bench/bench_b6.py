"""B6: from a freed GPU on a workload cluster to the waiting deployment's ModelReplica on the
hub, over HTTP, with the real daemons (not a test).

Two emulated API servers (tests/kube/kmockplus.py, each in a process of its own) play the hub
and one workload cluster; the real `gpufleet controller` and `gpufleet agent` run as processes
against them with default settings (only their metrics and health endpoints are turned off,
so that two daemons can share the machine's ports). The workload cluster has `--runs + 1`
nodes of 4 GPUs, each held whole by another tenant's ResourceClaim; a ModelDeployment wants
`--runs` replicas of 4 GPUs, so none fits. Each run deletes one foreign claim and times, as
this script's own watches see them:

- agent report: the claim's deletion to the PoolObservation on the hub that shows the node free;
- controller step: that observation to the new ModelReplica on the hub;
- materialize: that replica to its Deployment on the workload cluster (after the headline).

The headline is the sum of the first two: freed GPU to ModelReplica. Each run starts a
seeded random delay of 0 to 2.5 s after the agent's last push (it pushes when it
materializes the previous run's replica), so some runs free the GPU while the agent's minimum
push interval still holds its next push: the case that made the worst case.

    .venv/bin/python bench/bench_b6.py              # 12 runs
    .venv/bin/python bench/bench_b6.py --runs 1     # a smoke run
    .venv/bin/python bench/bench_b6.py --agent-arg=--min-push-interval=2   # try a setting
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kube"))

from gpufleet.api.names import replica_origin_of  # noqa: E402
from gpufleet.kube.store import KubeStore, KubeStoreConfig  # noqa: E402
from gpufleet.store.port import (  # noqa: E402
    DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
    Change,
    ChangeType,
    Kind,
    Obj,
    kind_of,
)

API = "gpufleet.io/v1alpha1"
CLUSTER = "a"
POOL = "l4"
GPUS_PER_NODE = 4
DRIVER = "gpu.nvidia.com"
WAIT_S = 30.0


# --- the emulated API servers, one process each -----------------------------------------------


def serve_forever() -> None:
    """`--serve`: run one emulated API server, print its URL, stop when stdin closes."""
    from kmockplus import serve

    with serve() as served:
        print(served.url, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def api_server() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)


def kubeconfig(url: str, directory: Path, name: str) -> Path:
    path = directory / f"{name}.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {name}\n  cluster: {{server: '{url}'}}\n"
        "users:\n- name: me\n  user: {token: bench}\n"
        f"contexts:\n- name: {name}\n  context: {{cluster: {name}, user: me}}\n"
        f"current-context: {name}\n"
    )
    return path


@contextlib.contextmanager
def daemon(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    gpufleet = Path(sys.executable).parent / "gpufleet"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(gpufleet), *args],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "KUBECONFIG": "/nonexistent"},
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


# --- objects ----------------------------------------------------------------------------------


def create(store: KubeStore, body: Obj, status: Obj | None = None) -> Obj:
    created = store.create(body)
    if status is not None:
        meta = created["metadata"]
        created = store.patch_status(kind_of(created), meta["name"], meta.get("namespace"), status)
    return created


def hub_objects(nodes: int) -> list[tuple[Obj, Obj | None]]:
    device = {
        "name": "gpu",
        "driver": DRIVER,
        "claim": "DRA",
        "deviceClassName": DRIVER,
        "count": GPUS_PER_NODE,
    }
    gpu_class = {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": "l4-4x"},
        "spec": {"devices": [device]},
    }
    cluster = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": CLUSTER, "labels": {"gpufleet.io/region": "r1"}},
        "spec": {"nodePools": [{"name": POOL, "className": "l4-4x", "nodeCount": nodes}]},
    }
    ready = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "PlatformReady",
                "message": "",
                "lastTransitionTime": "2026-11-29T09:00:00Z",
            }
        ],
        "gateway": {"address": "10.0.0.1"},
    }
    return [(gpu_class, None), (cluster, ready)]


def deployment(replicas: int) -> Obj:
    member = {
        "role": "Standalone",
        "nodeSelector": {
            "devices": [
                {
                    "name": "gpu",
                    "count": GPUS_PER_NODE,
                    "selectors": [{"cel": f'device.driver == "{DRIVER}"'}],
                }
            ]
        },
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}},
    }
    return {
        "apiVersion": API,
        "kind": "ModelDeployment",
        "metadata": {"name": "waiting", "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"engines": [{"name": "main", "copies": 1, "members": [member]}]}},
        },
    }


def workload_objects(node: str) -> list[tuple[Obj, Obj | None]]:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {"gpufleet.io/pool": POOL}},
        "spec": {"taints": []},
    }
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": f"gpu-{i}"} for i in range(GPUS_PER_NODE)],
        },
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"tenant-{node}", "namespace": "other"},
        "spec": {"devices": {"requests": []}},
    }
    results = [
        {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
        for i in range(GPUS_PER_NODE)
    ]
    allocated = {"allocation": {"devices": {"results": results}}}
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    return [(body, ready), (slice_, None), (claim, allocated)]


def free_nodes(observation: Obj) -> int:
    buckets = (observation.get("status") or {}).get("freeDevices") or []
    return sum(b["nodes"] for b in buckets if b["free"].get(DRIVER) == GPUS_PER_NODE)


# --- watching what the daemons write ----------------------------------------------------------


@dataclass
class Seen:
    """Every change a store's informers delivered, with the monotonic time it arrived."""

    store: KubeStore
    kinds: list[Kind]
    changes: list[tuple[float, Change]] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def follow(self, stop: threading.Event) -> None:
        cursor = 0
        while not stop.is_set():
            found, cursor = self.store.changes(cursor, self.kinds)
            arrived = time.monotonic()
            if found:
                with self.lock:
                    self.changes.extend((arrived, c) for c in found)
                    self.lock.notify_all()
            self.store.wait_for_changes(cursor, 0.2)

    def wait_until(self, done: Callable[[list[Change]], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        with self.lock:
            while not done([c for _, c in self.changes]):
                if not self.lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise SystemExit(f"B6: timed out waiting for {what}")

    def last_arrival(self, kinds: tuple[Kind, ...]) -> float:
        with self.lock:
            return max((at for at, c in self.changes if c.kind in kinds), default=0.0)

    def first(self, after: float, match: Callable[[Change], bool], what: str) -> float:
        """When the first change after `after` that `match`es arrived."""
        deadline = time.monotonic() + WAIT_S

        def found() -> float | None:
            for arrived, change in self.changes:
                if arrived >= after and match(change):
                    return arrived
            return None

        with self.lock:
            while (at := found()) is None:
                if not self.lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise SystemExit(f"B6: timed out waiting for {what}")
            return at


@dataclass(frozen=True)
class Run:
    delay_after_push_s: float
    report_s: float
    step_s: float
    materialize_s: float

    @property
    def total_s(self) -> float:
        return self.report_s + self.step_s


def replica_added(change: Change) -> bool:
    return change.kind == MODEL_REPLICA and change.type is ChangeType.ADDED


def measure(runs: int, seed: int, agent_args: list[str], controller_args: list[str]) -> list[Run]:
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(runs + 1)]
    config = KubeStoreConfig(request_timeout_s=10.0)
    with (
        tempfile.TemporaryDirectory() as tmp,
        api_server() as hub_url,
        api_server() as workload_url,
    ):
        directory = Path(tmp)
        hub_config = kubeconfig(hub_url, directory, "hub")
        workload_config = kubeconfig(workload_url, directory, "workload")
        hub = KubeStore.from_url(hub_url, config)
        workload = KubeStore.from_url(workload_url, config)
        stop = threading.Event()
        try:
            for body, status in hub_objects(len(nodes)):
                create(hub, body, status)
            for node in nodes:
                for body, status in workload_objects(node):
                    create(workload, body, status)
            hub_seen = Seen(hub, [POOL_OBSERVATION, REPLICA_OBSERVATION, MODEL_REPLICA])
            workload_seen = Seen(workload, [DEPLOYMENT])
            for seen in (hub_seen, workload_seen):
                for kind in seen.kinds:
                    seen.store.watch(kind)
                threading.Thread(target=seen.follow, args=(stop,), daemon=True).start()
            with (
                daemon(
                    [
                        "controller",
                        f"--kubeconfig={hub_config}",
                        "--lease-identity=controller",
                        "--metrics-address=0",
                        "--health-address=0",
                        *controller_args,
                    ],
                    directory / "controller.log",
                ),
                daemon(
                    [
                        "agent",
                        f"--cluster={CLUSTER}",
                        f"--kubeconfig={workload_config}",
                        f"--hub-kubeconfig={hub_config}",
                        "--lease-identity=agent",
                        "--metrics-address=0",
                        "--health-address=0",
                        *agent_args,
                    ],
                    directory / "agent.log",
                ),
            ):
                hub_seen.first(
                    0.0,
                    lambda c: c.kind == POOL_OBSERVATION and c.obj["metadata"]["name"] == POOL,
                    "the agent's first report",
                )
                create(hub, deployment(runs))
                time.sleep(3.0)  # the controller has looked at it, and found no room
                if hub.list(MODEL_REPLICA, "ml"):
                    raise SystemExit("B6: a replica was placed before any GPU was freed")
                results = []
                for index in range(runs):
                    # The agent pushes the previous run's replica once it materialized it.
                    hub_seen.wait_until(
                        lambda changes, n=index: added(changes, REPLICA_OBSERVATION) >= n,
                        "the agent's report of the new replica",
                    )
                    results.append(one_run(index, rng, nodes, hub_seen, workload_seen, workload))
                return results
        finally:
            stop.set()
            hub.close()
            workload.close()


def added(changes: list[Change], kind: Kind) -> int:
    return sum(1 for c in changes if c.kind == kind and c.type is ChangeType.ADDED)


OBSERVATIONS = (POOL_OBSERVATION, REPLICA_OBSERVATION)


def one_run(
    index: int,
    rng: random.Random,
    nodes: list[str],
    hub_seen: Seen,
    workload_seen: Seen,
    workload: KubeStore,
) -> Run:
    delay_s = rng.uniform(0.0, 2.5)
    time.sleep(max(0.0, hub_seen.last_arrival(OBSERVATIONS) + delay_s - time.monotonic()))
    freed = index + 1  # nodes free once this run's claim is gone
    started = time.monotonic()
    delay_after_push_s = started - hub_seen.last_arrival(OBSERVATIONS)
    workload.delete(RESOURCE_CLAIM, f"tenant-{nodes[index]}", "other")
    reported = hub_seen.first(
        started,
        lambda c: c.kind == POOL_OBSERVATION and free_nodes(c.obj) >= freed,
        f"run {index}: the report of the freed node",
    )
    placed = hub_seen.first(
        started,
        lambda c: (
            replica_added(c) and sum(1 for _, x in hub_seen.changes if replica_added(x)) >= freed
        ),
        f"run {index}: the new replica",
    )
    # The agent labels what it makes with the replica's name as scheduling knows it (its hub
    # name without the tenant namespace the hub name carries: `replica_origin_of`).
    _, name = replica_origin_of(
        [c for _, c in hub_seen.changes if replica_added(c)][index].obj["metadata"]
    )
    materialized = workload_seen.first(
        started,
        lambda c: (
            c.type is ChangeType.ADDED
            and (c.obj["metadata"].get("labels") or {}).get("gpufleet.io/replica") == name
        ),
        f"run {index}: the replica's Deployment",
    )
    return Run(delay_after_push_s, reported - started, placed - reported, materialized - placed)


def summary(runs: list[Run]) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        return {
            "median_s": round(statistics.median(values), 3),
            "worst_s": round(max(values), 3),
        }

    return {
        "runs": len(runs),
        "freed GPU to ModelReplica": stats([r.total_s for r in runs]),
        "agent report": stats([r.report_s for r in runs]),
        "controller step": stats([r.step_s for r in runs]),
        "materialize": stats([r.materialize_s for r in runs]),
    }


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve_forever()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--agent-arg", action="append", default=[])
    parser.add_argument("--controller-arg", action="append", default=[])
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    runs = measure(args.runs, args.seed, args.agent_arg, args.controller_arg)
    print("run  after push  agent report  controller step  = freed->replica  materialize")
    for i, r in enumerate(runs):
        print(
            f"{i:3}  {r.delay_after_push_s:8.3f} s  {r.report_s:10.3f} s  {r.step_s:13.3f} s"
            f"  {r.total_s:13.3f} s  {r.materialize_s:9.3f} s"
        )
    result = summary(runs)
    print(json.dumps(result, indent=2) if args.json else result)


if __name__ == "__main__":
    main()
