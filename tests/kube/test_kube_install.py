"""Install manifests: valid Kubernetes objects (offline schemas) with the RBAC we promise."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.kube import install

pytestmark = pytest.mark.timeout(60)

KUBERNETES_VERSION = "1.37.0"


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


OUTPUTS = {
    "hub": install.hub_yaml(image="registry.example/gpufleet:1.2.3"),
    "agent": install.agent_yaml("gke-us-central", "img:1"),
    "agent-hub": install.agent_hub_yaml("gke-us-central"),
}


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_every_document_validates_against_the_kubernetes_schemas(name: str) -> None:
    docs = documents(OUTPUTS[name])
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_does_reject_a_broken_manifest() -> None:
    broken = documents(OUTPUTS["hub"])[-2]  # the controller Deployment
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def by_kind(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in documents(text)}


def rules_allow(role: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        for r in role["rules"]
    )


def test_hub_install_puts_crds_first_and_runs_a_leader_elected_controller() -> None:
    docs = documents(OUTPUTS["hub"])
    kinds = [d["kind"] for d in docs]
    assert kinds[:6] == ["CustomResourceDefinition"] * 6 and kinds[6] == "Namespace"
    objs = by_kind(OUTPUTS["hub"])
    role = objs[("ClusterRole", "gpufleet-controller")]
    assert rules_allow(role, "gpufleet.io", "modeldeployments/status", "patch")
    assert not rules_allow(role, "gpufleet.io", "modeldeployments", "create")
    # ModelReplicas and Events only through RoleBindings, namespace by namespace.
    assert not rules_allow(role, "gpufleet.io", "modelreplicas", "create")
    assert not rules_allow(role, "", "events", "create")
    replicas = objs[("ClusterRole", "gpufleet-controller-replicas")]
    assert rules_allow(replicas, "gpufleet.io", "modelreplicas", "create")
    assert rules_allow(objs[("ClusterRole", "gpufleet-controller-events")], "", "events", "create")
    assert not any(
        k == "ClusterRoleBinding" and n.startswith("gpufleet-controller-") for k, n in objs
    )
    lease_role = objs[("Role", "gpufleet-controller")]
    assert lease_role["metadata"]["namespace"] == "gpufleet-system"
    assert rules_allow(lease_role, "coordination.k8s.io", "leases", "update")
    deployment = objs[("Deployment", "gpufleet-controller")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/gpufleet:1.2.3"
    assert container["args"][:2] == ["controller", "--leader-elect"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert objs[("Service", "gpufleet-controller-metrics")]["spec"]["ports"][0]["name"] == "metrics"


def test_agent_install_reads_the_cluster_and_manages_workloads() -> None:
    objs = by_kind(OUTPUTS["agent"])
    role = objs[("ClusterRole", "gpufleet-agent")]
    for group, resource in [
        ("", "nodes"),
        ("", "pods"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"),
    ]:
        assert rules_allow(role, group, resource, "watch")
        assert not rules_allow(role, group, resource, "delete")
    for group, resource in [
        ("apps", "deployments"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("policy", "poddisruptionbudgets"),
        ("", "namespaces"),
    ]:
        assert rules_allow(role, group, resource, "create")
    # The hub credentials are `gpufleet join`'s: no Secret to fill in, no placeholder.
    assert not [key for key in objs if key[0] == "Secret"]
    pod = objs[("Deployment", "gpufleet-agent")]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "hub", "secret": {"secretName": "gpufleet-hub"}}]
    args = pod["containers"][0]["args"]
    assert args[-1] == "--cluster=gke-us-central" and "--leader-elect" in args


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_no_output_asks_anyone_to_fill_anything_in(name: str) -> None:
    assert "REPLACE" not in OUTPUTS[name] and "fill-in" not in OUTPUTS[name]


@pytest.mark.parametrize("name", ["hub", "agent"])
def test_pods_run_as_the_images_numeric_user_spread_over_nodes(name: str) -> None:
    deployment = next(d for d in documents(OUTPUTS[name]) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == install.RUN_AS_USER != 0
    container = pod["containers"][0]
    assert container["securityContext"]["runAsUser"] == install.RUN_AS_USER
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # docs/operations.md's Security model: no capabilities, no privilege escalation, the
    # runtime's default seccomp profile.
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    selector = pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_default_image_is_tagged_with_the_installed_version() -> None:
    from importlib.metadata import version

    assert f"ghcr.io/gpufleet/gpufleet:{version('gpufleet')}" == install.DEFAULT_IMAGE
    deployment = next(d for d in documents(install.hub_yaml()) if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        install.DEFAULT_IMAGE
    )


def test_agent_hub_access_is_scoped_to_the_clusters_namespace() -> None:
    objs = by_kind(OUTPUTS["agent-hub"])
    name = "gpufleet-agent-gke-us-central"
    role = objs[("Role", name)]
    assert role["metadata"]["namespace"] == "gpufleet-cluster-gke-us-central"
    assert rules_allow(role, "gpufleet.io", "poolobservations", "create")
    assert rules_allow(role, "gpufleet.io", "replicaobservations/status", "patch")
    # Its ModelReplicas are in that namespace too: read there, never written.
    assert rules_allow(role, "gpufleet.io", "modelreplicas", "watch")
    assert not rules_allow(role, "gpufleet.io", "modelreplicas", "update")
    assert not rules_allow(role, "gpufleet.io", "modelreplicas/status", "patch")
    # One cluster-scoped rule: get its own InferenceCluster, by name.
    reader = objs[("ClusterRole", name)]
    assert reader["rules"] == [
        {
            "apiGroups": ["gpufleet.io"],
            "resources": ["inferenceclusters"],
            "verbs": ["get"],
            "resourceNames": ["gke-us-central"],
        }
    ]
    # No long-lived token Secret: `gpufleet join` asks the TokenRequest API for one that expires.
    assert not [key for key in objs if key[0] == "Secret"]


def test_cluster_names_must_make_a_namespace() -> None:
    with pytest.raises(ValueError, match="DNS label"):
        install.agent_yaml("Bad_Name", "img")
    with pytest.raises(ValueError, match="at most 46"):
        install.agent_hub_yaml("a" * 47)
