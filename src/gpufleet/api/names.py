"""Kubernetes name formats: DNS labels (RFC 1123), DNS subdomains, label keys and values."""

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.core.labels import DEPLOYMENT_NAMESPACE

DNS_LABEL_MAX_CHARS = 63
DNS_SUBDOMAIN_MAX_CHARS = 253

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

DNS_LABEL_RULE = (
    "must be a DNS label (lowercase letters, digits and '-', "
    "starting and ending with a letter or digit)"
)
DNS_SUBDOMAIN_RULE = (
    "must be a DNS subdomain (lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit)"
)


def is_dns_label(value: str, max_chars: int = DNS_LABEL_MAX_CHARS) -> bool:
    return len(value) <= max_chars and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= DNS_SUBDOMAIN_MAX_CHARS and _DNS_SUBDOMAIN.fullmatch(value) is not None


LABEL_VALUE_MAX_CHARS = 63
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

QUALIFIED_NAME_RULE = (
    "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 "
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)
LABEL_VALUE_RULE = (
    "must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit"
)


#: A ModelDeployment's name is the value of its replicas' `gpufleet.io/deployment` label (on
#: the hub and on every workload cluster), so it must fit a label value: a longer one would be
#: refused by the API server on every write of every replica (issue 30, 4).
DEPLOYMENT_NAME_RULE = (
    f"must be at most {LABEL_VALUE_MAX_CHARS} characters: it is the value of its replicas' "
    "gpufleet.io/deployment label"
)


def deployment_name_problem(name: str) -> str | None:
    """What is wrong with a ModelDeployment's name beyond the DNS subdomain rule, or None."""
    return DEPLOYMENT_NAME_RULE if len(name) > LABEL_VALUE_MAX_CHARS else None


def is_qualified_name(value: str) -> bool:
    """A label or annotation key as Kubernetes validates it (`example.com/name`)."""
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= DNS_LABEL_MAX_CHARS and _QUALIFIED_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return value == "" or (
        len(value) <= LABEL_VALUE_MAX_CHARS and _QUALIFIED_NAME.fullmatch(value) is not None
    )


# --- the hub's per-cluster namespaces -------------------------------------------------------

#: A cluster's hub namespace is this prefix + the cluster name (docs/operations.md, "Security
#: model"): its ModelReplicas and observations live there, and its agent may touch nothing else.
CLUSTER_NAMESPACE_PREFIX = "gpufleet-cluster-"
#: Longest cluster name whose hub namespace is still a DNS label (namespaces are).
CLUSTER_NAME_MAX_CHARS = DNS_LABEL_MAX_CHARS - len(CLUSTER_NAMESPACE_PREFIX)
CLUSTER_NAME_RULE = (
    f"must be a DNS label of at most {CLUSTER_NAME_MAX_CHARS} characters "
    f"(it names the hub namespace {CLUSTER_NAMESPACE_PREFIX}<cluster>)"
)


def cluster_name_problem(name: str) -> str | None:
    """What is wrong with an InferenceCluster's name beyond the DNS subdomain rule, or None (a
    name that is no DNS subdomain is refused by that rule already)."""
    if is_cluster_name(name) or not is_dns_subdomain(name):
        return None
    return CLUSTER_NAME_RULE + " and is a label value"


class ClusterNameError(ValueError):
    """A cluster name that cannot name a hub namespace (`CLUSTER_NAME_RULE`)."""


def is_cluster_name(cluster: str) -> bool:
    """Whether `cluster` can name a hub namespace (`CLUSTER_NAME_RULE`)."""
    return is_dns_label(cluster, CLUSTER_NAME_MAX_CHARS)


def cluster_namespace(cluster: str) -> str:
    """The hub namespace of cluster `cluster`: `gpufleet-cluster-<cluster>`, the one place this
    name is made. Raises `ClusterNameError` (naming the rule) when it would not be a DNS label."""
    if not is_cluster_name(cluster):
        raise ClusterNameError(f"cluster name {cluster!r} {CLUSTER_NAME_RULE}")
    return CLUSTER_NAMESPACE_PREFIX + cluster


def cluster_of_namespace(namespace: str) -> str | None:
    """The cluster whose hub namespace `namespace` is; None when it is no cluster's."""
    if not namespace.startswith(CLUSTER_NAMESPACE_PREFIX):
        return None
    cluster = namespace.removeprefix(CLUSTER_NAMESPACE_PREFIX)
    return cluster if is_cluster_name(cluster) else None


def replica_object_name(deployment_namespace: str, replica: str) -> str:
    """The hub name of replica `replica` of a deployment in `deployment_namespace`:
    `<namespace>.<replica>`. Replicas of equal names from two tenant namespaces share their
    cluster's hub namespace, so the name carries the tenant namespace; a namespace is a DNS
    label (no '.'), so the first '.' splits it off again (`replica_origin`). At most
    63 + 1 + 63 characters, a DNS subdomain (as every object name must be)."""
    return f"{deployment_namespace}.{replica}"


def replica_origin(
    namespace: str | None, name: str, deployment_namespace: str | None
) -> tuple[str, str]:
    """(the deployment's namespace, the replica's name as scheduling knows it) of a
    ModelReplica at hub `namespace`/`name` labelled with `deployment_namespace`
    (`gpufleet.io/deployment-namespace`). A replica without that label, or whose name does not
    carry it, was written in its deployment's namespace (before per-cluster namespaces): it is
    read as it stands."""
    if deployment_namespace and name.startswith(deployment_namespace + "."):
        return deployment_namespace, name[len(deployment_namespace) + 1 :]
    return namespace or "default", name


def replica_origin_of(metadata: Mapping[str, Any]) -> tuple[str, str]:
    """`replica_origin` of a ModelReplica's `metadata`."""
    deployment_namespace = (metadata.get("labels") or {}).get(DEPLOYMENT_NAMESPACE)
    return replica_origin(metadata.get("namespace"), str(metadata["name"]), deployment_namespace)
