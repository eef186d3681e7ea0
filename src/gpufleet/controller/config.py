"""`ControllerConfig`: the knobs of the hub controller, and the scheduling config they imply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpufleet.api.names import CLUSTER_NAMESPACE_PREFIX, cluster_namespace
from gpufleet.core.model import MAX_HISTOGRAM_BUCKETS, NodeChoice, SchedulingConfig

#: The hub namespace that holds one cluster's observations and replicas is this prefix + the
#: cluster name (`gpufleet.api.names.cluster_namespace`).
OBSERVATION_NAMESPACE_PREFIX: Final = CLUSTER_NAMESPACE_PREFIX

#: The namespace of Events about cluster-scoped objects, as the API server's recorders use.
CLUSTER_EVENT_NAMESPACE: Final = "default"


def observation_namespace(cluster_name: str) -> str:
    """The hub namespace holding the observations and replicas of cluster `cluster_name`."""
    return cluster_namespace(cluster_name)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    #: A pool observation older than this is published `Stale` (still used; errs toward full).
    stale_after_s: float = 60.0
    #: An agent silent longer than this makes its pools `Expired`: no new placements there.
    expire_after_s: float = 300.0
    #: When True (the default) the controller owns each cluster's `Ready` condition: True
    #: while the agent reports and is not Expired. A `Ready` condition another writer set (its
    #: reason is not one of the controller's) is always kept. A platform that owns Ready
    #: itself turns this off (`gpufleet controller --no-manage-ready`).
    manages_ready: bool = True
    #: When not empty, a cluster without `status.gateway` gets this address, with `{cluster}`
    #: replaced by its name (the simulator has no real gateways). A gateway another writer
    #: set is never changed.
    default_gateway_address: str = ""
    #: A cluster status whose only change is that its agent reported again (the observation
    #: times moved, nothing else did) is rewritten at most this often. Freshness is judged
    #: from the reports themselves, so this only bounds how far the published `observedAt`
    #: lags (as a Node's status lags its Lease heartbeats in Kubernetes).
    status_refresh_s: float = 120.0
    #: How often a write that hit a stale resourceVersion is re-read and retried in one step.
    max_conflict_retries: int = 5
    #: How long an assumed write (the controller's own, not yet visible in its view of the
    #: store) is kept in force before it is forgotten.
    assume_ttl_s: float = 300.0
    #: A report stamped more than this ahead of the controller's clock is not accepted (fails
    #: closed: its cluster ages toward Expired as if its agent were silent).
    max_clock_skew_s: float = 30.0
    #: Histograms with more buckets than this are published without them (whole-node fallback).
    max_histogram_buckets: int = MAX_HISTOGRAM_BUCKETS
    #: A replica some of whose claiming pods have been Unschedulable longer than this is
    #: re-placed on another cluster or pool (replace.py), unless the cluster's autoscaler is
    #: adding a node for them (`scale_up_timeout_s`). A running replica is never moved.
    stuck_after_s: float = 120.0
    #: How long a replica waiting for a node its cluster's autoscaler is adding
    #: (`TriggeredScaleUp`) waits, from that event, before it is re-placed anyway: 15 minutes,
    #: cluster-autoscaler's own `max-node-provision-time` default.
    scale_up_timeout_s: float = 900.0
    #: The (cluster, pool) of a re-placed replica is avoided by its deployment for this long,
    #: doubled on each repeat, at most `replace_backoff_max_s`.
    replace_backoff_s: float = 120.0
    replace_backoff_max_s: float = 1800.0
    #: An object whose processing raised is retried after this long, doubled on each failure
    #: in a row, at most `fault_backoff_max_s` (the fault barrier, barrier.py).
    fault_backoff_s: float = 1.0
    fault_backoff_max_s: float = 300.0
    #: Per cluster, how its own scheduler picks nodes (default Spread).
    node_choice: Mapping[str, NodeChoice] = field(default_factory=dict)
    #: The hub's own gpufleet version, against which each agent's reported version is checked
    #: (controller/skew.py); None (the simulator, tests): not checked.
    hub_version: str | None = None
    #: `source.component` / `reportingComponent` of the Events the controller writes.
    component: str = "gpufleet-controller"

    def scheduling(self) -> SchedulingConfig:
        return SchedulingConfig(
            stale_after_s=self.stale_after_s,
            expire_after_s=self.expire_after_s,
            node_choice=dict(self.node_choice),
            max_histogram_buckets=self.max_histogram_buckets,
        )
