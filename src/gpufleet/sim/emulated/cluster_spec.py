"""What an emulated workload cluster is made of and how it behaves: devices per node of a
pool, pools, the cluster's behaviour (cadences and delays of its components) and its spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.core.model import NodeChoice, Steering
from gpufleet.store.port import (
    Obj,
)


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One kind of device a node of a pool has (an InferenceClass `spec.devices` entry)."""

    name: str = "gpu"
    driver: str = "gpu.nvidia.com"
    device_class_name: str = "gpu.nvidia.com"
    count: int = 4
    claim: str = "DRA"
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    #: A `DevicePlugin` device's extended resource: the node's allocatable has `count` of it.
    resource_name: str = ""

    @classmethod
    def from_class(cls, device: Mapping[str, Any]) -> DeviceSpec:
        """From an InferenceClass device entry (`capacity: {memory: {value: 80Gi}}`)."""
        return cls(
            name=str(device["name"]),
            driver=str(device["driver"]),
            device_class_name=str(device.get("deviceClassName") or device["driver"]),
            count=int(device.get("count", 1)),
            claim=str(device.get("claim", "DRA")),
            attributes=dict(device.get("attributes") or {}),
            capacity={k: str(v["value"]) for k, v in (device.get("capacity") or {}).items()},
            resource_name=str(device.get("resourceName") or ""),
        )

    def to_class(self) -> Obj:
        body: Obj = {"name": self.name, "driver": self.driver, "claim": self.claim}
        if self.claim == "DRA":
            body["deviceClassName"] = self.device_class_name
        if self.claim == "DevicePlugin":
            body["resourceName"] = self.resource_name
        body["count"] = self.count
        if self.attributes:
            body["attributes"] = {k: dict(v) for k, v in self.attributes.items()}
        if self.capacity:
            body["capacity"] = {k: {"value": v} for k, v in self.capacity.items()}
        return body


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    devices: tuple[DeviceSpec, ...] = (DeviceSpec(),)
    node_count: int = 1
    min_node_count: int = 0
    #: None: a fixed-size pool (the autoscaler never grows it).
    max_node_count: int | None = None
    #: The InferenceClass name; defaults to the pool name.
    class_name: str = ""
    #: The sim's device models (`dra.node_devices`): MIG partitions per GPU (0: none), the
    #: counter each consumes (a quantity; not a whole number: unaccountable), and the devices
    #: published with a NoSchedule device taint (unhealthy).
    partitions: int = 0
    partition_counter: str = "1"
    tainted_devices: tuple[str, ...] = ()
    #: Each node's `status.allocatable` CPU and memory (quantities).
    node_cpu: str = "48"
    node_memory: str = "192Gi"

    @property
    def inference_class(self) -> str:
        return self.class_name or self.name


@dataclass(frozen=True, slots=True)
class ClusterBehaviour:
    """How one emulated cluster behaves. Times in seconds of simulated time."""

    #: How its kube-scheduler picks a node: Spread, the default profile's scoring
    #: (`gpufleet.sim.emulated.kube_scoring`); Pack, a packing scheduler (fewest free devices that fit).
    node_choice: NodeChoice = NodeChoice.SPREAD
    #: Whether its agent steers claiming pods to the nodes it chose (the InferenceCluster's
    #: `spec.steering`): node affinity preferred (weight 100), required, or none.
    steering: Steering = Steering.PREFERRED
    #: Cadence of the in-cluster controllers (scheduler, kubelet, controllers, driver).
    tick_s: float = 1.0
    pod_start_delay_s: float = 5.0
    termination_grace_s: float = 2.0
    dra_publish_delay_s: float = 10.0
    #: NodeReady=False to pods failed (NoExecute eviction of a lost node).
    node_eviction_delay_s: float = 5.0
    is_autoscaling: bool = True
    is_stocked_out: bool = False
    autoscaler_scan_s: float = 10.0
    scale_up_delay_s: float = 60.0
    scale_down_idle_s: float = 600.0
    #: Taint GPU nodes with `nvidia.com/gpu:NoSchedule`, as the GPU operator does.
    has_gpu_taint: bool = True
    #: The agent: how often it observes, and how long its report takes to reach the hub.
    report_interval_s: float = 5.0
    report_delay_s: float = 0.0
    #: The agent's heartbeat for this cluster; None: the fleet's `AgentConfig` default.
    heartbeat_interval_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    pools: tuple[PoolSpec, ...]
    behaviour: ClusterBehaviour = field(default_factory=ClusterBehaviour)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Cluster-level taints (the InferenceCluster's `spec.taints`: `key`, `value`, `effect`).
    taints: tuple[Mapping[str, str], ...] = ()
