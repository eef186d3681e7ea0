"""End to end over HTTP: the hub controller and two agents of one workload cluster, as the
`gpufleet controller` and `gpufleet agent` daemons compose them, against two emulated API
servers (hub and workload cluster).

The daemons' loops are driven by `tick()` on clocks of their own that the test advances, so
leases lapse and debounces elapse without sleeping; only the informers (real watches over HTTP)
run in real time, and every wait for them is bounded.

Both servers refuse objects in namespaces that do not exist, as a real API server does (so the
agent must create a tenant's namespace before its workloads). Each component talks with a token
of its own; at the end every request it sent is checked against the RBAC `gpufleet install`
gives its ServiceAccount (tests/kube/rbac.py), and a step that reported an error fails the test
as a step that raised does.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
import yaml
from kmockplus import Served, serve
from kube_helpers import FAST
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from rbac import Rbac, ServiceAccount

from gpufleet.agent.gates import ASSIGNED_NODE, is_gated
from gpufleet.agent.runner import AgentConfig
from gpufleet.agent.steer import GATE, HOSTNAME_KEY
from gpufleet.api.names import replica_object_name, replica_origin_of
from gpufleet.cli.agent import AgentDaemon
from gpufleet.cli.controller import ControllerDaemon
from gpufleet.core import labels
from gpufleet.core.decision import replica_name
from gpufleet.kube import install
from gpufleet.kube.agent_token import secret_writer
from gpufleet.kube.daemon import DaemonLoop, LoopConfig, Trigger
from gpufleet.kube.join import SECRET, request_token
from gpufleet.kube.leader import LeaderConfig
from gpufleet.kube.metrics import render
from gpufleet.kube.store import KubeStore
from gpufleet.store import StoreError
from gpufleet.store.port import (
    DEPLOYMENT,
    EVENT,
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    LEADER_WORKER_SET,
    LEASE,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    NAMESPACE,
    POD,
    POD_DISRUPTION_BUDGET,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    RESOURCE_CLAIM_TEMPLATE,
    Obj,
    kind_of,
)

pytestmark = pytest.mark.timeout(30)

API = "gpufleet.io/v1alpha1"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
CLUSTER = "a"
OBS_NS = f"gpufleet-cluster-{CLUSTER}"
LEASE_NS = "gpufleet-system"
AGENT_LEASE = LeaderConfig("gpufleet-agent", LEASE_NS, 15, 10.0, 2.0)
CONTROLLER_LEASE = LeaderConfig("gpufleet-controller", LEASE_NS, 15, 10.0, 2.0)
#: Resync far away: a step in these tests is triggered by a change (or a term start).
LOOP = LoopConfig(debounce_s=0.5, resync_period_s=3600.0, error_backoff_s=1.0)
AGENT = AgentConfig(heartbeat_interval_s=30.0, min_push_interval_s=2.0)
#: Who sends what: each component's bearer token and the ServiceAccount it stands for.
CONTROLLER_TOKEN, AGENT_HUB_TOKEN, AGENT_TOKEN = "controller", "agent-on-hub", "agent"
HUB_SUBJECTS = {
    CONTROLLER_TOKEN: ServiceAccount(LEASE_NS, "gpufleet-controller"),
    AGENT_HUB_TOKEN: ServiceAccount(OBS_NS, f"gpufleet-agent-{CLUSTER}"),
}
WORKLOAD_SUBJECTS = {AGENT_TOKEN: ServiceAccount(LEASE_NS, "gpufleet-agent")}
#: Another cluster's agent on the hub: enforced, never checked at the end (it is refused on
#: purpose, `test_another_clusters_agent_is_refused_this_clusters_namespace`).
OTHER_AGENT_TOKEN, OTHER_CLUSTER = "other-agent-on-hub", "b"
OTHER_AGENT = ServiceAccount(f"gpufleet-cluster-{OTHER_CLUSTER}", f"gpufleet-agent-{OTHER_CLUSTER}")
#: What `gpufleet install` (and `gpufleet join`, for the agents' hub side) grant.
HUB_RBAC = Rbac(
    [
        *install.hub(tenant_namespaces=("ml", "other")),
        *install.agent_hub_access(CLUSTER),
        *install.agent_hub_access(OTHER_CLUSTER),
    ]
)
WORKLOAD_RBAC = Rbac(install.agent(CLUSTER))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


# --- objects ----------------------------------------------------------------------------------


def gpu_class() -> Obj:
    device = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "claim": "DRA",
        "deviceClassName": "gpu.nvidia.com",
        "count": 4,
    }
    return {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": "l4-4x"},
        "spec": {"devices": [device]},
    }


def inference_cluster() -> tuple[Obj, Obj]:
    """The cluster and the status its platform team gives it (Ready, a gateway)."""
    body = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": CLUSTER, "labels": {"gpufleet.io/region": "r1"}},
        "spec": {"nodePools": [{"name": "l4", "className": "l4-4x", "nodeCount": 2}]},
    }
    status = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "PlatformReady",
                "message": "",
                "lastTransitionTime": "2026-11-29T09:00:00Z",
            }
        ],
        "gateway": {"address": "10.0.0.1"},
    }
    return body, status


def model_deployment(replicas: int = 1) -> Obj:
    member = {
        "role": "Standalone",
        "nodeSelector": {
            "devices": [
                {
                    "name": "gpu",
                    "count": 2,
                    "selectors": [{"cel": 'device.driver == "gpu.nvidia.com"'}],
                }
            ]
        },
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}},
    }
    return {
        "apiVersion": API,
        "kind": "ModelDeployment",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"engines": [{"name": "main", "copies": 1, "members": [member]}]}},
        },
    }


def node(name: str) -> tuple[Obj, Obj]:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpufleet.io/pool": "l4"}},
        "spec": {"taints": []},
    }
    return body, {"conditions": [{"type": "Ready", "status": "True"}]}


def resource_slice(node_name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": [{"name": f"gpu-{i}"} for i in range(4)],
        },
    }


def foreign_claim(node_name: str, devices: range) -> tuple[Obj, Obj]:
    """Another tenant's claim, allocated on `node_name`."""
    return foreign_claim_on(node_name, "someone-elses", devices)


def foreign_claim_on(node_name: str, name: str, devices: range) -> tuple[Obj, Obj]:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"devices": {"requests": []}},
    }
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node_name, "device": f"gpu-{i}"}
        for i in devices
    ]
    return body, {"allocation": {"devices": {"results": results}}}


def create(store: KubeStore, body: Obj, status: Obj | None = None) -> Obj:
    created = store.create(body)
    if status is not None:
        meta = created["metadata"]
        created = store.patch_status(kind_of(created), meta["name"], meta.get("namespace"), status)
    return created


# --- the fleet --------------------------------------------------------------------------------


@dataclass
class Daemon:
    loop: DaemonLoop
    clock: Clock
    #: The errors the last step reported (a step that reports errors has not raised).
    step_errors: Callable[[], list[str]]

    def tick(self, seconds: float = 0.25) -> Trigger | None:
        self.clock.advance(seconds)
        trigger = self.loop.tick()
        errors = self.step_errors()
        assert not errors, f"a step reported errors: {errors}"
        return trigger


@dataclass
class Fleet:
    hub_api: Served
    workload_api: Served
    hub: KubeStore  # the test's own view of each server
    workload: KubeStore
    controller: ControllerDaemon
    agents: dict[str, AgentDaemon]
    daemons: dict[str, Daemon] = field(default_factory=dict)

    def run_until(
        self, done: Callable[[], bool], *names: str, what: str, timeout_s: float = 10.0
    ) -> None:
        """Tick the named daemons (a quarter second of their time each round) until `done`."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"never happened: {what}")
            for name in names:
                self.daemons[name].tick()
            time.sleep(0.02)  # let the informers deliver

    def replicas(self) -> list[Obj]:
        return self.hub.list(MODEL_REPLICA, OBS_NS)

    def pool_observation(self) -> Obj | None:
        return self.hub.get(POOL_OBSERVATION, "l4", OBS_NS)


def last_trigger(loop: DaemonLoop) -> Trigger | None:
    return loop.last_trigger  # read afresh (mypy narrows an attribute across asserts)


def histogram(observation: Obj | None) -> dict[int, int]:
    status = (observation or {}).get("status") or {}
    return {b["free"]["gpu.nvidia.com"]: b["nodes"] for b in status.get("freeDevices") or []}


def epoch_of(observation: Obj | None) -> int | None:
    agent = ((observation or {}).get("status") or {}).get("agent") or {}
    epoch = agent.get("leaseEpoch")
    return epoch if isinstance(epoch, int) else None


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def controller_errors(controller: ControllerDaemon) -> Callable[[], list[str]]:
    return lambda: list(controller.last_result.errors) if controller.last_result else []


def agent_errors(agent: AgentDaemon) -> Callable[[], list[str]]:
    return lambda: list(agent.last_outcome.errors) if agent.last_outcome else []


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    stores: list[KubeStore] = []

    def store(served: Served, token: str | None = None) -> KubeStore:
        stores.append(KubeStore.from_url(served.url, FAST, token=token))
        return stores[-1]

    with serve(strict_namespaces=True) as hub_api, serve(strict_namespaces=True) as workload_api:
        try:
            hub, workload = store(hub_api), store(workload_api)
            # What `gpufleet install` and `gpufleet join` create, and the tenants' namespaces.
            for ns in (LEASE_NS, OBS_NS, "ml"):
                create(hub, namespace(ns))
            for ns in (LEASE_NS, "other"):
                create(workload, namespace(ns))
            create(hub, gpu_class())
            create(hub, *inference_cluster())
            # Both servers enforce the installed RBAC on the components' tokens (403).
            hub_api.api.authorize = HUB_RBAC.authorizer(
                {**HUB_SUBJECTS, OTHER_AGENT_TOKEN: OTHER_AGENT}
            )
            workload_api.api.authorize = WORKLOAD_RBAC.authorizer(WORKLOAD_SUBJECTS)
            clock = Clock()
            controller = ControllerDaemon(
                store(hub_api, CONTROLLER_TOKEN),
                "controller-0",
                clock,
                leader=CONTROLLER_LEASE,
                loop_config=LOOP,
            )
            fleet = Fleet(hub_api, workload_api, hub, workload, controller, {})
            fleet.daemons["controller"] = Daemon(
                controller.loop, clock, controller_errors(controller)
            )
            for name in ("agent-a", "agent-b"):
                clock = Clock()
                agent = AgentDaemon(
                    CLUSTER,
                    store(workload_api, AGENT_TOKEN),
                    store(hub_api, AGENT_HUB_TOKEN),
                    name,
                    clock,
                    leader=AGENT_LEASE,
                    loop_config=LOOP,
                    config=AGENT,
                )
                fleet.agents[name] = agent
                fleet.daemons[name] = Daemon(agent.loop, clock, agent_errors(agent))
            yield fleet
            for name, daemon in fleet.daemons.items():
                assert daemon.loop.failures == 0, (
                    f"a step of {name} raised: {daemon.loop.last_error}"
                )
            for s in stores:  # no request is in flight while the RBAC is checked
                s.close()
            check_rbac(hub_api, workload_api)
        finally:
            for s in stores:
                s.close()


#: What each component's requests exercised, over the tests of this module that ran so far.
EXERCISED: dict[ServiceAccount, set[tuple[str, str, str]]] = {}
RUNS: list[int] = []


def check_rbac(hub_api: Served, workload_api: Served) -> None:
    """Every request a component sent is one its installed RBAC allows."""
    for served, rbac, subjects in [
        (hub_api, HUB_RBAC, HUB_SUBJECTS),
        (workload_api, WORKLOAD_RBAC, WORKLOAD_SUBJECTS),
    ]:
        seen = list(served.api.requests_seen)
        assert {r.user for r in seen} & set(subjects), "no component sent anything"
        assert rbac.denied(seen, subjects) == []
        for r in seen:
            if r.user in subjects:
                resource = r.resource + (f"/{r.subresource}" if r.subresource else "")
                EXERCISED.setdefault(subjects[r.user], set()).add((r.group, resource, r.verb))
    RUNS.append(1)


def start_reporting(fleet: Fleet) -> None:
    """Agent a leads (epoch 0), b stands by; a reports 2 nodes: one with 2 free, one with 4."""
    assert fleet.daemons["agent-a"].tick() is Trigger.START
    assert fleet.daemons["agent-b"].tick() is None
    assert fleet.agents["agent-a"].loop.epoch == 0 and not fleet.agents["agent-b"].loop.is_leading()
    for name in ("n1", "n2"):
        create(fleet.workload, *node(name))
        create(fleet.workload, resource_slice(name))
    create(fleet.workload, *foreign_claim("n1", range(2)))
    fleet.run_until(
        lambda: histogram(fleet.pool_observation()) == {2: 1, 4: 1},
        "agent-a",
        "agent-b",
        what="agent a publishes the histogram {2 free: 1 node, 4 free: 1 node}",
    )


def test_agent_reports_controller_places_agent_materializes(fleet: Fleet) -> None:
    start_reporting(fleet)
    observation = fleet.pool_observation()
    assert observation is not None
    lease = fleet.workload.get(LEASE, AGENT_LEASE.lease_name, LEASE_NS)
    assert lease is not None
    # The Lease's uid is the incarnation the reports are fenced by (issue 17, point 2).
    assert observation["status"]["agent"] == {
        "identity": "agent-a",
        "leaseEpoch": 0,
        "leaseUID": lease["metadata"]["uid"],
    }
    assert observation["status"]["observedNodes"] == 2

    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(
        lambda: len(fleet.replicas()) == 1, "controller", what="the controller places a replica"
    )
    replica = fleet.replicas()[0]
    assert replica["metadata"]["labels"]["gpufleet.io/cluster"] == CLUSTER
    cluster = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER)
    assert cluster is not None
    pool = cluster["status"]["gpuPools"][0]
    assert pool["observation"]["freeDevices"] == observation["status"]["freeDevices"]

    # In the cluster's hub namespace, tied to its deployment by labels (no owner reference).
    assert replica["metadata"]["namespace"] == OBS_NS
    assert replica["metadata"]["labels"]["gpufleet.io/deployment-namespace"] == "ml"
    # The agent sees the replica through its watch of its hub namespace and materializes it
    # in the deployment's namespace, under the replica's own name.
    tenant, name = replica_origin_of(replica["metadata"])
    assert (tenant, f"{tenant}.{name}") == ("ml", replica["metadata"]["name"])

    def materialized() -> bool:
        selector = {"gpufleet.io/replica": name}
        return bool(fleet.workload.list(DEPLOYMENT, "ml", selector)) and bool(
            fleet.workload.list(RESOURCE_CLAIM_TEMPLATE, "ml", selector)
        )

    fleet.run_until(materialized, "agent-a", "agent-b", what="the agent materializes the replica")
    # The workload cluster had no namespace "ml": the agent created it (its RBAC lets it).
    assert fleet.workload.get(NAMESPACE, "ml") is not None
    assert fleet.agents["agent-a"].loop.last_trigger is Trigger.CHANGE
    # The standby never wrote anything: it has no term, hence no Agent.
    assert fleet.agents["agent-b"].agent is None

    controller_metrics = render(fleet.controller.registry).decode()
    assert 'gpufleet_placements_total{cluster="a"} 1.0' in controller_metrics
    assert 'gpufleet_leader{component="controller"} 1.0' in controller_metrics
    assert 'gpufleet_observation_age_seconds{cluster="a",pool="l4"}' in controller_metrics
    assert "gpufleet_decision_duration_seconds_count" in controller_metrics
    agent_metrics = render(fleet.agents["agent-a"].registry).decode()
    assert 'gpufleet_agent_reports_total{result="pushed"}' in agent_metrics
    assert 'gpufleet_leader{component="agent"} 1.0' in agent_metrics
    assert 'gpufleet_lease_epoch{component="agent"} 0.0' in agent_metrics
    standby_metrics = render(fleet.agents["agent-b"].registry).decode()
    assert 'gpufleet_leader{component="agent"} 0.0' in standby_metrics


def test_the_agent_pushes_a_change_within_seconds_and_a_heartbeat_when_idle(
    fleet: Fleet,
) -> None:
    start_reporting(fleet)
    a = fleet.daemons["agent-a"]
    # Settle: the push that showed the histogram may leave one requested step behind.
    for _ in range(12):
        a.tick()
    pushed_at = a.clock()
    create(fleet.workload, *foreign_claim_on("n2", "late", range(1)))
    fleet.run_until(
        lambda: histogram(fleet.pool_observation()) == {2: 1, 3: 1},
        "agent-a",
        what="agent a pushes the new claim",
    )
    # Within the debounce and the minimum push interval of the agent's own time.
    latency_s = (a.clock() - pushed_at).total_seconds()
    assert latency_s <= LOOP.debounce_s + 0.5
    assert fleet.agents["agent-a"].loop.last_trigger is Trigger.CHANGE

    # A change soon after a push waits until the minimum push interval since that push ends
    # (not a whole interval after the step that could not push), then goes out.
    pushed_at = a.clock()
    a.tick(1.5)
    create(fleet.workload, *foreign_claim_on("n2", "later", range(1, 2)))
    fleet.run_until(
        lambda: histogram(fleet.pool_observation()) == {2: 2},
        "agent-a",
        what="agent a pushes the second claim",
    )
    latency_s = (a.clock() - pushed_at).total_seconds()
    assert AGENT.min_push_interval_s <= latency_s <= AGENT.min_push_interval_s + 0.25  # + a tick
    # The held push goes out on the step the loop requested for that instant, unless a watch
    # event (the claim's own status, arriving late on a loaded machine) wakes it first: either
    # way at the end of the interval, which the latency above checks.
    assert last_trigger(fleet.agents["agent-a"].loop) in (Trigger.REQUESTED, Trigger.CHANGE)

    observation = fleet.pool_observation()
    assert observation is not None
    observed_at = observation["status"]["observedAt"]
    a.tick(AGENT.heartbeat_interval_s)
    assert last_trigger(fleet.agents["agent-a"].loop) is Trigger.RESYNC
    heartbeat = fleet.pool_observation()
    assert heartbeat is not None and heartbeat["status"]["observedAt"] != observed_at
    assert histogram(heartbeat) == {2: 2}


def test_standby_takes_over_when_the_lease_lapses_and_an_old_epoch_is_rejected(
    fleet: Fleet,
) -> None:
    start_reporting(fleet)
    fleet.run_until(
        lambda: fleet.controller.loop.steps > 0, "controller", what="the controller steps"
    )
    old_agent = fleet.agents["agent-a"].agent
    assert old_agent is not None and old_agent.lease_epoch == 0

    # Agent a dies without releasing its Lease. b takes over once the record it last saw has not
    # changed for the lease duration on b's own clock, and no sooner.
    b = fleet.daemons["agent-b"]
    b.tick(AGENT_LEASE.retry_period_s)
    b.tick(AGENT_LEASE.lease_duration_s - 3)
    assert not fleet.agents["agent-b"].loop.is_leading()
    fleet.run_until(
        lambda: epoch_of(fleet.pool_observation()) == 1,
        "agent-b",
        what="agent b leads with epoch 1 and reports under it",
    )
    lease = fleet.workload.get(LEASE, AGENT_LEASE.lease_name, LEASE_NS)
    assert lease is not None
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("agent-b", 1)
    # The next leader of the same Lease: the same incarnation, the next epoch.
    assert fleet.pool_observation()["status"]["agent"]["leaseUID"] == lease["metadata"]["uid"]  # type: ignore[index]

    def accepted_epoch() -> int | None:
        cluster = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER) or {}
        return ((cluster.get("status") or {}).get("agent") or {}).get("leaseEpoch")

    fleet.run_until(
        lambda: accepted_epoch() == 1, "controller", what="the controller accepts epoch 1"
    )

    # The old leader, partitioned from its own Lease but not from the hub, reports once more.
    fleet.daemons["agent-a"].clock.advance(AGENT.heartbeat_interval_s)
    outcome = old_agent.step(fleet.daemons["agent-a"].clock())
    assert outcome.is_pushed and epoch_of(fleet.pool_observation()) == 0

    def stale_events() -> list[Obj]:
        return [e for e in fleet.hub.list(EVENT) if e.get("reason") == "StaleAgentReport"]

    fleet.run_until(
        lambda: bool(stale_events()), "controller", what="a StaleAgentReport event is written"
    )
    result = fleet.controller.last_result
    assert result is not None and result.rejected_reports
    assert "lease epoch 0 ignored" in result.rejected_reports[0]
    event = stale_events()[0]
    assert event["involvedObject"]["name"] == CLUSTER and event["type"] == "Warning"
    assert accepted_epoch() == 1  # the cluster still trusts epoch 1 only
    metrics = render(fleet.controller.registry).decode()
    assert "gpufleet_rejected_reports_total 1.0" in metrics


def test_the_controller_loop_still_reacts_after_its_watches_are_killed(fleet: Fleet) -> None:
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="first placement")
    # Let the loop settle: the steps its own writes triggered have run.
    for _ in range(8):
        fleet.daemons["controller"].tick(1.0)
        time.sleep(0.02)
    steps = fleet.controller.loop.steps

    fleet.hub_api.api.kill_watches()
    deployment = fleet.hub.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert deployment is not None
    deployment["spec"]["replicas"] = 2
    fleet.hub.update(deployment)
    fleet.run_until(
        lambda: len(fleet.replicas()) == 2,
        "controller",
        what="the controller places the second replica after its watch broke",
    )
    assert fleet.controller.loop.steps > steps
    assert fleet.controller.loop.last_trigger is Trigger.CHANGE  # not a resync: it is an hour


def test_another_clusters_agent_is_refused_this_clusters_namespace(fleet: Fleet) -> None:
    """With the RBAC `gpufleet join` gives it, cluster b's agent reads its own namespace and
    is refused cluster a's replicas and observations, every namespace at once, and the
    cluster-scoped InferenceClusters and InferenceClasses (403 from the hub)."""
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a placement on a")
    other = KubeStore.from_url(fleet.hub_api.url, FAST, token=OTHER_AGENT_TOKEN)
    try:
        assert other.list(MODEL_REPLICA, OTHER_AGENT.namespace) == []
        refused = [
            lambda: other.list(MODEL_REPLICA, OBS_NS),
            lambda: other.list(MODEL_REPLICA),
            lambda: other.get(POOL_OBSERVATION, "l4", OBS_NS),
            lambda: other.list(INFERENCE_CLUSTER),
            lambda: other.get(INFERENCE_CLUSTER, CLUSTER),
            lambda: other.list(INFERENCE_CLASS),
        ]
        for read in refused:
            with pytest.raises(StoreError, match=r"403|[Ff]orbidden"):
                read()
    finally:
        other.close()


def test_the_controller_deletes_the_replicas_of_a_deleted_deployment(fleet: Fleet) -> None:
    """No owner reference can reach a replica in its cluster's namespace: the controller
    deletes it when its deployment goes (within its RBAC), and the agent its workloads."""
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a placement")
    fleet.run_until(
        lambda: bool(fleet.workload.list(DEPLOYMENT, "ml")),
        "agent-a",
        what="the agent materializes it",
    )
    fleet.hub.delete(MODEL_DEPLOYMENT, "llama", "ml")
    fleet.run_until(
        lambda: fleet.replicas() == [], "controller", what="the controller deletes the replica"
    )
    fleet.run_until(
        lambda: fleet.workload.list(DEPLOYMENT, "ml") == [],
        "agent-a",
        what="the agent deletes its workloads",
    )


def test_the_agent_reports_a_pool_gone_on_an_observation_it_did_not_write(fleet: Fleet) -> None:
    """A PoolObservation in the cluster's namespace for a pool the agent does not have (left by
    an earlier agent, or written by someone else with another spec): the agent takes it over,
    its spec updated to this cluster's (its `update` of PoolObservations), and reports it
    empty; it never deletes one."""
    create(
        fleet.hub,
        {
            "apiVersion": API,
            "kind": "PoolObservation",
            "metadata": {"name": "old", "namespace": OBS_NS},
            "spec": {"clusterName": "elsewhere", "poolName": "old"},
        },
    )
    start_reporting(fleet)

    def taken_over() -> bool:
        old = fleet.hub.get(POOL_OBSERVATION, "old", OBS_NS)
        return old is not None and old["spec"]["clusterName"] == CLUSTER and "status" in old

    fleet.run_until(taken_over, "agent-a", what="the agent reports the pool gone")
    old = fleet.hub.get(POOL_OBSERVATION, "old", OBS_NS)
    assert old is not None and not old["status"].get("freeDevices")


def test_the_agent_puts_back_a_workload_someone_changed(fleet: Fleet) -> None:
    """Someone edits the Deployment the agent materialized: the agent reads the latest version
    and puts its own spec back (its `get` and `update` of Deployments and PodDisruptionBudgets;
    a ResourceClaimTemplate's spec is immutable, so that one is re-created)."""
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a placement")
    fleet.run_until(
        lambda: bool(fleet.workload.list(DEPLOYMENT, "ml")), "agent-a", what="materialized"
    )
    [deployment] = fleet.workload.list(DEPLOYMENT, "ml")
    want = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/other"
    fleet.workload.update(deployment)

    def put_back() -> bool:
        [now] = fleet.workload.list(DEPLOYMENT, "ml")
        return bool(now["spec"]["template"]["spec"]["containers"][0]["image"] == want)

    fleet.run_until(put_back, "agent-a", "controller", what="the agent puts its spec back")
    # And so its ResourceClaimTemplate and PodDisruptionBudget.
    [template] = fleet.workload.list(RESOURCE_CLAIM_TEMPLATE, "ml")
    [budget] = fleet.workload.list(POD_DISRUPTION_BUDGET, "ml")
    template_spec, budget_spec = template["spec"], budget["spec"]
    template["spec"] = {"spec": {"devices": {"requests": []}}}
    budget["spec"] = {**budget_spec, "maxUnavailable": 7}
    budget["spec"].pop("minAvailable", None)
    fleet.workload.update(template)
    fleet.workload.update(budget)

    def both_back() -> bool:
        [t] = fleet.workload.list(RESOURCE_CLAIM_TEMPLATE, "ml")
        [b] = fleet.workload.list(POD_DISRUPTION_BUDGET, "ml")
        return bool(t["spec"] == template_spec and b["spec"] == budget_spec)

    fleet.run_until(both_back, "agent-a", "controller", what="the agent puts both back")


def test_a_restarted_controller_counts_a_repeated_event_up(fleet: Fleet) -> None:
    """A new controller process records the events of the state it finds again (here a
    deployment's InvalidSpec warning): under the same name, so the API server answers
    AlreadyExists and the controller reads the Event and updates its count (its `get` and
    `update` of Events)."""
    start_reporting(fleet)
    invalid = model_deployment(replicas=1)
    member = invalid["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"] = [{"cel": "device.driver =="}]
    create(fleet.hub, invalid)

    def events() -> dict[str, int]:
        return {e["metadata"]["name"]: e.get("count", 1) for e in fleet.hub.list(EVENT, "ml")}

    fleet.run_until(lambda: bool(events()), "controller", what="an InvalidSpec event")
    first = events()
    clock = fleet.daemons["controller"].clock
    hub = KubeStore.from_url(fleet.hub_api.url, FAST, token=CONTROLLER_TOKEN)
    try:
        restarted = ControllerDaemon(
            hub, "controller-0", clock, leader=CONTROLLER_LEASE, loop_config=LOOP
        )
        fleet.daemons["controller"] = Daemon(restarted.loop, clock, controller_errors(restarted))

        def counted_up() -> bool:
            now = events()
            return any(now.get(name, 0) > count for name, count in first.items())

        fleet.run_until(counted_up, "controller", what="a repeated Event counted up")
    finally:
        hub.close()


def test_the_agent_renews_its_hub_token_and_writes_it_to_its_secret(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The renewal's two requests (`gpufleet.kube.agent_token`), each with the agent's own
    token and within its grants: a TokenRequest for its own hub ServiceAccount, and a patch of
    its hub kubeconfig Secret on the workload cluster (tests/kube/test_kube_renewal.py runs the
    renewal itself, on time)."""
    start_reporting(fleet)
    account = install.agent_identity(CLUSTER)
    _post(
        f"{fleet.hub_api.url}/api/v1/namespaces/{OBS_NS}/serviceaccounts",
        {"metadata": {"name": account, "namespace": OBS_NS}},
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_kubeconfig(fleet.hub_api.url, AGENT_HUB_TOKEN)))
    _post(
        f"{fleet.workload_api.url}/api/v1/namespaces/{LEASE_NS}/secrets",
        {
            "metadata": {"name": install.HUB_SECRET, "namespace": LEASE_NS},
            "data": {
                install.HUB_KUBECONFIG_KEY: base64.b64encode(kubeconfig.read_bytes()).decode()
            },
        },
    )
    hub = Client(KubeConfig.from_dict(_kubeconfig(fleet.hub_api.url, AGENT_HUB_TOKEN)))
    try:
        token, _ = request_token(hub, OBS_NS, account, 600)
    finally:
        hub.close()
    member = KubeConfig.from_dict(_kubeconfig(fleet.workload_api.url, AGENT_TOKEN))
    secret_writer(AGENT_HUB_TOKEN, member, (LEASE_NS, install.HUB_SECRET), kubeconfig)(token)
    secret = fleet.workload.get(SECRET_KIND, install.HUB_SECRET, LEASE_NS)
    assert secret is not None
    written = yaml.safe_load(base64.b64decode(secret["data"][install.HUB_KUBECONFIG_KEY]))
    assert written["users"][0]["user"]["token"] == token != AGENT_HUB_TOKEN


SECRET_KIND = SECRET


def _post(url: str, obj: dict[str, object]) -> None:
    """Create an object as the test's admin (no bearer token): kinds KubeStore does not know."""
    created = httpx2.post(url, json=obj, timeout=10)
    assert created.status_code == 201, created.text


def _kubeconfig(url: str, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }


def test_the_agent_writes_a_replicas_observation_and_deletes_it_with_the_replica(
    fleet: Fleet,
) -> None:
    """The hub agent reports each replica it runs on a ReplicaObservation of the replica's name
    in its cluster's namespace: it reads it (`get`), creates it and writes its status (`patch`
    of replicaobservations/status); one someone else gave another spec it updates (`update`);
    once the replica is gone it deletes it (`delete`)."""
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a placement")
    name = fleet.replicas()[0]["metadata"]["name"]

    def observation() -> Obj | None:
        return fleet.hub.get(REPLICA_OBSERVATION, name, OBS_NS)

    def reported() -> bool:
        found = observation()
        return found is not None and bool(found.get("status"))

    fleet.run_until(reported, "agent-a", what="the agent reports the replica")
    found = observation()
    assert found is not None
    assert found["spec"] == {
        "clusterName": CLUSTER,
        "replicaName": name,
        "replicaNamespace": OBS_NS,
    }
    assert found["status"]["agent"]["identity"] == "agent-a"

    # Someone else gives it another spec: the agent puts its own back, and its status.
    found["spec"] = {**found["spec"], "clusterName": "elsewhere"}
    fleet.hub.update(found)

    def put_back() -> bool:
        now = observation()
        return now is not None and now["spec"]["clusterName"] == CLUSTER

    fleet.run_until(put_back, "agent-a", what="the agent puts its spec back")

    fleet.hub.delete(MODEL_DEPLOYMENT, "llama", "ml")
    fleet.run_until(lambda: fleet.replicas() == [], "controller", what="the replica is deleted")
    fleet.run_until(
        lambda: observation() is None, "agent-a", what="the agent deletes its observation"
    )


def gang_deployment() -> Obj:
    """One copy of a Leader and one Worker node, two GPUs each: a LeaderWorkerSet."""
    body = model_deployment(replicas=1)
    [engine] = body["spec"]["template"]["spec"]["engines"]
    leader = {**engine["members"][0], "role": "Leader"}
    engine["members"] = [leader, {**leader, "role": "Worker", "worker": {"nodes": 1}}]
    return body


def test_a_gang_replica_is_a_leader_worker_set_the_agent_keeps_and_deletes(fleet: Fleet) -> None:
    """A Leader/Worker engine materializes as a LeaderWorkerSet (its `create`); one someone
    edits the agent reads again and puts back (`get`, `update`); it goes with its replica
    (`delete`)."""
    start_reporting(fleet)
    create(fleet.hub, gang_deployment())
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a gang placement")

    def sets() -> list[Obj]:
        return fleet.workload.list(LEADER_WORKER_SET, "ml")

    fleet.run_until(lambda: bool(sets()), "agent-a", what="the agent creates a LeaderWorkerSet")
    [made] = sets()
    assert made["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert fleet.workload.list(DEPLOYMENT, "ml") == []
    want = made["spec"]["replicas"]
    made["spec"]["replicas"] = want + 3
    fleet.workload.update(made)
    fleet.run_until(
        lambda: [s["spec"]["replicas"] for s in sets()] == [want],
        "agent-a",
        "controller",
        what="the agent puts its LeaderWorkerSet back",
    )

    fleet.hub.delete(MODEL_DEPLOYMENT, "llama", "ml")
    fleet.run_until(lambda: fleet.replicas() == [], "controller", what="the replica is deleted")
    fleet.run_until(lambda: sets() == [], "agent-a", what="the agent deletes its LeaderWorkerSet")


def test_gated_steering_pins_each_pod_to_its_node_and_lifts_its_gate(fleet: Fleet) -> None:
    """On a cluster that steers `Gated`, the agent's Deployment makes its pods behind the
    gate `gpufleet.io/steer`; the agent pins each one to the node the fit chose for it and
    lifts the gate, in one `update` of the pod (the emulated server has no ReplicaSet
    controller: the test makes the pod from the Deployment's template, as one would)."""
    cluster = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER)
    assert cluster is not None
    cluster["spec"]["steering"] = "Gated"
    fleet.hub.update(cluster)
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="a placement")
    fleet.run_until(
        lambda: bool(fleet.workload.list(DEPLOYMENT, "ml")), "agent-a", what="materialized"
    )
    [deployment] = fleet.workload.list(DEPLOYMENT, "ml")
    template = deployment["spec"]["template"]
    assert {"name": GATE} in template["spec"]["schedulingGates"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-0",
            "namespace": "ml",
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"].get("annotations") or {},
        },
        "spec": template["spec"],
    }
    create(fleet.workload, pod)

    def pinned() -> Obj | None:
        [now] = fleet.workload.list(POD, "ml")
        return None if is_gated(now) else now

    fleet.run_until(lambda: pinned() is not None, "agent-a", what="the agent lifts the gate")
    lifted = pinned()
    assert lifted is not None
    node = lifted["metadata"]["annotations"][ASSIGNED_NODE]
    # The fit needs 2 free GPUs on one node: either node has them.
    assert node in ("n1", "n2")
    terms = lifted["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(
        {"key": HOSTNAME_KEY, "operator": "In", "values": [node]} in t["matchExpressions"]
        for t in terms
    )


def settle(fleet: Fleet, *names: str, ticks: int = 8) -> None:
    """Let the named daemons run the steps their own writes triggered."""
    for _ in range(ticks):
        for name in names:
            fleet.daemons[name].tick(1.0)
        time.sleep(0.02)


def test_the_controller_adopts_a_replica_its_view_has_not_shown_yet(fleet: Fleet) -> None:
    """The controller's view of ModelReplicas lags (its watch went silent) and the replica it
    is about to create is already there, made for the same deployment (by a leader before it,
    say): its create is answered AlreadyExists, so it reads the replica (`get` of
    modelreplicas) and makes it its own (`update`): the same object, with the placement's
    labels, not a second one nor an error."""
    start_reporting(fleet)
    create(fleet.hub, model_deployment(replicas=1))
    fleet.run_until(lambda: len(fleet.replicas()) == 1, "controller", what="first placement")
    settle(fleet, "controller")
    [first] = fleet.replicas()
    assert first["metadata"]["name"] == replica_object_name("ml", replica_name("llama", CLUSTER, 0))
    assert first["metadata"]["labels"][labels.REPLICA_INDEX] == "0"

    fleet.hub_api.api.stall_watches("modelreplicas")
    second = replica_object_name("ml", replica_name("llama", CLUSTER, 1))
    there = {
        "apiVersion": API,
        "kind": "ModelReplica",
        "metadata": {
            "name": second,
            "namespace": OBS_NS,
            "labels": dict(first["metadata"]["labels"]),  # index 0: not what index 1 wants
        },
        "spec": first["spec"],
    }
    made = create(fleet.hub, there)
    deployment = fleet.hub.get(MODEL_DEPLOYMENT, "llama", "ml")
    assert deployment is not None
    deployment["spec"]["replicas"] = 2
    fleet.hub.update(deployment)

    def adopted() -> Obj | None:
        found = fleet.hub.get(MODEL_REPLICA, second, OBS_NS)
        is_adopted = found is not None and found["metadata"]["labels"][labels.REPLICA_INDEX] == "1"
        return found if is_adopted else None

    fleet.run_until(lambda: adopted() is not None, "controller", what="the replica adopted")
    found = adopted()
    assert found is not None and found["metadata"]["uid"] == made["metadata"]["uid"]
    assert len(fleet.replicas()) == 2


def test_the_controller_reads_a_cluster_again_after_a_conflict(fleet: Fleet) -> None:
    """Someone writes the InferenceCluster while the controller's view of it lags: the
    controller's status patch, guarded by the version it read, is answered Conflict, and it
    reads the cluster again (`get` of inferenceclusters) and patches the latest version."""
    start_reporting(fleet)

    def free() -> object:
        cluster = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER) or {}
        pools = (cluster.get("status") or {}).get("gpuPools") or [{}]
        return (pools[0].get("observation") or {}).get("freeDevices")

    observed = (fleet.pool_observation() or {})["status"]["freeDevices"]
    fleet.run_until(lambda: free() == observed, "controller", what="the cluster's pools")
    settle(fleet, "controller")

    fleet.hub_api.api.stall_watches("inferenceclusters")
    cluster = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER)
    assert cluster is not None
    cluster["metadata"]["labels"]["team"] = "platform"
    fleet.hub.update(cluster)  # a new resourceVersion the controller has not seen
    create(fleet.workload, *foreign_claim_on("n2", "late", range(1)))
    fleet.run_until(
        lambda: histogram(fleet.pool_observation()) == {2: 1, 3: 1},
        "agent-a",
        what="the agent reports the claim",
    )
    new = (fleet.pool_observation() or {})["status"]["freeDevices"]
    fleet.run_until(
        lambda: free() == new, "controller", what="the cluster's pools after a Conflict"
    )
    final = fleet.hub.get(INFERENCE_CLUSTER, CLUSTER)
    assert final is not None and final["metadata"]["labels"]["team"] == "platform"


def test_every_rule_install_grants_is_exercised() -> None:
    """Issue 30.5: the other direction of `check_rbac`: every (group, resource, verb) that
    `gpufleet install` and `gpufleet join` grant the controller and the agent is used by a
    request of this module's tests: a grant no test exercises is exercised by a new test, or
    removed from `gpufleet install`. docs/operations.md's Security model names the tests."""
    if len(RUNS) < FLEET_TESTS:
        pytest.skip("needs the module's other tests to have run first (run the whole file)")
    unused = set()
    for rbac, subjects in [(HUB_RBAC, HUB_SUBJECTS), (WORKLOAD_RBAC, WORKLOAD_SUBJECTS)]:
        for subject in subjects.values():
            for grant in rbac.granted(subject) - EXERCISED.get(subject, set()):
                unused.add((f"{subject.namespace}/{subject.name}", *grant))
    assert sorted(unused) == [], "granted and never exercised"


#: The tests above that use the `fleet` fixture (each adds its requests to EXERCISED).
FLEET_TESTS = sum(
    1
    for name, value in list(globals().items())
    if name.startswith("test_") and value.__code__.co_varnames[:1] == ("fleet",)
)
