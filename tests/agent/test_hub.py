"""The agent's hub reads (agent/hub.py): its cluster's replicas, from its hub namespace only,
each as its deployment sees it; the kept views against the plain computation (`as_deployed`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.hub import HubReplicas, ObservationVersions, as_deployed
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import MODEL_REPLICA, REPLICA_OBSERVATION

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def replica(name: str, tenant: str = "ml", cluster: str = "a", namespace: str | None = None) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": f"{tenant}.{name}",
            "namespace": namespace or f"gpufleet-cluster-{cluster}",
            "labels": {
                "gpufleet.io/deployment-namespace": tenant,
                "gpufleet.io/deployment": "llama",
                "gpufleet.io/cluster": cluster,
            },
        },
        "spec": {"deploymentName": "llama", "clusterName": cluster, "engines": []},
    }


def test_a_replica_reads_as_in_its_deployments_namespace_under_its_own_name() -> None:
    obj = replica("llama-1a2b3", tenant="research")
    seen = as_deployed(obj)
    assert (seen["metadata"]["namespace"], seen["metadata"]["name"]) == ("research", "llama-1a2b3")
    assert seen["spec"] is obj["spec"]  # shared, never copied
    assert obj["metadata"]["namespace"] == "gpufleet-cluster-a"  # the hub's object is unchanged


def test_a_replica_without_the_namespace_label_reads_as_it_stands() -> None:
    obj = replica("r")
    del obj["metadata"]["labels"]["gpufleet.io/deployment-namespace"]
    assert as_deployed(obj) is obj


def test_only_the_clusters_own_namespace_is_read() -> None:
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    hub.create(replica("mine"))
    hub.create(replica("other-cluster", cluster="b"))
    hub.create(replica("labelled-a-elsewhere", namespace="gpufleet-cluster-b"))
    hub.create(replica("legacy", namespace="ml"))  # in the tenant's namespace: not the agent's
    stray = replica("stray-label")
    stray["metadata"]["labels"]["gpufleet.io/cluster"] = "b"
    hub.create(stray)
    got = HubReplicas(hub, "a").read()
    assert [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in got] == [("ml", "mine")]


def test_an_unchanged_replica_is_the_same_view_step_after_step() -> None:
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    hub.create(replica("r1"))
    hub.create(replica("r2"))
    reads = HubReplicas(hub, "a")
    first = {r["metadata"]["name"]: r for r in reads.read()}
    hub.patch_status(MODEL_REPLICA, "ml.r2", "gpufleet-cluster-a", {"phase": "Placed"})
    second = {r["metadata"]["name"]: r for r in reads.read()}
    assert second["r1"] is first["r1"]
    assert second["r2"] is not first["r2"]
    assert second["r2"]["status"] == {"phase": "Placed"}


_ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "status", "relabel", "delete", "recreate"]),
        st.sampled_from(["r1", "r2", "r3"]),
        st.sampled_from(["ml", "search"]),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_kept_views_are_what_a_fresh_read_makes(ops: list[tuple[str, str, str]]) -> None:
    """Oracle: after any changes, what `HubReplicas` hands out equals `as_deployed` of what
    the store shows, replica by replica."""
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    reads = HubReplicas(hub, "a")
    ns = "gpufleet-cluster-a"
    for op, name, tenant in ops:
        current: Any = hub.get(MODEL_REPLICA, f"{tenant}.{name}", ns)
        if op == "create" and current is None:
            hub.create(replica(name, tenant=tenant))
        elif op == "status" and current is not None:
            hub.patch_status(MODEL_REPLICA, f"{tenant}.{name}", ns, {"phase": op + name})
        elif op == "relabel" and current is not None:
            current["metadata"]["labels"]["gpufleet.io/deployment"] = "mistral"
            hub.update(current)
        elif op == "delete" and current is not None:
            hub.delete(MODEL_REPLICA, f"{tenant}.{name}", ns)
        elif op == "recreate" and current is not None:
            # The same name at the same place in the listing, another object (uid).
            hub.delete(MODEL_REPLICA, f"{tenant}.{name}", ns)
            hub.create(replica(name, tenant=tenant))
        got = reads.read()
        want = [as_deployed(r) for r in hub.view(MODEL_REPLICA, ns, {"gpufleet.io/cluster": "a"})]
        assert got == want
        assert [g["metadata"].get("uid") for g in got] == [w["metadata"].get("uid") for w in want]


def observation(name: str, cluster: str) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ReplicaObservation",
        "metadata": {"name": name, "namespace": f"gpufleet-cluster-{cluster}"},
        "spec": {"clusterName": cluster, "replicaName": name},
    }


def plain_versions(hub: MemoryStore, namespace: str) -> dict[str, object]:
    """The oracle: the versions of the namespace's observations, read in full."""
    return {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in hub.view(REPLICA_OBSERVATION, namespace)
    }


def test_unchanged_observations_are_the_same_versions_without_a_view() -> None:
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    hub.create(observation("ml.r1", "a"))
    kept = ObservationVersions(hub, "gpufleet-cluster-a")
    first = kept.read()
    held = dict(first)
    # Another cluster's observations move: not this namespace's.
    hub.create(observation("ml.r1", "b"))
    assert kept.read() is first
    hub.patch_status(REPLICA_OBSERVATION, "ml.r1", "gpufleet-cluster-a", {"phase": "x"})
    second = kept.read()
    assert second is not first
    assert first == held  # a mapping handed out is not changed
    assert second != held
    assert second == plain_versions(hub, "gpufleet-cluster-a")
    assert kept.relists == 1


_observation_ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "status", "delete", "compact", "read"]),
        st.sampled_from(["ml.r1", "ml.r2", "search.r1"]),
        st.sampled_from(["a", "b"]),
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(_observation_ops)
def test_kept_versions_are_what_a_plain_read_finds(ops: list[tuple[str, str, str]]) -> None:
    """Oracle: after any writes (to this namespace and another) and compactions of the feed,
    the kept versions equal the namespace's versions read in full, and a mapping handed out
    earlier still holds what it held then."""
    hub = MemoryStore(clock=lambda: T0, uid_seed="hub")
    kept = ObservationVersions(hub, "gpufleet-cluster-a")
    handed: list[tuple[Any, dict[str, object]]] = []
    for op, name, cluster in ops:
        ns = f"gpufleet-cluster-{cluster}"
        current = hub.get(REPLICA_OBSERVATION, name, ns)
        if op == "create" and current is None:
            hub.create(observation(name, cluster))
        elif op == "status" and current is not None:
            hub.patch_status(REPLICA_OBSERVATION, name, ns, {"phase": str(hub.revision)})
        elif op == "delete" and current is not None:
            hub.delete(REPLICA_OBSERVATION, name, ns)
        elif op == "compact":
            hub.compact(hub.revision)
        elif op == "read":
            got = kept.read()
            handed.append((got, dict(got)))
            assert got == plain_versions(hub, "gpufleet-cluster-a")
    assert kept.read() == plain_versions(hub, "gpufleet-cluster-a")
    for got, then in handed:
        assert got == then
