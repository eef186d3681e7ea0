"""The simulator's `drain` action behaves as `kubectl drain`: it cordons the node and evicts
its pods through the API server's eviction rules. A pod no PodDisruptionBudget guards goes at
once; one whose budget allows no disruption stays, and the drain retries it until the budget
allows it or is gone (the agent's budgets: scenario drain-replaced-first)."""

from __future__ import annotations

from sim_builders import pool

from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.disruption import budget_counts, refusal
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.store.port import POD, POD_DISRUPTION_BUDGET, Obj

QUICK = ClusterBehaviour(
    has_gpu_taint=False,
    is_autoscaling=False,
    pod_start_delay_s=1.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=1.0,
)


def cluster() -> tuple[EventLoop, WorkloadCluster]:
    loop = EventLoop(seed=1)
    c = WorkloadCluster(ClusterSpec("a", (pool(nodes=2),), QUICK), loop)
    c.start()
    return loop, c


def deployment(name: str, replicas: int) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"gpufleet.io/pool": "l4"},
                    "containers": [{"name": "engine", "image": "v1"}],
                },
            },
        },
    }


def budget(app: str, **spec: object) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def live_pods(c: WorkloadCluster) -> list[Obj]:
    return [p for p in c.store.list(POD, "ml") if not p["metadata"].get("deletionTimestamp")]


def node_of(c: WorkloadCluster) -> str:
    (pod,) = live_pods(c)
    node = pod["spec"]["nodeName"]
    assert isinstance(node, str)
    return node


def test_a_pod_no_budget_guards_is_evicted_at_once() -> None:
    loop, c = cluster()
    c.store.create(deployment("d", 1))
    loop.run_for(10)
    node = node_of(c)
    c.drain(node)
    assert live_pods(c) == []  # evicted: its Deployment makes another, elsewhere
    assert c.drains.refused == [] and len(c.drains.evicted) == 1
    loop.run_for(10)
    assert node_of(c) != node
    assert c.drains.nodes == []  # done


def test_a_guarded_pod_waits_until_its_budget_is_gone() -> None:
    loop, c = cluster()
    c.store.create(deployment("d", 1))
    c.store.create(budget("d", maxUnavailable=0, unhealthyPodEvictionPolicy="AlwaysAllow"))
    loop.run_for(10)
    node = node_of(c)
    (pdb,) = c.store.list(POD_DISRUPTION_BUDGET, "ml")
    counts = budget_counts(c.store, pdb)
    assert (counts.current_healthy, counts.desired_healthy, counts.disruptions_allowed) == (1, 1, 0)
    c.drain(node)
    loop.run_for(30)
    # Refused, and retried every 5 s: the pod serves on.
    assert node_of(c) == node
    assert len(c.drains.refused) >= 6
    _, pod, why = c.drains.refused[0]
    assert why == (
        "Cannot evict pod as it would violate the pod's disruption budget d: "
        "1 healthy, 1 desired, 0 disruptions allowed"
    )
    c.store.delete(POD_DISRUPTION_BUDGET, "d", "ml")
    loop.run_for(10)
    assert [p for _, p in c.drains.evicted] == [pod]
    assert node_of(c) != node and c.drains.nodes == []


def test_a_budget_allows_what_its_controllers_spare() -> None:
    loop, c = cluster()
    c.store.create(deployment("d", 2))
    c.store.create(budget("d", maxUnavailable=1))
    loop.run_for(10)
    pods = live_pods(c)
    (pdb,) = c.store.list(POD_DISRUPTION_BUDGET, "ml")
    assert budget_counts(c.store, pdb).disruptions_allowed == 1
    assert refusal(c.store, pods[0]) is None
    c.store.delete(POD, pods[0]["metadata"]["name"], "ml")  # one goes (terminating)
    assert budget_counts(c.store, pdb).disruptions_allowed == 0
    assert refusal(c.store, pods[1]) is not None


def test_a_pod_that_is_not_ready_goes_by_the_unhealthy_policy() -> None:
    loop, c = cluster()
    c.store.create(deployment("d", 1))
    c.store.create(budget("d", maxUnavailable=0))
    loop.run_for(0.5)  # bound, not yet started
    (pod,) = live_pods(c)
    # IfHealthyBudget (the default): the budget is not met (0 healthy of 1), so no.
    assert refusal(c.store, pod) is not None
    pdb = c.store.get(POD_DISRUPTION_BUDGET, "d", "ml")
    assert pdb is not None
    pdb["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    c.store.update(pdb)
    assert refusal(c.store, pod) is None  # serves nothing: may go
