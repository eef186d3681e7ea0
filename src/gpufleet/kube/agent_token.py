"""The agent's hub connection with a renewed token: the edge of `gpufleet.kube.renewal`.

`renewing_hub(config, cluster, ...)` returns the hub `KubeStore` (sending the current token)
and a started `TokenRenewer` when the kubeconfig's token has a known lifetime (a TokenRequest
token, as `gpufleet join` writes), else the plain store and None. Each renewal is a
TokenRequest for the agent's own ServiceAccount, made with the current token, and then, with
`hub_secret`, a merge patch of the agent's hub kubeconfig Secret on the workload cluster with
the new token, so that a pod started later reads a valid one.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx2
import yaml
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.types import PatchType

from gpufleet.api.names import cluster_namespace
from gpufleet.kube import install
from gpufleet.kube.join import SECRET, TOKEN_EXPIRES_AT, request_token
from gpufleet.kube.renewal import (
    BearerToken,
    TokenRenewer,
    kubeconfig_token,
    token_times,
    transports,
)
from gpufleet.kube.resources import resource_class
from gpufleet.kube.store import KubeStore, KubeStoreConfig

_TIMEOUT_S = 30.0


def with_token(kubeconfig: str, old: str, new: str) -> str:
    """`kubeconfig` (YAML) with every user whose token is `old` given `new`."""
    doc = yaml.safe_load(kubeconfig)
    for user in doc.get("users") or []:
        if (user.get("user") or {}).get("token") == old:
            user["user"]["token"] = new
    return str(yaml.safe_dump(doc, sort_keys=False))


def _single(config: KubeConfig | SingleConfig) -> SingleConfig:
    single = config.get() if isinstance(config, KubeConfig) else config
    assert single is not None, "a kubeconfig without a current context"
    return single


def renewing_hub(
    config: KubeConfig | SingleConfig,
    cluster: str,
    clock: Callable[[], datetime],
    *,
    store_config: KubeStoreConfig | None = None,
    member: KubeConfig | SingleConfig | None = None,
    hub_secret: tuple[str, str] | None = None,
    kubeconfig_path: Path | None = None,
) -> tuple[KubeStore, TokenRenewer | None]:
    """The agent's hub store and its token's renewer (see the module docstring); `member`,
    `hub_secret` (namespace, name) and `kubeconfig_path` (the file the Secret holds) say where
    to write a renewed token."""
    single = _single(config)
    token = kubeconfig_token(single)
    if token is None:
        return KubeStore(config, store_config), None
    bearer = BearerToken(token)
    store = KubeStore(config, store_config, bearer=bearer)
    sync, _ = transports(single, bearer)
    hub = Client(single, timeout=httpx2.Timeout(_TIMEOUT_S), transport=sync)
    ns, account = cluster_namespace(cluster), install.agent_identity(cluster)

    def request(ttl_s: int) -> str:
        return request_token(hub, ns, account, ttl_s)[0]

    persist = secret_writer(token, member, hub_secret, kubeconfig_path)
    return store, TokenRenewer(bearer, request, persist, clock, on_stop=hub.close).start()


def secret_writer(
    token: str,
    member: KubeConfig | SingleConfig | None,
    hub_secret: tuple[str, str] | None,
    kubeconfig_path: Path | None,
) -> Callable[[str], None]:
    """A `persist` for `TokenRenewer`: merge-patch the Secret `hub_secret` through `member`
    with the kubeconfig at `kubeconfig_path`, `token` replaced by the new one (a no-op without
    them)."""
    if member is None or hub_secret is None or kubeconfig_path is None:
        return lambda new: None
    client = Client(member, timeout=httpx2.Timeout(_TIMEOUT_S), field_manager="gpufleet-agent")
    state = {"text": kubeconfig_path.read_text(), "token": token}
    ns, name = hub_secret

    def persist(new: str) -> None:
        text = with_token(state["text"], state["token"], new)
        times = token_times(new)
        expires = times[1].strftime("%Y-%m-%dT%H:%M:%SZ") if times else ""
        patch = {
            "metadata": {"annotations": {TOKEN_EXPIRES_AT: expires}},
            "data": {install.HUB_KUBECONFIG_KEY: base64.b64encode(text.encode()).decode()},
        }
        client.patch(resource_class(SECRET), name, patch, namespace=ns, patch_type=PatchType.MERGE)
        state["text"], state["token"] = text, new

    return persist
