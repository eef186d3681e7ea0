"""The emulated Deployment and LeaderWorkerSet controllers roll as the real ones do: surge,
maxUnavailable and Recreate bound what is alive and ready at every second of a rollout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from sim_builders import pool

from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.objects import LWS_GROUP_INDEX, LWS_TEMPLATE_HASH, POD_TEMPLATE_HASH
from gpufleet.sim.emulated.workload_rollout import Strategy, deployment_strategy, lws_strategy
from gpufleet.store.port import DEPLOYMENT, LEADER_WORKER_SET, POD, Obj

QUICK = ClusterBehaviour(
    has_gpu_taint=False,
    is_autoscaling=False,
    pod_start_delay_s=3.0,
    termination_grace_s=2.0,
    dra_publish_delay_s=1.0,
)


@dataclass(frozen=True)
class StrategyCase:
    id: str
    spec: dict[str, Any]
    replicas: int
    want: Strategy


STRATEGIES = [
    StrategyCase("default-25-percent", {}, 4, Strategy(False, 1, 1)),
    StrategyCase("surge-rounds-up-unavailable-down", {}, 3, Strategy(False, 1, 0)),
    StrategyCase(
        "ints",
        {"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 2}}},
        4,
        Strategy(False, 0, 2),
    ),
    StrategyCase(
        "both-zero-is-one-unavailable",
        {"strategy": {"rollingUpdate": {"maxSurge": "0%", "maxUnavailable": 0}}},
        4,
        Strategy(False, 0, 1),
    ),
    StrategyCase("recreate", {"strategy": {"type": "Recreate"}}, 2, Strategy(True, 0, 2)),
]


@pytest.mark.parametrize("case", STRATEGIES, ids=lambda c: c.id)
def test_deployment_strategy_reads_as_kubernetes(case: StrategyCase) -> None:
    assert deployment_strategy(case.spec, case.replicas) == case.want


def test_lws_strategy_defaults_to_no_surge_one_unavailable() -> None:
    assert lws_strategy({}, 3) == Strategy(False, 0, 1)
    spec = {"rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": "50%"}}}
    assert lws_strategy(spec, 3) == Strategy(False, 2, 1)


def cluster(nodes: int) -> tuple[EventLoop, WorkloadCluster]:
    loop = EventLoop(seed=1)
    c = WorkloadCluster(ClusterSpec("a", (pool(nodes=nodes),), QUICK), loop)
    c.start()
    return loop, c


def pod_spec(image: str) -> Obj:
    return {
        "nodeSelector": {"gpufleet.io/pool": "l4"},
        "containers": [{"name": "engine", "image": image}],
    }


def deployment(replicas: int, strategy: Obj | None) -> Obj:
    spec: Obj = {
        "replicas": replicas,
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod_spec("v1")},
    }
    if strategy is not None:
        spec["strategy"] = strategy
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": spec,
    }


@dataclass(frozen=True)
class Sample:
    live: int  # not deleting
    present: int  # any, terminating ones too
    ready: int  # Running and not deleting
    hashes: int  # templates among the pods present


def sample(c: WorkloadCluster, label: str) -> Sample:
    pods = c.store.list(POD, "ml")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in live if p["status"].get("phase") == "Running"]
    hashes = {p["metadata"]["labels"].get(label) for p in pods}
    return Sample(len(live), len(pods), len(ready), len(hashes))


def roll(c: WorkloadCluster, loop: EventLoop, kind: Any, change: Any) -> list[Sample]:
    """Change the workload's template, then sample every second until it settles."""
    current = c.store.get(kind, "d", "ml")
    assert current is not None
    change(current["spec"])
    c.store.update(current)
    label = POD_TEMPLATE_HASH if kind is DEPLOYMENT else LWS_TEMPLATE_HASH
    samples = []
    for _ in range(60):
        loop.run_for(1)
        samples.append(sample(c, label))
    return samples


def new_image(spec: Obj) -> None:
    spec["template"]["spec"]["containers"][0]["image"] = "v2"


@dataclass(frozen=True)
class RollCase:
    id: str
    strategy: Obj | None
    max_live: int
    min_ready: int
    is_recreate: bool = False


ROLLS = [
    RollCase("default-surges-one", None, 5, 3),
    RollCase("no-surge", {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}, 4, 3),
    RollCase("surge-only", {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, 5, 4),
    RollCase("recreate", {"type": "Recreate"}, 4, 0, is_recreate=True),
]


@pytest.mark.parametrize("case", ROLLS, ids=lambda c: c.id)
def test_a_deployment_rolls_within_its_strategy(case: RollCase) -> None:
    loop, c = cluster(nodes=8)
    c.store.create(deployment(4, case.strategy))
    loop.run_for(10)
    assert sample(c, POD_TEMPLATE_HASH) == Sample(4, 4, 4, 1)
    samples = roll(c, loop, DEPLOYMENT, new_image)
    assert max(s.live for s in samples) == case.max_live
    assert min(s.ready for s in samples) == case.min_ready
    # Recreate: old and new pods never exist together, terminating ones included.
    assert (max(s.hashes for s in samples) == 1) is case.is_recreate
    assert samples[-1] == Sample(4, 4, 4, 1)
    images = {p["spec"]["containers"][0]["image"] for p in c.store.list(POD, "ml")}
    assert images == {"v2"}


def lws(replicas: int, config: Obj) -> Obj:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": config},
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {"spec": pod_spec("v1")},
                "workerTemplate": {"spec": pod_spec("v1")},
            },
        },
    }


def lws_new_image(spec: Obj) -> None:
    for role in ("leaderTemplate", "workerTemplate"):
        spec["leaderWorkerTemplate"][role]["spec"]["containers"][0]["image"] = "v2"


@pytest.mark.parametrize(
    ("config", "max_live", "min_ready"),
    [
        ({"maxSurge": 0, "maxUnavailable": 1}, 6, 4),
        ({"maxSurge": 0, "maxUnavailable": 2}, 6, 2),
        ({"maxSurge": 1, "maxUnavailable": 0}, 8, 6),
    ],
    ids=["one-group-at-a-time", "two-groups-at-a-time", "one-surge-group"],
)
def test_a_leader_worker_set_rolls_group_by_group(
    config: Obj, max_live: int, min_ready: int
) -> None:
    loop, c = cluster(nodes=8)
    c.store.create(lws(3, config))
    loop.run_for(10)
    label = LWS_TEMPLATE_HASH
    assert sample(c, label) == Sample(6, 6, 6, 1)
    samples = roll(c, loop, LEADER_WORKER_SET, lws_new_image)
    assert max(s.live for s in samples) == max_live
    assert min(s.ready for s in samples) == min_ready
    assert samples[-1] == Sample(6, 6, 6, 1)
    groups = {p["metadata"]["labels"][LWS_GROUP_INDEX] for p in c.store.list(POD, "ml")}
    assert groups == {"0", "1", "2"}
