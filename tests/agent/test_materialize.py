"""The materializer: a ModelReplica dict → the exact local objects, compared whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet.agent.materialize import PolicyDenied, ReplicaInvalid, dns_name, materialize
from gpufleet.agent.policy import ClusterPolicy, ViolationCode

Obj = dict[str, Any]

REQUEST = {
    "name": "gpu",
    "deviceClassName": "gpu.nvidia.com",
    "driver": "gpu.nvidia.com",
    "count": 2,
    "selectors": [{"cel": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'}],
}
CONTAINER = {"name": "engine", "image": "vllm/vllm-openai:v0.23.0"}
TEMPLATE = {"metadata": {"labels": {"team": "search"}}, "spec": {"containers": [CONTAINER]}}
BASE_LABELS = {
    "gpufleet.io/deployment": "llama",
    "gpufleet.io/replica": "llama-3f9a1",
    "gpufleet.io/engine": "main",
}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def replica(
    members: list[Obj],
    copies: int = 2,
    name: str = "llama-3f9a1",
    generation: int = 3,
    engine: str = "main",
) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "generation": generation,
            "labels": {"gpufleet.io/deployment": "llama", "gpufleet.io/cluster": "a"},
        },
        "spec": {
            "deploymentName": "llama",
            "clusterName": "a",
            "engines": [{"name": engine, "copies": copies, "members": members}],
        },
    }


def claim_template(name: str, role: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {**BASE_LABELS, "gpufleet.io/member": role},
        },
        "spec": {
            "metadata": {"labels": {**BASE_LABELS, "gpufleet.io/member": role}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 2,
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": 'device.attributes["gpu.nvidia.com"]'
                                            '.productName == "NVIDIA L4"'
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            },
        },
    }


def pod_template(role: str, claim: str | None) -> Obj:
    container: Obj = dict(CONTAINER)
    spec: Obj = {
        "nodeSelector": {"gpufleet.io/pool": "l4"},
        "tolerations": [TOLERATION],
    }
    if claim is not None:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim}]
    spec["containers"] = [container]
    return {
        "metadata": {
            "labels": {
                "team": "search",
                **BASE_LABELS,
                "gpufleet.io/member": role,
                "gpufleet.io/replica-generation": "3",
            }
        },
        "spec": spec,
    }


GANG_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {
                    "matchLabels": {
                        "gpufleet.io/replica": "llama-3f9a1",
                        "gpufleet.io/engine": "main",
                        "gpufleet.io/claiming": "true",
                    }
                },
                "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
}


def gang_pod_template(role: str, claim: str) -> Obj:
    """A claiming gang member's template: labelled claiming, kept off its copy's other
    claiming pods' nodes."""
    out = pod_template(role, claim)
    out["metadata"]["labels"]["gpufleet.io/claiming"] = "true"
    out["spec"]["affinity"] = GANG_ANTI_AFFINITY
    return out


STANDALONE = {
    "role": "Standalone",
    "nodePoolName": "l4",
    "deviceRequests": [REQUEST],
    "template": TEMPLATE,
}


@dataclass(frozen=True)
class Case:
    id: str
    replica: Obj
    want: list[Obj]


#: Written out, not imported: a replica's workload never surges (DESIGN.md decision 11).
NO_SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
NO_SURGE_GROUPS = {
    "type": "RollingUpdate",
    "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
}


CASES = [
    Case(
        "standalone-claiming",
        replica([STANDALONE]),
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "llama-3f9a1-main", "namespace": "ml", "labels": BASE_LABELS},
                "spec": {
                    "replicas": 2,
                    "selector": {
                        "matchLabels": {
                            "gpufleet.io/replica": "llama-3f9a1",
                            "gpufleet.io/engine": "main",
                        }
                    },
                    "strategy": NO_SURGE,
                    "template": pod_template("Standalone", "llama-3f9a1-main-standalone"),
                },
            },
            claim_template("llama-3f9a1-main-standalone", "Standalone"),
        ],
    ),
    Case(
        "standalone-claimless",
        replica([{"role": "Standalone", "nodePoolName": "l4", "template": TEMPLATE}], copies=1),
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "llama-3f9a1-main", "namespace": "ml", "labels": BASE_LABELS},
                "spec": {
                    "replicas": 1,
                    "selector": {
                        "matchLabels": {
                            "gpufleet.io/replica": "llama-3f9a1",
                            "gpufleet.io/engine": "main",
                        }
                    },
                    "strategy": NO_SURGE,
                    "template": pod_template("Standalone", None),
                },
            }
        ],
    ),
    Case(
        "leader-worker",
        replica(
            [
                {
                    "role": "Leader",
                    "nodePoolName": "l4",
                    "deviceRequests": [REQUEST],
                    "template": TEMPLATE,
                },
                {
                    "role": "Worker",
                    "worker": {"nodes": 3},
                    "nodePoolName": "l4",
                    "deviceRequests": [REQUEST],
                    "template": TEMPLATE,
                },
            ]
        ),
        [
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": "llama-3f9a1-main", "namespace": "ml", "labels": BASE_LABELS},
                "spec": {
                    "replicas": 2,
                    "rolloutStrategy": NO_SURGE_GROUPS,
                    "leaderWorkerTemplate": {
                        "size": 4,
                        "leaderTemplate": gang_pod_template("Leader", "llama-3f9a1-main-leader"),
                        "workerTemplate": gang_pod_template("Worker", "llama-3f9a1-main-worker"),
                    },
                },
            },
            claim_template("llama-3f9a1-main-leader", "Leader"),
            claim_template("llama-3f9a1-main-worker", "Worker"),
        ],
    ),
]


#: Every replica's PodDisruptionBudget: no Ready pod of it is evicted while it serves.
BUDGET: Obj = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {
        "name": "llama-3f9a1",
        "namespace": "ml",
        "labels": {"gpufleet.io/deployment": "llama", "gpufleet.io/replica": "llama-3f9a1"},
    },
    "spec": {
        "maxUnavailable": 0,
        "selector": {"matchLabels": {"gpufleet.io/replica": "llama-3f9a1"}},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    },
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_materialize(case: Case) -> None:
    made = materialize(case.replica)
    assert [o for o in made if o["kind"] != "PodDisruptionBudget"] == case.want
    assert [o for o in made if o["kind"] == "PodDisruptionBudget"] == [BUDGET]


def test_materialize_does_not_mutate_its_input() -> None:
    r = replica([STANDALONE])
    before = repr(r)
    materialize(r)
    assert repr(r) == before


@dataclass(frozen=True)
class NameCase:
    id: str
    parts: tuple[str, ...]
    want: str


NAME_CASES = [
    NameCase("short-kept", ("llama-3f9a1", "main"), "llama-3f9a1-main"),
    NameCase("lowercased", ("Llama", "Main"), "llama-main"),
    NameCase(
        "long-cut-with-hash",
        ("a" * 60, "decode", "standalone"),
        "a" * 57 + "-64add",  # 5 hex of sha256 of the full name
    ),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.id)
def test_dns_name(case: NameCase) -> None:
    assert dns_name(*case.parts) == case.want


def test_long_names_are_distinct_dns_labels() -> None:
    a = dns_name("x" * 70, "prefill")
    b = dns_name("x" * 70, "decode")
    assert a != b
    assert len(a) == len(b) == 63
    assert a[:57] == b[:57] == "x" * 57


def test_long_replica_names_give_valid_names() -> None:
    long_name = "m" * 58 + "-3f9a1"
    objs = materialize(replica([STANDALONE], name=long_name, engine="prefill"))
    names = sorted(o["metadata"]["name"] for o in objs)
    assert all(len(n) <= 63 for n in names)
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    rct = next(o for o in objs if o["kind"] == "ResourceClaimTemplate")
    assert (
        deployment["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        == rct["metadata"]["name"]
    )


@dataclass(frozen=True)
class BadCase:
    id: str
    replica: Obj
    message: str


BAD = [
    BadCase("no-name", {"metadata": {"namespace": "ml"}}, "metadata.name is required"),
    BadCase(
        "no-pool",
        replica([{"role": "Standalone", "template": TEMPLATE}]),
        "spec.engines[0].members[0].nodePoolName is required",
    ),
    BadCase(
        "worker-without-leader",
        replica([{"role": "Worker", "nodePoolName": "l4", "template": TEMPLATE}]),
        "spec.engines[0].members: want one Standalone or a Leader and a Worker, got ['Worker']",
    ),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_invalid_replica_names_the_field(case: BadCase) -> None:
    with pytest.raises(ReplicaInvalid) as e:
        materialize(case.replica)
    assert str(e.value) == case.message


# --- the cluster policy ------------------------------------------------------------------------


def test_policy_allows_ordinary_templates() -> None:
    """With the default policy an ordinary replica gives what it gives without one, hardened
    to Pod Security's restricted level where its template left fields unset."""
    ordinary = replica([STANDALONE])
    made = materialize(ordinary, ClusterPolicy())
    assert made == materialize(ordinary, hardened=True) != materialize(ordinary)
    assert materialize(ordinary, ClusterPolicy(level="baseline")) == materialize(ordinary)
    spec = made[0]["spec"]["template"]["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_policy_refuses_the_whole_replica_naming_every_violation() -> None:
    gang = [
        {**STANDALONE, "role": "Leader", "template": {"spec": {"hostNetwork": True}}},
        {
            "role": "Worker",
            "worker": {"nodes": 1},
            "nodePoolName": "l4",
            "deviceRequests": [REQUEST],
            "template": {
                "spec": {
                    "containers": [{**CONTAINER, "securityContext": {"privileged": True}}],
                    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                }
            },
        },
    ]
    with pytest.raises(PolicyDenied) as e:
        materialize(replica(gang), ClusterPolicy())
    assert [(v.path, v.code) for v in e.value.violations] == [
        ("spec.engines[0].members[0].template.spec.hostNetwork", ViolationCode.HOST_NAMESPACE),
        (
            "spec.engines[0].members[1].template.spec.containers[0].securityContext.privileged",
            ViolationCode.PRIVILEGED,
        ),
        ("spec.engines[0].members[1].template.spec.volumes[0].hostPath", ViolationCode.HOST_PATH),
    ]
    assert isinstance(e.value, ReplicaInvalid)  # the agent skips it as it skips invalid ones
    assert str(e.value).startswith("refused: 3 violations of the cluster policy: ")


def test_policy_refuses_a_namespace_not_served() -> None:
    with pytest.raises(PolicyDenied) as e:
        materialize(replica([STANDALONE]), ClusterPolicy(namespaces=("search",)))
    assert [v.code for v in e.value.violations] == [ViolationCode.NAMESPACE_NOT_SERVED]
