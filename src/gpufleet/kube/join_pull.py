"""Pull-style join, as `clusteradm join` and `karmadactl register` do (docs/operations.md,
"Join a workload cluster: pull-style"): the hub's admin issues a short-lived bootstrap token for
one cluster, and whoever administers the workload cluster joins it with that token and the
workload cluster's credentials only. No one needs admin credentials on both.

`issue_token(hub, cluster, ttl_s, now)` (`gpufleet token create`), with the hub's credentials:

1. the InferenceCluster and the agent's hub identity, as the push join makes them
   (`gpufleet.kube.join.hub_identity`);
2. a kubeadm bootstrap token: the Secret `bootstrap-token-<id>` in kube-system of type
   `bootstrap.kubernetes.io/token` (`token-id`, `token-secret`, `expiration`,
   `usage-bootstrap-authentication: "true"`, `auth-extra-groups`), which the API server's
   bootstrap authenticator accepts as the user `system:bootstrap:<id>` until it expires;
3. a Role and RoleBinding `gpufleet-bootstrap-<id>` in the cluster's hub namespace that let
   that user, and no one else, do one thing: `create serviceaccounts/token` on the agent's
   ServiceAccount (`resourceNames`). It cannot read, list or write anything, nor get a token
   for another ServiceAccount or another cluster.

`pull_join(bootstrap, member, cluster, endpoint)` (`gpufleet join --token`), with the bootstrap
token as its only hub credential: a TokenRequest for the agent's ServiceAccount (the same
identity, Role and namespace as the push join's), then the member side exactly as the push
join writes it (`gpufleet.kube.join.write_credentials`). The agent then renews that token
itself (`gpufleet.kube.renewal`). A refused bootstrap token (401: unknown, expired, wrong
secret; 403: issued for another cluster) is `BootstrapRefused`, a usage error.
"""

from __future__ import annotations

import base64
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import httpx2
from lightkube import ApiError, Client

from gpufleet.api.names import cluster_namespace
from gpufleet.kube import install
from gpufleet.kube.join import (
    HubEndpoint,
    JoinError,
    Pool,
    Report,
    Side,
    hub_identity,
    request_token,
    write_credentials,
)
from gpufleet.store.port import Obj

BOOTSTRAP_NAMESPACE: Final = "kube-system"
BOOTSTRAP_SECRET_TYPE: Final = "bootstrap.kubernetes.io/token"
#: The group every gpufleet bootstrap token is in, besides the API server's
#: `system:bootstrappers` (nothing is bound to it: each token's RoleBinding names its user).
BOOTSTRAP_GROUP: Final = "system:bootstrappers:gpufleet"
TOKEN_FORMAT: Final = "ID.SECRET: 6 and 16 lowercase letters or digits (abcdef.0123456789abcdef)"
_TOKEN = re.compile(r"([a-z0-9]{6})\.([a-z0-9]{16})")
_ALPHABET: Final = string.ascii_lowercase + string.digits
#: A bootstrap token lives at least a minute and at most a day (kubeadm's default is a day).
MIN_BOOTSTRAP_TTL_S: Final = 60
MAX_BOOTSTRAP_TTL_S: Final = 24 * 3600
DEFAULT_BOOTSTRAP_TTL_S: Final = 3600
#: The lifetime of the agent's hub token a pull join requests: a day, renewed by the agent.
DEFAULT_PULL_TOKEN_TTL_S: Final = 24 * 3600


class BootstrapRefused(JoinError):
    """The hub refused the bootstrap token (unknown, expired, or for another cluster)."""


@dataclass(frozen=True, slots=True)
class BootstrapToken:
    """A kubeadm bootstrap token: `id.secret`; the id is public, the secret is not."""

    id: str
    secret: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}"

    @property
    def user(self) -> str:
        """Who the API server authenticates it as."""
        return f"system:bootstrap:{self.id}"

    @property
    def name(self) -> str:
        """Its Secret in kube-system, and its Role and RoleBinding in the cluster namespace."""
        return f"bootstrap-token-{self.id}"

    @classmethod
    def parse(cls, text: str) -> BootstrapToken:
        """The token in `text`; `ValueError` naming the format (never echoing the secret)."""
        match = _TOKEN.fullmatch(text.strip()) if len(text) <= 64 else None
        if match is None:
            raise ValueError(f"not a bootstrap token: expected {TOKEN_FORMAT}")
        return cls(match.group(1), match.group(2))

    @classmethod
    def new(cls) -> BootstrapToken:
        return cls(
            "".join(secrets.choice(_ALPHABET) for _ in range(6)),
            "".join(secrets.choice(_ALPHABET) for _ in range(16)),
        )


def _role_name(token: BootstrapToken) -> str:
    return f"gpufleet-bootstrap-{token.id}"


def bootstrap_objects(cluster: str, token: BootstrapToken, expires_at: datetime) -> list[Obj]:
    """The token's Secret and the Role and RoleBinding that let it get the agent's token."""
    install.agent_hub_access(cluster)  # the name rule
    ns, account = cluster_namespace(cluster), install.agent_identity(cluster)
    labels = {"app.kubernetes.io/part-of": "gpufleet", "gpufleet.io/cluster": cluster}
    fields = {
        "description": f"gpufleet join of cluster {cluster}",
        "token-id": token.id,
        "token-secret": token.secret,
        "expiration": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": BOOTSTRAP_GROUP,
    }
    secret: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": token.name, "namespace": BOOTSTRAP_NAMESPACE, "labels": labels},
        "type": BOOTSTRAP_SECRET_TYPE,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in fields.items()},
    }
    rbac = "rbac.authorization.k8s.io/v1"
    name = _role_name(token)
    role: Obj = {
        "apiVersion": rbac,
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts/token"],
                "verbs": ["create"],
                "resourceNames": [account],
            }
        ],
    }
    binding: Obj = {
        "apiVersion": rbac,
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": token.user}],
    }
    return [secret, role, binding]


def issue_token(
    hub: Client,
    cluster: str,
    ttl_s: int,
    now: datetime,
    *,
    pools: Sequence[Pool] = (),
    labels: Mapping[str, str] | None = None,
    token: BootstrapToken | None = None,
) -> tuple[Report, BootstrapToken, datetime]:
    """Issue a bootstrap token for `cluster` (see the module docstring): the report, the token
    and its expiry. `ValueError` for bad input, `JoinError` when the hub refuses a step."""
    if not MIN_BOOTSTRAP_TTL_S <= ttl_s <= MAX_BOOTSTRAP_TTL_S:
        raise ValueError(
            f"bootstrap token lifetime {ttl_s} s must be between {MIN_BOOTSTRAP_TTL_S} and "
            f"{MAX_BOOTSTRAP_TTL_S} s"
        )
    install.agent_hub_access(cluster)  # the name rule, before anything is written
    token = token or BootstrapToken.new()
    expires_at = now + timedelta(seconds=ttl_s)
    report = Report()
    hub_side = Side(hub, "hub")
    hub_identity(hub_side, cluster, pools, labels, report)
    for obj in bootstrap_objects(cluster, token, expires_at):
        hub_side.ensure(obj, report)
    return report, token, expires_at


def pull_join(
    bootstrap: Client,
    member: Client,
    cluster: str,
    endpoint: HubEndpoint,
    *,
    token_ttl_s: int = DEFAULT_PULL_TOKEN_TTL_S,
) -> Report:
    """Join `cluster` with a bootstrap token (`bootstrap` authenticates with it) and the
    member's credentials (see the module docstring)."""
    install.agent_hub_access(cluster)  # the name rule
    ns, account = cluster_namespace(cluster), install.agent_identity(cluster)
    report = Report()
    try:
        token, expires = request_token(bootstrap, ns, account, token_ttl_s)
    except ApiError as e:
        answer = f"{e.status.code} {e.status.reason}: {e.status.message}"
        if e.status.code == 401:
            raise BootstrapRefused(
                f"hub: the bootstrap token was refused ({answer}): it is unknown, expired or "
                "deleted; issue a new one on the hub (gpufleet token create)"
            ) from e
        if e.status.code == 403:
            raise BootstrapRefused(
                f"hub: the bootstrap token may not get the identity of cluster {cluster} "
                f"({answer}): was it issued for another cluster?"
            ) from e
        raise JoinError(f"hub: request a token for ServiceAccount {ns}/{account}: {answer}") from e
    except httpx2.HTTPError as e:
        raise JoinError(f"hub: request a token for ServiceAccount {ns}/{account}: {e}") from e
    except ValueError as e:
        raise JoinError(f"hub: {e}") from e
    report.token_expires_at = expires
    report.add(
        f"hub: got a token for ServiceAccount {ns}/{account} with the bootstrap token, "
        f"expires {expires}"
    )
    write_credentials(Side(member, "member"), cluster, endpoint, token, expires, report)
    return report
