"""Reading a scenario's classes, fleet and controller settings into the simulator's specs.

Classes are validated as InferenceClasses and each cluster as the InferenceCluster the fleet
will publish, with the API, so their errors name the scenario's own field paths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from gpufleet.agent.runner import AgentConfig
from gpufleet.api import ValidationFailed, parse_object
from gpufleet.api.names import is_dns_label, is_dns_subdomain
from gpufleet.core.model import NodeChoice, Steering
from gpufleet.core.quantity import QuantityError, parse_quantity
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.sim.scenario.fields import (
    Problems,
    check_known,
    get_bool,
    get_duration,
    get_int,
    get_list,
    get_mapping,
    get_str,
)
from gpufleet.sim.scenario.model import (
    API_VERSION,
    MIN_PERIOD_S,
    Accounting,
    ControllerSettings,
)

_BEHAVIOUR_FIELDS: Final = {
    # yaml key: (ClusterBehaviour field, kind)
    "nodeChoice": ("node_choice", "choice"),
    "steering": ("steering", "steering"),
    "tick": ("tick_s", "duration"),
    "podStartDelay": ("pod_start_delay_s", "duration"),
    "terminationGrace": ("termination_grace_s", "duration"),
    "draPublishDelay": ("dra_publish_delay_s", "duration"),
    "nodeEvictionDelay": ("node_eviction_delay_s", "duration"),
    "autoscaling": ("is_autoscaling", "bool"),
    "stockout": ("is_stocked_out", "bool"),
    "autoscalerScan": ("autoscaler_scan_s", "duration"),
    "scaleUpDelay": ("scale_up_delay_s", "duration"),
    "scaleDownIdle": ("scale_down_idle_s", "duration"),
    "gpuTaint": ("has_gpu_taint", "bool"),
    "reportInterval": ("report_interval_s", "duration"),
    "reportDelay": ("report_delay_s", "duration"),
    "heartbeatInterval": ("heartbeat_interval_s", "duration"),
}


#: Behaviour fields that are periods: each must be at least `MIN_PERIOD_S`.
_PERIODS: Final = ("tick_s", "report_interval_s", "autoscaler_scan_s", "heartbeat_interval_s")


def _behaviour(data: Mapping[str, Any], path: str, problems: Problems) -> ClusterBehaviour:
    check_known(data, tuple(_BEHAVIOUR_FIELDS), path, problems)
    kwargs: dict[str, Any] = {}
    for key, (attr, kind) in _BEHAVIOUR_FIELDS.items():
        if key not in data:
            continue
        if kind == "duration":
            seconds = get_duration(data, key, path, problems)
            if attr in _PERIODS and seconds < MIN_PERIOD_S:
                problems.add(f"{path}.{key}", "must be at least 1ms (it is a period)")
                continue
            kwargs[attr] = seconds
        elif kind == "bool":
            kwargs[attr] = get_bool(data, key, path, problems, False)
        else:
            enum = NodeChoice if kind == "choice" else Steering
            value = data[key]
            choices = [c.value for c in enum]
            if value not in choices:
                problems.add(f"{path}.{key}", f"must be one of {', '.join(choices)}")
            else:
                kwargs[attr] = enum(value)
    return ClusterBehaviour(**kwargs)


def _devices(
    spec: object, path: str, problems: Problems, class_name: str, name_path: str | None
) -> tuple[DeviceSpec, ...]:
    """Devices of an InferenceClass spec, validated as an InferenceClass. A problem with the
    class's name is reported at `name_path`; None: the name is made from names whose own
    checks report it, so it is not reported twice."""
    body = {
        "apiVersion": API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": class_name},
        "spec": spec,
    }
    is_invalid = False
    try:
        parse_object(body)
    except ValidationFailed as failure:
        for error in failure.errors:
            is_invalid = True
            if error.path.startswith("metadata.name"):
                if name_path is not None:
                    problems.add(name_path, f"class name {class_name!r}: {error.message}")
                continue
            where = error.path.removeprefix("spec.").removeprefix("spec")
            problems.add(f"{path}.{where}" if where else path, error.message)
    if is_invalid or not isinstance(spec, Mapping):
        return ()
    return tuple(DeviceSpec.from_class(d) for d in spec.get("devices") or [])


def read_classes(value: object, problems: Problems) -> dict[str, tuple[DeviceSpec, ...]]:
    out: dict[str, tuple[DeviceSpec, ...]] = {}
    for name, spec in get_mapping(value, "classes", problems).items():
        if isinstance(spec, Mapping):
            check_known(spec, ("devices",), f"classes.{name}", problems)
        out[str(name)] = _devices(spec, f"classes.{name}", problems, str(name), f"classes.{name}")
    return out


def _pool(
    data: Mapping[str, Any],
    path: str,
    problems: Problems,
    cluster: str,
    classes: Mapping[str, tuple[DeviceSpec, ...]],
) -> PoolSpec:
    check_known(
        data,
        (
            "name",
            "class",
            "nodeCount",
            "minNodeCount",
            "maxNodeCount",
            "partitions",
            "partitionCounter",
            "taintedDevices",
            "nodeCpu",
            "nodeMemory",
        ),
        path,
        problems,
    )
    name = get_str(data, "name", path, problems)
    klass = data.get("class")
    devices: tuple[DeviceSpec, ...] = ()
    class_name = ""
    if isinstance(klass, str):
        class_name = klass
        if klass not in classes:
            known = ", ".join(sorted(classes)) or "none defined"
            problems.add(f"{path}.class", f"unknown class {klass!r} (classes: {known})")
        devices = classes.get(klass, ())
    elif isinstance(klass, Mapping):
        class_name = f"{cluster}-{name}"
        # A made-up name is wrong only when the cluster's or the pool's name is, and
        # those are reported where they are written.
        name_path: str | None = None
        if is_dns_label(name) and is_dns_subdomain(cluster):
            name_path = f"{path}.class"
        if isinstance(klass.get("name"), str):
            class_name = klass["name"]
            name_path = f"{path}.class.name"
        inner = {k: v for k, v in klass.items() if k != "name"}
        devices = _devices(inner, f"{path}.class", problems, class_name, name_path)
    else:
        problems.add(f"{path}.class", "is required: a class name, or {devices: [...]}")
    node_count = get_int(data, "nodeCount", path, problems, 1)
    min_nodes = get_int(data, "minNodeCount", path, problems, 0)
    max_nodes = data.get("maxNodeCount")
    if max_nodes is not None:
        max_nodes = get_int(data, "maxNodeCount", path, problems, 1, minimum=1)
        if max_nodes < 1:
            pass  # reported; comparing with it would report the same mistake again
        elif max_nodes < min_nodes:
            problems.add(f"{path}.maxNodeCount", "must be at least minNodeCount")
        elif node_count > max_nodes:
            problems.add(f"{path}.nodeCount", "must be at most maxNodeCount")
    return PoolSpec(
        name=name,
        devices=devices or (DeviceSpec(),),
        node_count=node_count,
        min_node_count=min_nodes,
        max_node_count=max_nodes,
        class_name=class_name,
        **_device_models(data, path, problems),
        node_cpu=_quantity(data, "nodeCpu", path, problems, "48"),
        node_memory=_quantity(data, "nodeMemory", path, problems, "192Gi"),
    )


def _quantity(
    data: Mapping[str, Any], key: str, path: str, problems: Problems, default: str
) -> str:
    """A node's allocatable CPU or memory (`nodeCpu`, `nodeMemory`): a positive quantity."""
    value = data.get(key, default)
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        if not isinstance(text, str) or parse_quantity(text).nanos <= 0:
            raise QuantityError(key)
    except QuantityError:
        problems.add(f"{path}.{key}", "must be a positive quantity (e.g. 48, 192Gi)")
        return default
    return text


def _device_models(data: Mapping[str, Any], path: str, problems: Problems) -> dict[str, Any]:
    """The pool's sim-only device models (`PoolSpec.partitions` and after)."""
    partitions = get_int(data, "partitions", path, problems, 0)
    if not 0 <= partitions <= 16:
        problems.add(f"{path}.partitions", "must be 0 to 16 (MIG partitions per GPU)")
    counter = data.get("partitionCounter", "1")
    if not isinstance(counter, str | int) or not str(counter):
        problems.add(f"{path}.partitionCounter", "must be a quantity")
        counter = "1"
    tainted = [
        str(d) for d in get_list(data.get("taintedDevices"), f"{path}.taintedDevices", problems)
    ]
    return {
        "partitions": max(0, min(partitions, 16)),
        "partition_counter": str(counter),
        "tainted_devices": tuple(tainted),
    }


def _taints(value: object, path: str, problems: Problems) -> tuple[Mapping[str, str], ...]:
    out: list[Mapping[str, str]] = []
    for i, taint in enumerate(get_list(value, path, problems)):
        where = f"{path}[{i}]"
        t = get_mapping(taint, where, problems)
        check_known(t, ("key", "value", "effect"), where, problems)
        key = get_str(t, "key", where, problems)
        effect = get_str(t, "effect", where, problems, "NoSchedule")
        if effect not in ("NoSchedule", "NoExecute"):
            problems.add(f"{where}.effect", "must be NoSchedule or NoExecute")
        body = {"key": key, "effect": effect}
        if t.get("value"):
            body["value"] = str(t["value"])
        out.append(body)
    return tuple(out)


def read_fleet(
    data: Mapping[str, Any],
    problems: Problems,
    classes: Mapping[str, tuple[DeviceSpec, ...]],
    controller_interval_s: float,
) -> FleetSpec:
    check_known(data, ("clusters", "agent"), "fleet", problems)
    clusters: list[ClusterSpec] = []
    seen: set[str] = set()
    raw_clusters = get_list(data.get("clusters"), "fleet.clusters", problems)
    if not raw_clusters:
        problems.add("fleet.clusters", "must have at least one cluster")
    for i, raw in enumerate(raw_clusters):
        path = f"fleet.clusters[{i}]"
        c = get_mapping(raw, path, problems)
        check_known(c, ("name", "labels", "taints", "behaviour", "pools"), path, problems)
        name = get_str(c, "name", path, problems)
        if name in seen:
            problems.add(f"{path}.name", f"duplicate cluster {name!r}")
        seen.add(name)
        labels = {
            str(k): str(v)
            for k, v in get_mapping(c.get("labels"), f"{path}.labels", problems).items()
        }
        behaviour = _behaviour(
            get_mapping(c.get("behaviour"), f"{path}.behaviour", problems),
            f"{path}.behaviour",
            problems,
        )
        pools: list[PoolSpec] = []
        pool_names: set[str] = set()
        raw_pools = get_list(c.get("pools"), f"{path}.pools", problems)
        if not raw_pools:
            problems.add(f"{path}.pools", "must have at least one pool")
        for j, raw_pool in enumerate(raw_pools):
            ppath = f"{path}.pools[{j}]"
            pool = _pool(get_mapping(raw_pool, ppath, problems), ppath, problems, name, classes)
            if pool.name in pool_names:
                problems.add(f"{ppath}.name", f"duplicate pool {pool.name!r}")
            pool_names.add(pool.name)
            pools.append(pool)
        taints = _taints(c.get("taints"), f"{path}.taints", problems)
        spec = ClusterSpec(name, tuple(pools), behaviour, labels, taints)
        check_cluster(spec, path, problems)
        clusters.append(spec)
    agent = get_mapping(data.get("agent"), "fleet.agent", problems)
    check_known(agent, ("heartbeatInterval", "minPushInterval"), "fleet.agent", problems)
    heartbeat_s = get_duration(agent, "heartbeatInterval", "fleet.agent", problems, 30.0)
    if heartbeat_s < MIN_PERIOD_S:
        problems.add("fleet.agent.heartbeatInterval", "must be at least 1ms (it is a period)")
        heartbeat_s = 30.0
    agent_config = AgentConfig(
        heartbeat_interval_s=heartbeat_s,
        min_push_interval_s=get_duration(agent, "minPushInterval", "fleet.agent", problems, 2.0),
    )
    return FleetSpec(tuple(clusters), controller_interval_s, agent_config)


def check_cluster(
    spec: ClusterSpec, path: str, problems: Problems, *, labels_only: bool = False
) -> None:
    """Validate the InferenceCluster the fleet will publish for `spec` with the API; with
    `labels_only`, report only problems of its labels, under `path` (`path.<label>`)."""
    from gpufleet.sim.emulated.fleet import inventory

    try:
        objs = inventory([spec])
    except ValueError as error:
        if not labels_only:
            problems.add(path, str(error))
        return
    for obj in objs:
        if obj["kind"] != "InferenceCluster":
            continue
        try:
            parse_object(obj)
        except ValidationFailed as failure:
            for field_error in failure.errors:
                where = re.sub(r"^spec\.nodePools", "pools", field_error.path)
                where = where.replace("metadata.labels", "labels").replace("spec.", "")
                where = where.replace("metadata.name", "name")
                if labels_only:
                    if where.startswith("labels"):
                        rest = where.removeprefix("labels").lstrip(".")
                        problems.add(f"{path}.{rest}" if rest else path, field_error.message)
                    continue
                if not problems.covers(f"{path}.{where}"):
                    problems.add(f"{path}.{where}", field_error.message)


def read_controller(data: Mapping[str, Any], problems: Problems) -> ControllerSettings:
    path = "controller"
    known = ("interval", "staleAfter", "expireAfter", "accounting", "stuckAfter")
    check_known(data, known, path, problems)
    accounting = data.get("accounting", Accounting.FREE_GPU.value)
    choices = [a.value for a in Accounting]
    if accounting not in choices:
        problems.add(f"{path}.accounting", f"must be one of {', '.join(choices)}")
        accounting = Accounting.FREE_GPU.value
    interval = get_duration(data, "interval", path, problems, 5.0)
    if interval < MIN_PERIOD_S:
        problems.add(f"{path}.interval", "must be at least 1ms (it is a period)")
        interval = 5.0
    stale = get_duration(data, "staleAfter", path, problems, 60.0)
    expire = get_duration(data, "expireAfter", path, problems, 300.0)
    if expire < stale:
        problems.add(f"{path}.expireAfter", "must be at least staleAfter")
    stuck = get_duration(data, "stuckAfter", path, problems, 120.0)
    if stuck < 1:
        problems.add(f"{path}.stuckAfter", "must be at least 1s")
        stuck = 120.0
    return ControllerSettings(interval, stale, expire, Accounting(accounting), stuck)
