"""Install manifests for the hub controller and for an agent (what `gpufleet install` prints).

- `hub_yaml(image)`: the CRDs, namespace `gpufleet-system`, the controller's ServiceAccount,
  ClusterRole/Binding (our kinds and their status, events), a Role for its Lease, the
  controller Deployment (leader-elected, probes on /healthz and /readyz) and a Service for
  /metrics.
- `agent_yaml(cluster, hub_server, image)`: for the *workload* cluster: namespace, the
  agent's ServiceAccount, a ClusterRole to read nodes, pods, ResourceSlices and
  ResourceClaims and to manage the replicas' workloads (Deployments, LeaderWorkerSets,
  ResourceClaimTemplates) in any namespace, a Role for its Lease, the Secret holding the hub
  kubeconfig (placeholder values the user fills in) and the agent Deployment.
- `agent_hub_yaml(cluster)`: for the *hub*: the cluster's namespace
  `gpufleet-cluster-<cluster>`, a ServiceAccount the agent authenticates as, a Role there to
  write Pool/ReplicaObservations (and their status), a read-only ClusterRole for ModelReplicas,
  InferenceClusters and InferenceClasses, and a token Secret for that ServiceAccount.

The agent pushes to and pulls from the hub, so the hub never holds workload-cluster
credentials. RBAC cannot scope by label: the agent may read every ModelReplica on the hub and
filters by `gpufleet.io/cluster=<cluster>` itself (docs/operations.md, "RBAC").
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.names import is_dns_label
from gpufleet.kube.crds import GROUP, crds_yaml, to_yaml

SYSTEM_NAMESPACE = "gpufleet-system"
DEFAULT_IMAGE = "ghcr.io/gpufleet/gpufleet:0.1.0"
CONTROLLER = "gpufleet-controller"
AGENT = "gpufleet-agent"
HUB_SECRET = "gpufleet-hub"
METRICS_PORT = 8080
HEALTH_PORT = 8081
#: Longest cluster name: `gpufleet-cluster-` + name must be a DNS label.
CLUSTER_NAME_MAX_CHARS = 63 - len("gpufleet-cluster-")

Manifest = dict[str, Any]

_OBSERVATIONS = ["poolobservations", "replicaobservations"]
_READ = ["get", "list", "watch"]
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]


def cluster_namespace(cluster: str) -> str:
    """The hub namespace of a cluster's observations."""
    return f"gpufleet-cluster-{cluster}"


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gpufleet",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "gpufleet",
    }


def _meta(name: str, component: str, namespace: str | None = None) -> Manifest:
    meta: Manifest = {"name": name, "labels": _labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _namespace(name: str, component: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, component)}


def _service_account(name: str, namespace: str, component: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, component, namespace),
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> Manifest:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _role(kind: str, name: str, component: str, rules: list[Manifest], ns: str | None) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _meta(name, component, ns),
        "rules": rules,
    }


def _binding(
    kind: str, name: str, component: str, role_kind: str, sa: str, sa_ns: str, ns: str | None
) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _meta(name, component, ns),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    }


def _lease_rules() -> list[Manifest]:
    return [
        _rule(["coordination.k8s.io"], ["leases"], ["get", "list", "watch", "create", "update"]),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def _container(
    name: str, image: str, args: list[str], ports: list[Manifest], mounts: list[Manifest]
) -> Manifest:
    def probe(path: str) -> Manifest:
        return {
            "httpGet": {"path": path, "port": "health"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        }

    container: Manifest = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
        ],
        "ports": [*ports, {"name": "health", "containerPort": HEALTH_PORT}],
        "livenessProbe": probe("/healthz"),
        "readinessProbe": probe("/readyz"),
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _deployment(
    name: str,
    component: str,
    replicas: int,
    container: Manifest,
    volumes: list[Manifest] | None = None,
) -> Manifest:
    pod_spec: Manifest = {
        "serviceAccountName": name,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if volumes:
        pod_spec["volumes"] = volumes
    selector = {"app.kubernetes.io/name": "gpufleet", "app.kubernetes.io/component": component}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, component, SYSTEM_NAMESPACE),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": _labels(component)}, "spec": pod_spec},
        },
    }


def hub(image: str = DEFAULT_IMAGE, replicas: int = 2) -> list[Manifest]:
    """The hub's objects after the CRDs (see `hub_yaml`)."""
    component = "controller"
    our_kinds = [
        "inferenceclasses",
        "inferenceclusters",
        "modeldeployments",
        "modelreplicas",
        *_OBSERVATIONS,
    ]
    cluster_rules = [
        _rule([GROUP], our_kinds, _WRITE),
        _rule([GROUP], [f"{k}/status" for k in our_kinds], ["get", "update", "patch"]),
        _rule([GROUP], ["modeldeployments/scale"], ["get"]),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
        _rule([""], ["namespaces"], _READ),
    ]
    args = [
        "controller",
        "--leader-elect",
        f"--lease-namespace={SYSTEM_NAMESPACE}",
        f"--lease-name={CONTROLLER}",
        "--lease-identity=$(POD_NAME)",
        f"--metrics-address=:{METRICS_PORT}",
        f"--health-address=:{HEALTH_PORT}",
    ]
    container = _container(
        "controller",
        image,
        args,
        [{"name": "metrics", "containerPort": METRICS_PORT}],
        [],
    )
    metrics_service: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(f"{CONTROLLER}-metrics", component, SYSTEM_NAMESPACE),
        "spec": {
            "selector": {
                "app.kubernetes.io/name": "gpufleet",
                "app.kubernetes.io/component": component,
            },
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
        },
    }
    return [
        _namespace(SYSTEM_NAMESPACE, component),
        _service_account(CONTROLLER, SYSTEM_NAMESPACE, component),
        _role("ClusterRole", CONTROLLER, component, cluster_rules, None),
        _binding(
            "ClusterRoleBinding",
            CONTROLLER,
            component,
            "ClusterRole",
            CONTROLLER,
            SYSTEM_NAMESPACE,
            None,
        ),
        _role("Role", CONTROLLER, component, _lease_rules(), SYSTEM_NAMESPACE),
        _binding(
            "RoleBinding",
            CONTROLLER,
            component,
            "Role",
            CONTROLLER,
            SYSTEM_NAMESPACE,
            SYSTEM_NAMESPACE,
        ),
        _deployment(CONTROLLER, component, replicas, container),
        metrics_service,
    ]


def hub_yaml(image: str = DEFAULT_IMAGE, replicas: int = 2) -> str:
    """`gpufleet install hub`: the CRDs first, then the controller."""
    return crds_yaml() + to_yaml(hub(image, replicas))


def _check_cluster(cluster: str) -> None:
    if not is_dns_label(cluster, CLUSTER_NAME_MAX_CHARS):
        raise ValueError(
            f"cluster name {cluster!r} must be a DNS label of at most "
            f"{CLUSTER_NAME_MAX_CHARS} characters (it names namespace gpufleet-cluster-<name>)"
        )


def hub_kubeconfig_template(cluster: str, hub_server: str) -> str:
    """The kubeconfig the agent uses for the hub, with placeholders the user replaces."""
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: hub\n"
        "  cluster:\n"
        f"    server: {hub_server}\n"
        "    certificate-authority-data: REPLACE_WITH_HUB_CA_BASE64\n"
        "users:\n"
        f"- name: {AGENT}-{cluster}\n"
        "  user:\n"
        "    token: REPLACE_WITH_HUB_TOKEN\n"
        "contexts:\n"
        "- name: hub\n"
        "  context:\n"
        "    cluster: hub\n"
        f"    user: {AGENT}-{cluster}\n"
        f"    namespace: {cluster_namespace(cluster)}\n"
        "current-context: hub\n"
    )


def agent(cluster: str, hub_server: str, image: str = DEFAULT_IMAGE) -> list[Manifest]:
    """The workload cluster's objects for the agent of `cluster` (see `agent_yaml`)."""
    _check_cluster(cluster)
    component = "agent"
    cluster_rules = [
        _rule([""], ["nodes", "pods", "namespaces"], _READ),
        _rule(["resource.k8s.io"], ["resourceslices", "resourceclaims", "deviceclasses"], _READ),
        _rule(["resource.k8s.io"], ["resourceclaimtemplates"], _WRITE),
        _rule(["apps"], ["deployments"], _WRITE),
        _rule(["leaderworkerset.x-k8s.io"], ["leaderworkersets"], _WRITE),
    ]
    secret: Manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            **_meta(HUB_SECRET, component, SYSTEM_NAMESPACE),
            "annotations": {
                "gpufleet.io/fill-in": (
                    "Replace REPLACE_WITH_HUB_CA_BASE64 and REPLACE_WITH_HUB_TOKEN: "
                    "see docs/operations.md, 'Connect an agent to the hub'"
                )
            },
        },
        "type": "Opaque",
        "stringData": {"kubeconfig": hub_kubeconfig_template(cluster, hub_server)},
    }
    args = [
        "agent",
        f"--cluster={cluster}",
        # The hub namespace follows from the cluster name (gpufleet-cluster-<cluster>).
        "--hub-kubeconfig=/etc/gpufleet/hub/kubeconfig",
        "--leader-elect",
        f"--lease-namespace={SYSTEM_NAMESPACE}",
        f"--lease-name={AGENT}",
        "--lease-identity=$(POD_NAME)",
        f"--metrics-address=:{METRICS_PORT}",
        f"--health-address=:{HEALTH_PORT}",
    ]
    container = _container(
        "agent",
        image,
        args,
        [{"name": "metrics", "containerPort": METRICS_PORT}],
        [{"name": "hub", "mountPath": "/etc/gpufleet/hub", "readOnly": True}],
    )
    volumes = [{"name": "hub", "secret": {"secretName": HUB_SECRET}}]
    return [
        _namespace(SYSTEM_NAMESPACE, component),
        _service_account(AGENT, SYSTEM_NAMESPACE, component),
        _role("ClusterRole", AGENT, component, cluster_rules, None),
        _binding(
            "ClusterRoleBinding", AGENT, component, "ClusterRole", AGENT, SYSTEM_NAMESPACE, None
        ),
        _role("Role", AGENT, component, _lease_rules(), SYSTEM_NAMESPACE),
        _binding(
            "RoleBinding", AGENT, component, "Role", AGENT, SYSTEM_NAMESPACE, SYSTEM_NAMESPACE
        ),
        secret,
        _deployment(AGENT, component, 2, container, volumes),
    ]


def agent_yaml(cluster: str, hub_server: str, image: str = DEFAULT_IMAGE) -> str:
    """`gpufleet install agent`: apply on the workload cluster."""
    return to_yaml(agent(cluster, hub_server, image))


def agent_hub_access(cluster: str) -> list[Manifest]:
    """The hub's objects that let the agent of `cluster` report (see `agent_hub_yaml`)."""
    _check_cluster(cluster)
    component = "agent"
    ns = cluster_namespace(cluster)
    name = f"{AGENT}-{cluster}"
    observation_rules = [
        _rule([GROUP], _OBSERVATIONS, _WRITE),
        _rule([GROUP], [f"{k}/status" for k in _OBSERVATIONS], ["get", "update", "patch"]),
    ]
    read_rules = [
        _rule([GROUP], ["modelreplicas", "inferenceclusters", "inferenceclasses"], _READ),
    ]
    token_secret: Manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            **_meta(f"{name}-token", component, ns),
            "annotations": {"kubernetes.io/service-account.name": name},
        },
        "type": "kubernetes.io/service-account-token",
    }
    return [
        _namespace(ns, component),
        _service_account(name, ns, component),
        _role("Role", name, component, observation_rules, ns),
        _binding("RoleBinding", name, component, "Role", name, ns, ns),
        _role("ClusterRole", name, component, read_rules, None),
        _binding("ClusterRoleBinding", name, component, "ClusterRole", name, ns, None),
        token_secret,
    ]


def agent_hub_yaml(cluster: str) -> str:
    """Apply on the hub before the agent of `cluster` starts."""
    return to_yaml(agent_hub_access(cluster))
