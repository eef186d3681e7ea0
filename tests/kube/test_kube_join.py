"""`gpufleet join` / `gpufleet unjoin` over HTTP against two emulated API servers (hub and
member), through kubeconfig contexts as a platform team runs them."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from kmockplus import Served, serve
from kube_helpers import FAST
from lightkube.config.kubeconfig import KubeConfig
from rbac import Rbac, ServiceAccount
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.kube import install
from gpufleet.kube import join as joining
from gpufleet.kube.store import KubeStore
from gpufleet.store import StoreError

pytestmark = pytest.mark.timeout(60)

CLUSTER = "gke-1"
OBS_NS = "gpufleet-cluster-gke-1"
ACCOUNT = "gpufleet-agent-gke-1"
runner = CliRunner()


@dataclass
class Pair:
    hub: Served
    member: Served
    kubeconfig: Path  # contexts "hub" and "member"

    def stored(self, served: Served, api_version: str, plural: str) -> list[dict[str, Any]]:
        group, _, version = api_version.rpartition("/")
        return served.api.stored(group, version, plural)

    def names(self, served: Served, api_version: str, plural: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.stored(served, api_version, plural))

    def secret(self) -> dict[str, Any] | None:
        found = [
            s
            for s in self.stored(self.member, "v1", "secrets")
            if s["metadata"]["name"] == "gpufleet-hub"
        ]
        return found[0] if found else None

    def agent_kubeconfig(self) -> dict[str, Any]:
        secret = self.secret()
        assert secret is not None
        loaded: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        return loaded


def write_kubeconfig(path: Path, contexts: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in contexts.items()],
        "users": [{"name": "admin", "user": {}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "admin"}} for n in contexts],
        "current-context": next(iter(contexts)),
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with serve(strict_namespaces=True) as hub, serve(strict_namespaces=True) as member:
        path = write_kubeconfig(tmp_path / "config", {"hub": hub.url, "member": member.url})
        yield Pair(hub, member, path)


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def flat(output: str) -> str:
    """The output without rich's error box and line wrapping."""
    return " ".join(output.replace("│", " ").split())


def join_args(pair: Pair, *extra: str) -> list[str]:  # the emulated hub is http:
    return [
        "join",
        "--cluster",
        CLUSTER,
        "--hub-kubeconfig",
        str(pair.kubeconfig),
        "--hub-context",
        "hub",
        "--member-kubeconfig",
        str(pair.kubeconfig),
        "--member-context",
        "member",
        "--allow-insecure-hub",
        *extra,
    ]


def test_join_creates_the_cluster_the_identity_a_token_and_the_members_secret(pair: Pair) -> None:
    code, output = run(*join_args(pair, "--pool", "l4=l4-4x:2", "--label", "region=r1"))
    assert code == 0, output
    cluster = pair.stored(pair.hub, "gpufleet.io/v1alpha1", "inferenceclusters")[0]
    assert cluster["metadata"]["name"] == CLUSTER
    assert cluster["metadata"]["labels"] == {"region": "r1"}
    assert cluster["spec"]["nodePools"] == [{"name": "l4", "className": "l4-4x", "nodeCount": 2}]
    # The identity is exactly what `install agent --hub-access` describes.
    for obj in install.agent_hub_access(CLUSTER):
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = obj["kind"].lower() + "s"
        stored = {
            o["metadata"]["name"]: o for o in pair.hub.api.stored(group, version or "v1", plural)
        }
        assert obj["metadata"]["name"] in stored, obj["kind"]
        for key in ("rules", "subjects", "roleRef"):
            assert stored[obj["metadata"]["name"]].get(key) == obj.get(key)
    config = pair.agent_kubeconfig()
    assert config["clusters"][0]["cluster"]["server"] == pair.hub.url
    assert config["contexts"][0]["context"]["namespace"] == OBS_NS
    token = config["users"][0]["user"]["token"]
    assert pair.hub.api.tokens[token] == (OBS_NS, ACCOUNT)
    secret = pair.secret()
    assert secret is not None and secret["metadata"]["namespace"] == "gpufleet-system"
    assert secret["metadata"]["annotations"][joining.TOKEN_EXPIRES_AT] in output
    assert "REPLACE" not in output


def test_the_agent_reports_with_the_joined_kubeconfig_within_its_rbac(
    pair: Pair, tmp_path: Path
) -> None:
    assert run(*join_args(pair, "--pool", "l4=l4-4x:1"))[0] == 0
    path = tmp_path / "agent-kubeconfig"
    path.write_text(yaml.safe_dump(pair.agent_kubeconfig()))
    token = pair.agent_kubeconfig()["users"][0]["user"]["token"]
    # What the hub holds now (not what install prints) allows what the agent does, and only
    # it: the hub enforces it from here on (403 Forbidden).
    stored = [
        *pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "roles"),
        *pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "rolebindings"),
        *pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "clusterroles"),
        *pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "clusterrolebindings"),
    ]
    pair.hub.api.authorize = Rbac(stored).authorizer({token: ServiceAccount(OBS_NS, ACCOUNT)})
    replicas = install_kind("ModelReplica")
    with KubeStore(KubeConfig.from_file(path), FAST) as agent_hub:
        agent_hub.create(
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "PoolObservation",
                "metadata": {"name": "l4", "namespace": OBS_NS},
            }
        )
        assert agent_hub.list(replicas, OBS_NS) == []
        # Its own InferenceCluster, by name; not another's, not every cluster's replicas, nor
        # another cluster's.
        clusters = install_kind("InferenceCluster")
        assert agent_hub.get(clusters, CLUSTER) is not None
        for namespace in (None, "gpufleet-cluster-other"):
            with pytest.raises(StoreError, match=r"403|Forbidden|forbidden"):
                agent_hub.list(replicas, namespace)
        with pytest.raises(StoreError, match=r"403|Forbidden|forbidden"):
            agent_hub.get(clusters, "other")
    seen = list(pair.hub.api.requests_seen)
    assert {(r.verb, r.resource) for r in seen if r.user == token and r.namespace == OBS_NS} == {
        ("create", "poolobservations"),
        ("list", "modelreplicas"),
    }
    # Refused: exactly the three requests made to be refused.
    assert Rbac(stored).denied(seen, {token: ServiceAccount(OBS_NS, ACCOUNT)}) == [
        f"{OBS_NS}/{ACCOUNT} may not get gpufleet.io/inferenceclusters in (cluster) name other",
        f"{OBS_NS}/{ACCOUNT} may not list gpufleet.io/modelreplicas in (cluster)",
        f"{OBS_NS}/{ACCOUNT} may not list gpufleet.io/modelreplicas in gpufleet-cluster-other",
    ]


def install_kind(kind: str) -> Any:
    from gpufleet.store.port import KNOWN_KINDS

    return next(k for k in KNOWN_KINDS if k.kind == kind)


def test_rejoining_rotates_the_token_and_restarts_an_installed_agent(pair: Pair) -> None:
    assert run(*join_args(pair, "--pool", "l4=l4-4x:1"))[0] == 0
    first = pair.agent_kubeconfig()["users"][0]["user"]["token"]
    with KubeStore.from_url(pair.member.url, FAST) as member:
        for obj in install.agent(CLUSTER):
            if obj["kind"] == "Deployment":
                member.create(obj)
    code, output = run(*join_args(pair))  # the cluster exists now: no pools needed
    assert code == 0, output
    assert "InferenceCluster gke-1 exists" in output
    second = pair.agent_kubeconfig()["users"][0]["user"]["token"]
    assert second != first and pair.hub.api.tokens[second] == (OBS_NS, ACCOUNT)
    deployment = pair.stored(pair.member, "apps/v1", "deployments")[0]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    secret = pair.secret()
    assert secret is not None
    assert (
        annotations[joining.CREDENTIALS_HASH]
        == (secret["metadata"]["annotations"][joining.CREDENTIALS_HASH])
    )
    assert "restarted Deployment gpufleet-system/gpufleet-agent" in output
    # One of each object still: a second join adds nothing but a token.
    assert pair.names(pair.hub, "v1", "serviceaccounts") == [ACCOUNT]
    assert len(pair.stored(pair.member, "v1", "secrets")) == 1


def test_join_repairs_a_role_changed_by_hand(pair: Pair) -> None:
    assert run(*join_args(pair, "--pool", "l4=l4-4x:1"))[0] == 0
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{OBS_NS}/roles/{ACCOUNT}"
    with httpx2.Client(base_url=pair.hub.url) as http:
        role = http.get(path).json()
        role["rules"] = []
        assert http.put(path, json=role).status_code == 200
        code, output = run(*join_args(pair))
        assert code == 0
        assert f"updated Role {OBS_NS}/{ACCOUNT}" in output
        assert http.get(path).json()["rules"] == install.agent_hub_access(CLUSTER)[2]["rules"]


def test_unjoin_removes_both_sides_and_the_cluster_join_created(pair: Pair) -> None:
    assert run(*join_args(pair, "--pool", "l4=l4-4x:1"))[0] == 0
    args = join_args(pair)
    args[0] = "unjoin"
    args.remove("--allow-insecure-hub")
    code, output = run(*args)
    assert code == 0, output
    assert pair.secret() is None
    assert OBS_NS not in pair.names(pair.hub, "v1", "namespaces")
    assert pair.names(pair.hub, "v1", "serviceaccounts") == []  # went with the namespace
    assert pair.names(pair.hub, "rbac.authorization.k8s.io/v1", "clusterroles") == []
    assert pair.names(pair.hub, "rbac.authorization.k8s.io/v1", "clusterrolebindings") == []
    assert pair.names(pair.hub, "gpufleet.io/v1alpha1", "inferenceclusters") == []
    # Again: nothing left to delete, and it says so.
    code, output = run(*args)
    assert code == 0 and "was not there" in output


def test_unjoin_keeps_an_inference_cluster_the_platform_team_declared(pair: Pair) -> None:
    with KubeStore.from_url(pair.hub.url, FAST) as hub:
        hub.create(joining.inference_cluster(CLUSTER, [joining.Pool("l4", "l4-4x", 1)]))
        declared = hub.get(install_kind("InferenceCluster"), CLUSTER)
        assert declared is not None
        del declared["metadata"]["annotations"]
        hub.update(declared)
    assert run(*join_args(pair))[0] == 0
    args = join_args(pair)
    args[0] = "unjoin"
    args.remove("--allow-insecure-hub")
    code, output = run(*args)
    assert code == 0 and f"kept InferenceCluster {CLUSTER}" in output
    assert pair.names(pair.hub, "gpufleet.io/v1alpha1", "inferenceclusters") == [CLUSTER]


def test_the_hub_server_can_be_given_as_the_member_reaches_it(pair: Pair) -> None:
    args = join_args(pair, "--pool", "l4=l4-4x:1", "--hub-server", "https://hub.internal:6443")
    assert run(*args)[0] == 0
    config = pair.agent_kubeconfig()
    assert config["clusters"][0]["cluster"]["server"] == "https://hub.internal:6443"


def test_separate_kubeconfig_files_and_their_current_contexts(pair: Pair, tmp_path: Path) -> None:
    hub_file = write_kubeconfig(tmp_path / "hub", {"h": pair.hub.url})
    member_file = write_kubeconfig(tmp_path / "member", {"m": pair.member.url})
    code, output = run(
        "join",
        "--cluster",
        CLUSTER,
        "--hub-kubeconfig",
        str(hub_file),
        "--member-kubeconfig",
        str(member_file),
        "--pool",
        "l4=l4-4x:1",
        "--allow-insecure-hub",
    )
    assert code == 0, output
    assert pair.secret() is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "does not exist on the hub"),
        (("--pool", "l4"), "NAME=CLASS:NODES"),
        (("--pool", "Bad_Pool=l4-4x:1"), "'--pool': InferenceCluster"),
        (
            ("--pool", "l4=l4-4x:1", "--token-ttl", "60"),
            "greater than or equal to 600",
        ),
        (("--pool", "l4=l4-4x:1", "--hub-context", "nope"), "Context 'nope' not found"),
        (("--pool", "l4=l4-4x:1", "--label", "novalue"), "KEY=VALUE"),
        (("--cluster", "Bad_Name", "--pool", "l4=l4-4x:1"), "'--cluster': cluster name 'Bad_Name'"),
    ],
    ids=[
        "no-cluster-no-pools",
        "bad-pool",
        "invalid-pool-name",
        "short-ttl",
        "no-context",
        "label",
        "bad-cluster-name",
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    pair: Pair, extra: tuple[str, ...], message: str
) -> None:
    args = join_args(pair)
    if "--hub-context" in extra:  # replace the good context with the bad one
        i = args.index("--hub-context")
        del args[i : i + 2]
    code, output = run(*args, *extra)
    assert code == 2
    assert message in flat(output)
    assert pair.hub.api.stored("", "v1", "serviceaccounts") == []
    assert pair.secret() is None


def test_a_missing_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    code, output = run("join", "--cluster", CLUSTER, "--hub-kubeconfig", str(tmp_path / "missing"))
    assert code == 2 and "no kubeconfig at" in flat(output)


def test_an_api_server_that_refuses_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with serve() as hub:
        path = write_kubeconfig(
            tmp_path / "config", {"hub": hub.url, "member": "http://127.0.0.1:9"}
        )
        code, output = run(
            "join",
            "--cluster",
            CLUSTER,
            "--hub-kubeconfig",
            str(path),
            "--hub-context",
            "hub",
            "--member-kubeconfig",
            str(path),
            "--member-context",
            "member",
            "--pool",
            "l4=l4-4x:1",
            "--allow-insecure-hub",
        )
    assert code == 1
    assert "member:" in output and "Traceback" not in output
