"""The default policy is at least Pod Security "restricted" plus the fields only the fleet sets:
one template breaking each rule (every one materialized on the old baseline-only policy), the
rules that relax it, and the hardening that makes unset fields restricted-compliant."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.materialize import materialize
from gpufleet.agent.pod_security import SAFE_SYSCTLS, TolerationRule
from gpufleet.agent.policy import ClusterPolicy, ViolationCode, check, parse_policy, warnings

Obj = dict[str, Any]
V = ViolationCode
ENGINE: Obj = {"name": "engine", "image": "vllm/vllm-openai:v0.23.0"}


def pod(**spec: Any) -> Obj:
    return {"spec": {"containers": [dict(ENGINE)], **spec}}


def engine_with(**fields: Any) -> Obj:
    return pod(containers=[{**ENGINE, **fields}])


def context(**fields: Any) -> Obj:
    return engine_with(securityContext=fields)


def volume(**kind: Any) -> Obj:
    return pod(volumes=[{"name": "v", **kind}])


C0 = "spec.containers[0]"
SC = f"{C0}.securityContext"


@dataclass
class Case:
    id: str
    template: Obj
    want: list[tuple[str, ViolationCode]]
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)


BROKEN = [
    # --- Pod Security baseline, beyond the host flags
    Case(
        "apparmor unconfined (field)",
        context(appArmorProfile={"type": "Unconfined"}),
        [(f"{SC}.appArmorProfile.type", V.APP_ARMOR)],
    ),
    Case(
        "apparmor unconfined (pod)",
        pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        [("spec.securityContext.appArmorProfile.type", V.APP_ARMOR)],
    ),
    Case(
        "apparmor unconfined (annotation)",
        {
            "metadata": {
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/engine": "unconfined"
                }
            },
            **pod(),
        },
        [
            (
                "metadata.annotations['container.apparmor.security.beta.kubernetes.io/engine']",
                V.APP_ARMOR,
            )
        ],
    ),
    Case(
        "selinux spc_t",
        context(seLinuxOptions={"type": "spc_t"}),
        [(f"{SC}.seLinuxOptions.type", V.SE_LINUX)],
    ),
    Case(
        "selinux user and role",
        pod(securityContext={"seLinuxOptions": {"user": "system_u", "role": "system_r"}}),
        [
            ("spec.securityContext.seLinuxOptions.role", V.SE_LINUX),
            ("spec.securityContext.seLinuxOptions.user", V.SE_LINUX),
        ],
    ),
    Case("unmasked /proc", context(procMount="Unmasked"), [(f"{SC}.procMount", V.PROC_MOUNT)]),
    Case(
        "seccomp unconfined (container)",
        context(seccompProfile={"type": "Unconfined"}),
        [(f"{SC}.seccompProfile.type", V.SECCOMP)],
    ),
    Case(
        "seccomp unconfined (pod)",
        pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        [("spec.securityContext.seccompProfile.type", V.SECCOMP)],
    ),
    Case(
        "seccomp unconfined (annotation)",
        {"metadata": {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}}
        | pod(),
        [("metadata.annotations['seccomp.security.alpha.kubernetes.io/pod']", V.SECCOMP)],
    ),
    Case(
        "unsafe sysctl",
        pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
        [("spec.securityContext.sysctls[0].name", V.SYSCTL)],
    ),
    Case(
        "probe on another host",
        engine_with(livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}),
        [(f"{C0}.livenessProbe.httpGet.host", V.HOST_PROBE)],
    ),
    Case(
        "lifecycle hook on another host",
        engine_with(lifecycle={"preStop": {"tcpSocket": {"host": "169.254.169.254", "port": 80}}}),
        [(f"{C0}.lifecycle.preStop.tcpSocket.host", V.HOST_PROBE)],
    ),
    # --- Pod Security restricted
    *(
        Case(f"volume {kind}", volume(**{kind: body}), [(f"spec.volumes[0].{kind}", V.VOLUME_TYPE)])
        for kind, body in (
            ("gitRepo", {"repository": "https://example.com/x.git"}),
            ("nfs", {"server": "10.0.0.1", "path": "/"}),
            ("iscsi", {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": 0}),
            ("flexVolume", {"driver": "x/y"}),
            ("cephfs", {"monitors": ["10.0.0.1"]}),
            ("image", {"reference": "busybox"}),
        )
    ),
    Case(
        "csi driver not named",
        volume(csi={"driver": "secrets-store.csi.k8s.io"}),
        [("spec.volumes[0].csi.driver", V.VOLUME_TYPE)],
    ),
    Case(
        "privilege escalation",
        context(allowPrivilegeEscalation=True),
        [(f"{SC}.allowPrivilegeEscalation", V.PRIVILEGE_ESCALATION)],
    ),
    Case(
        "runAsNonRoot false", context(runAsNonRoot=False), [(f"{SC}.runAsNonRoot", V.RUN_AS_ROOT)]
    ),
    Case(
        "pod runAsNonRoot false",
        pod(securityContext={"runAsNonRoot": False}),
        [("spec.securityContext.runAsNonRoot", V.RUN_AS_ROOT)],
    ),
    Case("runAsUser 0", context(runAsUser=0), [(f"{SC}.runAsUser", V.RUN_AS_ROOT)]),
    Case(
        "pod runAsUser 0",
        pod(securityContext={"runAsUser": 0}),
        [("spec.securityContext.runAsUser", V.RUN_AS_ROOT)],
    ),
    Case(
        "drop without ALL",
        context(capabilities={"drop": ["NET_RAW"]}),
        [(f"{SC}.capabilities.drop", V.CAPABILITIES_NOT_DROPPED)],
    ),
    Case(
        "add a baseline capability",
        context(capabilities={"drop": ["ALL"], "add": ["CHOWN"]}),
        [(f"{SC}.capabilities.add[0]", V.CAPABILITY_NOT_ALLOWED)],
    ),
    # --- fields only the fleet sets
    Case(
        "priority class",
        pod(priorityClassName="system-cluster-critical"),
        [("spec.priorityClassName", V.PRIORITY_NOT_ALLOWED)],
    ),
    Case("priority", pod(priority=1_000_000_000), [("spec.priority", V.PRIORITY_NOT_ALLOWED)]),
    Case("nodeName", pod(nodeName="gpu-node-1"), [("spec.nodeName", V.NODE_NAME)]),
    Case("schedulerName", pod(schedulerName="mine"), [("spec.schedulerName", V.SCHEDULER_NAME)]),
    Case(
        "tolerate every taint",
        pod(tolerations=[{"operator": "Exists"}]),
        [("spec.tolerations[0]", V.TOLERATION_NOT_ALLOWED)],
    ),
    Case(
        "tolerate the control plane",
        pod(tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]),
        [("spec.tolerations[0]", V.TOLERATION_NOT_ALLOWED)],
    ),
    Case(
        "tolerate gpu NoExecute too",
        pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        [("spec.tolerations[0]", V.TOLERATION_NOT_ALLOWED)],
    ),
    Case(
        "runtime class",
        pod(runtimeClassName="nvidia-privileged"),
        [("spec.runtimeClassName", V.RUNTIME_CLASS_NOT_ALLOWED)],
    ),
    Case(
        "device-plugin gpus beside the claim",
        engine_with(resources={"limits": {"nvidia.com/gpu": 8}}),
        [(f"{C0}.resources.limits['nvidia.com/gpu']", V.EXTENDED_RESOURCE)],
    ),
    Case(
        "pod-level extended resource",
        pod(resources={"requests": {"amd.com/gpu": 1}}),
        [("spec.resources.requests['amd.com/gpu']", V.EXTENDED_RESOURCE)],
    ),
    Case(
        "own resource claims",
        pod(resourceClaims=[{"name": "x", "resourceClaimName": "someone-elses"}]),
        [("spec.resourceClaims", V.RESOURCE_CLAIM)],
    ),
    Case(
        "container claims",
        engine_with(resources={"claims": [{"name": "x"}]}),
        [(f"{C0}.resources.claims", V.RESOURCE_CLAIM)],
    ),
    # --- Secrets and PersistentVolumeClaims of the namespace
    Case(
        "secret volume",
        volume(secret={"secretName": "db-password"}),
        [("spec.volumes[0].secret", V.SECRET_NOT_ALLOWED)],
    ),
    Case(
        "projected secret",
        volume(projected={"sources": [{"secret": {"name": "db-password"}}]}),
        [("spec.volumes[0].projected.sources[0].secret.name", V.SECRET_NOT_ALLOWED)],
    ),
    Case(
        "env secret",
        engine_with(env=[{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}]),
        [(f"{C0}.env[0].valueFrom.secretKeyRef.name", V.SECRET_NOT_ALLOWED)],
    ),
    Case(
        "envFrom secret",
        engine_with(envFrom=[{"secretRef": {"name": "db"}}]),
        [(f"{C0}.envFrom[0].secretRef.name", V.SECRET_NOT_ALLOWED)],
    ),
    Case(
        "image pull secret",
        pod(imagePullSecrets=[{"name": "registry"}]),
        [("spec.imagePullSecrets[0].name", V.SECRET_NOT_ALLOWED)],
    ),
    Case(
        "pvc",
        volume(persistentVolumeClaim={"claimName": "someone-elses-data"}),
        [("spec.volumes[0].persistentVolumeClaim.claimName", V.CLAIM_NOT_ALLOWED)],
    ),
    Case(
        "ephemeral volume cloned from a pvc",
        volume(
            ephemeral={
                "volumeClaimTemplate": {
                    "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "other"}}
                }
            }
        ),
        [("spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource", V.CLAIM_NOT_ALLOWED)],
    ),
]


@pytest.mark.parametrize("case", BROKEN, ids=lambda c: c.id)
def test_each_rule_refuses_a_template_that_breaks_it(case: Case) -> None:
    got = [(v.path, v.code) for v in check(case.template, "ml", case.policy)]
    assert got == sorted(case.want)


ALLOWED = [
    Case("plain", pod(), []),
    Case(
        "restricted spelled out",
        pod(
            securityContext={
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
                "sysctls": [{"name": n, "value": "1"} for n in sorted(SAFE_SYSCTLS)],
                "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
                "appArmorProfile": {"type": "RuntimeDefault"},
            },
            containers=[
                {
                    **ENGINE,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"},
                        "procMount": "Default",
                    },
                    "resources": {"limits": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "1Gi"}},
                    "livenessProbe": {"httpGet": {"port": 8000, "path": "/health"}},
                }
            ],
            volumes=[
                {"name": "a", "emptyDir": {}},
                {"name": "b", "configMap": {"name": "c"}},
                {"name": "c", "downwardAPI": {"items": []}},
                {"name": "d", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ],
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            schedulerName="default-scheduler",
        ),
        [],
    ),
    Case(
        "relaxed by the policy",
        pod(
            priorityClassName="inference",
            runtimeClassName="nvidia",
            imagePullSecrets=[{"name": "registry"}],
            tolerations=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            volumes=[
                {"name": "a", "secret": {"secretName": "hf-token"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "models"}},
                {"name": "c", "csi": {"driver": "ebs.csi.aws.com"}},
            ],
        ),
        [],
        policy=parse_policy(
            {
                "allow": {
                    "priorityClasses": ["inference"],
                    "runtimeClasses": ["nvidia"],
                    "secrets": ["hf-token", "registry"],
                    "persistentVolumeClaims": ["*"],
                    "csiDrivers": ["ebs.csi.aws.com"],
                    "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
                }
            }
        ),
    ),
    Case(
        "level baseline leaves the restricted rules out",
        pod(
            securityContext={"runAsUser": 0},
            containers=[
                {**ENGINE, "securityContext": {"allowPrivilegeEscalation": True}},
            ],
            volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}],
        ),
        [],
        policy=parse_policy({"level": "baseline"}),
    ),
]


@pytest.mark.parametrize("case", ALLOWED, ids=lambda c: c.id)
def test_what_the_rules_allow(case: Case) -> None:
    assert check(case.template, "ml", case.policy) == []


def test_level_baseline_still_checks_baseline_and_fleet_rules() -> None:
    policy = parse_policy({"level": "baseline"})
    template = pod(
        nodeName="n1",
        securityContext={"seccompProfile": {"type": "Unconfined"}},
        volumes=[{"name": "s", "secret": {"secretName": "x"}}],
    )
    codes = {v.code for v in check(template, "ml", policy)}
    assert codes == {V.NODE_NAME, V.SECCOMP, V.SECRET_NOT_ALLOWED}


def test_toleration_coverage() -> None:
    gpu = TolerationRule("nvidia.com/gpu", "Exists", "", "NoSchedule")
    assert gpu.covers("nvidia.com/gpu", "Exists", "", "NoSchedule")
    assert gpu.covers("nvidia.com/gpu", "Equal", "present", "NoSchedule")
    assert not gpu.covers("nvidia.com/gpu", "Exists", "", "")  # every effect
    assert not gpu.covers("", "Exists", "", "NoSchedule")  # every key
    exact = TolerationRule("dedicated", "Equal", "ml", "")
    assert exact.covers("dedicated", "Equal", "ml", "NoExecute")
    assert not exact.covers("dedicated", "Equal", "other", "NoExecute")
    assert not exact.covers("dedicated", "Exists", "", "NoExecute")


def test_bad_allowances_are_named() -> None:
    from gpufleet.agent.policy import PolicyInvalid

    bad = [
        ({"level": "strict"}, "level"),
        ({"allow": {"secrets": ["Not A Name"]}}, "allow.secrets[0]"),
        ({"allow": {"tolerations": [{"operator": "Maybe"}]}}, "allow.tolerations[0].operator"),
        ({"allow": {"tolerations": [{"key": "k", "color": "red"}]}}, "allow.tolerations[0].color"),
        ({"level": "baseline", "podSecurity": {"enforce": "restricted"}}, "podSecurity.enforce"),
    ]
    for doc, where in bad:
        with pytest.raises(PolicyInvalid) as e:
            parse_policy(doc)
        assert e.value.field == where, (doc, e.value)


def test_serving_kube_system_warns() -> None:
    assert warnings(ClusterPolicy()) == []
    (warning,) = warnings(parse_policy({"excludedNamespaces": []}))
    assert "kube-system" in warning and "gpufleet-system" in warning
    assert warnings(parse_policy({"excludedNamespaces": [], "namespaces": ["ml"]})) == []


# --- hardening: every pod made at level restricted passes restricted ---------------------

_maybe_bool = st.sampled_from([None, True, False])
_container_contexts = st.fixed_dictionaries(
    {},
    optional={
        "allowPrivilegeEscalation": _maybe_bool,
        "runAsNonRoot": _maybe_bool,
        "runAsUser": st.sampled_from([0, 1000]),
        "capabilities": st.fixed_dictionaries(
            {}, optional={"drop": st.sampled_from([["ALL"], ["NET_RAW"], []])}
        ),
        "seccompProfile": st.sampled_from([{"type": "RuntimeDefault"}, {"type": "Unconfined"}]),
    },
)


def _effective(pod_context: Obj, container_context: Obj, key: str) -> object:
    """A container's setting, as the kubelet reads it: the container's, else the pod's."""
    value = container_context.get(key)
    return pod_context.get(key) if value is None else value


@given(
    pod_context=st.fixed_dictionaries(
        {},
        optional={
            "runAsNonRoot": _maybe_bool,
            "seccompProfile": st.sampled_from([{"type": "Localhost"}, {"type": "Unconfined"}]),
        },
    ),
    contexts=st.lists(_container_contexts, min_size=1, max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_every_allowed_template_is_made_restricted(pod_context: Obj, contexts: list[Obj]) -> None:
    """Whatever a template sets or leaves unset, a pod the default policy lets through runs
    as non-root, with a seccomp profile, no privilege escalation and ALL capabilities dropped."""
    containers = [
        {"name": f"c{i}", "image": "x", "securityContext": c} for i, c in enumerate(contexts)
    ]
    template = {"spec": {"securityContext": pod_context, "containers": containers}}
    replica = {
        "metadata": {"name": "r", "namespace": "ml", "generation": 1},
        "spec": {
            "deploymentName": "d",
            "engines": [
                {
                    "name": "e",
                    "members": [{"role": "Standalone", "nodePoolName": "p", "template": template}],
                }
            ],
        },
    }
    if check(template, "ml", ClusterPolicy()):
        return  # refused: nothing is made
    (workload,) = [o for o in materialize(replica, ClusterPolicy()) if o["kind"] == "Deployment"]
    spec = workload["spec"]["template"]["spec"]
    assert spec["securityContext"]["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
    for made in spec["containers"]:
        sc = made["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert "ALL" in sc["capabilities"]["drop"]
        assert _effective(spec["securityContext"], sc, "runAsNonRoot") is True
        assert _effective(spec["securityContext"], sc, "runAsUser") != 0


def test_every_rule_is_listed_in_the_operations_guide() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Tenant pod policy") :]
    section = section[: section.index("\n## ", 1)]
    missing = [code.value for code in ViolationCode if f"| `{code.value}` |" not in section]
    assert missing == []
