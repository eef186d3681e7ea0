"""The controller's index against its oracle: after any sequence of changes to the hub (objects
created, updated, status-patched, heartbeating, deleted; the feed compacted so that a sync
meets `Expired`), synced at any points, the index holds what an index built fresh from one
listing of the same hub holds: the same objects at the same versions, read the same.

And the controller on top of it: everything it reports dirty after a sync covers what
changed (a fresh controller, for which every key is dirty, decides the same: that is
tests/sim/test_controller_memory.py over whole simulated days)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controller_builders import (
    T0,
    cluster,
    deployment,
    gpu_class,
    pool_obs,
    replica_obs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.controller.index import WATCHED, HubIndex, fresh_view, version_of
from gpufleet.controller.ledger import AssumeLedger
from gpufleet.store import MemoryStore
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    Kind,
    Obj,
)

_NAMES = ("a", "b", "c")


def _replica(name: str, step: int) -> Obj:
    """A ModelReplica as the controller writes one (its spec moves with `step`)."""
    request = {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 1 + step % 2}
    template = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}}
    member = {
        "role": "Standalone",
        "nodePoolName": "l4",
        "deviceRequests": [request],
        "template": template,
    }
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": f"ml.{name}",
            "namespace": "gpufleet-cluster-a",
            "labels": {"gpufleet.io/deployment-namespace": "ml", "gpufleet.io/deployment": name},
        },
        "spec": {
            "deploymentName": name,
            "clusterName": "a",
            "engines": [{"name": "engine", "copies": 1, "members": [member]}],
        },
    }


def _replica_status(step: int) -> dict[str, Any]:
    """A status patch of a replica: valid (as the controller writes them) but every fifth."""
    if step % 5 == 4:
        return {"note": step}
    scheduled = {
        "type": "ModelPodsScheduled",
        "status": "True" if step % 2 else "False",
        "reason": "AllPodsAllocated" if step % 2 else "PodsPending",
        "message": f"step {step}",
        "lastTransitionTime": "2026-11-29T10:00:01Z",
    }
    return {"observedGeneration": 1 + step % 3, "conditions": [scheduled], "note": None}


def _body(kind: Kind, name: str, step: int) -> Obj:
    at = T0 + timedelta(seconds=step)
    if kind == MODEL_REPLICA:
        return _replica(name, step)
    if kind == INFERENCE_CLUSTER:
        return cluster(name)
    if kind == MODEL_DEPLOYMENT:
        return deployment(name, replicas=1 + step % 3)
    if kind == POOL_OBSERVATION:
        return pool_obs("a", pool=name, free=((step % 4, 1),), observed_at=at)
    if kind == REPLICA_OBSERVATION:
        return replica_obs(name, pods_scheduled=step % 2 == 0, observed_at=at)
    return gpu_class(f"class-{name}")


_KINDS = (INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA, POOL_OBSERVATION, REPLICA_OBSERVATION)
_VERBS = ("put", "heartbeat", "status", "delete", "sync", "compact")


def _apply(store: MemoryStore, verb: str, kind: Kind, name: str, step: int) -> None:
    body = _body(kind, name, step)
    meta = body["metadata"]
    current = store.get(kind, meta["name"], meta.get("namespace"))
    if verb == "delete":
        if current is not None:
            store.delete(kind, meta["name"], meta.get("namespace"))
        return
    if current is None:
        store.create(body)
        return
    if verb == "heartbeat" and kind in (POOL_OBSERVATION, REPLICA_OBSERVATION):
        stamp = {"observedAt": body["status"]["observedAt"]}
        store.patch_status(kind, meta["name"], meta.get("namespace"), stamp, None)
    elif verb == "status":
        patch: dict[str, Any] = _replica_status(step) if kind == MODEL_REPLICA else {"note": step}
        store.patch_status(kind, meta["name"], meta.get("namespace"), patch, None)
    else:
        store.update({**current, "spec": body["spec"]})


def _state(index: HubIndex) -> dict[Kind, dict[tuple[str, str], tuple[object, object]]]:
    return {
        kind: {key: (version_of(r.obj), r.parsed) for key, r in index.records[kind].items()}
        for kind in WATCHED
    }


def _fresh(store: MemoryStore) -> HubIndex:
    index = HubIndex()
    index.overlay(store, AssumeLedger(300), index.sync(store))
    return index


_OPS = st.lists(
    st.tuples(st.sampled_from(_VERBS), st.sampled_from(_KINDS), st.sampled_from(_NAMES)),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_an_index_fed_by_changes_equals_one_built_from_a_listing(
    ops: list[tuple[str, Kind, str]],
) -> None:
    _check_against_a_listing(ops)


_STATUS_OPS = st.lists(
    st.tuples(
        st.sampled_from(("put", "status", "status", "sync", "sync", "delete")),
        st.just(MODEL_REPLICA),
        st.sampled_from(_NAMES[:2]),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops=_STATUS_OPS)
def test_replica_status_writes_read_as_a_listing_reads_them(
    ops: list[tuple[str, Kind, str]],
) -> None:
    """A replica's status write validates only its status (`parse_status_change`) after a
    version that was read: it reads what a listing reads, valid or not."""
    _check_against_a_listing(ops)


def _check_against_a_listing(ops: list[tuple[str, Kind, str]]) -> None:
    store = MemoryStore(clock=lambda: T0, uid_seed="hub")
    store.create(gpu_class())
    ledger = AssumeLedger(300)
    index = HubIndex()
    for step, (verb, kind, name) in enumerate(ops):
        if verb == "sync":
            index.overlay(store, ledger, index.sync(store))
            _state(index)  # read every record, as a step does: the next versions reuse them
        elif verb == "compact":
            store.compact(store.revision)  # the next sync meets Expired and lists again
        else:
            _apply(store, verb, kind, name, step)
    index.overlay(store, ledger, index.sync(store))
    assert _state(index) == _state(_fresh(store))
    assert {k: set(v) for k, v in index.mirror.items()} == {
        k: set(v) for k, v in fresh_view(store).items()
    }


@settings(max_examples=30, deadline=None)
@given(ops=_OPS)
def test_every_key_whose_object_changed_is_reported_moved(
    ops: list[tuple[str, Kind, str]],
) -> None:
    """What `overlay` reports moved since the last sync is exactly the keys whose version
    (or presence) differs between the two states: what the controller marks dirty."""
    store = MemoryStore(clock=lambda: T0, uid_seed="hub")
    ledger = AssumeLedger(300)
    index = HubIndex()
    index.overlay(store, ledger, index.sync(store))
    for step, (verb, kind, name) in enumerate(ops):
        before = _state(index)
        if verb in ("sync", "compact"):
            continue
        _apply(store, verb, kind, name, step)
        moved = index.overlay(store, ledger, index.sync(store))
        after = _state(index)
        for each in WATCHED:
            versions_before = {k: v[0] for k, v in before[each].items()}
            versions_after = {k: v[0] for k, v in after[each].items()}
            differ = {
                k
                for k in versions_before.keys() | versions_after.keys()
                if versions_before.get(k) != versions_after.get(k)
            }
            assert moved[each] == differ
