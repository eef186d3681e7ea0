"""Install manifests for the hub controller and for an agent (what `gpufleet install` prints).

- `hub_yaml(image)`: the CRDs, namespace `gpufleet-system`, the controller's ServiceAccount,
  ClusterRole/Binding, a Role for its Lease, the controller Deployment (leader-elected, probes
  on /healthz and /readyz, replicas spread over nodes and zones) and a Service for /metrics.
- ModelReplicas and Events the controller writes only where a RoleBinding of its ClusterRoles
  `gpufleet-controller-replicas` / `-events` lets it (`controller_namespace_access`): each
  cluster namespace (with the agent's hub side, made by `join`), `default` (the events of
  cluster-scoped objects) and each deployments' namespace given to `hub(tenant_namespaces=)`
  (`gpufleet install hub --tenant-namespace`); never cluster-wide, never a kube-* namespace.
- `agent_yaml(cluster, image)`: for the *workload* cluster: namespace, the agent's
  ServiceAccount, a ClusterRole to read nodes, pods, ResourceSlices and ResourceClaims, create
  the tenants' namespaces and manage the replicas' workloads (Deployments, LeaderWorkerSets,
  ResourceClaimTemplates) in any namespace, a Role for its Lease and to patch its hub Secret
  (with its renewed hub token) and the agent Deployment. The
  Secret `gpufleet-hub` it mounts (its hub kubeconfig) is written by `gpufleet join`
  (`gpufleet.kube.join`), never by hand.
- `agent_hub_access(cluster)`: for the *hub*: the cluster's namespace
  `gpufleet-cluster-<cluster>` (`gpufleet.api.names.cluster_namespace`), a ServiceAccount the
  agent authenticates as, a Role there to write Pool/ReplicaObservations (and their status)
  and watch the ModelReplicas the controller writes there, and to renew its own token (a
  TokenRequest on its own ServiceAccount), and a ClusterRole that only gets its own
  InferenceCluster (`resourceNames`). `gpufleet join` creates these objects and a token from the TokenRequest API; the
  namespace is made by `join` (or applied from `agent_hub_yaml`), never by the controller,
  which may not create namespaces.
- `pod_disruption_budget()`: at most one controller replica evicted at a time (part of `hub()`).
- `service_monitor()`, `prometheus_rule()` (the hub), `pod_monitor()`, `agent_prometheus_rule()`
  (a workload cluster) and the Grafana dashboard (`gpufleet.kube.install_dashboard`): what the
  Kustomize base adds for monitoring (deploy/, `make deploy`).

Every rule grants what the component sends and nothing more: tests/kube/test_kube_e2e.py records
each request the controller and the agent make and checks it against these rules. The images run
as the numeric user `RUN_AS_USER`, which the Dockerfile's `USER` matches (a test checks it).

The agent pushes to and pulls from the hub, so the hub never holds workload-cluster
credentials, and each agent reads and writes only its cluster's hub namespace, as Karmada's
execution namespaces and Open Cluster Management's cluster namespaces do: the controller writes
a cluster's ModelReplicas there (docs/operations.md, "Security model").
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any

from gpufleet.api.names import (
    CLUSTER_NAME_RULE,
    cluster_namespace,
    is_cluster_name,
)
from gpufleet.kube.crds import GROUP, crds_yaml, to_yaml
from gpufleet.kube.install_dashboard import dashboard_json


def _version() -> str:
    try:
        return metadata.version("gpufleet")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0.0.0"


VERSION = _version()
IMAGE_REPOSITORY = "ghcr.io/gpufleet/gpufleet"
#: The image `make image` builds and the manifests run: tagged with the project's version.
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{VERSION}"
#: The image's numeric user and group (the Dockerfile's `USER`); not root, so `runAsNonRoot`
#: can be checked by the kubelet without reading /etc/passwd.
RUN_AS_USER = 65532
SYSTEM_NAMESPACE = "gpufleet-system"
CONTROLLER = "gpufleet-controller"
AGENT = "gpufleet-agent"
HUB_SECRET = "gpufleet-hub"
HUB_KUBECONFIG_KEY = "kubeconfig"
HUB_KUBECONFIG_DIR = "/etc/gpufleet/hub"
METRICS_PORT = 8080
HEALTH_PORT = 8081
#: The defaults the alerts are written against (`gpufleet controller` flags).
LEASE_DURATION_S = 15
EXPIRE_AFTER_S = 300
#: How often the ServiceMonitor and the PodMonitor scrape. No alert waits (`for`) less than two
#: intervals: one missed or late scrape must not fire it.
SCRAPE_INTERVAL_S = 30

Manifest = dict[str, Any]

_OBSERVATIONS = ["poolobservations", "replicaobservations"]
_READ = ["get", "list", "watch"]
_WATCH = ["list", "watch"]
_MANAGE = ["get", "list", "watch", "create", "update", "delete"]
_LEASE = ["get", "create", "update"]


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
    """Leader election: read the Lease, create it once, renew and hand it over by update."""
    return [_rule(["coordination.k8s.io"], ["leases"], _LEASE)]


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
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
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
    selector = {"app.kubernetes.io/name": "gpufleet", "app.kubernetes.io/component": component}
    # The standby must not share the leader's node or zone, or one failure takes both.
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    pod_spec: Manifest = {
        "serviceAccountName": name,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": spread,
        "containers": [container],
    }
    if volumes:
        pod_spec["volumes"] = volumes
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


def hub(
    image: str = DEFAULT_IMAGE, replicas: int = 2, tenant_namespaces: tuple[str, ...] = ()
) -> list[Manifest]:
    """The hub's objects after the CRDs (see `hub_yaml`)."""
    component = "controller"
    # It reads everything of ours, writes ModelReplicas and the status of what it publishes,
    # and records events (a repeated one is read and updated with a higher count).
    # Cluster-wide it only reads, and merge-patches the status of the clusters and deployments it
    # publishes; ModelReplicas and Events it writes only where a RoleBinding lets it
    # (`controller_namespace_access`): the cluster namespaces, `default` (the events of
    # cluster-scoped objects) and the deployments' namespaces, never kube-system.
    cluster_rules = [
        # `get` only of what it writes (a re-read after a Conflict); the rest it watches.
        _rule([GROUP], ["inferenceclusters", "modeldeployments", "modelreplicas"], _READ),
        _rule([GROUP], ["inferenceclasses", *_OBSERVATIONS], _WATCH),
        _rule(
            [GROUP],
            [f"{k}/status" for k in ("inferenceclusters", "modeldeployments")],
            ["patch"],
        ),
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
        *_controller_namespaced_roles(),
        *controller_namespace_access(EVENTS_NAMESPACE, replicas=False),
        *(b for ns in tenant_namespaces for b in controller_namespace_access(ns, replicas=False)),
        _deployment(CONTROLLER, component, replicas, container),
        metrics_service,
        pod_disruption_budget(),
    ]


#: Where the controller records the events of cluster-scoped objects (InferenceClusters).
EVENTS_NAMESPACE = "default"
#: ClusterRoles bound only by RoleBindings, namespace by namespace: the controller's writes.
CONTROLLER_REPLICAS = f"{CONTROLLER}-replicas"
CONTROLLER_EVENTS = f"{CONTROLLER}-events"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_EVENT_RULE = _rule([""], ["events"], ["get", "create", "update"])


def _controller_namespaced_roles() -> list[Manifest]:
    """Manage ModelReplicas (and their status) and record Events; and record Events only."""
    replicas = [
        _rule([GROUP], ["modelreplicas"], _MANAGE),
        _rule([GROUP], ["modelreplicas/status"], ["patch"]),
        _EVENT_RULE,
    ]
    return [
        _role("ClusterRole", CONTROLLER_REPLICAS, "controller", replicas, None),
        _role("ClusterRole", CONTROLLER_EVENTS, "controller", [_EVENT_RULE], None),
    ]


def controller_namespace_access(namespace: str, *, replicas: bool) -> list[Manifest]:
    """The RoleBinding that lets the controller write in `namespace`: ModelReplicas and Events
    in a cluster namespace (`replicas`, made with the agent's hub side), Events in a
    deployments' namespace (`gpufleet install hub --tenant-namespace`)."""
    if not _DNS_LABEL.fullmatch(namespace) or namespace.startswith("kube-"):
        raise ValueError(
            f"namespace {namespace!r}: a DNS label (lowercase letters, digits, '-', at most 63) "
            "and not a kube-* namespace: the controller writes nothing there"
        )
    role = CONTROLLER_REPLICAS if replicas else CONTROLLER_EVENTS
    return [
        _binding(
            "RoleBinding",
            role,
            "controller",
            "ClusterRole",
            CONTROLLER,
            SYSTEM_NAMESPACE,
            namespace,
        )
    ]


def hub_yaml(
    image: str = DEFAULT_IMAGE, replicas: int = 2, tenant_namespaces: tuple[str, ...] = ()
) -> str:
    """`gpufleet install hub`: the CRDs first, then the controller (and its
    PodDisruptionBudget, as deploy/hub has it)."""
    return crds_yaml() + to_yaml(hub(image, replicas, tenant_namespaces))


def _check_cluster(cluster: str) -> None:
    if not is_cluster_name(cluster):
        raise ValueError(f"cluster name {cluster!r} {CLUSTER_NAME_RULE}")


def agent(cluster: str, image: str = DEFAULT_IMAGE) -> list[Manifest]:
    """The workload cluster's objects for the agent of `cluster` (see `agent_yaml`)."""
    _check_cluster(cluster)
    component = "agent"
    cluster_rules = [
        # What it observes, through informers (list, then watch).
        _rule([""], ["nodes", "pods"], _WATCH),
        # Gated steering: it pins each gated pod of its own to its node and lifts the gate,
        # reading the pod afresh first (`get`: nothing list and watch do not show already).
        _rule([""], ["pods"], ["get", "update"]),
        _rule(["resource.k8s.io"], ["resourceslices", "resourceclaims"], _WATCH),
        # The cluster autoscaler's verdicts on unschedulable pods (agent/scaleup.py).
        _rule([""], ["events"], _WATCH),
        # A replica's namespace is created if the cluster does not have it yet.
        _rule([""], ["namespaces"], ["get", "create"]),
        # The workloads it materializes (owned: label gpufleet.io/replica).
        # A ResourceClaimTemplate's spec is immutable: replaced (deleted, created), never updated.
        _rule(
            ["resource.k8s.io"], ["resourceclaimtemplates"], ["list", "watch", "create", "delete"]
        ),
        _rule(["apps"], ["deployments"], _MANAGE),
        _rule(["leaderworkerset.x-k8s.io"], ["leaderworkersets"], _MANAGE),
        # Each replica's PodDisruptionBudget: a drain waits while its replacement is placed.
        _rule(["policy"], ["poddisruptionbudgets"], _MANAGE),
    ]
    args = [
        "agent",
        # The hub namespace follows from the cluster name (gpufleet-cluster-<cluster>).
        f"--hub-kubeconfig={HUB_KUBECONFIG_DIR}/{HUB_KUBECONFIG_KEY}",
        "--leader-elect",
        f"--lease-namespace={SYSTEM_NAMESPACE}",
        f"--lease-name={AGENT}",
        "--lease-identity=$(POD_NAME)",
        f"--metrics-address=:{METRICS_PORT}",
        f"--health-address=:{HEALTH_PORT}",
        f"--hub-secret={SYSTEM_NAMESPACE}/{HUB_SECRET}",
        # Last, so a Kustomize overlay adds it to the base (deploy/agent) with one JSON patch.
        f"--cluster={cluster}",
    ]
    container = _container(
        "agent",
        image,
        args,
        [{"name": "metrics", "containerPort": METRICS_PORT}],
        [{"name": "hub", "mountPath": HUB_KUBECONFIG_DIR, "readOnly": True}],
    )
    # Written by `gpufleet join`; the pod waits for it (ContainerCreating) until then.
    volumes = [{"name": "hub", "secret": {"secretName": HUB_SECRET}}]
    # Its Lease, and its hub kubeconfig Secret, into which it writes its renewed hub token
    # (`gpufleet.kube.renewal`): that Secret only, by a merge patch.
    agent_rules = [
        *_lease_rules(),
        {**_rule([""], ["secrets"], ["patch"]), "resourceNames": [HUB_SECRET]},
    ]
    return [
        _namespace(SYSTEM_NAMESPACE, component),
        _service_account(AGENT, SYSTEM_NAMESPACE, component),
        _role("ClusterRole", AGENT, component, cluster_rules, None),
        _binding(
            "ClusterRoleBinding", AGENT, component, "ClusterRole", AGENT, SYSTEM_NAMESPACE, None
        ),
        _role("Role", AGENT, component, agent_rules, SYSTEM_NAMESPACE),
        _binding(
            "RoleBinding", AGENT, component, "Role", AGENT, SYSTEM_NAMESPACE, SYSTEM_NAMESPACE
        ),
        _deployment(AGENT, component, 2, container, volumes),
    ]


def agent_yaml(cluster: str, image: str = DEFAULT_IMAGE) -> str:
    """`gpufleet install agent`: apply on the workload cluster."""
    return to_yaml(agent(cluster, image))


def agent_identity(cluster: str) -> str:
    """The hub ServiceAccount (and Role, ClusterRole, bindings) of the agent of `cluster`."""
    return f"{AGENT}-{cluster}"


def agent_hub_access(cluster: str) -> list[Manifest]:
    """The hub's objects that let the agent of `cluster` report (see `agent_hub_yaml`)."""
    _check_cluster(cluster)
    component = "agent"
    ns = cluster_namespace(cluster)
    name = agent_identity(cluster)
    # Everything it does on the hub but one read, in its cluster's namespace only: it writes
    # its observations (and their status) and watches the ModelReplicas the controller writes
    # there for it; nor any other cluster's namespace.
    rules = [
        # It never deletes a PoolObservation: a pool gone is reported empty.
        _rule([GROUP], ["poolobservations"], [v for v in _MANAGE if v != "delete"]),
        _rule([GROUP], ["replicaobservations"], _MANAGE),
        _rule([GROUP], [f"{k}/status" for k in _OBSERVATIONS], ["patch"]),
        _rule([GROUP], ["modelreplicas"], _WATCH),
        # Renewing its own hub token before it expires (`gpufleet.kube.renewal`): a
        # TokenRequest for its own ServiceAccount only.
        {**_rule([""], ["serviceaccounts/token"], ["create"]), "resourceNames": [name]},
    ]
    # The one cluster-scoped read: its own InferenceCluster, by name (the pools it declares:
    # each is reported, also at zero nodes). No other cluster, no list or watch, and no
    # InferenceClass (its devices come from its own ResourceSlices).
    cluster_rules = [
        {**_rule([GROUP], ["inferenceclusters"], ["get"]), "resourceNames": [cluster]},
    ]
    return [
        _namespace(ns, component),
        _service_account(name, ns, component),
        _role("Role", name, component, rules, ns),
        _binding("RoleBinding", name, component, "Role", name, ns, ns),
        _role("ClusterRole", name, component, cluster_rules, None),
        _binding("ClusterRoleBinding", name, component, "ClusterRole", name, ns, None),
        # The controller writes this cluster's ModelReplicas here, and their Events.
        *controller_namespace_access(ns, replicas=True),
    ]


def agent_hub_yaml(cluster: str) -> str:
    """The hub side of an agent, for GitOps (`gpufleet join` creates it and a token)."""
    return to_yaml(agent_hub_access(cluster))


# --- production additions (the Kustomize base, deploy/) ---------------------------------------


def pod_disruption_budget() -> Manifest:
    """At most one controller replica evicted at a time: a drain never takes both."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(CONTROLLER, "controller", SYSTEM_NAMESPACE),
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "gpufleet",
                    "app.kubernetes.io/component": "controller",
                }
            },
        },
    }


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


#: The shortest `for` of any alert: two scrape intervals (tests/deploy checks every alert).
MIN_ALERT_FOR_S = 2 * SCRAPE_INTERVAL_S


def service_monitor() -> Manifest:
    """Prometheus Operator: scrape the controller's /metrics Service."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(CONTROLLER, "controller", SYSTEM_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": _labels("controller")},
            "endpoints": [
                {"port": "metrics", "path": "/metrics", "interval": f"{SCRAPE_INTERVAL_S}s"}
            ],
        },
    }


def pod_monitor() -> Manifest:
    """Prometheus Operator, on a workload cluster: scrape both agent pods' /metrics (the agent
    has no Service: nothing else talks to it, and a PodMonitor also sees the standby)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(AGENT, "agent", SYSTEM_NAMESPACE),
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "gpufleet",
                    "app.kubernetes.io/component": "agent",
                }
            },
            "podMetricsEndpoints": [
                {"port": "metrics", "path": "/metrics", "interval": f"{SCRAPE_INTERVAL_S}s"}
            ],
        },
    }


def _alert(name: str, expr: str, for_s: int, severity: str, summary: str, text: str) -> Manifest:
    return {
        "alert": name,
        "expr": expr,
        "for": _duration(max(for_s, MIN_ALERT_FOR_S)),
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": text},
    }


def alerts() -> list[Manifest]:
    """The hub's alerts docs/operations.md describes ("Metrics"), at the controller's defaults."""
    leader = 'gpufleet_leader{component="controller"}'
    return [
        _alert(
            "GpufleetObservationExpired",
            f"gpufleet_observation_age_seconds > {EXPIRE_AFTER_S}",
            60,
            "warning",
            "Cluster {{ $labels.cluster }} pool {{ $labels.pool }} is not reported",
            "The observation of pool {{ $labels.pool }} of cluster {{ $labels.cluster }} "
            f"is older than the expiry ({EXPIRE_AFTER_S} s): the cluster gets no new "
            "placements. Is its agent running and able to reach the hub?",
        ),
        _alert(
            "GpufleetControllerLeader",
            f"sum({leader}) != 1 or absent({leader})",
            # The lease duration, but never less than two scrapes.
            LEASE_DURATION_S,
            "critical",
            "Not exactly one gpufleet controller leads",
            "No controller replica (or more than one) has held the Lease for longer than "
            "the lease duration and two scrapes: nothing is being scheduled.",
        ),
    ]


def agent_alerts() -> list[Manifest]:
    """A workload cluster's alerts on its agent (docs/operations.md, "Metrics")."""
    leader = 'gpufleet_leader{component="agent"}'
    failed = 'sum(rate(gpufleet_agent_reports_total{result="failed"}[10m]))'
    ok = 'sum(rate(gpufleet_agent_reports_total{result=~"pushed|unchanged"}[10m]))'
    return [
        _alert(
            "GpufleetAgentLeader",
            f"sum({leader}) != 1 or absent({leader})",
            LEASE_DURATION_S,
            "critical",
            "Not exactly one gpufleet agent leads on this cluster",
            "No agent replica (or more than one) has held the agent Lease for longer than the "
            "lease duration and two scrapes: the cluster reports nothing and its replicas' "
            "workloads are not kept.",
        ),
        _alert(
            "GpufleetAgentReportsFailing",
            f"{failed} > 0 and ({ok} == 0 or absent(gpufleet_agent_reports_total))",
            300,
            "warning",
            "The gpufleet agent's steps fail",
            "Every agent step of the last 10 minutes failed (the hub could not be reached or "
            "refused a write): its observations age towards the expiry. See the agent's log.",
        ),
    ]


def prometheus_rule() -> Manifest:
    """Prometheus Operator: the alerts of `alerts()`."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("gpufleet", "controller", SYSTEM_NAMESPACE),
        "spec": {"groups": [{"name": "gpufleet", "rules": alerts()}]},
    }


def agent_prometheus_rule() -> Manifest:
    """Prometheus Operator, on a workload cluster: the alerts of `agent_alerts()`."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta(AGENT, "agent", SYSTEM_NAMESPACE),
        "spec": {"groups": [{"name": "gpufleet-agent", "rules": agent_alerts()}]},
    }


# --- the Kustomize base (deploy/, written by `make deploy`) -----------------------------------

#: The cluster name of the example agent overlay (deploy/overlays/agent-example).
EXAMPLE_CLUSTER = "example"
_KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
_GENERATED = "# Generated by `make deploy` from `gpufleet install`: do not edit.\n"


def _list(key: str, items: list[str]) -> str:
    return f"{key}:\n" + "".join(f"- {item}\n" for item in items)


def agent_base() -> list[Manifest]:
    """`agent()` without its `--cluster` argument (an overlay adds it: deploy/agent)."""
    objs = agent(EXAMPLE_CLUSTER)
    for obj in objs:
        if obj["kind"] == "Deployment":
            args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
            assert args[-1] == f"--cluster={EXAMPLE_CLUSTER}"
            del args[-1]
    return objs


def agent_overlay(cluster: str) -> dict[str, str]:
    """The files of an overlay that runs the agent for `cluster` (relative to deploy/overlays/
    <dir>): the base plus one JSON patch that appends `--cluster=<cluster>` to its args."""
    _check_cluster(cluster)
    patch = (
        "- op: add\n"
        "  path: /spec/template/spec/containers/0/args/-\n"
        f"  value: --cluster={cluster}\n"
    )
    kustomization = (
        _KUSTOMIZATION
        + f"# The agent of cluster {cluster}: copy this folder and change the name in cluster.yaml.\n"
        + _list("bases", ["../../agent"])
        + "patchesJson6902:\n"
        + "- target:\n"
        + "    group: apps\n"
        + "    version: v1\n"
        + "    kind: Deployment\n"
        + f"    name: {AGENT}\n"
        + f"    namespace: {SYSTEM_NAMESPACE}\n"
        + "  path: cluster.yaml\n"
    )
    return {"kustomization.yaml": kustomization, "cluster.yaml": patch}


def deploy_files(crd_files: list[str]) -> dict[str, str]:
    """Every file of the Kustomize base under deploy/ (paths relative to it), given the names of
    the CRD files in deploy/crds. Written for kustomize v2 (Debian's kubectl) as well as v5:
    hence `bases` and `patchesJson6902`, which v5 still reads (with a deprecation warning).

    deploy/crds/kustomization.yml is named `.yml` so that deploy/crds/*.yaml stays exactly the
    generated CRDs (tests/kube/test_kube_crds.py compares that set)."""
    files = {
        "crds/kustomization.yml": (
            _KUSTOMIZATION
            + "# The CRDs (generated from src/gpufleet/api/models.py, see docs/operations.md).\n"
            + _list("resources", sorted(crd_files))
        ),
        "hub/kustomization.yaml": (
            _KUSTOMIZATION
            + "# The hub: the CRDs and the controller with its PodDisruptionBudget, as\n"
            + "# `gpufleet install hub`. Monitoring: overlays/monitoring.\n"
            + _list("bases", ["../crds"])
            + _list("resources", ["controller.yaml"])
        ),
        "hub/controller.yaml": _GENERATED + to_yaml(hub()),
        "agent/kustomization.yaml": (
            _KUSTOMIZATION
            + "# An agent without its cluster name: use an overlay (overlays/agent-example).\n"
            + _list("resources", ["agent.yaml"])
        ),
        "agent/agent.yaml": _GENERATED + to_yaml(agent_base()),
        "overlays/monitoring/kustomization.yaml": (
            _KUSTOMIZATION
            + "# The hub with Prometheus Operator objects (needs its CRDs on the hub).\n"
            + _list("bases", ["../../hub"])
            + _list("resources", ["servicemonitor.yaml", "prometheusrule.yaml"])
        ),
        "overlays/monitoring/servicemonitor.yaml": _GENERATED + to_yaml([service_monitor()]),
        "overlays/monitoring/prometheusrule.yaml": _GENERATED + to_yaml([prometheus_rule()]),
        "overlays/monitoring-agent/kustomization.yaml": (
            _KUSTOMIZATION
            + "# On each workload cluster with the Prometheus Operator, beside its agent:\n"
            + "# a PodMonitor for both agent pods and the agent's alerts.\n"
            + _list("resources", ["podmonitor.yaml", "prometheusrule.yaml"])
        ),
        "overlays/monitoring-agent/podmonitor.yaml": _GENERATED + to_yaml([pod_monitor()]),
        "overlays/monitoring-agent/prometheusrule.yaml": (
            _GENERATED + to_yaml([agent_prometheus_rule()])
        ),
        "monitoring/grafana-dashboard.json": dashboard_json(),
    }
    for name, text in agent_overlay(EXAMPLE_CLUSTER).items():
        files[f"overlays/agent-{EXAMPLE_CLUSTER}/{name}"] = text
    return files


def write_deploy(directory: Path) -> list[Path]:
    """Write `deploy_files()` under `directory` (deploy/); returns the paths written."""
    crd_files = sorted(p.name for p in (directory / "crds").glob("*.yaml"))
    written = []
    for name, text in deploy_files(crd_files).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
