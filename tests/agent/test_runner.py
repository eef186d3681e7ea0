"""The agent runner against two in-memory stores (no simulator): what it pushes and when,
what it materializes, and how it behaves when the hub is unreachable or writes conflict."""

from __future__ import annotations

import builtins
import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from observe_builders import pod as opod

from gpufleet.agent.hub import as_deployed
from gpufleet.agent.materialize import OWNED_SELECTOR
from gpufleet.agent.report_writer import _status_patch
from gpufleet.agent.runner import Agent, AgentConfig, StepOutcome
from gpufleet.store import Kind, MemoryStore, NotFound, Obj, StoreError, kind_of
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.merge import merge_patch
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    MODEL_REPLICA,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
NS = "gpufleet-cluster-a"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def node(name: str, pool: str = "l4", ready: bool = True, cordoned: bool = False) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpufleet.io/pool": pool}},
        "spec": {"unschedulable": cordoned, "taints": []},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def slice_(node_name: str, gpus: int = 4) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [{"name": f"gpu-{i}"} for i in range(gpus)],
        },
    }


def claim(name: str, node_name: str, devices: Sequence[int], namespace: str = "other") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": node_name,
                            "device": f"gpu-{i}",
                        }
                        for i in devices
                    ]
                }
            }
        },
    }


def model_replica(name: str = "llama-0", cluster: str = "a", copies: int = 1) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        # As the controller writes it: in the cluster's hub namespace, named and labelled
        # with its deployment's namespace ("ml"), where the agent reads it (agent/hub.py).
        "metadata": {
            "name": f"ml.{name}",
            "namespace": f"gpufleet-cluster-{cluster}",
            "labels": {
                "gpufleet.io/deployment-namespace": "ml",
                "gpufleet.io/deployment": "llama",
                "gpufleet.io/cluster": cluster,
            },
        },
        "spec": {
            "deploymentName": "llama",
            "clusterName": cluster,
            "engines": [
                {
                    "name": "main",
                    "copies": copies,
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
                                }
                            ],
                            "template": {"spec": {"containers": [{"name": "engine"}]}},
                        }
                    ],
                }
            ],
        },
    }


@dataclass
class World:
    clock: Clock = field(default_factory=Clock)
    local: MemoryStore = field(init=False)
    hub: MemoryStore = field(init=False)

    def __post_init__(self) -> None:
        self.local = MemoryStore(clock=self.clock, uid_seed="local")
        self.hub = MemoryStore(clock=self.clock, uid_seed="hub")

    def agent(self, config: AgentConfig | None = None, epoch: int = 1) -> Agent:
        return Agent(
            "a", self.local, self.hub, config, identity=f"agent-{epoch}", lease_epoch=epoch
        )

    def add(self, *objs: Obj) -> None:
        for obj in objs:
            status = obj.pop("status", None)
            created = self.local.create(obj)
            if status is not None:
                self.local.patch_status(
                    kind_of(created),
                    created["metadata"]["name"],
                    created["metadata"].get("namespace"),
                    status,
                )

    def at(self, seconds: float) -> datetime:
        self.clock.now = T0 + timedelta(seconds=seconds)
        return self.clock.now


def pool_status(w: World, pool: str = "l4") -> dict[str, Any]:
    obj = w.hub.get(POOL_OBSERVATION, pool, NS)
    assert obj is not None
    return dict(obj["status"])


# --- what the agent publishes -----------------------------------------------------------


@dataclass(frozen=True)
class PoolCase:
    id: str
    objects: tuple[Obj, ...]
    want: dict[str, Any]


def _status(
    buckets: list[tuple[dict[str, int], int]],
    nodes: int,
    excluded: Mapping[str, int] | None = None,
    last: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedNodes": nodes,
        # Nodes without allocatable CPU or memory have none free (agent/hostroom.py).
        "freeDevices": [
            {"free": free, "nodes": n, "hostRoom": [{"milliCpu": 0, "memory": 0, "nodes": n}]}
            for free, n in buckets
        ],
    }
    if last is not None:
        status["lastAllocationTime"] = last
    status["excludedNodes"] = dict(excluded or {})
    status["extendedResources"] = {}
    status["agent"] = {"identity": "agent-1", "leaseEpoch": 1, "leaseUID": "standalone"}
    status["observedAt"] = "2026-11-29T10:00:00Z"
    return status


def gpus(n: int) -> dict[str, int]:
    return {"gpu.nvidia.com": n}


POOL_CASES = [
    PoolCase(
        "node-without-slices-has-nothing-free",
        (node("n0"),),
        _status([({}, 1)], 1, {"NoSlices": 1}),
    ),
    PoolCase(
        "published-node-all-free",
        (node("n0"), slice_("n0")),
        _status([(gpus(4), 1)], 1),
    ),
    PoolCase(
        "foreign-claim-counts-as-taken",
        (node("n0"), slice_("n0"), node("n1"), slice_("n1"), claim("other-1", "n1", [0, 1])),
        _status([(gpus(2), 1), (gpus(4), 1)], 2, last="2026-11-29T10:00:00Z"),
    ),
    PoolCase(
        "cordoned-node-counts-but-has-nothing-free",
        (node("n0", cordoned=True), slice_("n0"), node("n1"), slice_("n1")),
        _status([(gpus(0), 1), (gpus(4), 1)], 2, {"Cordoned": 1}),
    ),
    PoolCase(
        "not-ready-node-counts-but-has-nothing-free",
        (node("n0", ready=False), slice_("n0")),
        _status([(gpus(0), 1)], 1, {"NotReady": 1}),
    ),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.id)
def test_agent_publishes_pool_observation(case: PoolCase) -> None:
    w = World()
    w.add(*[dict(o) for o in case.objects])
    w.agent().step(w.at(0))
    got = pool_status(w)
    got.pop("conditions")
    assert got == case.want


def test_observation_objects_carry_spec_and_labels() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica())
    w.agent().step(w.at(0))
    pool = w.hub.get(POOL_OBSERVATION, "l4", NS)
    rep = w.hub.get(REPLICA_OBSERVATION, "ml.llama-0", NS)
    assert pool is not None and rep is not None
    assert (pool["spec"], pool["metadata"]["labels"]) == (
        {"clusterName": "a", "poolName": "l4"},
        {"gpufleet.io/cluster": "a"},
    )
    # It names the replica's object on the hub: in the same namespace, of the same name.
    assert rep["spec"] == {"clusterName": "a", "replicaName": "ml.llama-0", "replicaNamespace": NS}
    assert rep["status"]["podsScheduled"] is False


# --- when it pushes ---------------------------------------------------------------------


def test_push_debounce_and_heartbeat() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    agent = w.agent(AgentConfig(heartbeat_interval_s=30, min_push_interval_s=5))
    pushed = []
    for t, change in [(0, None), (1, "n1"), (4, None), (6, None), (10, None), (36, None)]:
        if change:
            w.add(node(change), slice_(change))
        pushed.append((t, agent.step(w.at(t)).is_pushed))
    # 0: first push; 1: changed but within the debounce; 6: the change goes out;
    # 10: nothing changed; 36: heartbeat.
    assert pushed == [(0, True), (1, False), (4, False), (6, True), (10, False), (36, True)]
    assert pool_status(w)["observedAt"] == "2026-11-29T10:00:36Z"
    assert pool_status(w)["observedNodes"] == 2


def test_removed_fields_are_cleared_on_the_hub() -> None:
    w = World()
    w.add(node("n0", cordoned=True), slice_("n0"), claim("c", "n0", [0]))
    agent = w.agent(AgentConfig(min_push_interval_s=0))
    agent.step(w.at(0))
    assert pool_status(w)["excludedNodes"] == {"Cordoned": 1}
    assert "lastAllocationTime" in pool_status(w)
    w.local.delete(*(_kind_and_name(w.local.list(RESOURCE_CLAIM)[0])))
    n0 = w.local.get(NODE, "n0")
    assert n0 is not None
    n0["spec"]["unschedulable"] = False
    w.local.update(n0)
    agent.step(w.at(1))
    status = pool_status(w)
    assert (status["excludedNodes"], "lastAllocationTime" in status) == ({}, False)


def _kind_and_name(obj: Obj) -> tuple[Kind, str, str | None]:
    return kind_of(obj), obj["metadata"]["name"], obj["metadata"].get("namespace")


def test_replica_observation_deleted_with_its_replica() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica("r1"))
    w.hub.create(model_replica("r2"))
    w.hub.create(model_replica("elsewhere", cluster="b"))
    agent = w.agent(AgentConfig(min_push_interval_s=0))
    agent.step(w.at(0))
    assert [o["metadata"]["name"] for o in w.hub.list(REPLICA_OBSERVATION, NS)] == [
        "ml.r1",
        "ml.r2",
    ]
    w.hub.delete(MODEL_REPLICA, "ml.r1", NS)
    agent.step(w.at(1))
    assert [o["metadata"]["name"] for o in w.hub.list(REPLICA_OBSERVATION, NS)] == ["ml.r2"]


@pytest.mark.parametrize("is_restarted", [False, True], ids=["same-agent", "restarted-agent"])
def test_pool_that_vanishes_is_reported_empty(is_restarted: bool) -> None:
    w = World()
    w.add(node("n0", pool="old"), slice_("n0"), node("n1"), slice_("n1"))
    agent = w.agent(AgentConfig(min_push_interval_s=0))
    agent.step(w.at(0))
    assert pool_status(w, "old")["observedNodes"] == 1
    w.local.delete(NODE, "n0")
    if is_restarted:
        agent = w.agent(AgentConfig(min_push_interval_s=0), epoch=2)
    agent.step(w.at(1))
    status = pool_status(w, "old")
    assert (status["observedNodes"], status["freeDevices"]) == (0, [])


def test_an_observation_changed_on_the_hub_is_written_whole_again() -> None:
    """The agent patches its own last write without reading it again; when someone else
    wrote the observation since (spec or status), the next push reads it and corrects it."""
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica("r1"))
    agent = w.agent(AgentConfig(min_push_interval_s=0, heartbeat_interval_s=1))
    agent.step(w.at(0))
    agent.step(w.at(1))
    want = w.hub.get(REPLICA_OBSERVATION, "ml.r1", NS)
    assert want is not None
    w.hub.patch_status(REPLICA_OBSERVATION, "ml.r1", NS, {"podsScheduled": True, "extra": 1})
    pool = w.hub.get(POOL_OBSERVATION, "l4", NS)
    assert pool is not None
    pool["spec"]["poolName"] = "other"
    w.hub.update(pool)
    assert agent.step(w.at(2)).is_pushed
    got = w.hub.get(REPLICA_OBSERVATION, "ml.r1", NS)
    assert got is not None
    assert got["status"] == {**want["status"], "observedAt": "2026-11-29T10:00:02Z"}
    assert pool_status(w)["observedAt"] == "2026-11-29T10:00:02Z"
    pool = w.hub.get(POOL_OBSERVATION, "l4", NS)
    assert pool is not None and pool["spec"]["poolName"] == "l4"


def test_an_observation_deleted_on_the_hub_is_created_again() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica("r1"))
    agent = w.agent(AgentConfig(min_push_interval_s=0, heartbeat_interval_s=1))
    agent.step(w.at(0))
    agent.step(w.at(1))
    w.hub.delete(REPLICA_OBSERVATION, "ml.r1", NS)
    w.hub.delete(POOL_OBSERVATION, "l4", NS)
    assert agent.step(w.at(2)).is_pushed
    rep = w.hub.get(REPLICA_OBSERVATION, "ml.r1", NS)
    assert rep is not None and rep["status"]["observedAt"] == "2026-11-29T10:00:02Z"
    assert pool_status(w)["observedNodes"] == 1


def test_a_heartbeat_writes_each_pool_observation_once_and_no_replica_observation() -> None:
    """A heartbeat refreshes the pool observations (one status patch each, nothing read
    again); replica observations whose content did not change are left as they are."""
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.hub.create(model_replica("r1"))
    w.hub.create(model_replica("r2"))
    agent = w.agent(AgentConfig(min_push_interval_s=0, heartbeat_interval_s=1))
    agent.step(w.at(0))
    agent.step(w.at(1))
    before = w.hub.revision
    assert agent.step(w.at(2)).is_pushed
    changes, _ = w.hub.changes(before)
    assert sorted((c.kind.kind, c.name) for c in changes) == [("PoolObservation", "l4")]
    assert {c.obj["status"]["observedAt"] for c in changes} == {"2026-11-29T10:00:02Z"}
    replica = w.hub.get(REPLICA_OBSERVATION, "ml.r1", NS)
    assert replica is not None
    assert replica["status"]["observedAt"] == "2026-11-29T10:00:00Z"  # its content's time

    w.hub.delete(MODEL_REPLICA, "ml.r2", NS)  # a change: r2's observation goes, r1's stays
    before = w.hub.revision
    assert agent.step(w.at(3)).is_pushed
    changes, _ = w.hub.changes(before)
    assert sorted((c.kind.kind, c.name) for c in changes) == [
        ("PoolObservation", "l4"),
        ("ReplicaObservation", "ml.r2"),
    ]


def test_a_push_skipping_what_its_last_push_left_writes_what_comparing_each_would() -> None:
    """A push leaves alone, without looking at it, each replica observation whose entry is
    the same object as in the last complete push and whose version on the hub is the one that
    push left. Whatever others do to the observations in between, and whichever entries
    change (or come in another order, or go), the hub ends as when every entry is a new
    (equal) object, compared one by one."""

    def run(is_reused: bool) -> list[tuple[bool, list[Obj]]]:
        w = World()
        w.add(node("n0"), slice_("n0"))
        for name in ("r1", "r2", "r3"):
            w.hub.create(model_replica(name))
        agent = w.agent(AgentConfig(min_push_interval_s=0, heartbeat_interval_s=1))
        agent.step(w.at(0))
        replicas = agent.read_replicas()
        assert replicas is not None
        last = agent.observe(w.at(1), replicas)
        assert agent.push(last, w.at(1))
        foreign = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "ReplicaObservation",
            "metadata": {"name": "ml.ghost", "namespace": NS},
            "spec": {"clusterName": "a", "replicaName": "ghost", "replicaNamespace": "ml"},
        }
        meddling = [
            lambda: None,
            lambda: w.hub.patch_status(REPLICA_OBSERVATION, "ml.r1", NS, {"podsScheduled": 1}),
            lambda: w.hub.delete(REPLICA_OBSERVATION, "ml.r2", NS),
            lambda: w.hub.create(foreign),
            lambda: w.hub.patch_status(REPLICA_OBSERVATION, "ml.r3", NS, {"agent": None}),
            lambda: w.hub.patch_status(REPLICA_OBSERVATION, "ml.r3", NS, {"podsScheduled": 1}),
            lambda: None,
        ]
        out = []
        for t, meddle in enumerate(meddling, start=2):
            meddle()
            at = w.at(t)
            entries = dict(last.replicas)
            if t in (3, 6):  # r2's content changes (and, at 6, changes back)
                spec, status = entries["ml.r2"]
                entries["ml.r2"] = (spec, {**status, "podsScheduled": t == 3})
            if t == 4:  # the same entries, in another order
                entries = dict(reversed(entries.items()))
            if t >= 7:  # r3 is gone
                del entries["ml.r3"]
            if not is_reused:
                entries = {name: copy.deepcopy(entry) for name, entry in entries.items()}
                agent._writer._replicas_left = None  # nothing known: every entry is compared
            report = dataclasses.replace(last, observed_at=at, replicas=entries)
            if t == 2 and is_reused:
                report = dataclasses.replace(last, observed_at=at)  # the very mapping
            is_pushed = agent.push(report, at)
            on_hub = w.hub.list(REPLICA_OBSERVATION, NS)
            # Either way, the hub holds what the report says (and only that).
            assert {
                o["metadata"]["name"]: (
                    o["spec"],
                    {k: v for k, v in o["status"].items() if k != "observedAt"},
                )
                for o in on_hub
            } == {
                name: (spec, {**status, "agent": _AGENT_1})
                for name, (spec, status) in report.replicas.items()
            }
            out.append((is_pushed, on_hub))
        out.append((w.hub.revision > 0, w.hub.list(POOL_OBSERVATION, NS)))
        out.append((True, [c.obj for c in w.hub.changes(0, [REPLICA_OBSERVATION])[0]]))
        return out

    assert run(is_reused=True) == run(is_reused=False)


def test_observing_unchanged_content_reuses_the_report_mappings() -> None:
    """What lets a push compare by identity: observing again with nothing changed gives the
    very mappings of the last report; a change replaces only the entries it touches."""
    w = World()
    w.add(node("n0"), slice_("n0"))
    for name in ("r1", "r2"):
        w.hub.create(model_replica(name))
    agent = w.agent()
    replicas = agent.read_replicas()
    assert replicas is not None
    first = agent.observe(w.at(0), replicas)
    again = agent.observe(w.at(1), replicas)
    assert (again.pools is first.pools, again.replicas is first.replicas) == (True, True)
    w.add(node("n1"), slice_("n1"))
    r2 = w.hub.get(MODEL_REPLICA, "ml.r2", NS)
    assert r2 is not None
    r2["spec"]["engines"][0]["copies"] = 2  # a new generation
    w.hub.update(r2)
    replicas = agent.read_replicas()
    assert replicas is not None
    changed = agent.observe(w.at(2), replicas)
    assert changed.pools is not first.pools and changed.replicas is not first.replicas
    assert changed.replicas["ml.r1"] is first.replicas["ml.r1"]
    assert changed.replicas["ml.r2"] != first.replicas["ml.r2"]
    fresh = w.agent().observe(w.at(2), replicas)
    assert (changed.pools, changed.replicas) == (fresh.pools, fresh.replicas)
    # A quiet step re-sends the report at its own time: the same content, a new time.
    later = changed.at(w.at(3))
    assert later == dataclasses.replace(changed, observed_at=w.at(3)) != changed


# --- materializing ----------------------------------------------------------------------


def test_a_report_made_from_the_observations_that_changed_is_the_whole_report() -> None:
    """A report's replica entries are made again only where the observation is not the very
    one of the last call. Through pods coming and going for one replica, a new generation,
    a status write, replicas coming and going and a replica whose pod changes and changes
    back, the entries are equal to those made from every observation, and the same
    objects as the last report's at the same places."""
    pods: dict[str, Obj] = {
        "p1": opod("p1", "r1", ns="ml"),
        "p3": opod("p3", "r3", ns="ml", phase="Pending"),
    }
    events: list[Any] = [
        lambda w: None,
        lambda w: w.add(copy.deepcopy(pods["p1"])),
        lambda w: w.add(copy.deepcopy(pods["p3"])),
        lambda w: w.hub.patch_status(MODEL_REPLICA, "ml.r2", NS, {"phase": "Placed"}),
        lambda w: respec(w, "r2", 2),
        lambda w: w.local.delete(POD, "p1", "ml"),
        lambda w: w.hub.create(model_replica("r4")),
        lambda w: w.local.delete(POD, "p3", "ml"),
        lambda w: w.hub.delete(MODEL_REPLICA, "ml.r1", NS),
        lambda w: w.add(copy.deepcopy(pods["p3"])),
        lambda w: None,
    ]

    def respec(w: World, name: str, copies: int) -> None:
        replica = w.hub.get(MODEL_REPLICA, f"ml.{name}", NS)
        assert replica is not None
        replica["spec"]["engines"][0]["copies"] = copies
        w.hub.update(replica)

    w = World()
    w.add(node("n0"), slice_("n0"))
    for name in ("r1", "r2", "r3"):
        w.hub.create(model_replica(name))
    agent = w.agent()
    last: Mapping[str, Any] = {}
    for t, event in enumerate(events):
        event(w)
        replicas = agent.read_replicas()
        assert replicas is not None
        report = agent.observe(w.at(t), replicas)
        whole = {
            f"{r.namespace}.{r.name}": (
                {
                    "clusterName": agent.cluster_name,
                    "replicaName": f"{r.namespace}.{r.name}",
                    "replicaNamespace": NS,
                },
                r.to_status(),
            )
            for r in report.result.replicas
        }
        assert report.replicas == whole, t
        for name, entry in report.replicas.items():
            assert (last.get(name) is entry) == (last.get(name) == entry), (t, name)
        assert (report.replicas is last) == (report.replicas == last), t
        last = report.replicas


def owned(w: World) -> list[str]:
    return [
        f"{o['kind']} {o['metadata']['name']} replicas={o['spec'].get('replicas', '-')}"
        for kind in (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT, LEADER_WORKER_SET, POD_DISRUPTION_BUDGET)
        for o in w.local.list(kind)
    ]


def test_materialize_creates_updates_and_deletes() -> None:
    w = World()
    agent = w.agent()
    w.hub.create(model_replica("r1"))
    w.hub.create(model_replica("r2"))
    out = agent.step(w.at(0))
    assert owned(w) == [
        "ResourceClaimTemplate r1-main-standalone replicas=-",
        "ResourceClaimTemplate r2-main-standalone replicas=-",
        "Deployment r1-main replicas=1",
        "Deployment r2-main replicas=1",
        # Each replica's budget: no Ready pod of it is evicted while it serves.
        "PodDisruptionBudget r1 replicas=-",
        "PodDisruptionBudget r2 replicas=-",
    ]
    assert len(out.created) == 6
    assert w.local.get(NAMESPACE, "ml") is not None
    # Unchanged: nothing written.
    before = w.local.revision
    agent.step(w.at(1))
    assert w.local.revision == before
    # r1 grows to 3 copies, r2 is gone.
    r1 = w.hub.get(MODEL_REPLICA, "ml.r1", NS)
    assert r1 is not None
    r1["spec"]["engines"][0]["copies"] = 3
    w.hub.update(r1)
    w.hub.delete(MODEL_REPLICA, "ml.r2", NS)
    out = agent.step(w.at(2))
    assert owned(w) == [
        "ResourceClaimTemplate r1-main-standalone replicas=-",
        "Deployment r1-main replicas=3",
        "PodDisruptionBudget r1 replicas=-",
    ]
    # r2's budget goes with it.
    assert (out.updated, sorted(out.deleted)) == (
        ["Deployment ml/r1-main"],
        [
            "Deployment ml/r2-main",
            "PodDisruptionBudget ml/r2",
            "ResourceClaimTemplate ml/r2-main-standalone",
        ],
    )
    dep = w.local.get(DEPLOYMENT, "r1-main", "ml")
    assert dep is not None
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["gpufleet.io/replica-generation"] == "2"


def test_what_a_replica_wants_is_made_again_when_anything_materialize_reads_changed() -> None:
    """The agent keeps each replica's desired objects while the replica's spec is the same
    object and its generation and labels are equal (a status write changes neither). Replicas
    sharing one spec object but differing in what else materialize reads are materialized
    as an agent that keeps nothing would."""
    base = dict(as_deployed(model_replica("r1")))  # as `read_replicas` hands it over
    del base["spec"]["deploymentName"]  # the deployment label names it instead
    spec = base["spec"]

    def variant(generation: int, deployment: str, status: Obj | None = None) -> Obj:
        labels = {**base["metadata"]["labels"], "gpufleet.io/deployment": deployment}
        meta = {**base["metadata"], "labels": labels, "generation": generation}
        return {**base, "metadata": meta, "spec": spec, "status": status or {}}

    steps = [
        variant(1, "llama"),
        variant(1, "llama", {"phase": "Placed"}),  # status only: nothing to do
        variant(1, "mistral"),  # the label: every object is relabelled
        variant(2, "mistral"),  # the generation: the pod template's label
        variant(2, "mistral", {"phase": "Running"}),
    ]

    def run(is_kept: bool) -> list[tuple[list[str], list[Obj]]]:
        w = World()
        agent = w.agent()
        out = []
        for replica in steps:
            outcome = StepOutcome()
            (agent if is_kept else w.agent()).materialize([replica], outcome)
            kinds = (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT)
            out.append((outcome.updated, [o for kind in kinds for o in w.local.list(kind)]))
        return out

    kept, fresh = run(is_kept=True), run(is_kept=False)
    assert kept == fresh
    assert [updated for updated, _ in kept] == [
        [],
        [],
        [
            "ResourceClaimTemplate ml/r1-main-standalone",
            "Deployment ml/r1-main",
            "PodDisruptionBudget ml/r1",
        ],
        ["Deployment ml/r1-main"],
        [],
    ]


def test_materializing_what_was_settled_skips_nothing_that_changed() -> None:
    """A kind whose wanted objects and local objects are the very ones of a pass that found
    them all agreeing is not looked at again. Through changes to either side (by the hub,
    by someone else on the cluster), the cluster ends as with an agent that keeps nothing."""

    def run(is_kept: bool) -> list[tuple[list[str], list[str], list[str], list[Obj]]]:
        w = World()
        for name in ("r1", "r2"):
            w.hub.create(model_replica(name))
        agent = w.agent()

        def relabel() -> None:
            dep = w.local.get(DEPLOYMENT, "r1-main", "ml")
            assert dep is not None
            dep["spec"]["replicas"] = 5
            w.local.update(dep)

        def stray() -> None:
            stray = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "stray",
                    "namespace": "ml",
                    "labels": {"gpufleet.io/replica": "gone"},
                },
                "spec": {"replicas": 1},
            }
            w.local.create(stray)

        events = [
            lambda: None,
            lambda: None,
            relabel,
            lambda: w.local.delete(RESOURCE_CLAIM_TEMPLATE, "r2-main-standalone", "ml"),
            stray,
            lambda: w.hub.patch_status(MODEL_REPLICA, "ml.r1", NS, {"phase": "Placed"}),
            lambda: w.hub.delete(MODEL_REPLICA, "ml.r2", NS),
            lambda: None,
        ]
        out = []
        for event in events:
            event()
            replicas = agent.read_replicas()
            assert replicas is not None
            outcome = StepOutcome()
            (agent if is_kept else w.agent()).materialize(replicas, outcome)
            local = [
                o for kind in (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT) for o in w.local.list(kind)
            ]
            out.append((outcome.created, outcome.updated, outcome.deleted, local))
        return out

    assert run(is_kept=True) == run(is_kept=False)


def test_materializing_what_changed_does_what_a_whole_pass_does() -> None:
    """Materialize looks only at what came, went or changed since its last call: replicas by
    key and resourceVersion (the desired set is patched with what they want), local objects
    by resourceVersion, and the keys the last pass wrote. Through replicas coming, going and changing (spec,
    status, labels, namespace), invalid ones, one listed twice, and local objects changed
    or deleted by someone else, every step does what an agent that keeps nothing does."""

    def run(is_kept: bool) -> list[tuple[list[str], list[str], list[str], list[str], Any]]:
        w = World()
        agent = w.agent()
        patched: list[int] = []

        def add(name: str, namespace: str = "ml", copies: int = 1) -> None:
            replica = model_replica(name, copies=copies)
            replica["metadata"]["name"] = f"{namespace}.{name}"
            replica["metadata"]["labels"]["gpufleet.io/deployment-namespace"] = namespace
            w.hub.create(replica)

        def respec(name: str, copies: int) -> None:
            replica = w.hub.get(MODEL_REPLICA, f"ml.{name}", NS)
            assert replica is not None
            replica["spec"]["engines"][0]["copies"] = copies
            w.hub.update(replica)

        def invalid() -> None:
            replica = model_replica("bad")
            del replica["spec"]["engines"][0]["name"]
            w.hub.create(replica)

        def edit_deployment(name: str) -> None:
            dep = w.local.get(DEPLOYMENT, name, "ml")
            assert dep is not None
            dep["spec"]["replicas"] = 7
            w.local.update(dep)

        def relabel_local(name: str) -> None:
            # A label write by someone else moves neither the spec nor its generation.
            dep = w.local.get(DEPLOYMENT, name, "ml")
            assert dep is not None
            labels = dep["metadata"]["labels"]
            key = next(k for k in sorted(labels) if k != OWNED_SELECTOR)
            labels[key] = "edited"
            generation = dep["metadata"]["generation"]
            assert w.local.update(dep)["metadata"]["generation"] == generation

        def relabel(name: str) -> None:
            replica = w.hub.get(MODEL_REPLICA, f"ml.{name}", NS)
            assert replica is not None
            replica["metadata"]["labels"]["gpufleet.io/deployment"] = "mistral"
            w.hub.update(replica)

        events: list[Any] = [
            lambda: [add(f"r{i}") for i in range(1, 6)],
            lambda: None,
            lambda: add("r6"),
            lambda: w.hub.patch_status(MODEL_REPLICA, "ml.r2", NS, {"phase": "Placed"}),
            lambda: respec("r3", 2),
            lambda: w.hub.delete(MODEL_REPLICA, "ml.r4", NS),
            lambda: add("r7", namespace="ml2"),
            lambda: edit_deployment("r1-main"),
            lambda: w.local.delete(RESOURCE_CLAIM_TEMPLATE, "r5-main-standalone", "ml"),
            lambda: w.local.patch_status(DEPLOYMENT, "r6-main", "ml", {"readyReplicas": 1}),
            lambda: relabel_local("r6-main"),
            lambda: relabel("r2"),
            invalid,
            lambda: add("r8"),
            lambda: w.hub.delete(MODEL_REPLICA, "ml.bad", NS),
            lambda: w.hub.delete(MODEL_REPLICA, "ml2.r7", NS),
            lambda: [respec("r1", 3), w.hub.delete(MODEL_REPLICA, "ml.r5", NS)],
            lambda: None,
        ]
        out = []
        for event in [*events, "twice", lambda: None, "copy", lambda: None]:
            replicas = None
            if callable(event):
                event()
            else:
                listed = agent.read_replicas()
                assert listed is not None
                if event == "twice":
                    replicas = [*listed, listed[0]]  # one object listed twice
                else:
                    replicas = [*listed, copy.deepcopy(listed[-1])]  # two of one key
            if replicas is None:
                replicas = agent.read_replicas()
            assert replicas is not None
            outcome = StepOutcome()
            (agent if is_kept else w.agent()).materialize(replicas, outcome)
            patched.append(agent._workloads.desired.patches)
            local = [
                o
                for kind in (RESOURCE_CLAIM_TEMPLATE, DEPLOYMENT, NAMESPACE)
                for o in w.local.list(kind)
            ]
            out.append((outcome.created, outcome.updated, outcome.deleted, outcome.errors, local))
        if is_kept:
            # The desired set was patched from a change at least once (not made whole).
            assert patched[-1] > 0
        return out

    assert run(is_kept=True) == run(is_kept=False)


class RefusingStore(MemoryStore):
    """A cluster whose API server refuses to create Deployments while `is_refusing`."""

    is_refusing = True

    def create(self, obj: Obj) -> Obj:
        if self.is_refusing and obj.get("kind") == "Deployment":
            raise StoreError("admission webhook refused the Deployment")
        return super().create(obj)


def test_a_write_that_failed_is_tried_again_though_nothing_changed() -> None:
    """A pass looks again at the keys the last one wrote or failed to write: a refused
    create leaves the listing as it was, and is still tried (and reported) every pass."""
    w = World()
    w.local = RefusingStore(clock=w.clock, uid_seed="local")
    agent = w.agent()
    w.hub.create(model_replica("r1"))
    errors = []
    for refuses in (True, True, True, False, False):
        w.local.is_refusing = refuses
        outcome = StepOutcome()
        replicas = agent.read_replicas()
        assert replicas is not None
        agent.materialize(replicas, outcome)
        errors.append((outcome.errors, outcome.created))
    refused = ["apply Deployment ml/r1-main: admission webhook refused the Deployment"]
    assert errors == [
        (refused, ["ResourceClaimTemplate ml/r1-main-standalone", "PodDisruptionBudget ml/r1"]),
        (refused, []),
        (refused, []),
        ([], ["Deployment ml/r1-main"]),
        ([], []),
    ]


def test_a_workload_changed_by_someone_else_is_put_back() -> None:
    """The agent remembers which workloads already hold what it wants; a workload changed
    since (a new object) is compared again, even when its replica did not change."""
    w = World()
    agent = w.agent()
    w.hub.create(model_replica("r1"))
    agent.step(w.at(0))
    agent.step(w.at(1))
    dep = w.local.get(DEPLOYMENT, "r1-main", "ml")
    assert dep is not None
    dep["spec"]["replicas"] = 5
    del dep["metadata"]["labels"]["gpufleet.io/engine"]
    w.local.update(dep)
    out = agent.step(w.at(2))
    assert out.updated == ["Deployment ml/r1-main"]
    dep = w.local.get(DEPLOYMENT, "r1-main", "ml")
    assert dep is not None and dep["spec"]["replicas"] == 1
    assert dep["metadata"]["labels"]["gpufleet.io/engine"] == "main"
    # And left alone once it agrees again.
    before = w.local.revision
    assert agent.step(w.at(3)).updated == []
    assert w.local.revision == before


def test_a_workload_deleted_by_someone_else_is_created_again() -> None:
    w = World()
    agent = w.agent()
    w.hub.create(model_replica("r1"))
    agent.step(w.at(0))
    agent.step(w.at(1))
    w.local.delete(DEPLOYMENT, "r1-main", "ml")
    w.local.delete(RESOURCE_CLAIM_TEMPLATE, "r1-main-standalone", "ml")
    out = agent.step(w.at(2))
    assert sorted(out.created) == [
        "Deployment ml/r1-main",
        "ResourceClaimTemplate ml/r1-main-standalone",
    ]


def test_workloads_not_owned_by_the_agent_are_left_alone() -> None:
    w = World()
    w.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "someone-else", "namespace": "ml"},
            "spec": {"replicas": 1},
        }
    )
    w.agent().step(w.at(0))
    assert w.local.get(DEPLOYMENT, "someone-else", "ml") is not None


class NoLeaderWorkerSets(MemoryStore):
    """A cluster without the LeaderWorkerSet CRD: the API server answers 404 for the kind."""

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        if kind == LEADER_WORKER_SET:
            raise NotFound("the server could not find the requested resource")
        return super().list(kind, namespace, label_selector)

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        if kind == LEADER_WORKER_SET:
            raise NotFound("the server could not find the requested resource")
        return super().view(kind, namespace, label_selector)


def test_a_cluster_without_leaderworkersets_still_gets_its_deployments() -> None:
    w = World()
    w.local = NoLeaderWorkerSets(clock=w.clock, uid_seed="local")
    w.hub.create(model_replica("r1"))
    out = w.agent().step(w.at(0))
    assert out.errors == []
    assert [o["metadata"]["name"] for o in w.local.list(DEPLOYMENT, "ml")] == ["r1-main"]


class RacingStore(MemoryStore):
    """A store where another writer touches an object right before our first update of it
    (what a controller updating the Deployment's status does), so the update conflicts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.races = 0

    def update(self, obj: Obj) -> Obj:
        if self.races == 0:
            self.races += 1
            meta = obj["metadata"]
            self.patch_status(kind_of(obj), meta["name"], meta.get("namespace"), {"x": 1})
        return super().update(obj)


def test_conflicting_update_is_retried_after_rereading() -> None:
    w = World()
    w.local = RacingStore(clock=w.clock, uid_seed="local")
    agent = w.agent()
    w.hub.create(model_replica("r1"))
    agent.step(w.at(0))
    r1 = w.hub.get(MODEL_REPLICA, "ml.r1", NS)
    assert r1 is not None
    r1["spec"]["engines"][0]["copies"] = 2
    w.hub.update(r1)
    out = agent.step(w.at(1))
    assert (out.errors, out.updated) == ([], ["Deployment ml/r1-main"])
    dep = w.local.get(DEPLOYMENT, "r1-main", "ml")
    assert dep is not None and dep["spec"]["replicas"] == 2
    assert isinstance(w.local, RacingStore) and w.local.races == 1


# --- an unreachable hub -----------------------------------------------------------------


class Unreachable(StoreError):
    pass


class FlakyHub(ForwardingStore):
    """A hub that refuses every call (reads and writes alike) while `is_down`."""

    is_down = False

    def before_call(self) -> None:
        if self.is_down:
            raise Unreachable("hub down")


def test_unreachable_hub_changes_nothing_and_push_is_retried() -> None:
    w = World()
    hub = FlakyHub(w.hub)
    w.add(node("n0"), slice_("n0"))
    hub.create(model_replica("r1"))
    config = AgentConfig(min_push_interval_s=0, heartbeat_interval_s=1000)
    agent = Agent("a", w.local, hub, config, identity="agent-1", lease_epoch=1)
    agent.step(w.at(0))
    assert owned(w) == [
        "ResourceClaimTemplate r1-main-standalone replicas=-",
        "Deployment r1-main replicas=1",
        "PodDisruptionBudget r1 replicas=-",
    ]
    hub.is_down = True
    out = agent.step(w.at(5))
    assert (out.is_hub_reachable, out.is_pushed) == (False, False)
    assert owned(w) == [  # a partition is not "every replica was deleted"
        "ResourceClaimTemplate r1-main-standalone replicas=-",
        "Deployment r1-main replicas=1",
        "PodDisruptionBudget r1 replicas=-",
    ]
    hub.is_down = False
    w.add(node("n1"), slice_("n1"))
    assert agent.step(w.at(10)).is_pushed
    assert pool_status(w)["observedNodes"] == 2


# --- merge patches ----------------------------------------------------------------------

_AGENT_1 = {"identity": "agent-1", "leaseEpoch": 1, "leaseUID": "standalone"}


@pytest.mark.parametrize(
    "written",
    [
        {"x": 1, "agent": {"identity": "agent-1", "leaseEpoch": 1}, "observedAt": "T1"},
        {"x": 1, "agent": {"identity": "agent-1", "leaseEpoch": 1}, "observedAt": "T2"},
        {"x": 1, "agent": {"identity": "agent-1", "leaseEpoch": 2}, "observedAt": "T1"},
        {"x": 1, "agent": {"identity": "agent-1", "leaseEpoch": 1, "more": 0}},
        {"x": 1, "agent": {"identity": "agent-1", "leaseEpoch": 1}},
        {"x": 1, "agent": None, "observedAt": "T1"},
        {"x": 1, "observedAt": "T1"},
    ],
    ids=["same", "time", "epoch", "agent-field", "no-time", "null-agent", "no-agent"],
)
def test_a_heartbeat_patch_is_the_merge_patch_of_the_stamp(written: Obj) -> None:
    """Unchanged content: the patch is the merge patch from the stamp as written to the new
    stamp, which a heartbeat (the agent as written) tells without diffing."""
    content = {"x": 1}
    stamp = {"agent": {"identity": "agent-1", "leaseEpoch": 1}, "observedAt": "T2"}
    want = merge_patch({k: written[k] for k in stamp if k in written}, stamp)
    assert _status_patch(written, content, content, stamp) == want


def test_replicas_read_again_are_the_replicas_not_being_deleted() -> None:
    """Reading the same replicas again reuses the last filtering (a new list each time);
    a replica being deleted (held by a finalizer) drops out as soon as it is marked."""
    w = World()
    for name in ("r1", "r2"):
        replica = model_replica(name)
        replica["metadata"]["finalizers"] = ["gpufleet.io/cleanup"]
        w.hub.create(replica)
    agent = w.agent()

    def names() -> list[str]:
        replicas = agent.read_replicas()
        assert replicas is not None
        found = [r["metadata"]["name"] for r in replicas]
        replicas.clear()  # the caller's list: the next read is not changed by it
        return found

    assert [names(), names()] == [["r1", "r2"], ["r1", "r2"]]
    w.hub.delete(MODEL_REPLICA, "ml.r1", NS)
    assert [names(), names()] == [["r2"], ["r2"]]
