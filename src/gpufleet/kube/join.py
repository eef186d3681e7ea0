"""`gpufleet join` / `gpufleet unjoin`: connect a workload cluster's agent to the hub in one step,
as `karmadactl register` and `clusteradm join` do.

`join(hub, member, cluster, endpoint)`, run with admin credentials for both clusters:

1. on the hub, the cluster's InferenceCluster if it is missing (from the pools given; marked
   `gpufleet.io/joined-by` so that `unjoin` knows it made it), then the agent's identity
   (`install.agent_hub_access`: the namespace `gpufleet-cluster-<cluster>`, the ServiceAccount
   `gpufleet-agent-<cluster>`, its Role there and its binding, and a ClusterRole that only gets
   its own InferenceCluster, by name, and its binding), created when missing and brought back
   to the installed rules when changed (so an older version's wider ClusterRole, which read
   every cluster's ModelReplicas, loses that rule);
2. a token for that ServiceAccount from the TokenRequest API (`POST .../serviceaccounts/NAME/
   token`) with an expiry (`token_ttl_s`; the API server may shorten it: the expiry it returns
   is the one reported);
3. on the member, the Secret `gpufleet-system/gpufleet-hub` holding the agent's hub kubeconfig
   (server, CA, token, the cluster's namespace), created or replaced; if the agent Deployment is
   already installed, its pod template is annotated with a hash of the new credentials so its
   pods restart onto them (the agent reads its kubeconfig once, at start).

Running it again issues a new token and replaces the Secret: that is how the token is rotated.
A token from the TokenRequest API cannot be revoked by itself: an older one stays valid until its
expiry, or until the ServiceAccount is deleted (`unjoin`, which a later `join` undoes).

`unjoin(hub, member, cluster)` deletes the member's Secret and, on the hub, the agent's
ClusterRole and ClusterRoleBinding and the cluster's namespace (with its ServiceAccount, Role,
binding, observations and ModelReplicas); the InferenceCluster only if `join` created it
(`keep_cluster` keeps it). Missing objects are skipped, so both are safe to re-run. Every API error becomes a
`JoinError` that says which side, which object and what the API server answered.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core import resource as res
from lightkube.generic_resource import Generic
from lightkube.types import PatchType

from gpufleet.api.errors import ValidationFailed
from gpufleet.api.names import cluster_namespace
from gpufleet.api.validation import validate
from gpufleet.kube import install
from gpufleet.kube.crds import GROUP
from gpufleet.kube.resources import resource_class, to_obj
from gpufleet.store.port import DEPLOYMENT, INFERENCE_CLUSTER, NAMESPACE, Kind, Obj

JOINED_BY = "gpufleet.io/joined-by"
TOKEN_EXPIRES_AT = "gpufleet.io/token-expires-at"
CREDENTIALS_HASH = "gpufleet.io/hub-credentials"
#: Token lifetime bounds: the API server refuses under 10 minutes; a year and a day at most.
MIN_TOKEN_TTL_S = 600
MAX_TOKEN_TTL_S = 366 * 24 * 3600
DEFAULT_TOKEN_TTL_S = 30 * 24 * 3600

SECRET = Kind("v1", "Secret", namespaced=True)
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", namespaced=True)
_RBAC = "rbac.authorization.k8s.io/v1"
_KINDS: dict[str, Kind] = {
    "Namespace": NAMESPACE,
    "ServiceAccount": SERVICE_ACCOUNT,
    "Role": Kind(_RBAC, "Role", namespaced=True),
    "RoleBinding": Kind(_RBAC, "RoleBinding", namespaced=True),
    "ClusterRole": Kind(_RBAC, "ClusterRole", namespaced=False),
    "ClusterRoleBinding": Kind(_RBAC, "ClusterRoleBinding", namespaced=False),
    "Secret": SECRET,
    "InferenceCluster": INFERENCE_CLUSTER,
}
#: The fields `join` owns in an existing object (others, such as a Secret's owner, are kept).
_OWNED_FIELDS = ("rules", "subjects", "data", "type")


class JoinError(Exception):
    """A step of join or unjoin failed; the message names the side, the object and the answer."""


class _TokenRequest(res.NamespacedSubResource, Generic):  # type: ignore[misc]
    """`POST serviceaccounts/NAME/token` with plain dicts in and out (see kube/resources.py)."""

    _api_info = res.ApiInfo(
        resource=res.ResourceDef("authentication.k8s.io", "v1", "TokenRequest"),
        parent=res.ResourceDef("", "v1", "ServiceAccount"),
        plural="serviceaccounts",
        verbs=["post"],
        action="token",
    )


def request_token(client: Client, ns: str, account: str, ttl_s: int) -> tuple[str, str]:
    """(token, expirationTimestamp) of a TokenRequest for ServiceAccount `ns/account`; the
    API error as it comes, `ValueError` for an answer without them."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": account, "namespace": ns},
        "spec": {"expirationSeconds": ttl_s},
    }
    answer = to_obj(client.create(_TokenRequest.from_dict(body), account, namespace=ns))
    status = answer.get("status") or {}
    token, expires = status.get("token"), status.get("expirationTimestamp")
    if not isinstance(token, str) or not token or not isinstance(expires, str):
        raise ValueError("the TokenRequest answer has no token or expiry")
    return token, expires


@dataclass(frozen=True, slots=True)
class HubEndpoint:
    """How the agent reaches the hub: its URL and the CA it trusts (base64 PEM)."""

    server: str
    ca_data: str | None = None
    is_insecure: bool = False

    @classmethod
    def of(cls, config: SingleConfig, server: str | None = None) -> HubEndpoint:
        """The endpoint of a kubeconfig context; `server` overrides its URL (the address the
        member cluster reaches the hub at may not be the one you do)."""
        cluster = config.cluster
        ca_data = cluster.certificate_auth_data
        if ca_data is None and cluster.certificate_auth:
            path = config.abs_file(cluster.certificate_auth)
            try:
                with open(path, "rb") as f:
                    ca_data = base64.b64encode(f.read()).decode()
            except OSError as e:
                raise JoinError(f"hub CA file {path}: {e.strerror or e}") from e
        return cls(server or cluster.server, ca_data, cluster.insecure)


@dataclass(frozen=True, slots=True)
class Pool:
    """A node pool of an InferenceCluster that `join` creates."""

    name: str
    class_name: str
    node_count: int


@dataclass
class Report:
    """What join or unjoin did, one line per action, in order."""

    lines: list[str] = field(default_factory=list)
    token_expires_at: str | None = None

    def add(self, line: str) -> None:
        self.lines.append(line)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{obj['kind']} {ns}/{meta['name']}" if ns else f"{obj['kind']} {meta['name']}"


class Side:
    """One cluster through a lightkube client: reads and writes of plain dicts."""

    def __init__(self, client: Client, side: str) -> None:
        self.client, self.side = client, side

    def _fail(self, what: str, e: Exception) -> JoinError:
        if isinstance(e, ApiError):
            answer = f"{e.status.code} {e.status.reason}: {e.status.message}"
        else:
            answer = f"{type(e).__name__}: {e}"
        return JoinError(f"{self.side}: {what}: {answer}")

    def get(self, kind: Kind, name: str, ns: str | None = None) -> Obj | None:
        try:
            return to_obj(self.client.get(resource_class(kind), name, namespace=ns))
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise self._fail(f"get {kind.kind} {name}", e) from e
        except httpx2.HTTPError as e:
            raise self._fail(f"get {kind.kind} {name}", e) from e

    def ensure(self, obj: Obj, report: Report, *, verb: str = "created") -> Obj:
        """Create `obj`, or bring an existing one's owned fields and labels to `obj`'s."""
        kind, meta = _KINDS[obj["kind"]], obj["metadata"]
        current = self.get(kind, meta["name"], meta.get("namespace"))
        try:
            if current is None:
                ns = meta.get("namespace")
                created = self.client.create(resource_class(kind)(obj), namespace=ns)
                report.add(f"{self.side}: {verb} {_name(obj)}")
                return to_obj(created)
            wanted = dict(current)
            wanted["metadata"] = {
                **current["metadata"],
                "labels": {**(current["metadata"].get("labels") or {}), **meta.get("labels", {})},
                "annotations": {
                    **(current["metadata"].get("annotations") or {}),
                    **meta.get("annotations", {}),
                },
            }
            wanted.update({k: obj[k] for k in _OWNED_FIELDS if k in obj})
            if wanted == current:
                report.add(f"{self.side}: {_name(obj)} is up to date")
                return current
            updated = self.client.replace(resource_class(kind)(wanted))
            report.add(f"{self.side}: updated {_name(obj)}")
            return to_obj(updated)
        except (ApiError, httpx2.HTTPError) as e:
            raise self._fail(f"write {_name(obj)}", e) from e

    def delete(self, kind: Kind, name: str, ns: str | None, report: Report) -> None:
        what = f"{kind.kind} {ns}/{name}" if ns else f"{kind.kind} {name}"
        try:
            self.client.delete(resource_class(kind), name, namespace=ns)
            report.add(f"{self.side}: deleted {what}")
        except ApiError as e:
            if e.status.code != 404:
                raise self._fail(f"delete {what}", e) from e
            report.add(f"{self.side}: {what} was not there")
        except httpx2.HTTPError as e:
            raise self._fail(f"delete {what}", e) from e

    def token(self, ns: str, account: str, ttl_s: int) -> tuple[str, str]:
        """(token, expirationTimestamp) from the TokenRequest API."""
        try:
            return request_token(self.client, ns, account, ttl_s)
        except (ApiError, httpx2.HTTPError) as e:
            raise self._fail(f"request a token for ServiceAccount {ns}/{account}", e) from e
        except ValueError as e:
            raise JoinError(f"{self.side}: {e}") from e

    def patch(self, kind: Kind, name: str, ns: str, patch: Obj, report: Report) -> None:
        try:
            self.client.patch(
                resource_class(kind), name, patch, namespace=ns, patch_type=PatchType.MERGE
            )
        except (ApiError, httpx2.HTTPError) as e:
            raise self._fail(f"patch {kind.kind} {ns}/{name}", e) from e
        report.add(f"{self.side}: restarted {kind.kind} {ns}/{name} onto the new credentials")


def inference_cluster(
    cluster: str, pools: Sequence[Pool], labels: Mapping[str, str] | None = None
) -> Obj:
    """The InferenceCluster `join` creates when the hub has none; validated as the CRD is."""
    body: Obj = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {
            "name": cluster,
            "labels": dict(labels or {}),
            "annotations": {JOINED_BY: "gpufleet join"},
        },
        "spec": {
            "nodePools": [
                {"name": p.name, "className": p.class_name, "nodeCount": p.node_count}
                for p in pools
            ]
        },
    }
    try:
        validate(body)
    except ValidationFailed as e:
        raise ValueError(str(e)) from e
    return body


def hub_kubeconfig(cluster: str, endpoint: HubEndpoint, token: str) -> str:
    """The kubeconfig the agent of `cluster` uses for the hub."""
    hub: Obj = {"server": endpoint.server}
    if endpoint.ca_data:
        hub["certificate-authority-data"] = endpoint.ca_data
    if endpoint.is_insecure:
        hub["insecure-skip-tls-verify"] = True
    user = install.agent_identity(cluster)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": hub}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "hub",
                "context": {
                    "cluster": "hub",
                    "user": user,
                    "namespace": cluster_namespace(cluster),
                },
            }
        ],
        "current-context": "hub",
    }
    return yaml.safe_dump(config, sort_keys=False)


def _check(cluster: str, token_ttl_s: int) -> None:
    install.agent_hub_access(cluster)  # raises ValueError naming the rule for a bad name
    if not MIN_TOKEN_TTL_S <= token_ttl_s <= MAX_TOKEN_TTL_S:
        raise ValueError(
            f"token lifetime {token_ttl_s} s must be between {MIN_TOKEN_TTL_S} and "
            f"{MAX_TOKEN_TTL_S} s"
        )


def join(
    hub: Client,
    member: Client,
    cluster: str,
    endpoint: HubEndpoint,
    *,
    pools: Sequence[Pool] = (),
    labels: Mapping[str, str] | None = None,
    token_ttl_s: int = DEFAULT_TOKEN_TTL_S,
) -> Report:
    """Join `cluster` (see the module docstring). Raises `ValueError` for bad input (before
    anything is written) and `JoinError` when an API server refuses a step."""
    _check(cluster, token_ttl_s)
    report = Report()
    hub_side, member_side = Side(hub, "hub"), Side(member, "member")
    hub_identity(hub_side, cluster, pools, labels, report)
    ns, account = cluster_namespace(cluster), install.agent_identity(cluster)
    token, expires = hub_side.token(ns, account, token_ttl_s)
    report.token_expires_at = expires
    report.add(f"hub: issued a token for ServiceAccount {ns}/{account}, expires {expires}")
    write_credentials(member_side, cluster, endpoint, token, expires, report)
    return report


def hub_identity(
    hub_side: Side,
    cluster: str,
    pools: Sequence[Pool],
    labels: Mapping[str, str] | None,
    report: Report,
) -> None:
    """The hub side of a join: the InferenceCluster (made from `pools` if missing) and the
    agent's identity (`install.agent_hub_access`)."""
    if hub_side.get(INFERENCE_CLUSTER, cluster) is None:
        if not pools:
            raise ValueError(
                f"InferenceCluster {cluster!r} does not exist on the hub: give its pools "
                "(--pool NAME=CLASS:NODES) or create it first"
            )
        hub_side.ensure(inference_cluster(cluster, pools, labels), report)
    else:
        report.add(f"hub: InferenceCluster {cluster} exists (left as it is)")
    for obj in install.agent_hub_access(cluster):
        hub_side.ensure(obj, report)


def write_credentials(
    member_side: Side,
    cluster: str,
    endpoint: HubEndpoint,
    token: str,
    expires: str,
    report: Report,
) -> None:
    """The member side of a join: the agent's namespace and its hub kubeconfig Secret (with
    `token`), and a restart of an installed agent onto it."""
    kubeconfig = hub_kubeconfig(cluster, endpoint, token)
    system_ns = next(o for o in install.agent(cluster) if o["kind"] == "Namespace")
    member_side.ensure(system_ns, report)
    digest = hashlib.sha256(kubeconfig.encode()).hexdigest()[:16]
    secret: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": install.HUB_SECRET,
            "namespace": install.SYSTEM_NAMESPACE,
            "labels": system_ns["metadata"]["labels"],
            "annotations": {TOKEN_EXPIRES_AT: expires, CREDENTIALS_HASH: digest},
        },
        "type": "Opaque",
        "data": {install.HUB_KUBECONFIG_KEY: base64.b64encode(kubeconfig.encode()).decode()},
    }
    member_side.ensure(secret, report, verb="wrote")
    if member_side.get(DEPLOYMENT, install.AGENT, install.SYSTEM_NAMESPACE) is not None:
        restart = {"spec": {"template": {"metadata": {"annotations": {CREDENTIALS_HASH: digest}}}}}
        member_side.patch(DEPLOYMENT, install.AGENT, install.SYSTEM_NAMESPACE, restart, report)


def unjoin(hub: Client, member: Client, cluster: str, *, keep_cluster: bool = False) -> Report:
    """Undo `join` on both sides (see the module docstring)."""
    install.agent_hub_access(cluster)  # the name rule
    report = Report()
    hub_side, member_side = Side(hub, "hub"), Side(member, "member")
    member_side.delete(SECRET, install.HUB_SECRET, install.SYSTEM_NAMESPACE, report)
    name = install.agent_identity(cluster)
    hub_side.delete(_KINDS["ClusterRoleBinding"], name, None, report)
    hub_side.delete(_KINDS["ClusterRole"], name, None, report)
    hub_side.delete(NAMESPACE, cluster_namespace(cluster), None, report)
    existing = hub_side.get(INFERENCE_CLUSTER, cluster)
    if existing is not None:
        annotations = existing["metadata"].get("annotations") or {}
        if JOINED_BY in annotations and not keep_cluster:
            hub_side.delete(INFERENCE_CLUSTER, cluster, None, report)
        else:
            report.add(f"hub: kept InferenceCluster {cluster}")
    return report
