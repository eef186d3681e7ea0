"""The simulated fleet: N emulated workload clusters, their agents, one hub store and a hub
controller, all on one event loop.

`Fleet(FleetSpec(...), controller=..., seed=...)` builds every cluster (`WorkloadCluster`), a hub
`MemoryStore`, and one real `Agent` per cluster whose hub is a `HubLink` (a `Store` proxy that
can be partitioned). It publishes the fleet's InferenceClasses and InferenceClusters on the hub
(unless told not to), and schedules on the loop:

- every cluster's components, every `tick_s`;
- every agent, every `report_interval_s`: it observes the cluster and reads its replicas at
  once, materializes at once, and its report reaches the hub `report_delay_s` later. A half
  of the step whose inputs did not change is not run again: the last report is re-sent with a
  new time, a materialize that changed nothing is not repeated, and the replicas are not read
  again while the hub's change feed shows none of them changed (`Fleet._agent_tick`);
- the hub controller (anything with `step(now)`, the `HubController` protocol), every
  `controller_interval_s`.

Agent lifecycle for scenarios: `crash_agent` drops the Agent object (its memory, including
the allocation clock, is lost; its reports stay on the hub and go stale), `restart_agent` makes
a new one with an empty clock and the next lease epoch (or, reinstalled, a new Lease: a new
incarnation at epoch 0), `partition` makes every hub call of that agent fail
(`HubUnreachable`) until healed; the agent retries on its next step.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from gpufleet.agent.runner import OWNED_KINDS, Agent, AgentConfig, Report
from gpufleet.core import labels
from gpufleet.sim.emulated.cluster import ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EPOCH, EventLoop
from gpufleet.store import MemoryStore
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    EVENT,
    KNOWN_KINDS,
    MODEL_REPLICA,
    NAMESPACE,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ChangeType,
    Obj,
    Store,
    StoreError,
)


class HubController(Protocol):
    """What the fleet calls on the hub: the real controller, or a test's stand-in."""

    def step(self, now: datetime) -> None: ...


class HubUnreachable(StoreError):
    """The agent's link to the hub is partitioned."""


class HubLink(ForwardingStore):
    """One agent's view of the hub store: every call fails while `is_partitioned`."""

    def __init__(self, hub: Store, cluster: str) -> None:
        super().__init__(hub)
        self._cluster = cluster
        self.is_partitioned = False

    def before_call(self) -> None:
        if self.is_partitioned:
            raise HubUnreachable(f"cluster {self._cluster}: hub unreachable (partitioned)")


@dataclass(frozen=True, slots=True)
class FleetSpec:
    clusters: tuple[ClusterSpec, ...]
    controller_interval_s: float = 5.0
    agent: AgentConfig = field(default_factory=AgentConfig)
    #: Write InferenceClass and InferenceCluster objects for the clusters to the hub.
    publishes_inventory: bool = True
    #: Let an agent tick skip the halves of the agent's step whose inputs did not change
    #: (`Fleet._agent_tick`). False: every tick observes and materializes, for tests that
    #: check the shortcut changes no outcome.
    reuses_agent_work: bool = True


def lease_uid(cluster: str, incarnation: int) -> str:
    """The uid of a cluster's agent Lease, its `incarnation`-th (deterministic, UUID-shaped
    as an API server's)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet-sim/{cluster}/lease/{incarnation}"))


@dataclass(slots=True)
class AgentSlot:
    """A cluster's agent: the current Agent (None while crashed), its link and lease epoch."""

    link: HubLink
    agent: Agent | None = None
    lease_epoch: int = 0
    #: The incarnations of the agent's Lease so far (a reinstall creates a new Lease).
    leases: int = 1
    pushes: int = 0
    failed_pushes: int = 0
    #: For quiet steps: the last report and the replicas it was made from, the cluster
    #: store's revisions of the kinds observe reads when it was made, the revisions of the
    #: kinds materialize reads and writes after a materialize that changed nothing (None:
    #: it changed something, or has not run), and the hub change-feed cursor up to which
    #: ModelReplica changes were looked at.
    last_report: Report | None = None
    replicas: list[Mapping[str, Any]] = field(default_factory=list)
    observed_revisions: tuple[int, ...] = ()
    settled_revisions: tuple[int, ...] | None = None
    replica_cursor: int = 0
    #: Steps that re-sent the last report, and steps that did not materialize.
    quiet_steps: int = 0
    settled_steps: int = 0


class Fleet:
    def __init__(
        self,
        spec: FleetSpec,
        controller: HubController | None = None,
        seed: int = 0,
        start: datetime = EPOCH,
    ) -> None:
        self.spec = spec
        self.loop = EventLoop(seed, start)
        self.hub = MemoryStore(clock=self.loop.clock, uid_seed="hub")
        self.clusters: dict[str, WorkloadCluster] = {}
        self.agents: dict[str, AgentSlot] = {}
        self.controller = controller
        #: The hub's ModelReplica changes, read once for every agent: the cursor read up to,
        #: and per cluster label the cursor of the last change of a replica carrying it.
        self._replica_cursor = 0
        self._replica_changed: dict[str, int] = {}
        #: The cluster label each replica had at its last change (for relabels).
        self._replica_clusters: dict[tuple[str, str], str] = {}
        for cspec in spec.clusters:
            if cspec.name in self.clusters:
                raise ValueError(f"clusters: duplicate name {cspec.name!r}")
            self.clusters[cspec.name] = WorkloadCluster(cspec, self.loop)
            self.agents[cspec.name] = AgentSlot(HubLink(self.hub, cspec.name))
        if spec.publishes_inventory:
            for obj in inventory(spec.clusters):
                self.hub.create(obj)
        for name, cluster in self.clusters.items():
            cluster.start()
            self.restart_agent(name)
            self.loop.every(
                cluster.behaviour.report_interval_s,
                functools.partial(self._agent_tick, name),
                f"{name}/agent",
            )
        if controller is not None:
            self.loop.every(
                spec.controller_interval_s, lambda: self._controller_tick(), "hub/controller"
            )

    # --- running --------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.loop.now

    def run_until(self, until: datetime) -> None:
        self.loop.run_until(until)

    def run_for(self, seconds: float) -> None:
        self.loop.run_for(seconds)

    def _controller_tick(self) -> None:
        if self.controller is not None:
            self.controller.step(self.loop.now)

    def _agent_tick(self, cluster: str) -> None:
        slot = self.agents[cluster]
        agent = slot.agent
        if agent is None:
            return
        local = self.clusters[cluster].store
        # An agent's step is observe, push, materialize. Observe is a pure function of the
        # objects it reads (and the agent's allocation clock, which only those objects move),
        # and materializing what the same replicas want against the same local objects does
        # what it did last time: so a half whose inputs did not change since it last ran is not
        # run again. The report is re-sent with a new time (`push` decides whether it is due, as
        # it always does); a materialize that changed nothing would change nothing again.
        is_steady = self.spec.reuses_agent_work and self._is_quiet(cluster, slot)
        observed = local.kind_revisions(_OBSERVED_KINDS)
        is_local_steady = slot.last_report is not None and observed == slot.observed_revisions
        replicas: Sequence[Mapping[str, Any]]
        if is_steady and slot.last_report is not None:
            # None of the cluster's ModelReplicas changed since they were last read (the
            # change feed says so): a read would hand out the very objects read then.
            replicas = slot.replicas
        else:
            read = agent.read_replicas()
            if read is None:
                # Whatever changed meanwhile was not read: the next step reads it all again.
                slot.failed_pushes += 1
                slot.last_report, slot.settled_revisions = None, None
                return
            replicas = read
            # Neither half reads a replica's status: replicas whose statuses alone changed (the
            # controller publishing what this agent reported) leave both inputs as they were.
            is_steady = (
                self.spec.reuses_agent_work
                and not slot.link.is_partitioned
                and _is_same_but_status(read, slot.replicas)
            )
        if is_steady and is_local_steady:
            assert slot.last_report is not None
            slot.quiet_steps += 1
            report = slot.last_report.at(self.loop.now)
            slot.replicas = list(replicas)
        else:
            report = agent.observe(self.loop.now, replicas)
            slot.last_report, slot.replicas, slot.observed_revisions = (
                report,
                list(replicas),
                observed,
            )
        self._send(cluster, agent, report)
        materialized = local.kind_revisions(_MATERIALIZED_KINDS)
        if is_steady and materialized == slot.settled_revisions:
            slot.settled_steps += 1
            return
        before = local.revision
        agent.materialize(replicas)
        is_settled = local.revision == before
        slot.settled_revisions = local.kind_revisions(_MATERIALIZED_KINDS) if is_settled else None

    def _send(self, cluster: str, agent: Agent, report: Report) -> None:
        delay = self.clusters[cluster].behaviour.report_delay_s
        if delay > 0:
            self.loop.after(delay, lambda: self._push(cluster, agent, report), f"{cluster}/push")
        else:
            self._push(cluster, agent, report)

    def _is_quiet(self, cluster: str, slot: AgentSlot) -> bool:
        """Whether the hub side is quiet for the agent, so that it may reuse what its last
        steps read: its link is up and none of the ModelReplicas assigned to its cluster
        changed since its last step."""
        self._read_replica_changes()
        is_replica_changed = self._replica_changed.get(cluster, 0) > slot.replica_cursor
        slot.replica_cursor = self._replica_cursor
        return not is_replica_changed and not slot.link.is_partitioned

    def _read_replica_changes(self) -> None:
        """Note which clusters' ModelReplicas changed since the last call: one read of the
        hub's change feed serves every agent (each tick asks only whether its cluster's
        label appeared in a change after the cursor it saw last). A replica relabelled to
        another cluster is a change for both: the one it left is the one it had last."""
        if self.hub.kind_revision(MODEL_REPLICA) <= self._replica_cursor:
            self._replica_cursor = self.hub.revision
            return
        changes = self.hub.changes_after(self._replica_cursor)  # read-only: no copies
        self._replica_cursor = self.hub.revision
        for c in changes:
            if c.kind != MODEL_REPLICA:
                continue
            key = (c.obj["metadata"].get("namespace") or "", c.obj["metadata"]["name"])
            cluster = (c.obj["metadata"].get("labels") or {}).get(labels.CLUSTER)
            before = self._replica_clusters.pop(key, None)
            if before is not None and before != cluster:
                self._replica_changed[before] = c.cursor
            if isinstance(cluster, str):
                self._replica_changed[cluster] = c.cursor
                if c.type is not ChangeType.DELETED:
                    self._replica_clusters[key] = cluster

    def _push(self, cluster: str, agent: Agent, report: Report) -> None:
        slot = self.agents[cluster]
        if slot.agent is not agent:
            return  # the agent crashed (or was replaced) while its report was on the way
        if agent.push(report, self.loop.now):
            slot.pushes += 1

    # --- agent lifecycle ------------------------------------------------------------------

    def crash_agent(self, cluster: str) -> None:
        self.agents[cluster].agent = None

    def restart_agent(self, cluster: str, new_lease: bool = False) -> Agent:
        """A new Agent for `cluster`: the next leader of its Lease (the next epoch), or with
        `new_lease` the first leader of a Lease created again (a reinstalled agent: a new
        incarnation, epoch 0), which the hub accepts once the old one has been silent."""
        slot = self.agents[cluster]
        if slot.agent is not None:
            self.crash_agent(cluster)
        if new_lease:
            slot.leases += 1
            slot.lease_epoch = 0
        else:
            slot.lease_epoch += 1
        # A new agent observes afresh (its allocation clock is empty) and materializes.
        slot.last_report, slot.settled_revisions = None, None
        behaviour = self.clusters[cluster].behaviour
        config = dataclasses.replace(self.spec.agent, steering=behaviour.steering)
        if behaviour.heartbeat_interval_s is not None:
            config = dataclasses.replace(
                config, heartbeat_interval_s=behaviour.heartbeat_interval_s
            )
        slot.agent = Agent(
            cluster,
            self.clusters[cluster].store,
            slot.link,
            config,
            identity=f"agent-{cluster}-{slot.lease_epoch}",
            lease_epoch=slot.lease_epoch,
            lease_uid=lease_uid(cluster, slot.leases),
        )
        return slot.agent

    def partition(self, cluster: str, is_partitioned: bool = True) -> None:
        self.agents[cluster].link.is_partitioned = is_partitioned

    def heal(self, cluster: str) -> None:
        self.partition(cluster, False)

    # --- inspection -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, list[Obj]]:
        """Every object of every store, by `store/kind` (for determinism checks and reports)."""
        out: dict[str, list[Obj]] = {}
        stores: list[tuple[str, MemoryStore]] = [("hub", self.hub)]
        stores += [(name, c.store) for name, c in sorted(self.clusters.items())]
        for store_name, store in stores:
            for kind in KNOWN_KINDS:
                objs = store.list(kind)
                if objs:
                    out[f"{store_name}/{kind}"] = objs
        return out


#: What the agent's observe reads of its cluster (Events: the autoscaler's verdicts,
#: agent/scaleup.py), and what its materialize reads and writes.
_OBSERVED_KINDS: Final = (NODE, RESOURCE_SLICE, RESOURCE_CLAIM, POD, EVENT)
_MATERIALIZED_KINDS: Final = (*OWNED_KINDS, NAMESPACE)


def _is_same_but_status(
    now: Sequence[Mapping[str, Any]], then: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether two listings of replicas differ at most in their statuses (and the versions a
    status write moves): the same names, and each the same object or one with the same spec
    (a status write shares it) and the same metadata but for `resourceVersion`."""
    if len(now) != len(then):
        return False
    for a, b in zip(now, then, strict=True):
        if a is b:
            continue
        if a.get("spec") is not b.get("spec") or a.get("apiVersion") != b.get("apiVersion"):
            return False
        meta_a, meta_b = a.get("metadata") or {}, b.get("metadata") or {}
        if meta_a.keys() != meta_b.keys() or any(
            meta_a[k] != meta_b[k] for k in meta_a if k != "resourceVersion"
        ):
            return False
    return True


def inventory(clusters: Sequence[ClusterSpec]) -> list[Obj]:
    """InferenceClass and InferenceCluster objects describing the clusters (shapes.md)."""
    classes: dict[str, Obj] = {}
    out: list[Obj] = []
    for c in clusters:
        pools = []
        for p in c.pools:
            body = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "InferenceClass"}
            klass = {
                **body,
                "metadata": {"name": p.inference_class},
                "spec": {"devices": [d.to_class() for d in p.devices]},
            }
            if classes.setdefault(p.inference_class, klass) != klass:
                raise ValueError(f"pool {c.name}/{p.name}: class {p.inference_class!r} differs")
            pool: Obj = {
                "name": p.name,
                "className": p.inference_class,
                "nodeCount": p.node_count,
                "minNodeCount": p.min_node_count,
            }
            if p.max_node_count is not None:
                pool["maxNodeCount"] = p.max_node_count
            pools.append(pool)
        spec: Obj = {"nodePools": pools, "steering": str(c.behaviour.steering)}
        if c.taints:
            spec["taints"] = [dict(t) for t in c.taints]
        out.append(
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "InferenceCluster",
                "metadata": {"name": c.name, "labels": dict(c.labels)},
                "spec": spec,
            }
        )
    return [*(classes[k] for k in sorted(classes)), *out]
