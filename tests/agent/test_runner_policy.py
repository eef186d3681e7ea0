"""The agent enforces its cluster policy: a refused replica is not materialized at all and its
ReplicaObservation says why; namespaces it creates carry Pod Security Admission labels."""

from __future__ import annotations

import copy
import dataclasses
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.agent.admission import PolicyGate
from gpufleet.agent.model import ObservationResult, ObservedReplica
from gpufleet.agent.policy import ClusterPolicy, PodSecurityLabels, check_replica
from gpufleet.agent.runner import Agent, AgentConfig
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import (
    DEPLOYMENT,
    MODEL_REPLICA,
    NAMESPACE,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM_TEMPLATE,
)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
HUB_NS = "gpufleet-cluster-a"
PSA = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "latest",
}


def model_replica(name: str, namespace: str = "ml", **container: Any) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        # As the controller writes it: in the cluster's hub namespace, labelled with the
        # deployment's namespace `namespace`.
        "metadata": {
            "name": f"{namespace}.{name}",
            "namespace": HUB_NS,
            "labels": {
                "gpufleet.io/deployment-namespace": namespace,
                "gpufleet.io/deployment": "llama",
                "gpufleet.io/cluster": "a",
            },
        },
        "spec": {
            "deploymentName": "llama",
            "clusterName": "a",
            "engines": [
                {
                    "name": "main",
                    "copies": 1,
                    "members": [
                        {
                            "role": "Standalone",
                            "nodePoolName": "l4",
                            "deviceRequests": [
                                {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 1}
                            ],
                            "template": {"spec": {"containers": [{"name": "e", **container}]}},
                        }
                    ],
                }
            ],
        },
    }


class World:
    def __init__(self) -> None:
        self.now = T0
        self.local = MemoryStore(clock=lambda: self.now, uid_seed="local")
        self.hub = MemoryStore(clock=lambda: self.now, uid_seed="hub")

    def agent(self, policy: ClusterPolicy | None = None) -> Agent:
        config = AgentConfig(policy=policy or ClusterPolicy())
        return Agent("a", self.local, self.hub, config, identity="agent-1", lease_epoch=1)

    def at(self, seconds: float) -> datetime:
        self.now = T0 + timedelta(seconds=seconds)
        return self.now

    def owned(self) -> list[str]:
        return sorted(
            f"{o['kind']} {o['metadata']['namespace']}/{o['metadata']['name']}"
            for kind in (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT)
            for o in self.local.list(kind)
        )

    def observed(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.hub.get(REPLICA_OBSERVATION, f"{namespace}.{name}", HUB_NS)
        assert obj is not None
        status: dict[str, Any] = obj["status"]
        return status


PRIVILEGED = {"securityContext": {"privileged": True}, "ports": [{"hostPort": 22}]}


def test_a_refused_replica_is_not_materialized_and_its_observation_says_why() -> None:
    w = World()
    agent = w.agent()
    w.hub.create(model_replica("ok"))
    w.hub.create(model_replica("bad", **PRIVILEGED))
    out = agent.step(w.at(0))
    assert w.owned() == ["Deployment ml/ok-main", "ResourceClaimTemplate ml/ok-main-standalone"]
    status = w.observed("ml", "bad")
    assert status["podsScheduled"] is False
    [condition] = status["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason")} == {
        "type": "PolicyAllowed",
        "status": "False",
        "reason": "PolicyDenied",
    }
    path = "spec.engines[0].members[0].template.spec.containers[0]"
    assert condition["message"] == (
        "2 violations of the cluster policy: "
        f"{path}.ports[0].hostPort: binds the node's port 22 (HostPort); "
        f"{path}.securityContext.privileged: a privileged container (Privileged)"
    )
    assert "conditions" not in w.observed("ml", "ok")
    assert out.errors == [f"replica ml/bad: refused: {condition['message']}"]
    # Namespaces the agent creates are labelled for Pod Security Admission.
    ns = w.local.get(NAMESPACE, "ml")
    assert ns is not None and ns["metadata"]["labels"] == PSA

    # Nothing changed: the refusal is not written again.
    before = w.hub.revision, w.local.revision
    agent.step(w.at(1))
    assert (w.hub.revision, w.local.revision) == before

    # The tenant fixes the template: it is materialized and the refusal is gone.
    bad = w.hub.get(MODEL_REPLICA, "ml.bad", HUB_NS)
    assert bad is not None
    bad["spec"]["engines"][0]["members"][0]["template"] = {"spec": {"containers": [{"name": "e"}]}}
    w.hub.update(bad)
    out = agent.step(w.at(5))
    assert out.errors == []
    assert "Deployment ml/bad-main" in w.owned()
    assert "conditions" not in w.observed("ml", "bad")


def test_a_stricter_policy_removes_what_it_no_longer_allows() -> None:
    w = World()
    w.hub.create(model_replica("r", "ml"))
    w.hub.create(model_replica("s", "search"))
    w.agent().step(w.at(0))
    assert len(w.owned()) == 4
    # A restarted agent serving only `search`: nothing of `ml` stays half there.
    out = w.agent(ClusterPolicy(namespaces=("search",))).step(w.at(1))
    assert w.owned() == [
        "Deployment search/s-main",
        "ResourceClaimTemplate search/s-main-standalone",
    ]
    assert sorted(out.deleted) == [
        "Deployment ml/r-main",
        "PodDisruptionBudget ml/r",
        "ResourceClaimTemplate ml/r-main-standalone",
    ]
    assert w.observed("ml", "r")["conditions"][0]["message"].startswith(
        "1 violation of the cluster policy: metadata.namespace: namespace 'ml' is not served"
    )


def test_an_existing_namespace_is_not_relabelled() -> None:
    w = World()
    w.local.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    w.hub.create(model_replica("r"))
    w.agent().step(w.at(0))
    ns = w.local.get(NAMESPACE, "ml")
    assert ns is not None and not ns["metadata"].get("labels")


def test_no_labels_when_the_policy_sets_none() -> None:
    w = World()
    w.hub.create(model_replica("r"))
    w.agent(ClusterPolicy(pod_security=PodSecurityLabels(None, None, None))).step(w.at(0))
    ns = w.local.get(NAMESPACE, "ml")
    assert ns is not None and "labels" not in ns["metadata"]


# --- the gate's reuse against the plain computation ------------------------------------------


def _observation(replica: Obj) -> ObservedReplica:
    meta = replica["metadata"]
    return ObservedReplica(meta["namespace"], meta["name"], 1, True, ())


def test_policy_gate_gives_what_checking_each_replica_gives() -> None:
    """Oracle: over random edits (with and without resourceVersions), replicas coming and
    going, and empty listings, `refusals` equals
    `check_replica` on every replica, and `annotate` marks exactly the refused ones."""
    rng = random.Random(17)
    policy = ClusterPolicy()
    gate = PolicyGate(policy)
    replicas = [model_replica(f"r{i}") for i in range(6)]
    for i, r in enumerate(replicas):
        r["metadata"].update(uid=f"u{i}", resourceVersion="1", generation=1)
    last_refused: dict[tuple[str, str], tuple[Any, ...]] = {}
    for step in range(300):
        choice = rng.randrange(7)
        if choice == 4 and len(replicas) > 1:  # a replica goes
            replicas.pop(rng.randrange(len(replicas)))
        elif choice == 5:  # one comes (allowed or refused)
            new = model_replica(f"n{step}")
            new["metadata"].update(uid=f"n{step}", resourceVersion=str(step + 2), generation=1)
            if rng.random() < 0.5:
                members = new["spec"]["engines"][0]["members"]
                members[0]["template"]["spec"]["containers"][0]["securityContext"] = {
                    "privileged": True
                }
            replicas.insert(rng.randrange(len(replicas) + 1), new)
        i = rng.randrange(len(replicas))
        edited = copy.deepcopy(replicas[i])
        container = edited["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
        if choice == 0:
            container["securityContext"] = {"privileged": rng.random() < 0.5}
        elif choice == 1:
            container.pop("securityContext", None)
        elif choice == 2:
            edited["metadata"].pop("resourceVersion", None)
        if choice < 3:
            meta = edited["metadata"]
            meta["generation"] = meta.get("generation", 1) + 1
            if "resourceVersion" in meta:
                meta["resourceVersion"] = str(step + 2)
            replicas[i] = edited
        want = {
            (r["metadata"]["namespace"], r["metadata"]["name"]): tuple(check_replica(r, policy))
            for r in replicas
        }
        got = gate.refusals(replicas)
        assert dict(got) == {k: v for k, v in want.items() if v}
        if choice == 6:  # every replica gone, and back (as an empty listing would say)
            assert gate.refusals([]) == {}
            assert dict(gate.refusals(replicas)) == {k: v for k, v in want.items() if v}
        result = ObservationResult((), tuple(_observation(r) for r in replicas), (), ())
        annotated = gate.annotate(result, replicas)
        for before, after in zip(result.replicas, annotated.replicas, strict=True):
            key = (before.namespace, before.name)
            if want[key]:
                assert after.pods_scheduled is False
                assert after.to_status()["conditions"][-1]["reason"] == "PolicyDenied"
            else:
                assert after is before
        refused = {k: v for k, v in want.items() if v}
        # `moved`: exactly the replicas whose refusal came, went or changed.
        assert gate.moved == {k for k, _ in refused.items() ^ last_refused.items()}
        last_refused = refused
        # One observation at a time (the runner's incremental report) as the whole gave it.
        for before, after in zip(result.replicas, annotated.replicas, strict=True):
            assert gate.annotated(before) == after
            assert gate.annotated(_observation_copy(before)) == after
        assert gate.annotated(None) is None
        # The same inputs again: the very same observations out, and nothing moved.
        again = gate.annotate(result, replicas)
        assert all(a is b for a, b in zip(again.replicas, annotated.replicas, strict=True))
        assert gate.moved == frozenset()


def _observation_copy(o: ObservedReplica) -> ObservedReplica:
    """An equal observation that is not the same object (not one `annotate` was given)."""
    return dataclasses.replace(o)
