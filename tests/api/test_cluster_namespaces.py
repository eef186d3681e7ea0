"""The hub's per-cluster namespaces and the names of replicas in them (api/names.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.names import (
    CLUSTER_NAME_MAX_CHARS,
    ClusterNameError,
    cluster_namespace,
    cluster_of_namespace,
    is_dns_label,
    is_dns_subdomain,
    replica_object_name,
    replica_origin,
)

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
_cluster = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,44}[a-z0-9])?", fullmatch=True)
# A replica is named after its deployment, an object name: a DNS subdomain (dot-separated
# labels, never two dots in a row), here of at most 3 x 20 + 2 = 62 characters.
_replica = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?){0,2}", fullmatch=True
)


@given(_cluster)
def test_every_valid_cluster_name_names_a_namespace_and_back(cluster: str) -> None:
    namespace = cluster_namespace(cluster)
    assert is_dns_label(namespace)
    assert cluster_of_namespace(namespace) == cluster


def test_the_longest_cluster_name_fills_a_dns_label_exactly() -> None:
    assert CLUSTER_NAME_MAX_CHARS == 46
    assert len(cluster_namespace("c" * 46)) == 63


@pytest.mark.parametrize("bad", ["c" * 47, "a.b", "Upper", "", "-a", "a-", "a_b"])
def test_a_cluster_name_that_names_no_namespace_is_refused_with_the_rule(bad: str) -> None:
    with pytest.raises(ClusterNameError) as raised:
        cluster_namespace(bad)
    assert str(raised.value) == (
        f"cluster name {bad!r} must be a DNS label of at most 46 characters "
        "(it names the hub namespace gpufleet-cluster-<cluster>)"
    )


@pytest.mark.parametrize("namespace", ["ml", "gpufleet-cluster-", "gpufleet-cluster-a.b"])
def test_other_namespaces_are_no_clusters(namespace: str) -> None:
    assert cluster_of_namespace(namespace) is None


@given(_label, _replica, _cluster)
def test_a_replica_name_carries_its_deployments_namespace_and_gives_it_back(
    tenant: str, name: str, cluster: str
) -> None:
    hub_name = replica_object_name(tenant, name)
    assert is_dns_subdomain(hub_name)
    assert replica_origin(cluster_namespace(cluster), hub_name, tenant) == (tenant, name)


@pytest.mark.parametrize(
    ("namespace", "name", "label", "want"),
    [
        ("ml", "llama-1", None, ("ml", "llama-1")),  # written before cluster namespaces
        (None, "llama-1", None, ("default", "llama-1")),
        ("gpufleet-cluster-a", "ml.llama-1", "ml", ("ml", "llama-1")),
        # A label its name does not carry: read as it stands.
        ("gpufleet-cluster-a", "ml.llama-1", "search", ("gpufleet-cluster-a", "ml.llama-1")),
    ],
)
def test_replica_origin(
    namespace: str | None, name: str, label: str | None, want: tuple[str, str]
) -> None:
    assert replica_origin(namespace, name, label) == want
