"""The fault barrier (controller/barrier.py): an exception while processing one object, at any
point of the step, quarantines that object (a `Processed=False` condition and a
`ProcessingFailed` event, retried with backoff) and the rest of the step goes on.

Each case runs the same fleet twice, with and without the fault, through the declared seam
(`Faults`, our own code: no client is patched). After the faulted step, every object that is
not about the target reads as in the clean run: everything else was decided and written. When
the fault is gone and the backoff has passed, the target is processed, its condition removed,
and the two runs agree on it too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from controller_builders import (
    SIM,
    at,
    cluster,
    condition_of,
    deployment,
    gpu_class,
    hub,
    pool_obs,
    replica_obs,
)

from gpufleet.api.names import replica_object_name
from gpufleet.controller import Controller, observation_namespace
from gpufleet.controller.barrier import PROCESSED, PROCESSING_FAILED, FaultPoint
from gpufleet.controller.index import Key
from gpufleet.core.decision import replica_name
from gpufleet.store import MemoryStore, Obj, format_time
from gpufleet.store.port import (
    EVENT,
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

_FIRST_REPLICA = replica_object_name("ml", replica_name("first", "a", 0))
_NS_A = observation_namespace("a")
_NS_B = observation_namespace("b")


@dataclass
class Inject:
    """Raise (as the deep CEL selector did) when processing `key` of `kind` at `point`."""

    point: FaultPoint
    kind: str
    key: Key
    is_on: bool = True
    hits: int = 0

    def check(self, point: FaultPoint, kind: str, key: Key) -> None:
        if self.is_on and point is self.point and kind == self.kind and key == self.key:
            self.hits += 1
            raise RecursionError("maximum recursion depth exceeded (injected)")


@dataclass(frozen=True)
class Case:
    id: str
    point: FaultPoint
    kind: str
    key: Key
    #: (kind, namespace, name) of the objects the fault is about (not compared after it).
    about: tuple[tuple[str, str, str], ...]
    #: Whether the target gets a `Processed` condition (an observation's status is its
    #: agent's: an event only).
    has_condition: bool = True
    #: Whether scheduling fails closed (an input that cannot be read).
    is_closed: bool = False


_BAD = ("ModelDeployment", "ml", "bad")
_B = ("InferenceCluster", "", "b")
_REPLICA = ("ModelReplica", _NS_A, _FIRST_REPLICA)
_FIRST = ("ModelDeployment", "ml", "first")

CASES = [
    Case("deployment-read", FaultPoint.READ, "ModelDeployment", ("ml", "bad"), (_BAD,)),
    Case("deployment-schedule", FaultPoint.SCHEDULE, "ModelDeployment", ("ml", "bad"), (_BAD,)),
    Case("deployment-apply", FaultPoint.APPLY, "ModelDeployment", ("ml", "bad"), (_BAD,)),
    Case("cluster-read", FaultPoint.READ, "InferenceCluster", ("", "b"), (_B,)),
    Case("cluster-judge", FaultPoint.JUDGE, "InferenceCluster", ("", "b"), (_B,)),
    Case("cluster-publish", FaultPoint.PUBLISH, "InferenceCluster", ("", "b"), (_B,)),
    Case(
        "replica-read",
        FaultPoint.READ,
        "ModelReplica",
        (_NS_A, _FIRST_REPLICA),
        (_REPLICA, _FIRST),
        is_closed=True,
    ),
    Case(
        "replica-publish",
        FaultPoint.PUBLISH,
        "ModelReplica",
        (_NS_A, _FIRST_REPLICA),
        (_REPLICA, _FIRST),
    ),
    Case(
        "replica-collect",
        FaultPoint.COLLECT,
        "ModelReplica",
        (_NS_A, _FIRST_REPLICA),
        (_REPLICA, _FIRST),
    ),
    Case(
        "pool-observation-read",
        FaultPoint.READ,
        "PoolObservation",
        (_NS_B, "l4"),
        (("PoolObservation", _NS_B, "l4"), _B),
        has_condition=False,
    ),
]


def _fleet() -> MemoryStore:
    """Clusters a (free) and b (full), and a deployment `first` placed on a."""
    return hub(
        gpu_class(),
        cluster("a", pools=({"name": "l4", "className": "l4-4x", "nodeCount": 3},)),
        cluster("b"),
        pool_obs("a", free=((4, 3),)),
        pool_obs("b", free=((0, 1),)),
        deployment("first"),
    )


def _change(store: MemoryStore) -> None:
    """What step 2 reads: two new deployments, and every other object moved."""
    store.create(deployment("good"))
    store.create(deployment("bad"))
    for name in ("a", "b"):
        found = store.get(INFERENCE_CLUSTER, name)
        assert found is not None
        found["metadata"]["labels"]["touched"] = "yes"
        store.update(found)
        store.patch_status(
            POOL_OBSERVATION,
            "l4",
            observation_namespace(name),
            {"observedAt": format_time(at(2))},
        )
    replica = store.get(MODEL_REPLICA, _FIRST_REPLICA, _NS_A)
    assert replica is not None
    replica["metadata"].setdefault("annotations", {})["touched"] = "yes"
    store.update(replica)
    store.create(replica_obs(_FIRST_REPLICA, observed_at=at(2)))


def _reads(store: MemoryStore, about: tuple[tuple[str, str, str], ...]) -> dict[str, Any]:
    """The store as compared: each object's labels, spec and status, and the events (but
    ProcessingFailed) by subject, reason and message; not the objects `about` the fault."""
    objects: dict[tuple[str, str, str], Any] = {}
    for kind in (
        INFERENCE_CLASS,
        INFERENCE_CLUSTER,
        MODEL_DEPLOYMENT,
        MODEL_REPLICA,
        POOL_OBSERVATION,
        REPLICA_OBSERVATION,
    ):
        for obj in store.list(kind):
            meta = obj["metadata"]
            at_ = (obj["kind"], meta.get("namespace") or "", meta["name"])
            labels = meta.get("labels") or {}
            deployment_of = ("ModelDeployment", labels.get("gpufleet.io/deployment-namespace", ""))
            if at_ in about or (deployment_of[1] == "ml" and _BAD in about and "bad" in at_[2]):
                continue
            objects[at_] = (labels, obj.get("spec"), obj.get("status"))
    events: Counter[tuple[object, ...]] = Counter()
    for event in store.list(EVENT):
        ref = event["involvedObject"]
        subject = (ref.get("kind"), ref.get("namespace") or "", ref.get("name"))
        if event["reason"] == PROCESSING_FAILED or subject in about:
            continue
        if _BAD in about and "bad" in str(ref.get("name")) + event["message"]:
            continue
        events[(*subject, event["reason"], event["message"])] += 1
    return {"objects": objects, "events": events}


def _run(inject: Inject | None) -> tuple[MemoryStore, Controller, list[list[str]]]:
    store = _fleet()
    controller = Controller(store, SIM, "ctl", faults=inject)
    if inject is not None:
        inject.is_on = False
    errors = [controller.step(at(1)).errors]
    _change(store)
    if inject is not None:
        inject.is_on = True
    errors.append(controller.step(at(2)).errors)
    return store, controller, errors


def _target(store: MemoryStore, case: Case) -> Obj | None:
    kind = {
        "ModelDeployment": MODEL_DEPLOYMENT,
        "InferenceCluster": INFERENCE_CLUSTER,
        "ModelReplica": MODEL_REPLICA,
        "PoolObservation": POOL_OBSERVATION,
    }[case.kind]
    return store.get(kind, case.key[1], case.key[0] or None)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_object_that_raises_is_quarantined_and_the_rest_goes_on(case: Case) -> None:
    clean, clean_controller, clean_errors = _run(None)
    assert clean_errors == [[], []]
    inject = Inject(case.point, case.kind, case.key)
    faulted, controller, errors = _run(inject)

    assert inject.hits >= 1  # the point was reached, for the target
    assert errors[0] == []
    assert any(f"failed at {case.point.value}" in e for e in errors[1]), errors[1]
    events = [e for e in faulted.list(EVENT) if e["reason"] == PROCESSING_FAILED]
    assert [e["involvedObject"]["name"] for e in events] == [case.key[1]]
    assert "RecursionError" in events[0]["message"]
    processed = condition_of(_target(faulted, case), PROCESSED)
    if case.has_condition:
        assert processed is not None
        assert processed["status"] == "False"
        assert processed["reason"] == PROCESSING_FAILED
        assert f"at {case.point.value}" in processed["message"]
    else:
        assert processed is None

    if case.is_closed:
        # An input that cannot be read: scheduling fails closed, statuses still go on.
        assert any("scheduling skipped: cannot read ModelReplica" in e for e in errors[1])
        assert faulted.get(MODEL_DEPLOYMENT, "good", "ml") is not None
        for name in ("a", "b"):
            assert (faulted.get(INFERENCE_CLUSTER, name) or {}).get("status") == (
                clean.get(INFERENCE_CLUSTER, name) or {}
            ).get("status")
    else:
        # Everything not about the target was decided and written as in the clean run.
        assert _reads(faulted, case.about) == _reads(clean, case.about)
        good = [r for r in faulted.list(MODEL_REPLICA) if "good" in r["metadata"]["name"]]
        assert len(good) == 1

    # The fault is gone; once the backoff ends, the target is processed as in the clean run.
    inject.is_on = False
    controller.step(at(2.5))  # (still quarantined: the backoff is 1 s)
    clean_controller.step(at(2.5))
    for seconds in (3.5, 4.5):  # retried at 3 s
        assert controller.step(at(seconds)).errors == []
        assert clean_controller.step(at(seconds)).errors == []
    assert len(controller.quarantine) == 0
    assert condition_of(_target(faulted, case), PROCESSED) is None
    assert _reads(faulted, ())["objects"].keys() == _reads(clean, ())["objects"].keys()
    names = sorted(r["metadata"]["name"] for r in faulted.list(MODEL_REPLICA))
    assert names == sorted(r["metadata"]["name"] for r in clean.list(MODEL_REPLICA))


def test_a_quarantined_object_waits_out_a_doubling_backoff() -> None:
    store = hub(gpu_class(), cluster("a"), pool_obs("a"), deployment("bad"))
    inject = Inject(FaultPoint.SCHEDULE, "ModelDeployment", ("ml", "bad"))
    controller = Controller(store, SIM, "ctl", faults=inject)
    tried = []
    for tenths in range(1, 80):
        hits = inject.hits
        controller.step(at(tenths / 10))
        if inject.hits > hits:
            tried.append(tenths / 10)
    # Retried after 1 s, then 2 s, then 4 s (each counted from the failure).
    assert tried == [0.1, 1.1, 3.1, 7.1]
    failure = controller.quarantine.held[("ModelDeployment", ("ml", "bad"))]
    assert failure.count == 4
    assert controller.quarantine.next_due() == at(15.1)
    # Nothing else was ever in the way: the step never failed as a whole.
    assert store.list(MODEL_REPLICA) == []


def test_a_step_that_fails_as_a_whole_loses_no_change() -> None:
    """A failure outside every object's processing (the step's own barrier): the next step
    lists the hub again, so what the failed step had read is not lost."""
    store = hub(gpu_class(), cluster("a"), pool_obs("a"))
    inject = Inject(FaultPoint.STEP, "", ("", ""), is_on=False)
    controller = Controller(store, SIM, "ctl", faults=inject)
    assert controller.step(at(1)).errors == []
    store.create(deployment("late"))
    store.create(cluster("b"))
    inject.is_on = True
    result = controller.step(at(2))
    assert result.errors == [
        "step failed: RecursionError: maximum recursion depth exceeded (injected)"
    ]
    assert store.list(MODEL_REPLICA) == []
    inject.is_on = False
    assert controller.step(at(3)).errors == []
    (replica,) = store.list(MODEL_REPLICA)
    assert "late" in replica["metadata"]["name"]
    assert condition_of(store.get(INFERENCE_CLUSTER, "b"), "Ready") is not None
