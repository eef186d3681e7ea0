"""The oracle of the observe half's quiet-step reuse (`Observer`): an agent that hands out its
last report again while the version key of its inputs is unchanged writes exactly what an
agent that observes every step in full writes, over any sequence of cluster and hub changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_runner import NS, World, claim, model_replica, node, slice_

from gpufleet.agent.runner import Agent, AgentConfig
from gpufleet.store.port import (
    DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM_TEMPLATE,
)

_OPS = st.lists(
    st.sampled_from(["node", "claim", "replica", "status", "drop", "quiet", "quiet"]),
    max_size=14,
)


def _run(ops: list[str], reuse: bool) -> tuple[list[object], int]:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica("r0"))
    config = AgentConfig(min_push_interval_s=0, heartbeat_interval_s=3)
    agent = Agent("a", w.local, w.hub, config, identity="agent-1", reuse=reuse)
    seen: list[object] = []
    nodes, claims, replicas = 1, 0, 1
    for t, op in enumerate(ops):
        if op == "node":
            w.add(node(f"n{nodes}"), slice_(f"n{nodes}"))
            nodes += 1
        elif op == "claim":
            w.add(claim(f"c{claims}", f"n{claims % nodes}", [claims % 4]))
            claims += 1
        elif op == "replica":
            w.hub.create(model_replica(f"r{replicas}"))
            replicas += 1
        elif op == "status" and replicas:
            name = f"ml.r{replicas - 1}"
            if w.hub.get(MODEL_REPLICA, name, NS) is not None:
                w.hub.patch_status(MODEL_REPLICA, name, NS, {"note": t})
        elif op == "drop" and replicas:
            replicas -= 1
            if w.hub.get(MODEL_REPLICA, f"ml.r{replicas}", NS) is not None:
                w.hub.delete(MODEL_REPLICA, f"ml.r{replicas}", NS)
        outcome = agent.step(w.at(t))
        seen.append((outcome.is_pushed, outcome.created, outcome.updated, outcome.errors))
        seen.append(w.hub.list(POOL_OBSERVATION, NS))
        seen.append(w.hub.list(REPLICA_OBSERVATION, NS))
        seen.append(w.local.list(DEPLOYMENT) + w.local.list(RESOURCE_CLAIM_TEMPLATE))
    return seen, agent._observer.reused


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_a_quiet_step_reusing_the_report_writes_what_observing_in_full_writes(
    ops: list[str],
) -> None:
    reused, _ = _run(ops, reuse=True)
    plain, none = _run(ops, reuse=False)
    assert reused == plain
    assert none == 0


def test_a_quiet_step_reuses_the_report_and_a_change_does_not() -> None:
    """The reuse happens (it is what a quiet step saves), and only while nothing moved."""
    _, count = _run(["quiet", "quiet", "quiet"], reuse=True)
    assert count == 2  # the first step observes in full
    _, count = _run(["node", "claim", "replica", "drop"], reuse=True)
    assert count == 0
    # A replica's status written alone (the controller publishing) moves no input of observe.
    _, count = _run(["quiet", "status", "status"], reuse=True)
    assert count == 2
