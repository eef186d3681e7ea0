"""The pull-style join over HTTP against two emulated API servers: `gpufleet token create` on
the hub, `gpufleet join --token` on the member with the member's credentials only, the agent
reporting with the identity it got, and every hostile input refused with exit 2."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
import yaml
from kmockplus import Served, serve
from kube_helpers import FAST
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from rbac import Rbac, ServiceAccount, Subject, User
from test_kube_join import ACCOUNT, CLUSTER, OBS_NS, Pair, flat, run, write_kubeconfig
from test_kube_token_create import token_create
from typer.testing import CliRunner

from gpufleet.cli.agent import AgentDaemon
from gpufleet.cli.main import app
from gpufleet.kube import join_pull
from gpufleet.kube.agent_token import renewing_hub
from gpufleet.kube.daemon import LoopConfig
from gpufleet.kube.join import Pool
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import KNOWN_KINDS

pytestmark = pytest.mark.timeout(60)

POOL_OBSERVATION = next(k for k in KNOWN_KINDS if k.kind == "PoolObservation")
_TOKEN_LINE = re.compile(r"token: ([a-z0-9]{6}\.[a-z0-9]{16}) \(expires")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with serve(strict_namespaces=True) as hub, serve(strict_namespaces=True) as member:
        path = write_kubeconfig(tmp_path / "config", {"hub": hub.url, "member": member.url})
        yield Pair(hub, member, path)


def pull_join(pair: Pair, token: str, *extra: str, hub: str | None = None) -> tuple[int, str]:
    return run(
        "join",
        "--cluster",
        CLUSTER,
        "--token",
        token,
        "--hub",
        hub or pair.hub.url,
        "--member-kubeconfig",
        str(pair.kubeconfig),
        "--member-context",
        "member",
        *extra,
    )


class Subjects(Mapping[str, Subject]):
    """The bootstrap token stands for its user; every token the hub issued for its account."""

    def __init__(self, served: Served, bootstrap: str) -> None:
        self.served, self.bootstrap = served, bootstrap

    def _all(self) -> dict[str, Subject]:
        token_id = self.bootstrap.split(".")[0]
        subjects: dict[str, Subject] = {
            t: ServiceAccount(*sa) for t, sa in self.served.api.tokens.items()
        }
        subjects[self.bootstrap] = User(
            f"system:bootstrap:{token_id}", ("system:bootstrappers", join_pull.BOOTSTRAP_GROUP)
        )
        return subjects

    def __getitem__(self, token: str) -> Subject:
        return self._all()[token]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def stored_rbac(pair: Pair) -> Rbac:
    return Rbac(
        [
            o
            for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
            for o in pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", plural)
        ]
    )


def test_a_pull_join_gets_the_agents_identity_and_the_agent_reports(
    pair: Pair, tmp_path: Path
) -> None:
    code, output = token_create(pair, "--pool", "l4=l4-4x:1", "--ttl", "10m")
    assert code == 0, output
    match = _TOKEN_LINE.search(output)
    assert match is not None, output
    token = match.group(1)
    assert f"gpufleet join --cluster {CLUSTER} --token {token} --hub {pair.hub.url}" in output
    # From here the hub enforces the RBAC it holds: the bootstrap token's and the agent's.
    subjects = Subjects(pair.hub, token)
    pair.hub.api.authorize = stored_rbac(pair).authorizer(subjects)

    code, output = pull_join(pair, token, "--allow-insecure-hub")
    assert code == 0, output
    assert "joined gke-1 (pull-style)" in output
    config = pair.agent_kubeconfig()
    agent_token = config["users"][0]["user"]["token"]
    assert pair.hub.api.tokens[agent_token] == (OBS_NS, ACCOUNT)
    assert config["clusters"][0]["cluster"]["server"] == pair.hub.url
    # The bootstrap token did one thing: mint the agent's token.
    by_bootstrap = {
        (r.verb, r.resource, r.subresource, r.namespace, r.name)
        for r in pair.hub.api.requests_seen
        if r.user == token
    }
    assert by_bootstrap == {("create", "serviceaccounts", "token", OBS_NS, ACCOUNT)}
    # And can do nothing else: read a Secret, mint another account's token.
    for path in (
        f"/api/v1/namespaces/{OBS_NS}/secrets",
        "/api/v1/namespaces/gpufleet-system/serviceaccounts/gpufleet-controller/token",
    ):
        method = "POST" if path.endswith("/token") else "GET"
        response = httpx2.request(
            method,
            pair.hub.url + path,
            headers={"Authorization": f"Bearer {token}"},
            json={"spec": {"expirationSeconds": 600}},
            timeout=10,
        )
        assert response.status_code == 403, (path, response.text)

    # The agent, on the credentials the pull join wrote, reports to the hub.
    mounted = tmp_path / "kubeconfig"
    mounted.write_text(yaml.safe_dump(config))
    hub_store, renewer = renewing_hub(
        KubeConfig.from_file(mounted), CLUSTER, lambda: datetime.now(UTC), store_config=FAST
    )
    assert renewer is not None  # a TokenRequest token: renewed before it expires
    member = KubeStore.from_url(pair.member.url, FAST)
    try:
        agent = AgentDaemon(
            CLUSTER,
            member,
            hub_store,
            "agent-0",
            lambda: datetime.now(UTC),
            leader=None,
            loop_config=LoopConfig(debounce_s=0.0, resync_period_s=3600.0),
        )
        deadline = time.monotonic() + 20
        while not pair.stored(pair.hub, "gpufleet.io/v1alpha1", "poolobservations"):
            assert time.monotonic() < deadline, "the agent never reported"
            agent.loop.tick()
            time.sleep(0.05)
        assert agent.loop.failures == 0, agent.loop.last_error
    finally:
        renewer.stop()
        hub_store.close()
        member.close()
    (observation,) = pair.stored(pair.hub, "gpufleet.io/v1alpha1", "poolobservations")
    assert observation["metadata"]["namespace"] == OBS_NS
    # Refused: exactly the two requests made to be refused.
    user = f"user/system:bootstrap:{token.split('.')[0]}"
    assert stored_rbac(pair).denied(pair.hub.api.requests_seen, subjects) == [
        f"{user} may not create core/serviceaccounts/token in gpufleet-system name "
        "gpufleet-controller",
        f"{user} may not list core/secrets in {OBS_NS}",
    ]


def _issue(pair: Pair, now: datetime, ttl_s: int = 60, cluster: str = CLUSTER) -> str:
    hub = Client(KubeConfig.from_file(pair.kubeconfig).get(context_name="hub"))
    try:
        _, token, _ = join_pull.issue_token(
            hub, cluster, ttl_s, now, pools=[Pool("l4", "l4-4x", 1)]
        )
    finally:
        hub.close()
    return str(token)


def test_an_expired_bootstrap_token_is_refused_with_exit_2(pair: Pair) -> None:
    token = _issue(pair, datetime.now(UTC) - timedelta(minutes=2))
    code, output = pull_join(pair, token, "--allow-insecure-hub")
    assert code == 2, output
    assert "the bootstrap token was refused" in flat(output) and "expired" in flat(output)
    assert "Traceback" not in output
    assert pair.secret() is None


def test_a_token_of_another_cluster_is_refused_with_exit_2(pair: Pair) -> None:
    token = _issue(pair, datetime.now(UTC), cluster="other")
    pair.hub.api.authorize = stored_rbac(pair).authorizer(Subjects(pair.hub, token))
    code, output = pull_join(pair, token, "--allow-insecure-hub")
    assert code == 2, output
    assert "may not get the identity of cluster gke-1" in flat(output)
    assert pair.secret() is None


def test_an_unknown_token_is_refused_with_exit_2(pair: Pair) -> None:
    code, output = pull_join(pair, "abcdef.0123456789abcdef", "--allow-insecure-hub")
    assert code == 2, output
    assert "unknown" in flat(output) and "0123456789abcdef" not in flat(output).split("--token")[0]
    assert pair.secret() is None


@pytest.mark.parametrize(
    ("token", "extra", "message"),
    [
        ("abc", ("--allow-insecure-hub",), "not a bootstrap token: expected ID.SECRET"),
        ("ABCDEF.0123456789ABCDEF", ("--allow-insecure-hub",), "not a bootstrap token"),
        ("a" * 6 + "." + "b" * 5000, ("--allow-insecure-hub",), "not a bootstrap token"),
        ("abcdef.0123456789abcdef", (), "plain http://"),
        ("abcdef.0123456789abcdef", ("--hub-context", "hub"), "push-style"),
        ("abcdef.0123456789abcdef", ("--pool", "l4=l4-4x:1"), "push-style"),
        (
            "abcdef.0123456789abcdef",
            ("--hub-ca", "/nonexistent", "--allow-insecure-hub"),
            "'--hub-ca'",
        ),
        (
            "abcdef.0123456789abcdef",
            ("--hub-ca", "/dev/zero", "--allow-insecure-hub"),
            "not a regular file",
        ),
    ],
    ids=["short", "uppercase", "huge", "http-hub", "hub-context", "pool", "no-ca", "ca-device"],
)
def test_hostile_pull_join_input_exits_2_and_writes_nothing(
    pair: Pair, token: str, extra: tuple[str, ...], message: str
) -> None:
    code, output = pull_join(pair, token, *extra)
    assert code == 2, output
    assert message in flat(output)
    assert "Traceback" not in output
    assert pair.secret() is None
    assert not pair.hub.api.requests_seen


def test_a_ca_file_that_is_not_pem_and_a_bad_url_are_usage_errors(
    pair: Pair, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate")
    code, output = pull_join(
        pair, "abcdef.0123456789abcdef", "--hub-ca", str(ca), "--allow-insecure-hub"
    )
    assert code == 2 and "not a PEM certificate" in flat(output)
    code, output = pull_join(pair, "abcdef.0123456789abcdef", hub="ftp://hub")
    assert code == 2 and "'--hub'" in flat(output)
    code, output = run("join", "--cluster", CLUSTER, "--hub", pair.hub.url)
    assert code == 2 and "'--token'" in flat(output)


OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"


def test_the_documented_pull_join_runs_as_written(tmp_path: Path) -> None:
    """docs/operations.md's pull-style steps, their commands as written, but for what only a
    real hub has: the token printed (for the example one), the emulated hub's http URL (with
    --allow-insecure-hub) and no CA file."""
    section = OPERATIONS.read_text().split("\n## Join a workload cluster: pull-style", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = [
        shlex.split(b.replace("\\\n", " "))
        for b in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    ]
    assert [b[:3] for b in blocks] == [
        ["gpufleet", "token", "create"],
        ["gpufleet", "join", "--cluster"],
    ]
    with serve(strict_namespaces=True) as hub, serve(strict_namespaces=True) as member:
        cluster = blocks[0][blocks[0].index("--cluster") + 1]
        config = write_kubeconfig(tmp_path / "config", {"hub": hub.url, cluster: member.url})
        env = {"KUBECONFIG": str(config)}
        result = CliRunner().invoke(app, blocks[0][1:], env=env)
        assert result.exit_code == 0, result.output
        match = _TOKEN_LINE.search(result.output)
        assert match is not None, result.output
        join = blocks[1][1:]
        join[join.index("--token") + 1] = match.group(1)
        join[join.index("--hub") + 1] = hub.url
        i = join.index("--hub-ca")
        del join[i : i + 2]
        result = CliRunner().invoke(app, [*join, "--allow-insecure-hub"], env=env)
        assert result.exit_code == 0, result.output
        (secret,) = [
            s
            for s in member.api.stored("", "v1", "secrets")
            if s["metadata"]["name"] == "gpufleet-hub"
        ]
        assert secret["metadata"]["namespace"] == "gpufleet-system"
