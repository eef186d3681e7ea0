"""The emulated API server authenticates as the real one does for the pull-style join:
kubeadm bootstrap tokens (a Secret in kube-system, with expiry), TokenRequest tokens that
expire, and RBAC for a bootstrap token's user (tests/kube/kmockplus.py, tests/kube/rbac.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from kmockplus import Request, Served, serve
from rbac import Rbac, User

pytestmark = pytest.mark.timeout(60)

TOKEN_ID, TOKEN_SECRET = "abcdef", "0123456789abcdef"
SA_PATH = "/api/v1/namespaces/ns/serviceaccounts"


def bootstrap_secret(expires: datetime, secret: str = TOKEN_SECRET, usage: str = "true") -> dict:
    fields = {
        "token-id": TOKEN_ID,
        "token-secret": secret,
        "expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "usage-bootstrap-authentication": usage,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in fields.items()},
    }


@pytest.fixture
def api() -> Iterator[Served]:
    with serve() as served:
        yield served


def call(api: Served, method: str, path: str, token: str | None, body: dict | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.request(
        method, api.url + path, headers=headers, json=body, timeout=10
    ).status_code


def admin_post(api: Served, path: str, body: dict) -> dict:
    response = httpx2.post(api.url + path, json=body, timeout=10)
    assert response.status_code == 201, response.text
    answer: dict = response.json()
    return answer


def test_a_bootstrap_token_authenticates_until_it_expires_and_only_with_its_secret(
    api: Served,
) -> None:
    token = f"{TOKEN_ID}.{TOKEN_SECRET}"
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", token) == 401  # unknown
    admin_post(
        api,
        "/api/v1/namespaces/kube-system/secrets",
        bootstrap_secret(datetime.now(UTC) + timedelta(hours=1)),
    )
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", token) == 200
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", f"{TOKEN_ID}.{'x' * 16}") == 401
    # Not of the bootstrap form: no authenticator here refuses it (RBAC may).
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", "some-token") == 200


@pytest.mark.parametrize(
    "secret",
    [
        bootstrap_secret(datetime.now(UTC) - timedelta(seconds=1)),
        bootstrap_secret(datetime.now(UTC) + timedelta(hours=1), usage="false"),
    ],
    ids=["expired", "not-for-authentication"],
)
def test_an_expired_or_unusable_bootstrap_token_is_401(api: Served, secret: dict) -> None:
    admin_post(api, "/api/v1/namespaces/kube-system/secrets", secret)
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", f"{TOKEN_ID}.{TOKEN_SECRET}") == 401


def test_a_token_request_token_carries_its_times_and_is_refused_once_revoked(api: Served) -> None:
    admin_post(api, SA_PATH, {"metadata": {"name": "bot"}})
    answer = admin_post(api, f"{SA_PATH}/bot/token", {"spec": {"expirationSeconds": 600}})
    token = answer["status"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["exp"] - claims["iat"] == 600
    assert claims["sub"] == "system:serviceaccount:ns:bot"
    assert api.api.tokens[token] == ("ns", "bot")
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", token) == 200
    api.api.revoke(token)
    assert call(api, "GET", "/api/v1/namespaces/ns/configmaps", token) == 401


def test_a_token_request_below_the_minimum_lifetime_is_invalid(api: Served) -> None:
    admin_post(api, SA_PATH, {"metadata": {"name": "bot"}})
    body = {"spec": {"expirationSeconds": 60}}
    assert call(api, "POST", f"{SA_PATH}/bot/token", None, body) == 422
    api.api.token_min_s = 1  # a test's knob, to see a renewal in seconds
    assert call(api, "POST", f"{SA_PATH}/bot/token", None, body) == 201


def test_rbac_grants_a_bootstrap_user_what_a_binding_names_it_or_its_group() -> None:
    rules = [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts/token"],
            "verbs": ["create"],
            "resourceNames": ["agent"],
        }
    ]
    rbac = Rbac(
        [
            {"kind": "Role", "metadata": {"name": "r", "namespace": "ns"}, "rules": rules},
            {
                "kind": "RoleBinding",
                "metadata": {"name": "r", "namespace": "ns"},
                "roleRef": {"kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "system:bootstrap:abcdef"}],
            },
        ]
    )
    mint = Request("t", "create", "", "serviceaccounts", "token", "ns", "agent")
    assert rbac.allows(User("system:bootstrap:abcdef"), mint)
    assert not rbac.allows(User("system:bootstrap:zzzzzz"), mint)
    for other in (
        Request("t", "create", "", "serviceaccounts", "token", "ns", "controller"),
        Request("t", "create", "", "serviceaccounts", "token", "other", "agent"),
        Request("t", "get", "", "serviceaccounts", "", "ns", "agent"),
    ):
        assert not rbac.allows(User("system:bootstrap:abcdef"), other)
