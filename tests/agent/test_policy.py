"""The cluster policy for tenant pod templates: each rule, several at once, hostile input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.policy import (
    AGENT_NAMESPACE,
    BASELINE_CAPABILITIES,
    RESTRICTED_CAPABILITIES,
    ClusterPolicy,
    PodSecurityLabels,
    PolicyInvalid,
    Violation,
    ViolationCode,
    check,
    check_replica,
    namespace_labels,
    parse_policy,
    refusal_condition,
    summary,
)
from gpufleet.kube.install import SYSTEM_NAMESPACE

Obj = dict[str, Any]
V = ViolationCode
ENGINE: Obj = {"name": "engine", "image": "vllm/vllm-openai:v0.23.0"}


def pod(**spec: Any) -> Obj:
    return {"spec": {"containers": [dict(ENGINE)], **spec}}


def engine_with(**fields: Any) -> Obj:
    return pod(containers=[{**ENGINE, **fields}])


@dataclass
class Case:
    id: str
    template: object
    want: list[tuple[str, ViolationCode]]
    namespace: str = "ml"
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)


CASES = [
    Case("ordinary", pod(), []),
    Case("no spec", {"metadata": {}}, []),
    Case(
        "privileged",
        engine_with(securityContext={"privileged": True}),
        [("spec.containers[0].securityContext.privileged", V.PRIVILEGED)],
    ),
    Case("privileged false", engine_with(securityContext={"privileged": False}), []),
    Case(
        "privileged allowed",
        engine_with(securityContext={"privileged": True}),
        [],
        policy=ClusterPolicy(allow_privileged=True),
    ),
    Case(
        "privileged init container",
        pod(initContainers=[{"name": "i", "securityContext": {"privileged": True}}]),
        [("spec.initContainers[0].securityContext.privileged", V.PRIVILEGED)],
    ),
    Case(
        "privileged ephemeral container",
        pod(ephemeralContainers=[{"name": "d", "securityContext": {"privileged": True}}]),
        [("spec.ephemeralContainers[0].securityContext.privileged", V.PRIVILEGED)],
    ),
    Case("hostNetwork", pod(hostNetwork=True), [("spec.hostNetwork", V.HOST_NAMESPACE)]),
    Case("hostPID", pod(hostPID=True), [("spec.hostPID", V.HOST_NAMESPACE)]),
    Case("hostIPC", pod(hostIPC=True), [("spec.hostIPC", V.HOST_NAMESPACE)]),
    Case(
        "hostNetwork allowed",
        pod(hostNetwork=True, hostPID=True),
        [("spec.hostPID", V.HOST_NAMESPACE)],
        policy=ClusterPolicy(allow_host_network=True),
    ),
    Case(
        "hostPath",
        pod(volumes=[{"name": "m", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/"}}]),
        [("spec.volumes[1].hostPath", V.HOST_PATH)],
    ),
    Case(
        "hostPath allowed",
        pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        [],
        policy=ClusterPolicy(allow_host_path=True),
    ),
    Case(
        "hostPort",
        engine_with(ports=[{"containerPort": 8000}, {"containerPort": 80, "hostPort": 80}]),
        [("spec.containers[0].ports[1].hostPort", V.HOST_PORT)],
    ),
    Case("hostPort 0", engine_with(ports=[{"containerPort": 80, "hostPort": 0}]), []),
    Case(
        "hostPort allowed",
        engine_with(ports=[{"containerPort": 80, "hostPort": 80}]),
        [],
        policy=ClusterPolicy(allow_host_ports=True),
    ),
    Case(
        "baseline capabilities at level baseline",
        engine_with(securityContext={"capabilities": {"add": ["CHOWN", "cap_kill"]}}),
        [],
        policy=ClusterPolicy(level="baseline", allowed_capabilities=BASELINE_CAPABILITIES),
    ),
    Case(
        "restricted adds only NET_BIND_SERVICE",
        engine_with(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "cap_kill"]}}),
        [("spec.containers[0].securityContext.capabilities.add[1]", V.CAPABILITY_NOT_ALLOWED)],
    ),
    Case(
        "capability beyond baseline",
        engine_with(securityContext={"capabilities": {"add": ["CHOWN", "cap_sys_admin", "ALL"]}}),
        [
            ("spec.containers[0].securityContext.capabilities.add[1]", V.CAPABILITY_NOT_ALLOWED),
            ("spec.containers[0].securityContext.capabilities.add[2]", V.CAPABILITY_NOT_ALLOWED),
        ],
        policy=ClusterPolicy(level="baseline", allowed_capabilities=BASELINE_CAPABILITIES),
    ),
    Case(
        "capability allowed",
        engine_with(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        [],
        policy=ClusterPolicy(allowed_capabilities=BASELINE_CAPABILITIES | {"SYS_ADMIN"}),
    ),
    Case(
        "dropping is fine",
        engine_with(securityContext={"capabilities": {"drop": ["ALL"]}}),
        [],
    ),
    Case(
        "service account",
        pod(serviceAccountName="cluster-admin-sa"),
        [("spec.serviceAccountName", V.SERVICE_ACCOUNT_NOT_ALLOWED)],
    ),
    Case(
        "deprecated serviceAccount",
        pod(serviceAccount="builder"),
        [("spec.serviceAccount", V.SERVICE_ACCOUNT_NOT_ALLOWED)],
    ),
    Case("default service account", pod(serviceAccountName="default"), []),
    Case("empty service account is default", pod(serviceAccountName=""), []),
    Case(
        "service account allowed",
        pod(serviceAccountName="vllm"),
        [],
        policy=ClusterPolicy(allowed_service_accounts=("default", "vllm")),
    ),
    Case(
        "any service account",
        pod(serviceAccountName="x"),
        [],
        policy=ClusterPolicy(allowed_service_accounts=("*",)),
    ),
    Case(
        "default not allowed and unset",
        pod(),
        [("spec.serviceAccountName", V.SERVICE_ACCOUNT_NOT_ALLOWED)],
        policy=ClusterPolicy(allowed_service_accounts=("vllm",)),
    ),
    Case(
        "hostProcess",
        pod(securityContext={"windowsOptions": {"hostProcess": True}}),
        [("spec.securityContext.windowsOptions.hostProcess", V.HOST_PROCESS)],
    ),
    Case("kube-system", pod(), [("metadata.namespace", V.NAMESPACE_NOT_SERVED)], "kube-system"),
    Case(
        "agent namespace",
        pod(),
        [("metadata.namespace", V.NAMESPACE_NOT_SERVED)],
        AGENT_NAMESPACE,
    ),
    Case(
        "not in the served list",
        pod(),
        [("metadata.namespace", V.NAMESPACE_NOT_SERVED)],
        "other",
        ClusterPolicy(namespaces=("ml",)),
    ),
    Case("in the served list", pod(), [], "ml", ClusterPolicy(namespaces=("ml",))),
    Case(
        "malformed fields are refused",
        {
            "spec": {
                "hostNetwork": "true",
                "containers": {"name": "engine"},
                "volumes": [["hostPath"]],
                "initContainers": [
                    {"securityContext": {"privileged": 1, "capabilities": {"add": "ALL"}}},
                    {"ports": [{"hostPort": "80"}], "securityContext": []},
                ],
                "serviceAccountName": 7,
            }
        },
        [
            ("spec.containers", V.MALFORMED_FIELD),
            ("spec.hostNetwork", V.MALFORMED_FIELD),
            ("spec.initContainers[0].securityContext.capabilities.add", V.MALFORMED_FIELD),
            ("spec.initContainers[0].securityContext.privileged", V.MALFORMED_FIELD),
            ("spec.initContainers[1].ports[0].hostPort", V.MALFORMED_FIELD),
            ("spec.initContainers[1].securityContext", V.MALFORMED_FIELD),
            ("spec.serviceAccountName", V.MALFORMED_FIELD),
            ("spec.volumes[0]", V.MALFORMED_FIELD),
        ],
    ),
    Case("template not a map", ["spec"], [("template", V.MALFORMED_FIELD)]),
    Case("spec not a map", {"spec": "x"}, [("spec", V.MALFORMED_FIELD)]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_check(case: Case) -> None:
    found = check(case.template, case.namespace, case.policy)
    assert [(v.path, v.code) for v in found] == case.want
    assert all(v.message for v in found)


def test_several_violations_are_all_reported_at_once() -> None:
    template = pod(
        hostNetwork=True,
        hostPID=True,
        serviceAccountName="admin",
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
        containers=[
            {
                **ENGINE,
                "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
                "ports": [{"containerPort": 22, "hostPort": 22}],
            }
        ],
    )
    found = check(template, "kube-system", ClusterPolicy(), "spec.template.")
    assert [(v.path, v.code) for v in found] == [
        ("metadata.namespace", V.NAMESPACE_NOT_SERVED),
        ("spec.template.spec.containers[0].ports[0].hostPort", V.HOST_PORT),
        (
            "spec.template.spec.containers[0].securityContext.capabilities.add[0]",
            V.CAPABILITY_NOT_ALLOWED,
        ),
        ("spec.template.spec.containers[0].securityContext.privileged", V.PRIVILEGED),
        ("spec.template.spec.hostNetwork", V.HOST_NAMESPACE),
        ("spec.template.spec.hostPID", V.HOST_NAMESPACE),
        ("spec.template.spec.serviceAccountName", V.SERVICE_ACCOUNT_NOT_ALLOWED),
        ("spec.template.spec.volumes[0].hostPath", V.HOST_PATH),
    ]
    message = summary(found)
    assert message.startswith("8 violations of the cluster policy: metadata.namespace: ")
    assert "(Privileged)" in message and "'/'" in message


def replica(namespace: str, *templates: object) -> Obj:
    members = [{"role": "Standalone", "nodePoolName": "l4", "template": t} for t in templates]
    return {
        "metadata": {"name": "r", "namespace": namespace},
        "spec": {
            "engines": [
                {"name": "main", "members": members[:1]},
                {"name": "side", "members": members[1:]},
            ]
        },
    }


def test_check_replica_names_each_member_template() -> None:
    found = check_replica(replica("ml", pod(), pod(hostIPC=True)), ClusterPolicy())
    assert found == [
        Violation(
            "spec.engines[1].members[0].template.spec.hostIPC",
            V.HOST_NAMESPACE,
            "uses the node's IPC namespace",
        )
    ]
    assert check_replica(replica("ml", pod(), pod()), ClusterPolicy()) == []


def test_check_replica_malformed_shapes() -> None:
    bad = {"metadata": {"namespace": 3}, "spec": {"engines": [{"members": {"x": 1}}]}}
    assert [(v.path, v.code) for v in check_replica(bad, ClusterPolicy())] == [
        ("metadata.namespace", V.MALFORMED_FIELD),
        ("spec.engines[0].members", V.MALFORMED_FIELD),
    ]
    assert [v.code for v in check_replica(None, ClusterPolicy())] == [V.MALFORMED_FIELD]


def test_refusal_condition_and_bounded_message() -> None:
    many = pod(
        volumes=[{"name": f"v{i}", "hostPath": {"path": "/" + "x" * 500}} for i in range(50)]
    )
    found = check(many, "ml", ClusterPolicy())
    assert len(found) == 50
    cond = refusal_condition(found)
    assert cond["type"] == "PolicyAllowed" and cond["status"] == "False"
    assert cond["reason"] == "PolicyDenied"
    assert cond["message"].endswith("; and 42 more")
    assert len(cond["message"]) < 2000


def test_agent_namespace_is_the_install_namespace() -> None:
    assert AGENT_NAMESPACE == SYSTEM_NAMESPACE


def test_namespace_labels() -> None:
    assert namespace_labels(ClusterPolicy()) == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/warn-version": "latest",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/audit-version": "latest",
    }
    psa = PodSecurityLabels(enforce="restricted", warn=None, audit=None, version="v1.33")
    assert namespace_labels(ClusterPolicy(pod_security=psa)) == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "v1.33",
    }


# --- parsing --------------------------------------------------------------------------------


def test_parse_empty_is_default() -> None:
    assert parse_policy(None) == ClusterPolicy()
    assert parse_policy({}) == ClusterPolicy()


def test_parse_full() -> None:
    policy = parse_policy(
        {
            "namespaces": ["ml", "search"],
            "excludedNamespaces": ["kube-system"],
            "allow": {
                "hostNetwork": True,
                "capabilities": ["cap_net_admin"],
                "serviceAccounts": ["default", "vllm"],
            },
            "podSecurity": {"enforce": "privileged", "warn": None, "version": "v1.33"},
        }
    )
    assert policy == ClusterPolicy(
        namespaces=("ml", "search"),
        excluded_namespaces=("kube-system",),
        allow_host_network=True,
        allowed_capabilities=RESTRICTED_CAPABILITIES | {"NET_ADMIN"},
        allowed_service_accounts=("default", "vllm"),
        pod_security=PodSecurityLabels("privileged", None, "restricted", "v1.33"),
    )


@dataclass
class BadPolicy:
    id: str
    doc: object
    field: str
    rule: str


BAD_POLICIES = [
    BadPolicy("not a map", ["x"], "policy", "must be a map"),
    BadPolicy("unknown key", {"namespace": ["ml"]}, "policy.namespace", "unknown field"),
    BadPolicy("non-string key", {1: 2}, "policy", "unknown field"),
    BadPolicy("unknown allow", {"allow": {"root": True}}, "allow.root", "unknown field"),
    BadPolicy("flag not bool", {"allow": {"privileged": "yes"}}, "allow.privileged", "true or"),
    BadPolicy("list not a list", {"namespaces": "ml"}, "namespaces", "must be a list"),
    BadPolicy("bad namespace", {"namespaces": ["ML"]}, "namespaces[0]", "DNS label"),
    BadPolicy("duplicate", {"namespaces": ["a", "a"]}, "namespaces[1]", "duplicate"),
    BadPolicy(
        "too many",
        {"namespaces": [f"n{i}" for i in range(257)]},
        "namespaces",
        "at most 256 entries (got 257)",
    ),
    BadPolicy(
        "bad account", {"allow": {"serviceAccounts": ["a/b"]}}, "allow.serviceAccounts[0]", "DNS"
    ),
    BadPolicy(
        "bad capability", {"allow": {"capabilities": ["sys admin"]}}, "allow.capabilities[0]", "a"
    ),
    BadPolicy("bad level", {"podSecurity": {"enforce": "strict"}}, "podSecurity.enforce", "one"),
    BadPolicy("bad version", {"podSecurity": {"version": "1.33"}}, "podSecurity.version", "v1."),
    BadPolicy(
        "relaxed beyond enforced baseline",
        {"allow": {"privileged": True}},
        "podSecurity.enforce",
        "must be privileged (or null) when allow.privileged goes beyond baseline",
    ),
    BadPolicy(
        "capability beyond enforced baseline",
        {"allow": {"capabilities": ["SYS_ADMIN"]}},
        "podSecurity.enforce",
        "allow.capabilities",
    ),
]


@pytest.mark.parametrize("case", BAD_POLICIES, ids=lambda c: c.id)
def test_parse_errors_name_the_field_and_rule(case: BadPolicy) -> None:
    with pytest.raises(PolicyInvalid) as e:
        parse_policy(case.doc)
    assert e.value.field == case.field
    assert case.rule in e.value.rule


def test_relaxing_with_privileged_enforcement_is_valid() -> None:
    policy = parse_policy({"allow": {"privileged": True}, "podSecurity": {"enforce": None}})
    assert policy.allow_privileged and policy.pod_security.enforce is None


# --- hostile templates ------------------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "spec",
        "metadata",
        "containers",
        "initContainers",
        "ephemeralContainers",
        "volumes",
        "hostPath",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "securityContext",
        "privileged",
        "capabilities",
        "add",
        "ports",
        "hostPort",
        "serviceAccountName",
        "serviceAccount",
        "windowsOptions",
        "hostProcess",
        "path",
        "x",
    ]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(template=JSON, namespace=st.text(max_size=8), allow_all=st.booleans())
def test_check_never_raises_on_json_like_templates(
    template: object, namespace: str, allow_all: bool
) -> None:
    policy = ClusterPolicy(allowed_service_accounts=("*",)) if allow_all else ClusterPolicy()
    found = check(template, namespace, policy)
    assert found == sorted(found)
    assert all(isinstance(v.code, ViolationCode) and v.path for v in found)
    wrapped = {
        "metadata": {"namespace": namespace},
        "spec": {"engines": [{"members": [{"template": template}]}]},
    }
    assert len(check_replica(wrapped, policy)) == len(found)


def test_the_policy_file_in_the_docs_parses() -> None:
    """docs/agent.md's example policy file is a valid policy (the docs stay true)."""
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    block = text.split("**The policy file**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    policy = parse_policy(yaml.safe_load(block))
    assert policy.namespaces == ("ml-team", "search")
    assert "NET_RAW" in policy.allowed_capabilities
    assert policy.pod_security.enforce == "privileged"
