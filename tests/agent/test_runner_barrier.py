"""The agent's fault barrier (agent/runner.py): a replica whose materializing raises is
quarantined (its workloads are left as they last were, the others are materialized) and
retried with backoff; a failure while observing stops that half only, and the next try lists
the cluster again, so nothing it read is lost. Faults come through the declared seam
(`AgentFaults`), never a patched client."""

from __future__ import annotations

from dataclasses import dataclass, field

from test_runner import NS, World, model_replica, node, owned, pool_status, slice_

from gpufleet.store.port import MODEL_REPLICA


@dataclass
class Inject:
    point: str
    key: tuple[str, str]
    is_on: bool = True
    hits: int = 0
    seen: set[tuple[str, tuple[str, str]]] = field(default_factory=set)

    def check(self, point: str, key: tuple[str, str]) -> None:
        self.seen.add((point, key))
        if self.is_on and point == self.point and key == self.key:
            self.hits += 1
            raise RecursionError("maximum recursion depth exceeded (injected)")


def test_a_replica_that_raises_is_quarantined_and_the_others_are_materialized() -> None:
    w = World()
    inject = Inject("materialize", ("ml", "r2"), is_on=False)
    agent = w.agent()
    agent.faults = inject
    w.hub.create(model_replica("r1"))
    w.hub.create(model_replica("r2"))
    assert agent.step(w.at(0)).errors == []
    assert ("materialize", ("ml", "r2")) in inject.seen
    # r1 and r2 grow; materializing r2 raises from now on.
    for name in ("r1", "r2"):
        replica = w.hub.get(MODEL_REPLICA, f"ml.{name}", NS)
        assert replica is not None
        replica["spec"]["engines"][0]["copies"] = 2
        w.hub.update(replica)
    inject.is_on = True
    out = agent.step(w.at(1))
    assert inject.hits >= 1
    assert [e.split(":")[0] for e in out.errors] == ["replica ml/r2 failed (1 in a row)"]
    assert "RecursionError" in out.errors[0]
    # r1 went on; r2 is left as it last materialized (not deleted, not grown).
    assert owned(w) == [
        "ResourceClaimTemplate r1-main-standalone replicas=-",
        "ResourceClaimTemplate r2-main-standalone replicas=-",
        "Deployment r1-main replicas=2",
        "Deployment r2-main replicas=1",
        "PodDisruptionBudget r1 replicas=-",
        "PodDisruptionBudget r2 replicas=-",
    ]
    # Within its backoff it is not tried again; the step has no error.
    hits = inject.hits
    assert agent.step(w.at(1.5)).errors == []
    assert inject.hits == hits
    # After it (1 s), tried again: fails again, and waits twice as long.
    out = agent.step(w.at(2.5))
    assert out.errors[0].startswith("replica ml/r2 failed (2 in a row)")
    assert "retried in 2 s" in out.errors[0]
    inject.is_on = False
    assert agent.step(w.at(3.5)).errors == []
    assert owned(w)[-3] == "Deployment r2-main replicas=1"  # still waiting
    assert agent.step(w.at(5)).errors == []
    assert owned(w)[-3] == "Deployment r2-main replicas=2"
    assert agent.quarantine == {}


def test_a_failure_while_observing_loses_no_change() -> None:
    w = World()
    w.add(node("n1"), slice_("n1"))
    inject = Inject("observe", ("", ""), is_on=False)
    agent = w.agent()
    agent.faults = inject
    assert agent.step(w.at(0)).errors == []
    assert pool_status(w)["observedNodes"] == 1
    w.add(node("n2"), slice_("n2"))
    w.hub.create(model_replica("r1"))
    inject.is_on = True
    out = agent.step(w.at(1))
    assert [e.split(":")[0] for e in out.errors] == ["observe failed (1 in a row)"]
    # The other half went on.
    assert "Deployment r1-main replicas=1" in owned(w)
    inject.is_on = False
    assert agent.step(w.at(1.5)).errors == []  # waiting out its backoff
    assert pool_status(w)["observedNodes"] == 1
    assert agent.step(w.at(2.5)).errors == []
    assert pool_status(w)["observedNodes"] == 2  # the node added before the failure
