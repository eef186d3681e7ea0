"""The RBAC evaluator the end-to-end tests check requests with (tests/kube/rbac.py), and what
the installed roles allow and refuse."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kmockplus import Request
from rbac import Rbac, ServiceAccount

from gpufleet.kube import install

SA = ServiceAccount("sys", "bot")


def role(kind: str, name: str, rules: list[dict[str, object]], ns: str | None = None) -> dict:
    meta: dict[str, object] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, role_kind: str, name: str, ns: str | None = None) -> dict:
    meta: dict[str, object] = {"name": f"{name}-binding"}
    if ns is not None:
        meta["namespace"] = ns
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"kind": role_kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": SA.name, "namespace": SA.namespace}],
    }


RULES = [
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["cfg"]},
    {"apiGroups": ["x.io"], "resources": ["things/status"], "verbs": ["patch"]},
    {"apiGroups": ["*"], "resources": ["widgets"], "verbs": ["*"]},
]
#: ClusterRole "wide" bound cluster-wide; Role "local" and ClusterRole "reused" bound in ns "a".
MANIFESTS = [
    role("ClusterRole", "wide", [RULES[0], RULES[3]]),
    binding("ClusterRoleBinding", "ClusterRole", "wide"),
    role("Role", "local", [RULES[1], RULES[2]], "a"),
    binding("RoleBinding", "Role", "local", "a"),
    role("ClusterRole", "reused", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]),
    binding("RoleBinding", "ClusterRole", "reused", "a"),
    # Bound to someone else: grants SA nothing.
    role("ClusterRole", "other", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "other"},
        "roleRef": {"kind": "ClusterRole", "name": "other"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "elsewhere"}],
    },
]


@dataclass(frozen=True)
class Case:
    id: str
    request: Request
    allowed: bool


def req(verb: str, group: str, resource: str, ns: str = "", name: str = "", sub: str = ""):
    return Request("t", verb, group, resource, sub, ns, name)


CASES = [
    Case("cluster-role-anywhere", req("list", "apps", "deployments", "z"), True),
    Case("cluster-role-cluster-wide", req("list", "apps", "deployments"), True),
    Case("verb-not-granted", req("delete", "apps", "deployments", "z", "d"), False),
    Case("wrong-group", req("list", "", "deployments", "z"), False),
    Case("wildcards", req("deletecollection", "any.io", "widgets", "z"), True),
    Case("role-in-its-namespace", req("patch", "x.io", "things", "a", "t", "status"), True),
    Case("role-elsewhere", req("patch", "x.io", "things", "b", "t", "status"), False),
    Case("subresource-is-not-the-resource", req("patch", "x.io", "things", "a", "t"), False),
    Case("resource-name-matches", req("get", "", "configmaps", "a", "cfg"), True),
    Case("resource-name-differs", req("get", "", "configmaps", "a", "other"), False),
    Case("resource-names-never-match-a-list", req("list", "", "configmaps", "a"), False),
    Case("cluster-role-by-role-binding", req("create", "", "secrets", "a"), True),
    Case("only-in-the-binding-namespace", req("create", "", "secrets", "b"), False),
    Case("not-cluster-wide-either", req("list", "", "secrets"), False),
    Case("a-namespace-counts-as-in-itself", req("get", "", "namespaces", "", "a"), False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rbac_evaluation(case: Case) -> None:
    assert Rbac(MANIFESTS).allows(SA, case.request) is case.allowed


def test_a_namespace_object_is_in_its_own_namespace() -> None:
    rules = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
    rbac = Rbac([role("Role", "ns", rules, "a"), binding("RoleBinding", "Role", "ns", "a")])
    assert rbac.allows(SA, req("get", "", "namespaces", "", "a"))
    assert not rbac.allows(SA, req("get", "", "namespaces", "", "b"))


def test_denied_names_each_refused_request_of_a_known_token_once() -> None:
    rbac = Rbac(MANIFESTS)
    refused = req("delete", "apps", "deployments", "z", "d")
    anonymous = Request("", "delete", "apps", "deployments", "", "z", "d")
    lines = rbac.denied(
        [refused, refused, anonymous, req("list", "apps", "deployments")], {"t": SA}
    )
    assert lines == ["sys/bot may not delete apps/deployments in z name d"]


AGENT = ServiceAccount("gpufleet-system", "gpufleet-agent")
CONTROLLER = ServiceAccount("gpufleet-system", "gpufleet-controller")
HUB_AGENT = ServiceAccount("gpufleet-cluster-a", "gpufleet-agent-a")


def test_the_agent_may_create_a_tenants_namespace_and_nothing_cluster_wide_besides() -> None:
    rbac = Rbac(install.agent("a"))
    assert rbac.allows(AGENT, req("create", "", "namespaces"))
    assert rbac.allows(AGENT, req("create", "apps", "deployments", "ml"))
    assert not rbac.allows(AGENT, req("delete", "", "namespaces", "", "ml"))
    assert not rbac.allows(AGENT, req("create", "", "pods", "ml"))
    assert not rbac.allows(AGENT, req("get", "", "secrets", "gpufleet-system", "gpufleet-hub"))
    assert rbac.allows(AGENT, req("update", "coordination.k8s.io", "leases", "gpufleet-system"))
    assert not rbac.allows(AGENT, req("update", "coordination.k8s.io", "leases", "kube-system"))


@pytest.mark.parametrize(
    "resource", ["modeldeployments", "inferenceclusters", "inferenceclasses", "poolobservations"]
)
@pytest.mark.parametrize("verb", ["create", "delete", "update"])
def test_the_controller_writes_none_of_what_others_own(resource: str, verb: str) -> None:
    rbac = Rbac(install.hub())
    assert rbac.allows(CONTROLLER, req("watch", "gpufleet.io", resource))
    assert not rbac.allows(CONTROLLER, req(verb, "gpufleet.io", resource, "ml", "x"))


def test_the_controller_manages_replicas_and_the_status_it_publishes() -> None:
    rbac = Rbac([*install.hub(), *install.agent_hub_access("a")])
    ns = "gpufleet-cluster-a"
    for verb in ("create", "update", "delete"):
        assert rbac.allows(CONTROLLER, req(verb, "gpufleet.io", "modelreplicas", ns, "r"))
    assert rbac.allows(CONTROLLER, req("patch", "gpufleet.io", "modelreplicas", ns, "r", "status"))
    for resource in ("modeldeployments", "inferenceclusters"):
        assert rbac.allows(CONTROLLER, req("patch", "gpufleet.io", resource, "ml", "x", "status"))
    assert not rbac.allows(CONTROLLER, req("get", "", "secrets", "ml", "x"))


def test_the_controller_writes_replicas_and_events_only_where_it_is_bound() -> None:
    """Issue 30.4: not cluster-wide, not kube-system: ModelReplicas in the cluster
    namespaces, Events there, in `default` and in the tenant namespaces it was given."""
    rbac = Rbac([*install.hub(tenant_namespaces=("ml",)), *install.agent_hub_access("a")])
    assert rbac.allows(CONTROLLER, req("create", "", "events", "gpufleet-cluster-a"))
    assert rbac.allows(CONTROLLER, req("create", "", "events", "default"))
    assert rbac.allows(CONTROLLER, req("update", "", "events", "ml", "e"))
    for ns in ("kube-system", "other-team", "gpufleet-system", "default", "ml"):
        assert not rbac.allows(CONTROLLER, req("create", "gpufleet.io", "modelreplicas", ns))
    for ns in ("kube-system", "other-team", "gpufleet-system"):
        assert not rbac.allows(CONTROLLER, req("create", "", "events", ns))
    # Reads stay cluster-wide: the controller watches every replica.
    assert rbac.allows(CONTROLLER, req("watch", "gpufleet.io", "modelreplicas"))
    with pytest.raises(ValueError, match="not a kube-\\* namespace"):
        install.hub(tenant_namespaces=("kube-system",))


def test_an_agent_reads_and_writes_only_its_own_clusters_namespace() -> None:
    rbac = Rbac([*install.hub(), *install.agent_hub_access("a"), *install.agent_hub_access("b")])
    own, other = "gpufleet-cluster-a", "gpufleet-cluster-b"
    assert rbac.allows(HUB_AGENT, req("create", "gpufleet.io", "poolobservations", own))
    assert not rbac.allows(HUB_AGENT, req("create", "gpufleet.io", "poolobservations", other))
    assert rbac.allows(HUB_AGENT, req("watch", "gpufleet.io", "modelreplicas", own))
    assert rbac.allows(HUB_AGENT, req("list", "gpufleet.io", "modelreplicas", own))
    # Not another cluster's replicas, not a tenant's namespace, not cluster-wide.
    for where in (other, "ml", ""):
        assert not rbac.allows(HUB_AGENT, req("list", "gpufleet.io", "modelreplicas", where))
        assert not rbac.allows(HUB_AGENT, req("watch", "gpufleet.io", "modelreplicas", where))
    assert not rbac.allows(HUB_AGENT, req("update", "gpufleet.io", "modelreplicas", own, "r"))
    assert not rbac.allows(HUB_AGENT, req("delete", "gpufleet.io", "modelreplicas", own, "r"))
    # Cluster-scoped, only its own InferenceCluster, by name (docs/operations.md).
    assert rbac.allows(HUB_AGENT, req("get", "gpufleet.io", "inferenceclusters", "", "a"))
    assert not rbac.allows(HUB_AGENT, req("get", "gpufleet.io", "inferenceclusters", "", "b"))
    assert not rbac.allows(HUB_AGENT, req("watch", "gpufleet.io", "inferenceclusters", "", "a"))
    for resource in ("inferenceclusters", "inferenceclasses", "modeldeployments"):
        assert not rbac.allows(HUB_AGENT, req("list", "gpufleet.io", resource))
    assert not rbac.allows(HUB_AGENT, req("get", "gpufleet.io", "inferenceclasses", "", "l4"))
    assert not rbac.allows(HUB_AGENT, req("get", "", "secrets", own, "x"))


def test_the_controller_writes_replicas_in_any_clusters_namespace_but_makes_none() -> None:
    rbac = Rbac([*install.hub(), *install.agent_hub_access("a"), *install.agent_hub_access("b")])
    for ns in ("gpufleet-cluster-a", "gpufleet-cluster-b"):
        assert rbac.allows(CONTROLLER, req("create", "gpufleet.io", "modelreplicas", ns))
        assert rbac.allows(CONTROLLER, req("delete", "gpufleet.io", "modelreplicas", ns, "r"))
    # `gpufleet join` makes a cluster's namespace, with an admin's credentials.
    assert not rbac.allows(CONTROLLER, req("create", "", "namespaces"))
