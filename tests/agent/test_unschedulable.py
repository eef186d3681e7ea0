"""What the agent reports of a replica's unschedulable pods (agent/pods.py) and the cluster
autoscaler's verdict on them from their Events (agent/scaleup.py)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from observe_builders import NS, T0, node, pod, replica

from gpufleet.agent.model import ClusterObjects, ObservedReplica, format_time
from gpufleet.agent.observe import AllocationClock, ObserveConfig, observe
from gpufleet.agent.scaleup import ScaleUpVerdicts
from gpufleet.core.model import ScaleUp
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import EVENT

SINCE = T0 - timedelta(seconds=90)


def unschedulable(p: Obj, since: str | None) -> Obj:
    condition: dict[str, Any] = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
    }
    if since is not None:
        condition["lastTransitionTime"] = since
    p["status"] = {**p["status"], "phase": "Pending", "conditions": [condition]}
    return p


def test_unschedulable_claiming_pods_are_counted_per_pool_with_the_earliest_time() -> None:
    rep = replica("r", copies=4)
    later = format_time(SINCE + timedelta(seconds=30))
    pods = [
        unschedulable(pod("r-0", "r"), later),
        unschedulable(pod("r-1", "r"), format_time(SINCE)),
        unschedulable(pod("r-2", "r"), None),  # counted, gives no time
        # Bound: whatever its stale condition says, kube-scheduler is done with it.
        unschedulable(pod("r-3", "r", node_name="n1"), format_time(SINCE)),
        # Of an old generation: counted too (the stuck rule counts every generation).
        unschedulable(pod("r-old", "r", generation=0), format_time(SINCE - timedelta(1))),
    ]
    objects = ClusterObjects(nodes=(node("n1", "h100"),), pods=tuple(pods), replicas=(rep,))
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    [observed] = result.replicas
    [pool] = observed.pools
    earliest = SINCE - timedelta(1)
    assert (pool.unschedulable_pods, pool.unschedulable_since) == (4, earliest)
    assert observed.unschedulable == (
        ("h100", "r-0"),
        ("h100", "r-1"),
        ("h100", "r-2"),
        ("h100", "r-old"),
    )
    body = observed.to_status()["pools"][0]
    assert (body["unschedulablePods"], body["unschedulableSince"]) == (4, format_time(earliest))
    assert "scaleUp" not in body


def test_a_pool_without_unschedulable_pods_says_nothing_of_them() -> None:
    objects = ClusterObjects(
        nodes=(node("n1", "h100"),), pods=(pod("r-0", "r"),), replicas=(replica("r"),)
    )
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    body = result.replicas[0].to_status()["pools"][0]
    assert not {"unschedulablePods", "unschedulableSince", "scaleUp", "scaleUpTime"} & body.keys()


def event(name: str, pod_name: str, reason: str, at: str | None) -> Obj:
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": NS},
        "reason": reason,
        "message": reason,
    }
    if at is not None:
        body["lastTimestamp"] = at
    return body


def waiting(*pods: str) -> ObservedReplica:
    objects = ClusterObjects(
        nodes=(node("n1", "h100"),),
        pods=tuple(unschedulable(pod(p, "r"), format_time(SINCE)) for p in pods),
        replicas=(replica("r", copies=len(pods)),),
    )
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    return result.replicas[0]


def verdict_of(observed: ObservedReplica | None) -> tuple[object, object]:
    assert observed is not None
    return observed.pools[0].scale_up, observed.pools[0].scale_up_at


def test_the_latest_verdict_counts_and_not_triggered_outweighs_triggered() -> None:
    store = MemoryStore()
    verdicts = ScaleUpVerdicts(store)
    t1, t2 = format_time(SINCE + timedelta(seconds=10)), format_time(SINCE + timedelta(seconds=20))
    store.create(event("e1", "r-0", "TriggeredScaleUp", t1))
    store.create(event("e2", "r-1", "TriggeredScaleUp", t2))
    store.create(event("e3", "other", "NotTriggerScaleUp", t2))  # another pod: not read
    store.create(event("e4", "r-0", "FailedScheduling", t2))  # not a verdict
    verdicts.sync()
    observed = waiting("r-0", "r-1")
    result = observed_result(observed)
    annotated = verdicts.annotate(result).replicas[0]
    assert verdict_of(annotated) == (ScaleUp.TRIGGERED, SINCE + timedelta(seconds=20))
    assert verdicts.moved == {(NS, "r")}
    assert annotated.to_status()["pools"][0]["scaleUp"] == "Triggered"
    # The autoscaler gives up on r-1 later: its latest verdict is NotTriggerScaleUp.
    t3 = format_time(SINCE + timedelta(seconds=40))
    store.create(event("e5", "r-1", "NotTriggerScaleUp", t3))
    verdicts.sync()  # from the change feed
    annotated = verdicts.annotate(result).replicas[0]
    assert verdict_of(annotated) == (ScaleUp.NOT_TRIGGERED, SINCE + timedelta(seconds=40))
    assert verdicts.moved == {(NS, "r")}
    assert verdicts.annotate(result).replicas[0] == annotated and verdicts.moved == frozenset()
    # A relist (a fresh reader) agrees with the change feed.
    fresh = ScaleUpVerdicts(store)
    fresh.sync()
    assert verdict_of(fresh.annotated(observed)) == verdict_of(annotated)
    # The events go (expired): the verdict goes with them.
    for name in ("e1", "e2", "e5"):
        store.delete(EVENT, name, NS)
    verdicts.sync()
    assert verdicts.annotated(observed) is observed
    assert verdicts.annotate(result).replicas[0] is observed and verdicts.moved == {(NS, "r")}


def test_an_untimed_verdict_loses_to_a_timed_one() -> None:
    store = MemoryStore()
    store.create(event("e1", "r-0", "NotTriggerScaleUp", None))
    store.create(event("e2", "r-0", "TriggeredScaleUp", format_time(SINCE)))
    verdicts = ScaleUpVerdicts(store)
    verdicts.sync()
    assert verdict_of(verdicts.annotated(waiting("r-0"))) == (ScaleUp.TRIGGERED, SINCE)


def observed_result(observed: ObservedReplica) -> Any:
    objects = ClusterObjects(nodes=(node("n1", "h100"),))
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    return dataclasses.replace(result, replicas=(observed,))


def ready(p: Obj) -> Obj:
    p["status"] = {**p["status"], "conditions": [{"type": "Ready", "status": "True"}]}
    return p


def test_pods_that_serve_are_counted_over_every_generation() -> None:
    rep = replica("r", copies=2)
    pods = [
        ready(pod("r-old", "r", generation=0, node_name="n1")),  # the old one serves
        unschedulable(pod("r-new", "r"), format_time(SINCE)),
        pod("r-starting", "r", node_name="n1"),  # Running, not yet Ready
        ready(pod("r-going", "r", node_name="n1", deleting=True)),  # not live
    ]
    objects = ClusterObjects(nodes=(node("n1", "h100"),), pods=tuple(pods), replicas=(rep,))
    result, _ = observe(objects, AllocationClock(), ObserveConfig(), T0)
    [observed] = result.replicas
    [pool] = observed.pools
    assert (pool.ready_pods, pool.unschedulable_pods) == (1, 1)
    assert observed.to_status()["pools"][0]["readyPods"] == 1
    # What is charged is still counted for the current generation only.
    assert [(m.live_pods, m.allocated_pods) for m in pool.members] == [(2, 0)]
