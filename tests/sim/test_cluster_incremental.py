"""The cluster's components visit only what changed since their last pass (work queues fed by
the store's change log). A cluster that visits every object on every pass (`visit_all`) is the
reference: driven through the same random mix of workload changes, pod deletes and re-owning,
node failures and removals, and other tenants' claims, both must write exactly the same objects
in the same order (equal resourceVersions) at every step."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sim_builders import pool

from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.store.port import (
    DEPLOYMENT,
    KNOWN_KINDS,
    LEADER_WORKER_SET,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    Obj,
    StoreError,
)

BEHAVIOUR = ClusterBehaviour(
    pod_start_delay_s=2.0,
    termination_grace_s=1.0,
    dra_publish_delay_s=3.0,
    node_eviction_delay_s=2.0,
    autoscaler_scan_s=5.0,
    scale_up_delay_s=10.0,
    scale_down_idle_s=30.0,
)
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def claim_template(name: str, count: int) -> Obj:
    return {
        "apiVersion": RESOURCE_CLAIM_TEMPLATE.api_version,
        "kind": RESOURCE_CLAIM_TEMPLATE.kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "metadata": {"labels": {"claim": name}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                        }
                    ]
                }
            },
        },
    }


def pod_template(image: str, claim: str | None, tolerates: bool = True) -> Obj:
    spec: dict[str, Any] = {
        "nodeSelector": {"gpufleet.io/pool": "l4"},
        "tolerations": [TOLERATION] if tolerates else [],
        "containers": [{"name": "engine", "image": image}],
    }
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
    return {"metadata": {"labels": {"image": image}}, "spec": spec}


def deployment(name: str, replicas: int, template: Obj) -> Obj:
    return {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicas": replicas, "template": template},
    }


def lws(name: str, replicas: int, size: int, template: Obj) -> Obj:
    return {
        "apiVersion": LEADER_WORKER_SET.api_version,
        "kind": LEADER_WORKER_SET.kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template,
                "workerTemplate": template,
            },
        },
    }


def state(c: WorkloadCluster) -> dict[str, list[Obj]]:
    return {str(kind): c.store.list(kind) for kind in KNOWN_KINDS}


class Twins:
    """The same operations on an incremental cluster and a visit-every-object one."""

    def __init__(self) -> None:
        spec = ClusterSpec("a", (pool(nodes=3, gpus=4, max_nodes=5),), BEHAVIOUR)
        self.loops = [EventLoop(seed=7), EventLoop(seed=7)]
        self.clusters = [
            WorkloadCluster(spec, self.loops[0]),
            WorkloadCluster(spec, self.loops[1], visit_all=True),
        ]
        for c in self.clusters:
            c.start()

    @property
    def fast(self) -> WorkloadCluster:
        return self.clusters[0]

    def each(self, op: Any) -> None:
        """Apply `op(cluster)` to both; an op refused by the store is refused by both."""
        errors = []
        for c in self.clusters:
            try:
                op(c)
                errors.append("")
            except (StoreError, ValueError) as e:
                errors.append(type(e).__name__)
        assert errors[0] == errors[1]

    def run(self, seconds: float) -> None:
        for loop in self.loops:
            loop.run_for(seconds)
        fast, full = (state(c) for c in self.clusters)
        assert fast == full
        assert self.clusters[0].store.revision == self.clusters[1].store.revision
        # What the scheduler sees as taken, kept from the change log, is what the claims say.
        store = self.fast.store
        assert store.taken() == dra.taken_devices(store.peek(RESOURCE_CLAIM))


def random_step(t: Twins, rng: random.Random, step: int) -> None:
    pods = t.fast.store.peek(POD)
    deployment_pods = [p for p in pods if "pod-template-hash" in p["metadata"]["labels"]]
    nodes = [n["metadata"]["name"] for n in t.fast.store.peek(NODE)]
    deps = [d["metadata"]["name"] for d in t.fast.store.peek(DEPLOYMENT)]
    sets = [s["metadata"]["name"] for s in t.fast.store.peek(LEADER_WORKER_SET)]
    choice = rng.randrange(14)
    claim = rng.choice(["one", "two", "missing", None])
    template = pod_template(f"v{rng.randrange(3)}", claim, tolerates=rng.random() < 0.9)
    if choice == 0 or not deps:
        body = deployment(f"d{step}", rng.randrange(4), template)
        t.each(lambda c: c.store.create(body))
    elif choice == 1:
        name = rng.choice(deps)
        replicas, image = rng.randrange(5), f"v{rng.randrange(3)}"

        def change(c: WorkloadCluster) -> None:
            dep = c.store.get(DEPLOYMENT, name, "ml")
            assert dep is not None
            dep["spec"]["replicas"] = replicas
            dep["spec"]["template"]["spec"]["containers"][0]["image"] = image
            c.store.update(dep)

        t.each(change)
    elif choice == 2:
        name = rng.choice(deps)
        t.each(lambda c: c.store.delete(DEPLOYMENT, name, "ml"))
    elif choice == 3:
        body = lws(f"g{step}", rng.randrange(1, 3), rng.randrange(1, 3), template)
        t.each(lambda c: c.store.create(body))
    elif choice == 4 and sets:
        name = rng.choice(sets)
        t.each(lambda c: c.store.delete(LEADER_WORKER_SET, name, "ml"))
    elif choice == 5 and pods:
        name = rng.choice(pods)["metadata"]["name"]
        t.each(lambda c: c.store.delete(POD, name, "ml"))
    elif choice == 6 and pods:
        name = rng.choice(pods)["metadata"]["name"]
        t.each(lambda c: c.store.patch_status(POD, name, "ml", {"phase": "Failed"}))
    elif choice == 7 and deployment_pods and deps:
        # Only a Deployment's pods: a LeaderWorkerSet recreates a lost pod under its name.
        name, to = rng.choice(deployment_pods)["metadata"]["name"], rng.choice(deps)

        def re_own(c: WorkloadCluster) -> None:
            pod, owner = c.store.get(POD, name, "ml"), c.store.get(DEPLOYMENT, to, "ml")
            assert pod is not None and owner is not None
            pod["metadata"]["ownerReferences"][0].update(
                kind="Deployment", name=to, uid=owner["metadata"]["uid"]
            )
            c.store.update(pod)

        t.each(re_own)
    elif choice == 8 and nodes:
        name = rng.choice(nodes)
        if rng.random() < 0.5:
            t.each(lambda c: c.fail_node(name))
        else:
            t.each(lambda c: c.recover_node(name))
    elif choice == 9 and nodes:
        name, on = rng.choice(nodes), rng.random() < 0.5
        t.each(lambda c: c.cordon(name, on))
    elif choice == 10 and nodes:
        name = rng.choice(nodes)
        t.each(lambda c: c.remove_node(name))
    elif choice == 11:
        t.each(lambda c: c.add_node("l4"))
    elif choice == 12 and nodes:
        name, count = rng.choice(nodes), rng.randrange(1, 3)
        t.each(lambda c: c.add_foreign_claim(name, count))
    elif choice == 13:
        name = rng.choice(["one", "two", "missing"])
        if t.fast.store.peek_one(RESOURCE_CLAIM_TEMPLATE, name, "ml") is None:
            body = claim_template(name, 1 if name == "one" else 2)
            t.each(lambda c: c.store.create(body))
        else:
            t.each(lambda c: c.store.delete(RESOURCE_CLAIM_TEMPLATE, name, "ml"))


@pytest.mark.parametrize("seed", range(6))
def test_passes_over_what_changed_write_what_full_passes_write(seed: int) -> None:
    rng = random.Random(seed)
    t = Twins()
    t.each(lambda c: c.store.create(claim_template("one", 1)))
    t.each(lambda c: c.store.create(claim_template("two", 2)))
    for step in range(80):
        for _ in range(rng.randrange(1, 3)):
            random_step(t, rng, step)
        t.run(rng.choice([0.0, 1.0, 1.0, 2.0, 5.0, 15.0]))
    t.run(120.0)
    # The run did what the components exist for (else the comparison shows little).
    kinds = {kind: len(objs) for kind, objs in state(t.fast).items() if objs}
    assert t.fast.store.revision > 400, kinds
