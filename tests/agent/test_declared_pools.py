"""Issue 14, section 3: the agent reports every pool the hub declares for its cluster (its
InferenceCluster's `spec.nodePools`), at zero nodes when it sees none of the pool's nodes, so a
cluster whose pools are all at zero nodes reports, and the hub can count its growth."""

from __future__ import annotations

from typing import Any

import pytest
from test_runner import NS, FlakyHub, World, node, pool_status, slice_

from gpufleet.agent.reads import MAX_DECLARED_POOLS, declared_pools
from gpufleet.agent.runner import Agent, AgentConfig
from gpufleet.store import Obj
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION


def inference_cluster(name: str, *pools: str) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {
            "nodePools": [
                {"name": p, "className": "l4", "nodeCount": 0, "maxNodeCount": 2} for p in pools
            ]
        },
    }


def reported(w: World) -> list[tuple[str, int, Any]]:
    return [
        (o["metadata"]["name"], o["status"]["observedNodes"], o["status"].get("freeDevices"))
        for o in w.hub.list(POOL_OBSERVATION, NS)
    ]


def test_a_cluster_with_every_pool_at_zero_nodes_reports_each_pool() -> None:
    w = World()
    w.hub.create(inference_cluster("a", "l4", "h100"))
    w.hub.create(inference_cluster("b", "other"))  # another cluster's pools are not ours
    w.agent().step(w.at(0))
    assert reported(w) == [("h100", 0, []), ("l4", 0, [])]
    status = pool_status(w, "h100")
    assert status["agent"] == {"identity": "agent-1", "leaseEpoch": 1, "leaseUID": "standalone"}
    assert status["observedAt"] == "2026-11-29T10:00:00Z"


def test_declared_pools_join_the_pools_the_nodes_name() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))  # pool l4
    w.hub.create(inference_cluster("a", "l4", "zero"))
    agent = w.agent(AgentConfig(min_push_interval_s=0))
    agent.step(w.at(0))
    assert reported(w) == [
        (
            "l4",
            1,
            [
                {
                    "free": {"gpu.nvidia.com": 4},
                    "nodes": 1,
                    "hostRoom": [{"milliCpu": 0, "memory": 0, "nodes": 1}],
                }
            ],
        ),
        ("zero", 0, []),
    ]
    # The pool's first node comes (scale from zero): the same observation, now with it.
    w.add(node("n1", pool="zero"), slice_("n1"))
    agent.step(w.at(1))
    assert pool_status(w, "zero")["observedNodes"] == 1


def test_without_an_inference_cluster_only_seen_pools_are_reported() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.agent().step(w.at(0))
    assert [name for name, _, _ in reported(w)] == ["l4"]


def test_a_partitioned_hub_keeps_the_pools_last_declared() -> None:
    w = World()
    hub = FlakyHub(w.hub)
    hub.create(inference_cluster("a", "zero"))
    agent = Agent("a", w.local, hub, AgentConfig(), identity="agent-1", lease_epoch=1)
    assert agent.read_declared_pools() == {"zero"}
    hub.is_down = True
    assert agent.read_declared_pools() == {"zero"}
    hub.is_down = False
    w.hub.delete(INFERENCE_CLUSTER, "a")
    assert agent.read_declared_pools() == frozenset()


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({"nodePools": [{"name": "a"}, {"name": "b"}]}, {"a", "b"}),
        ({"nodePools": [{"name": 7}, "x", None, {"name": ""}, {"name": "ok"}]}, {"ok"}),
        ({"nodePools": [{"name": "x" * 64}]}, set()),
        ({"nodePools": {"name": "a"}}, set()),
        ({"nodePools": [{"name": f"p{i}"} for i in range(20)]}, {f"p{i}" for i in range(8)}),
        ("spec", set()),
        ({}, set()),
    ],
    ids=["names", "malformed-entries", "name-too-long", "not-a-list", "capped", "bad-spec", "none"],
)
def test_declared_pools_are_read_as_untrusted(spec: object, want: set[str]) -> None:
    assert declared_pools({"metadata": {"name": "a"}, "spec": spec}) == want
    assert len(declared_pools({"spec": spec})) <= MAX_DECLARED_POOLS


def test_no_inference_cluster_declares_nothing() -> None:
    assert declared_pools(None) == frozenset()


def test_declared_pools_are_read_again_once_per_heartbeat() -> None:
    """The hub is asked at most once per heartbeat interval: a pool declared since is reported
    from the first step a heartbeat after the last read."""
    w = World()
    w.hub.create(inference_cluster("a", "l4"))
    agent = w.agent(AgentConfig(min_push_interval_s=0, heartbeat_interval_s=30))
    agent.step(w.at(0))
    obj = w.hub.get(INFERENCE_CLUSTER, "a")
    assert obj is not None
    obj["spec"]["nodePools"].append({"name": "zero", "className": "l4", "nodeCount": 0})
    w.hub.update(obj)
    agent.step(w.at(29))
    assert [name for name, _, _ in reported(w)] == ["l4"]
    agent.step(w.at(30))
    assert [name for name, _, _ in reported(w)] == ["l4", "zero"]
