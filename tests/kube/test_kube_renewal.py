"""The agent renews its hub token before expiry (`gpufleet.kube.renewal`): the timing as a
pure function, and over HTTP against the emulated API servers, the renewed token sent from then
on (the old one revoked), written into the member's Secret, within the installed RBAC."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from kmockplus import Served, serve
from kube_helpers import FAST
from lightkube.config.kubeconfig import KubeConfig
from rbac import Rbac, ServiceAccount

from gpufleet.kube import install
from gpufleet.kube.agent_token import renewing_hub, with_token
from gpufleet.kube.join import TOKEN_EXPIRES_AT
from gpufleet.kube.renewal import RENEW_FRACTION, RETRY_MAX_S, next_attempt, token_times
from gpufleet.store.port import KNOWN_KINDS

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
CLUSTER = "gke-1"
OBS_NS = "gpufleet-cluster-gke-1"
ACCOUNT = "gpufleet-agent-gke-1"
POOL_OBSERVATION = next(k for k in KNOWN_KINDS if k.kind == "PoolObservation")


def jwt(claims: object) -> str:
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


# --- the timing (pure) ------------------------------------------------------------------------


def test_renewal_is_due_at_80_percent_of_the_lifetime() -> None:
    assert next_attempt(T0, T0 + timedelta(hours=24), 0, T0) == T0 + timedelta(hours=19.2)
    assert next_attempt(T0, T0 + timedelta(seconds=600), 0, T0) == T0 + timedelta(seconds=480)


def test_after_failures_it_backs_off_but_never_past_the_expiry() -> None:
    expires, now = T0 + timedelta(hours=1), T0 + timedelta(minutes=48)
    assert next_attempt(T0, expires, 1, now) == now + timedelta(seconds=1)
    assert next_attempt(T0, expires, 3, now) == now + timedelta(seconds=4)
    assert next_attempt(T0, expires, 30, now) == now + timedelta(seconds=RETRY_MAX_S)
    late = expires - timedelta(seconds=10)
    assert next_attempt(T0, expires, 30, late) == expires
    # Already expired: try now (the token may still be accepted by a lenient hub; or fail).
    assert next_attempt(T0, expires, 5, expires + timedelta(hours=1)) == expires + timedelta(
        hours=1
    )


@given(
    lifetime=st.integers(min_value=1, max_value=10**8),
    failures=st.integers(min_value=0, max_value=10**6),
    offset=st.integers(min_value=0, max_value=10**8),
)
def test_the_next_attempt_is_before_the_expiry_and_not_in_the_past(
    lifetime: int, failures: int, offset: int
) -> None:
    expires = T0 + timedelta(seconds=lifetime)
    now = T0 + timedelta(seconds=offset)
    due = next_attempt(T0, expires, failures, now)
    if failures == 0:
        assert T0 < due < expires
        assert due == T0 + timedelta(seconds=lifetime) * RENEW_FRACTION
    else:
        assert now <= due <= max(now, expires)
        assert due - now <= timedelta(seconds=RETRY_MAX_S)


@pytest.mark.parametrize(
    "token",
    [
        "static-token",
        "a.b",
        "a.!!!.c",
        jwt({"iat": 5}),
        jwt({"iat": True, "exp": 10}),
        jwt({"iat": "5", "exp": 10}),
        jwt({"iat": 10, "exp": 10}),
        jwt([1, 2]),
        jwt({"iat": 0, "exp": 10**20}),
    ],
    ids=["opaque", "two-parts", "not-base64", "no-exp", "bool", "string", "empty", "list", "huge"],
)
def test_a_token_without_a_readable_lifetime_is_never_renewed(token: str) -> None:
    assert token_times(token) is None


def test_a_jwts_times_are_its_iat_and_exp() -> None:
    token = jwt({"iat": int(T0.timestamp()), "exp": int(T0.timestamp()) + 600})
    assert token_times(token) == (T0, T0 + timedelta(seconds=600))


def test_with_token_replaces_only_the_old_token() -> None:
    text = yaml.safe_dump(
        {"users": [{"name": "a", "user": {"token": "old"}}, {"name": "b", "user": {"token": "x"}}]}
    )
    users = yaml.safe_load(with_token(text, "old", "new"))["users"]
    assert [u["user"]["token"] for u in users] == ["new", "x"]


# --- over HTTP -------------------------------------------------------------------------------


class Issued(Mapping[str, ServiceAccount]):
    """Every token the hub issued stands for its ServiceAccount (for `Rbac.authorizer`)."""

    def __init__(self, served: Served) -> None:
        self.tokens = served.api.tokens

    def __getitem__(self, token: str) -> ServiceAccount:
        return ServiceAccount(*self.tokens[token])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.tokens))

    def __len__(self) -> int:
        return len(self.tokens)


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_the_agent_renews_its_hub_token_uses_it_and_writes_it_to_its_secret(
    tmp_path: Path,
) -> None:
    with serve(strict_namespaces=True) as hub_api, serve(strict_namespaces=True) as member_api:
        hub_api.api.token_min_s = 1  # a 3 s token, renewed after about 2.4 s
        for obj in install.agent_hub_access(CLUSTER):
            _create(hub_api, obj)
        first = _token_request(hub_api, 3)
        hub_config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "hub", "cluster": {"server": hub_api.url}}],
            "users": [{"name": ACCOUNT, "user": {"token": first}}],
            "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": ACCOUNT}}],
            "current-context": "hub",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(hub_config))
        for obj in install.agent(CLUSTER):
            if obj["kind"] in ("Namespace", "Role", "RoleBinding"):
                _create(member_api, obj)
        _create(
            member_api,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": install.HUB_SECRET, "namespace": install.SYSTEM_NAMESPACE},
                "data": {"kubeconfig": base64.b64encode(path.read_bytes()).decode()},
            },
        )
        # Both servers enforce what install and join grant, on the agent's tokens.
        hub_rbac = Rbac(install.agent_hub_access(CLUSTER))
        hub_api.api.authorize = hub_rbac.authorizer(Issued(hub_api))
        member_rbac = Rbac(install.agent(CLUSTER))
        agent_sa = ServiceAccount(install.SYSTEM_NAMESPACE, install.AGENT)
        member_api.api.authorize = member_rbac.authorizer({"member-agent": agent_sa})
        member_config = KubeConfig.from_dict(_single(member_api.url, "member-agent"))
        store, renewer = renewing_hub(
            KubeConfig.from_file(path),
            CLUSTER,
            lambda: datetime.now(UTC),
            store_config=FAST,
            member=member_config,
            hub_secret=(install.SYSTEM_NAMESPACE, install.HUB_SECRET),
            kubeconfig_path=path,
        )
        assert renewer is not None
        try:
            store.create(_observation("before"))
            wait_until(lambda: renewer.renewals >= 1, "a renewal")
            (second,) = [t for t in hub_api.api.tokens if t != first]
            hub_api.api.revoke(first)  # from here only the renewed token is accepted
            store.create(_observation("after"))
            assert {o["metadata"]["name"] for o in store.list(POOL_OBSERVATION, OBS_NS)} == {
                "before",
                "after",
            }
        finally:
            renewer.stop()
            store.close()
        seen = hub_api.api.requests_seen
        by = {(r.user, r.verb, r.resource, r.subresource, r.name) for r in seen}
        assert (first, "create", "serviceaccounts", "token", ACCOUNT) in by
        assert (second, "create", "poolobservations", "", "") in by
        assert (first, "create", "poolobservations", "", "") in by
        assert hub_rbac.denied(seen, Issued(hub_api)) == []
        # The Secret a restarted pod mounts now holds the renewed token.
        (secret,) = [
            s
            for s in member_api.api.stored("", "v1", "secrets")
            if s["metadata"]["name"] == install.HUB_SECRET
        ]
        written = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        assert written["users"][0]["user"]["token"] in {second, *hub_api.api.tokens}
        assert written["users"][0]["user"]["token"] != first
        assert secret["metadata"]["annotations"][TOKEN_EXPIRES_AT]
        assert member_rbac.denied(member_api.api.requests_seen, {"member-agent": agent_sa}) == []


def _single(url: str, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }


def _observation(name: str) -> dict:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "PoolObservation",
        "metadata": {"name": name, "namespace": OBS_NS},
    }


def _create(served: Served, obj: dict) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = obj["kind"].lower() + "s"
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    ns = obj["metadata"].get("namespace")
    path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
    response = httpx2.post(served.url + path, json=obj, timeout=10)
    assert response.status_code in (201, 409), response.text


def _token_request(served: Served, seconds: int) -> str:
    path = f"/api/v1/namespaces/{OBS_NS}/serviceaccounts/{ACCOUNT}/token"
    response = httpx2.post(
        served.url + path, json={"spec": {"expirationSeconds": seconds}}, timeout=10
    )
    assert response.status_code == 201, response.text
    token: str = response.json()["status"]["token"]
    return token


@pytest.mark.parametrize("value", ["gpufleet-hub", "/gpufleet-hub", "Bad_NS/x", "ns/"])
def test_a_bad_hub_secret_is_a_usage_error(tmp_path: Path, value: str) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    result = CliRunner().invoke(
        app,
        ["agent", "--cluster", "a", "--hub-secret", value],
        env={"HOME": str(tmp_path), "KUBECONFIG": "", "COLUMNS": "1000"},
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "'--hub-secret'" in text and "NAMESPACE/NAME" in text
    assert "Traceback" not in result.output
