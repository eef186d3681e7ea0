"""What the report shows over time beyond `Series`: the hub's view next to the ground truth.

`Samples.take(fleet, at_s)` is called once per metrics sample (after `Series` is sampled, at
the same instants, so every list here is aligned with `Series.times_s`). It only reads the
fleet. It is kept apart from `Series` on purpose: `Series` is part of the outcome fingerprint
(bench/fingerprint.py), and these samples are for people (the HTML report, `--output json`).

Per pool:

- `reported_free` / `reported_nodes`: free GPUs and nodes in the agent's last report as the
  hub holds it (the PoolObservation; None before the first one arrives). Next to the ground
  truth (`Series.pool_free`, `Series.pool_nodes`) it shows how far the agent's view lags.

Per cluster:

- `observation`: the freshness the hub controller last published for the cluster's pools
  (`Fresh`, `Stale`, `Expired`; `None` when it publishes no observation, as in whole-node
  accounting). With several pools the least fresh one is shown.
- `ready`: the InferenceCluster's `Ready` condition as (status, reason): who made the cluster
  Ready (the controller from agent reports, or the simulator in whole-node accounting).
- `agent`: `up`, `down` (crashed, not restarted) or `partitioned` (cut off from the hub).

Per deployment:

- `replicas_running`: ModelReplicas every pod of which is Running on its cluster (ground
  truth; `Series.running` counts pods, which a gang or a P/D pair has several of).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.names import cluster_namespace, replica_origin_of
from gpufleet.core import labels
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.store.port import INFERENCE_CLUSTER, MODEL_REPLICA, POD, POOL_OBSERVATION

PoolKey = tuple[str, str]

#: Freshness from best to worst; a cluster shows its least fresh pool.
FRESHNESS = ("Fresh", "Stale", "Expired")
NO_OBSERVATION = "None"
AGENT_STATES = ("up", "partitioned", "down")


@dataclass(slots=True)
class Samples:
    """The report's extra samples over time; every list is aligned with `times_s`."""

    times_s: list[float] = field(default_factory=list)
    reported_free: dict[PoolKey, list[int | None]] = field(default_factory=dict)
    reported_nodes: dict[PoolKey, list[int | None]] = field(default_factory=dict)
    observation: dict[str, list[str]] = field(default_factory=dict)
    ready: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    agent: dict[str, list[str]] = field(default_factory=dict)
    replicas_running: dict[str, list[int]] = field(default_factory=dict)
    #: Per cluster: (store revision, {replica name: Running pods}) of the last count.
    _running_pods: dict[str, tuple[int, Counter[str]]] = field(default_factory=dict, repr=False)

    def take(self, fleet: Fleet, at_s: float) -> None:
        """Sample `fleet` at `at_s` (seconds after the start)."""
        self.times_s.append(at_s)
        n = len(self.times_s)
        # Read-only views: nothing is copied (the port's contract: never written to).
        statuses = {
            c["metadata"]["name"]: c.get("status") or {} for c in fleet.hub.view(INFERENCE_CLUSTER)
        }
        for name in sorted(fleet.clusters):
            self._take_cluster(fleet, name, statuses.get(name) or {})
        running = self._running_replicas(fleet)
        for key in sorted(set(running) | set(self.replicas_running)):
            column = self.replicas_running.setdefault(key, [0] * (n - 1))
            column.append(running.get(key, 0))

    def _take_cluster(self, fleet: Fleet, name: str, status: Mapping[str, Any]) -> None:
        hub = fleet.hub
        slot = fleet.agents[name]
        if slot.agent is None:
            agent = "down"
        elif slot.link.is_partitioned:
            agent = "partitioned"
        else:
            agent = "up"
        self.agent.setdefault(name, []).append(agent)
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        self.ready.setdefault(name, []).append(
            ("Unknown", "") if ready is None else (str(ready["status"]), str(ready["reason"]))
        )
        states = [
            str((p.get("observation") or {}).get("state") or NO_OBSERVATION)
            for p in status.get("gpuPools") or []
        ]
        known = [s for s in states if s in FRESHNESS]
        worst = max(known, key=FRESHNESS.index) if known else NO_OBSERVATION
        self.observation.setdefault(name, []).append(worst)
        namespace = cluster_namespace(name)
        reports = {o["metadata"]["name"]: o for o in hub.view(POOL_OBSERVATION, namespace)}
        for pool in sorted(fleet.clusters[name].pools):
            free, nodes = _reported(reports.get(pool))
            self.reported_free.setdefault((name, pool), []).append(free)
            self.reported_nodes.setdefault((name, pool), []).append(nodes)

    def _running_replicas(self, fleet: Fleet) -> dict[str, int]:
        pods: Counter[str] = Counter()
        for name, cluster in sorted(fleet.clusters.items()):
            known = self._running_pods.get(name)
            if known is None or known[0] != cluster.store.revision:
                known = (cluster.store.revision, _running_pods(cluster.store.peek(POD)))
                self._running_pods[name] = known
            pods.update(known[1])
        out: dict[str, int] = {}
        for replica in fleet.hub.view(MODEL_REPLICA):
            meta = replica["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            spec = replica.get("spec") or {}
            namespace, name = replica_origin_of(meta)
            key = f"{namespace}/{spec.get('deploymentName', '')}"
            out.setdefault(key, 0)
            expected = expected_pods(spec)
            if expected and pods[name] >= expected:
                out[key] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "times": self.times_s,
            "pools": {
                f"{c}/{p}": {
                    "reportedFree": self.reported_free[(c, p)],
                    "reportedNodes": self.reported_nodes[(c, p)],
                }
                for c, p in self.reported_free
            },
            "clusters": {
                c: {
                    "observation": self.observation[c],
                    "ready": [f"{s}/{r}" if r else s for s, r in self.ready[c]],
                    "agent": self.agent[c],
                }
                for c in self.observation
            },
            "deployments": {
                d: {"replicasRunning": v} for d, v in sorted(self.replicas_running.items())
            },
        }


def _reported(obj: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    status = (obj or {}).get("status")
    if not status:
        return None, None
    free = 0
    for bucket in status.get("freeDevices") or []:
        free += sum(int(v) for v in (bucket.get("free") or {}).values()) * int(bucket["nodes"])
    return free, int(status.get("observedNodes") or 0)


def _running_pods(pods: Any) -> Counter[str]:
    out: Counter[str] = Counter()
    for pod in pods:
        meta = pod["metadata"]
        replica = (meta.get("labels") or {}).get(labels.REPLICA)
        if replica is None or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") == "Running":
            out[replica] += 1
    return out


def expected_pods(spec: Mapping[str, Any]) -> int:
    """How many pods a ModelReplica runs: per engine copy, one per Standalone or Leader member
    and `worker.nodes` per Worker member."""
    total = 0
    for engine in spec.get("engines") or []:
        per_copy = 0
        for member in engine.get("members") or []:
            if member.get("role") == "Worker":
                per_copy += int((member.get("worker") or {}).get("nodes", 1))
            else:
                per_copy += 1
        total += int(engine.get("copies", 1)) * per_copy
    return total
