"""The fleet scheduling loop over a MemoryStore: placements, refusals, scale-down, invalid
deployments, conflicts, the assume ledger and idempotence."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from controller_builders import (
    CEL,
    SIM,
    TEMPLATE,
    at,
    brief,
    cluster,
    condition_of,
    deployment,
    gpu_class,
    hub,
    pool_obs,
)

from gpufleet.controller import Controller, observation_namespace
from gpufleet.core.decision import replica_name
from gpufleet.store import Kind, MemoryStore, Obj, StoreError, format_time, kind_of
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    EVENT,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
)


def _replicas(store: Any) -> list[Obj]:
    return list(store.list(MODEL_REPLICA))


def _events(store: Any, reason: str) -> list[Obj]:
    return [e for e in store.list(EVENT) if e["reason"] == reason]


def _fleet(*extra: Obj, free: Sequence[tuple[int, int]] = ((1, 1),)) -> MemoryStore:
    """One cluster `a` with pool l4 (4 GPUs per node, 1 node) whose agent reports `free`."""
    return hub(gpu_class(), cluster(), pool_obs(free=free), *extra)


def test_a_new_deployment_gets_a_replica_a_status_and_an_event() -> None:
    store = _fleet(deployment())
    result = Controller(store, SIM, "ctl").step(at(1))

    assert result.errors == []
    name = replica_name("llama", "a", 0)
    (replica,) = _replicas(store)
    owner = store.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert owner is not None
    # In cluster a's hub namespace, named with the deployment's namespace; tied to its
    # deployment by labels (an owner reference cannot cross namespaces).
    assert replica["metadata"]["namespace"] == "gpufleet-cluster-a"
    assert replica["metadata"]["name"] == f"ml.{name}"
    assert replica["metadata"]["labels"] == {
        "gpufleet.io/deployment-namespace": "ml",
        "gpufleet.io/deployment": "llama",
        "gpufleet.io/deployment-uid": owner["metadata"]["uid"],
        "gpufleet.io/cluster": "a",
        "gpufleet.io/replica-index": "0",
        # The template revision it runs (a rollout replaces replicas of another).
        "gpufleet.io/revision": owner["status"]["revision"],
    }
    assert len(owner["status"]["revision"]) == 10
    assert "ownerReferences" not in replica["metadata"]
    assert replica["spec"] == {
        "deploymentName": "llama",
        "clusterName": "a",
        "serving": {"mode": "Unified"},
        "engines": [
            {
                "name": "engine",
                "copies": 1,
                "members": [
                    {
                        "role": "Standalone",
                        "nodePoolName": "l4",
                        "deviceRequests": [
                            {
                                "name": "gpu",
                                "deviceClassName": "gpu.nvidia.com",
                                "driver": "gpu.nvidia.com",
                                "count": 1,
                                "selectors": [{"cel": CEL}],
                            }
                        ],
                        "template": TEMPLATE,
                    }
                ],
            }
        ],
    }
    status = owner["status"]
    assert status["observedGeneration"] == 1
    # Placed is not running: the replica is pending, and ReplicasRunning says so.
    assert status["replicas"] == {"total": 1, "ready": 0, "pending": 1}
    running = condition_of(owner, "ReplicasRunning")
    assert running is not None
    assert (running["status"], running["reason"]) == ("False", "PodsPending")
    assert running["message"] == (
        f"0 of 1 replicas running; 1 placed but not all pods scheduled: {name} (NotObserved)"
    )
    scheduled = condition_of(owner, "ReplicasScheduled")
    assert scheduled is not None
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "True",
        "ReplicasCreated",
        "Scheduled 1 of 1",
    )
    (event,) = _events(store, "Scheduled")
    assert event["type"] == "Normal"
    assert event["involvedObject"]["name"] == "llama"
    assert event["message"] == f"created replica {name} on cluster a (index 0, pools l4)"
    assert (result.placements, result.count("ModelReplica", "create")) == (1, 1)


def test_two_deployments_waiting_for_one_free_gpu_exactly_one_is_placed() -> None:
    store = _fleet(deployment("alpha"), deployment("beta"))
    result = Controller(store, SIM, "ctl").step(at(1))

    assert [r["spec"]["deploymentName"] for r in _replicas(store)] == ["alpha"]
    beta = store.get(MODEL_DEPLOYMENT, "beta", "ml")
    assert brief(condition_of(beta, "ReplicasScheduled")) == ("False", "InsufficientGPU")
    assert condition_of(beta, "ReplicasScheduled")["message"].startswith(  # type: ignore[index]
        "0 of 1 replicas scheduled: 0/1 clusters fit: 1 InsufficientGPU"
    )
    (refused,) = _events(store, "FailedScheduling")
    assert refused["type"] == "Warning"
    assert refused["involvedObject"]["name"] == "beta"
    assert result.refusals == {"InsufficientGPU": 1}
    assert (result.placements, result.shortfall) == (1, 1)


class LaggingStore(ForwardingStore):
    """A view of a store whose lists do not show objects created since the last `catch_up()`,
    as an informer cache lags its own writes. Writes go through, and so does `get`: it reads
    the server, as `KubeStore.get` (a direct GET) does."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self._hidden: set[tuple[Kind, str, str]] = set()

    def catch_up(self) -> None:
        self._hidden.clear()

    def _is_hidden(self, kind: Kind, obj: Mapping[str, Any]) -> bool:
        meta = obj["metadata"]
        return (kind, meta.get("namespace") or "", meta["name"]) in self._hidden

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> list[Obj]:
        found = self.inner.list(kind, namespace, label_selector)
        return [o for o in found if not self._is_hidden(kind, o)]

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> list[Mapping[str, Any]]:
        found = self.inner.view(kind, namespace, label_selector)
        return [o for o in found if not self._is_hidden(kind, o)]

    def create(self, obj: Obj) -> Obj:
        created = self.inner.create(obj)
        meta = created["metadata"]
        self._hidden.add((kind_of(created), meta.get("namespace") or "", meta["name"]))
        return created


def test_the_assume_ledger_charges_a_created_replica_the_lagging_view_does_not_show() -> None:
    inner = _fleet(deployment("zulu"))
    view = LaggingStore(inner)
    controller = Controller(view, SIM, "ctl")
    controller.step(at(1))
    assert [r["spec"]["deploymentName"] for r in _replicas(inner)] == ["zulu"]
    assert view.list(MODEL_REPLICA) == []  # the view lags

    inner.create(deployment("alpha"))  # sorts first: it would be offered the GPU first
    result = controller.step(at(2))
    # zulu's replica is still assumed: not created twice, and its GPU is not given to alpha.
    assert result.errors == []
    assert result.assumed >= 1
    assert result.count("ModelReplica", "create") == 0
    assert [r["spec"]["deploymentName"] for r in _replicas(inner)] == ["zulu"]
    alpha = inner.get(MODEL_DEPLOYMENT, "alpha", "ml")
    assert brief(condition_of(alpha, "ReplicasScheduled")) == ("False", "InsufficientGPU")

    # Once the view shows the replica its entry is forgotten and the decision is the same.
    view.catch_up()
    result = controller.step(at(3))
    assert result.assumed == 0
    assert result.count("ModelReplica", "create") == 0
    assert len(_replicas(inner)) == 1


def test_objects_deleted_after_the_controller_wrote_them_are_not_brought_back() -> None:
    """The ledger holds zulu's deployment and replica from step 1. A user deletes both
    (the garbage collector takes the replica): step 2 must neither write to them nor keep
    charging the replica, so alpha gets the GPU."""
    store = _fleet(deployment("zulu"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    (replica,) = _replicas(store)
    store.delete(MODEL_DEPLOYMENT, "zulu", "ml")
    store.delete(MODEL_REPLICA, replica["metadata"]["name"], replica["metadata"]["namespace"])
    store.create(deployment("alpha"))

    result = controller.step(at(2))
    assert result.errors == []
    assert store.get(MODEL_DEPLOYMENT, "zulu", "ml") is None
    assert [r["spec"]["deploymentName"] for r in _replicas(store)] == ["alpha"]


def test_without_the_ledger_a_lagging_view_would_double_book() -> None:
    """The counterfactual that makes the ledger test meaningful: a fresh controller (empty
    ledger) over the same lagging view gives alpha the GPU zulu's replica already holds."""
    inner = _fleet(deployment("zulu"))
    view = LaggingStore(inner)
    Controller(view, SIM, "ctl").step(at(1))
    inner.create(deployment("alpha"))
    Controller(view, SIM, "ctl-2").step(at(2))
    assert sorted(r["spec"]["deploymentName"] for r in _replicas(inner)) == ["alpha", "zulu"]


def test_scale_down_deletes_the_highest_index_and_says_why() -> None:
    store = _fleet(deployment(replicas=3), free=((4, 1),))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    names = {f"ml.{replica_name('llama', 'a', i)}" for i in range(3)}
    assert {r["metadata"]["name"] for r in _replicas(store)} == names

    current = store.get(MODEL_DEPLOYMENT, "llama", "ml")
    current["spec"]["replicas"] = 2  # type: ignore[index]
    store.update(current)  # type: ignore[arg-type]
    result = controller.step(at(2))

    assert {r["metadata"]["name"] for r in _replicas(store)} == names - {
        f"ml.{replica_name('llama', 'a', 2)}"
    }
    assert (result.drops, result.count("ModelReplica", "delete")) == (1, 1)
    (dropped,) = _events(store, "Dropped")
    assert dropped["type"] == "Normal"
    assert dropped["message"].startswith(
        f"deleted replica {replica_name('llama', 'a', 2)} on cluster a: ScaledDown"
    )
    owner = store.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert owner["status"]["observedGeneration"] == 2  # type: ignore[index]
    assert owner["status"]["replicas"] == {"total": 2, "ready": 0, "pending": 2}  # type: ignore[index]


@pytest.mark.parametrize(
    ("edit", "reason", "words"),
    [
        (
            {"cel": "device.driver =="},
            "InvalidNodeSelector",
            "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel",
        ),
        ({"replicas": 5000}, "InvalidSpec", "spec.replicas: must be at most 1000"),
    ],
    ids=["bad-cel", "too-many-replicas"],
)
def test_an_invalid_deployment_is_explained_and_its_replicas_are_untouched(
    edit: dict[str, Any], reason: str, words: str
) -> None:
    store = _fleet(deployment(replicas=1), free=((4, 1),))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    (before,) = _replicas(store)

    current = store.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert current is not None
    if "cel" in edit:
        member = current["spec"]["template"]["spec"]["engines"][0]["members"][0]
        member["nodeSelector"]["devices"][0]["selectors"] = [{"cel": edit["cel"]}]
    else:
        current["spec"]["replicas"] = edit["replicas"]
    store.update(current)
    result = controller.step(at(2))

    (after,) = _replicas(store)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    owner = store.get(MODEL_DEPLOYMENT, "llama", "ml")
    scheduled = condition_of(owner, "ReplicasScheduled")
    assert brief(scheduled) == ("False", reason)
    assert words in scheduled["message"]  # type: ignore[index]
    assert owner["status"]["observedGeneration"] == 2  # type: ignore[index]
    assert result.refusals == {reason: 1}
    assert len(_events(store, "InvalidSpec")) == 1


class ConcurrentWriterStore(LaggingStore):
    """A store where another writer changes a ModelReplica's status right before the
    controller's first update of it, so that update carries a stale resourceVersion."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.conflicts = 0

    def create(self, obj: Obj) -> Obj:
        return self.inner.create(obj)

    def update(self, obj: Obj) -> Obj:
        if obj["kind"] == "ModelReplica" and self.conflicts == 0:
            self.conflicts += 1
            meta = obj["metadata"]
            self.inner.patch_status(
                MODEL_REPLICA, meta["name"], meta["namespace"], {"note": "other writer"}
            )
        return self.inner.update(obj)


def test_a_conflict_during_an_update_is_retried_and_nothing_is_lost() -> None:
    inner = _fleet(deployment(), free=((4, 1),))
    store = ConcurrentWriterStore(inner)
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))

    current = inner.get(MODEL_DEPLOYMENT, "llama", "ml")
    current["spec"]["template"]["spec"]["engines"][0]["copies"] = 2  # type: ignore[index]
    inner.update(current)  # type: ignore[arg-type]
    # A replica made before rollouts (no revision label) is re-stamped in place.
    (made,) = _replicas(inner)
    del made["metadata"]["labels"]["gpufleet.io/revision"]
    inner.update(made)
    result = controller.step(at(2))

    assert store.conflicts == 1
    assert result.errors == []
    assert result.count("ModelReplica", "update") == 1
    (replica,) = _replicas(inner)
    assert replica["spec"]["engines"][0]["copies"] == 2
    assert replica["metadata"]["generation"] == 2
    assert replica["status"]["note"] == "other writer"


def test_a_second_step_with_no_changes_writes_nothing() -> None:
    store = _fleet(deployment("alpha"), deployment("beta"))
    controller = Controller(store, SIM, "ctl")
    first = controller.step(at(1))
    assert first.write_count > 0
    second = controller.step(at(6))
    assert second.errors == []
    assert dict(second.writes) == {}
    assert second.placements == 0
    assert second.refusals == {"InsufficientGPU": 1}  # still reported as a metric


def test_objects_that_did_not_change_are_not_validated_again() -> None:
    """The index reads (parses) an object once per version: a quiet step reads nothing, and
    a changed one is read again, once. (The cluster's observation ages move with `now`, but
    they are neither written alone nor read.)"""
    store = _fleet(deployment("alpha"), deployment("beta"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    controller.step(at(2))  # the first step's own writes are read back once
    settled = controller.index.reads
    controller.step(at(3))
    assert controller.index.reads == settled

    alpha = store.get(MODEL_DEPLOYMENT, "alpha", "ml")
    assert alpha is not None
    store.update(alpha | {"spec": {**alpha["spec"], "replicas": 2}})
    controller.step(at(4))
    assert controller.index.reads == settled + 1  # alpha, nothing else
    updated = store.get(MODEL_DEPLOYMENT, "alpha", "ml")
    assert updated is not None
    assert condition_of(updated, "ReplicasScheduled") is not None


def test_decision_latency_comes_from_the_callers_timer() -> None:
    ticks = iter([10.0, 10.25])
    store = _fleet(deployment())
    result = Controller(store, SIM, "ctl", timer=lambda: next(ticks)).step(at(1))
    assert result.decision_latency_s == 0.25
    assert result.decision is not None
    assert [str(d.key) for d in result.decision.deployments] == ["ml/llama"]


def test_an_expired_cluster_takes_no_new_replica() -> None:
    store = _fleet(deployment())
    result = Controller(store, SIM, "ctl").step(at(400))
    assert _replicas(store) == []
    assert result.refusals.total() == 1


class RefusingStore(LaggingStore):
    """A store whose API server refuses the next `refusals` ModelReplica creates."""

    def __init__(self, inner: MemoryStore, refusals: int) -> None:
        super().__init__(inner)
        self.refusals = refusals

    def create(self, obj: Obj) -> Obj:
        if obj["kind"] == "ModelReplica" and self.refusals > 0:
            self.refusals -= 1
            raise StoreError("503 Service Unavailable")
        return self.inner.create(obj)


def test_a_failed_write_is_reported_not_claimed_in_status_and_retried_next_step() -> None:
    inner = _fleet(deployment())
    controller = Controller(RefusingStore(inner, refusals=1), SIM, "ctl")
    first = controller.step(at(1))
    assert len(first.errors) == 1
    assert "create ModelReplica ml/" in first.errors[0]
    assert _replicas(inner) == []
    assert (inner.get(MODEL_DEPLOYMENT, "llama", "ml") or {}).get("status") is None
    assert _events(inner, "Scheduled") == []

    second = controller.step(at(2))
    assert second.errors == []
    assert len(_replicas(inner)) == 1
    owner = inner.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert brief(condition_of(owner, "ReplicasScheduled")) == ("True", "ReplicasCreated")


def test_a_refusal_that_recurs_increments_its_events_count() -> None:
    store = _fleet(deployment("alpha"), deployment("beta"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))  # beta refused
    # The situation clears (a GPU is free for beta), then recurs (alpha's replica grows).
    store.patch_status(
        POOL_OBSERVATION, "l4", "gpufleet-cluster-a", pool_obs(free=((2, 1),))["status"]
    )
    controller.step(at(2))
    assert len(_replicas(store)) == 2
    current = store.get(MODEL_DEPLOYMENT, "beta", "ml")
    current["spec"]["replicas"] = 2  # type: ignore[index]
    store.update(current)  # type: ignore[arg-type]
    controller.step(at(3))
    controller.step(at(4))
    refused = [
        e for e in _events(store, "FailedScheduling") if e["involvedObject"]["name"] == "beta"
    ]
    assert [e["count"] for e in refused] == [1, 1]  # two situations, each written once
    assert {e["message"] for e in refused} == {
        "0 of 1 replicas scheduled: 0/1 clusters fit: 1 InsufficientGPU",
        "Scheduled 1 of 2: 0/1 clusters fit: 1 InsufficientGPU",
    }
    # A restarted controller records the standing situation once more: the same event, count 2.
    Controller(store, SIM, "ctl-2").step(at(5))
    refused = [
        e for e in _events(store, "FailedScheduling") if e["involvedObject"]["name"] == "beta"
    ]
    assert sorted(e["count"] for e in refused) == [1, 2]
    (repeat,) = [e for e in refused if e["count"] == 2]
    assert repeat["message"].startswith("Scheduled 1 of 2")
    assert (repeat["firstTimestamp"], repeat["lastTimestamp"]) == (
        format_time(at(3)),
        format_time(at(5)),
    )


def test_heartbeats_keep_a_cluster_fresh_without_rewriting_its_status() -> None:
    """A report that only moves the observation time is published at most every
    `status_refresh_s`, but the scheduler judges freshness from the reports themselves: a
    cluster whose published time is past expiry still takes replicas while its agent reports,
    and stops taking them once the agent falls silent."""
    config = dataclasses.replace(SIM, status_refresh_s=1000)
    store = _fleet()
    controller = Controller(store, config, "ctl")

    def heartbeat(seconds: float) -> None:
        namespace = observation_namespace("a")
        patch = {"observedAt": format_time(at(seconds))}
        store.patch_status(POOL_OBSERVATION, "l4", namespace, patch, None)

    def published_at() -> str:
        got = store.get(INFERENCE_CLUSTER, "a")
        assert got is not None
        return str(got["status"]["agent"]["observedAt"])

    controller.step(at(1))
    for seconds in range(30, 400, 30):
        heartbeat(seconds)
        result = controller.step(at(seconds + 1))
        assert result.count("InferenceCluster", "patch_status") == 0
    assert published_at() == format_time(at(0))

    store.create(deployment("llama"))
    result = controller.step(at(400))
    assert result.placements == 1  # fresh by its reports, though published 400 s ago

    store.create(deployment("mistral"))
    result = controller.step(at(700))  # the agent's last report was at 390 s: Expired
    assert result.placements == 0
    assert published_at() == format_time(at(390))  # the state changed, so it was published


def test_a_heartbeat_is_published_once_the_refresh_interval_passed() -> None:
    store = _fleet()
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    namespace = observation_namespace("a")
    for seconds in (30, 60, 90, 120, 150):
        patch = {"observedAt": format_time(at(seconds))}
        store.patch_status(POOL_OBSERVATION, "l4", namespace, patch, None)
        result = controller.step(at(seconds + 1))
        written = result.count("InferenceCluster", "patch_status")
        assert written == (1 if seconds == 120 else 0), seconds
    got = store.get(INFERENCE_CLUSTER, "a")
    assert got is not None
    assert got["status"]["agent"]["observedAt"] == format_time(at(120))
    assert got["status"]["gpuPools"][0]["observation"]["observedAt"] == format_time(at(120))


def test_a_deployment_whose_status_alone_changed_is_not_checked_again() -> None:
    """A status write makes a new version but keeps the spec (and generation): the checked
    deployment carries over; a spec change is checked again."""
    store = _fleet(deployment("alpha"))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(1))
    controller.step(at(2))
    settled = controller.index.reads
    store.patch_status(MODEL_DEPLOYMENT, "alpha", "ml", {"note": "someone else's"}, None)
    controller.step(at(3))
    assert controller.index.reads == settled
    alpha = store.get(MODEL_DEPLOYMENT, "alpha", "ml")
    assert alpha is not None
    store.update(alpha | {"spec": {**alpha["spec"], "replicas": 2}})
    result = controller.step(at(4))
    assert controller.index.reads == settled + 1
    assert result.placements == 0  # one GPU free and already taken: the second is refused
    assert result.shortfall == 1
