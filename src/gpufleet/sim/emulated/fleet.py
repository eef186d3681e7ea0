"""The simulated fleet: N emulated workload clusters, their agents, one hub store and a hub
controller, all on one event loop.

`Fleet(FleetSpec(...), controller=..., seed=...)` builds every cluster (`WorkloadCluster`), a hub
`MemoryStore`, and one real `Agent` per cluster whose hub is a `HubLink` (a `Store` proxy that
can be partitioned). It publishes the fleet's InferenceClasses and InferenceClusters on the hub
(unless told not to), and schedules on the loop:

- every cluster's components, every `tick_s`;
- every agent's whole step (`Agent.step`), every `report_interval_s`: it reads its replicas,
  observes the cluster and materializes at once, and its report reaches the hub
  `report_delay_s` later (`Fleet._agent_step`);
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from gpufleet.agent.runner import Agent, AgentConfig, Report
from gpufleet.sim.emulated.cluster import ClusterSpec, WorkloadCluster
from gpufleet.sim.emulated.engine import EPOCH, EventLoop
from gpufleet.store import MemoryStore
from gpufleet.store.forwarding import ForwardingStore
from gpufleet.store.port import (
    KNOWN_KINDS,
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
                functools.partial(self._agent_step, name),
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

    def _agent_step(self, cluster: str) -> None:
        """The agent's whole step (`Agent.step`), as its daemon would run it; a report that
        travels (`report_delay_s`) is pushed when it arrives."""
        slot = self.agents[cluster]
        agent = slot.agent
        if agent is None:
            return
        delay = self.clusters[cluster].behaviour.report_delay_s
        deliver = None
        if delay > 0:

            def deliver(report: Report) -> None:
                self.loop.after(
                    delay, lambda: self._push(cluster, agent, report), f"{cluster}/push"
                )

        outcome = agent.step(self.loop.now, deliver)
        if not outcome.is_hub_reachable:
            slot.failed_pushes += 1
        if outcome.is_pushed:
            slot.pushes += 1

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
