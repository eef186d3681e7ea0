"""`OrphanWatch` against its oracle, the full scan: after any sequence of changes to replicas
and deployments, judging only the replicas it says are due finds exactly the replicas that
judging every replica (`orphaned` over all of them) finds. And the controller, which judges
only those, leaves no orphaned replica on the hub after a step, whatever was changed."""

from __future__ import annotations

from typing import Any

from controller_builders import SIM, at, cluster, deployment, gpu_class, hub, pool_obs
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.controller import Controller
from gpufleet.controller.replicas import OrphanWatch, deployment_of, orphaned
from gpufleet.core import labels
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import MODEL_DEPLOYMENT, MODEL_REPLICA

Key = tuple[str, str]
NAMES = ("a", "b")
TENANTS = ("ml", "research")
UIDS = ("u1", "u2")


def _replica(namespace: str, tenant: str | None, name: str, uid: str | None) -> Obj:
    marks = {}
    if tenant is not None:
        marks[labels.DEPLOYMENT_NAMESPACE] = tenant
    if uid is not None:
        marks[labels.DEPLOYMENT_UID] = uid
    return {
        "metadata": {"name": f"{tenant}.{name}.r", "namespace": namespace, "labels": marks},
        "spec": {"clusterName": "a", "deploymentName": name},
    }


replicas = st.builds(
    _replica,
    st.sampled_from(("gpufleet-cluster-a", "gpufleet-cluster-a", "gpufleet-cluster-a", "ml")),
    st.sampled_from((None, *TENANTS, *TENANTS)),
    st.sampled_from(NAMES),
    st.sampled_from((None, *UIDS)),
)
ops = st.one_of(
    st.tuples(st.just("replica"), st.integers(0, 3), replicas),
    st.tuples(st.just("unreplica"), st.integers(0, 3), st.none()),
    st.tuples(
        st.just("deployment"),
        st.tuples(st.sampled_from(TENANTS), st.sampled_from(NAMES)),
        st.sampled_from(UIDS),
    ),
    st.tuples(
        st.just("undeployment"),
        st.tuples(st.sampled_from(TENANTS), st.sampled_from(NAMES)),
        st.none(),
    ),
    st.tuples(st.just("collect"), st.none(), st.none()),
)


def _collect(watch: OrphanWatch, present: dict[Key, Obj], deployments: dict[Key, Obj]) -> set[Key]:
    """What the controller's `_collect` does with the watch: judge the due replicas, delete
    the orphaned ones."""
    collected = set()
    for key in watch.take():
        if orphaned(present[key], deployments) is not None:
            collected.add(key)
    for key in collected:
        del present[key]
        watch.replica(key, None)
    return collected


@settings(max_examples=400, deadline=None)
@given(st.lists(ops, min_size=4, max_size=40))
def test_the_due_replicas_find_what_the_full_scan_finds(steps: list[Any]) -> None:
    watch = OrphanWatch()
    present: dict[Key, Obj] = {}  # the replicas (by a slot standing for their key)
    deployments: dict[Key, Obj] = {}
    for op, at_, value in [*steps, ("collect", None, None)]:
        if op == "replica":
            key = ("ns", str(at_))
            present[key] = value
            watch.replica(key, value)
        elif op == "unreplica":
            key = ("ns", str(at_))
            present.pop(key, None)
            watch.replica(key, None)
        elif op == "deployment":
            deployments[at_] = {"metadata": {"uid": value}}
            watch.deployment(at_)
        elif op == "undeployment":
            deployments.pop(at_, None)
            watch.deployment(at_)
        else:
            full = {k for k, obj in present.items() if orphaned(obj, deployments) is not None}
            assert _collect(watch, present, deployments) == full
            for key, obj in present.items():
                assert watch.owner(key) == deployment_of(obj)


def _orphans(store: MemoryStore) -> list[str]:
    """The replicas on the hub that the full scan finds orphaned."""
    existing = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in store.list(MODEL_DEPLOYMENT)
        if not d["metadata"].get("deletionTimestamp")
    }
    return [
        r["metadata"]["name"]
        for r in store.list(MODEL_REPLICA)
        if orphaned(r, existing) is not None
    ]


edits = st.lists(
    st.tuples(st.sampled_from(("delete", "recreate", "keep")), st.sampled_from(NAMES)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None)
@given(edits)
def test_no_orphaned_replica_is_left_after_a_step(changes: list[tuple[str, str]]) -> None:
    store = hub(
        gpu_class(),
        cluster("a"),
        pool_obs("a", free=((4, 2),)),
        *(deployment(name, "ml") for name in NAMES),
    )
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    assert store.list(MODEL_REPLICA)
    for second, (edit, name) in enumerate(changes, start=2):
        if edit != "keep" and store.get(MODEL_DEPLOYMENT, name, "ml") is not None:
            store.delete(MODEL_DEPLOYMENT, name, "ml")
        if edit == "recreate":
            store.create(deployment(name, "ml"))
        result = controller.step(at(second))
        assert result.errors == []
        assert _orphans(store) == []
