"""Issue 14, sections 3 and 4, at the hub: a report of a pool at zero nodes is plausible and
makes its cluster Ready, an autoscaled pool at zero nodes takes replicas on its growth, and a
fixed pool takes only what the nodes its agent reports can hold."""

from __future__ import annotations

from typing import Any

from controller_builders import SIM, at, brief, cluster, condition_of, deployment, gpu_class, hub
from controller_builders import pool_obs as _pool_obs

from gpufleet.controller import Controller
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import EVENT, INFERENCE_CLUSTER, MODEL_REPLICA


def _run(pool: Obj, free: list[tuple[int, int]], replicas: int = 3) -> MemoryStore:
    """Cluster `a` with the one pool `pool` (4-GPU nodes) whose agent reports `free`, and a
    deployment of `replicas` 4-GPU replicas; three controller steps."""
    store = hub(
        gpu_class(),
        cluster(pools=[pool]),
        _pool_obs(free=free),
        deployment(replicas=replicas, gpus=4),
    )
    controller = Controller(store, SIM, "ctl")
    for t in (1, 2, 3):
        assert controller.step(at(t)).errors == []
    return store


def _published(store: MemoryStore) -> Any:
    obj = store.get(INFERENCE_CLUSTER, "a")
    assert obj is not None
    return obj


def test_an_autoscaled_pool_at_zero_nodes_is_ready_and_grows() -> None:
    pool = {"name": "l4", "className": "l4-4x", "nodeCount": 0, "maxNodeCount": 2}
    store = _run(pool, [])
    obj = _published(store)
    assert brief(condition_of(obj, "Ready")) == ("True", "AgentReporting")
    (published,) = obj["status"]["gpuPools"]
    observation = published["observation"]
    assert (observation["observedNodes"], observation["freeDevices"]) == (0, [])
    assert not [e for e in store.list(EVENT) if e["reason"] == "ImplausibleReport"]
    # Two nodes of growth, one 4-GPU replica each; the third is refused at the ceiling.
    assert len(store.list(MODEL_REPLICA)) == 2


def test_a_fixed_pool_at_zero_nodes_takes_nothing() -> None:
    pool = {"name": "l4", "className": "l4-4x", "nodeCount": 0}
    store = _run(pool, [])
    assert brief(condition_of(_published(store), "Ready")) == ("True", "AgentReporting")
    assert store.list(MODEL_REPLICA) == []


def test_a_fixed_pool_missing_a_node_takes_only_the_reported_ones() -> None:
    # Declared at 2 nodes; the agent reports 1 (the other was removed): no growth.
    pool = {"name": "l4", "className": "l4-4x", "nodeCount": 2}
    store = _run(pool, [(4, 1)])
    assert len(store.list(MODEL_REPLICA)) == 1
