"""`gpufleet token create` over HTTP against an emulated hub: the bootstrap token's Secret of
type bootstrap.kubernetes.io/token in kube-system, and bad input refused with exit 2 before
anything is written (the pull-style join that uses it: test_kube_join_pull.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kmockplus import serve
from test_kube_join import CLUSTER, Pair, flat, run, write_kubeconfig

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with serve(strict_namespaces=True) as hub, serve(strict_namespaces=True) as member:
        path = write_kubeconfig(tmp_path / "config", {"hub": hub.url, "member": member.url})
        yield Pair(hub, member, path)


def token_create(pair: Pair, *extra: str) -> tuple[int, str]:
    return run(
        "token",
        "create",
        "--cluster",
        CLUSTER,
        "--hub-kubeconfig",
        str(pair.kubeconfig),
        "--hub-context",
        "hub",
        *extra,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--pool", "l4=l4-4x:1", "--ttl", "2d"), "at most 1d"),
        (("--pool", "l4=l4-4x:1", "--ttl", "10s"), "at least 1m"),
        ((), "does not exist on the hub"),
    ],
    ids=["long", "short", "no-cluster"],
)
def test_token_create_bad_input_exits_2_and_writes_nothing(
    pair: Pair, extra: tuple[str, ...], message: str
) -> None:
    code, output = token_create(pair, *extra)
    assert code == 2, output
    assert message in flat(output)
    assert [
        s
        for s in pair.hub.api.stored("", "v1", "secrets")
        if s["metadata"]["namespace"] == "kube-system"
    ] == []


def test_token_create_quiet_prints_the_token_only(pair: Pair) -> None:
    code, output = token_create(pair, "--pool", "l4=l4-4x:1", "--quiet")
    assert code == 0, output
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}\n", output)
    (secret,) = [
        s
        for s in pair.hub.api.stored("", "v1", "secrets")
        if s["metadata"]["namespace"] == "kube-system"
    ]
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert secret["metadata"]["name"] == f"bootstrap-token-{output[:6]}"
    # The one grant: that user may mint the agent's token, by name, in its namespace.
    name = f"gpufleet-bootstrap-{output[:6]}"
    (role,) = [
        r
        for r in pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "roles")
        if r["metadata"]["name"] == name
    ]
    assert role["metadata"]["namespace"] == "gpufleet-cluster-gke-1"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts/token"],
            "verbs": ["create"],
            "resourceNames": ["gpufleet-agent-gke-1"],
        }
    ]
    (binding,) = [
        b
        for b in pair.stored(pair.hub, "rbac.authorization.k8s.io/v1", "rolebindings")
        if b["metadata"]["name"] == name
    ]
    assert binding["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": f"system:bootstrap:{output[:6]}",
        }
    ]
