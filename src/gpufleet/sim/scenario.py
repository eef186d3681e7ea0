"""Scenario files: a simulated fleet, the manifests applied to it, a timeline, and checks.

A scenario is YAML (docs/scenarios.md has the schema). `load_scenario(path)` and
`parse_scenario(data)` turn it into frozen dataclasses: the fleet as the simulator's own
`FleetSpec` (clusters, pools, behaviour), the controller settings, the ModelDeployments (each
validated with the API, so an invalid manifest is an error naming the field), the timeline of
`Action`s and the `Check`s. Nothing is half-parsed: every problem of the file is collected with
its field path (`timeline[3].action: unknown action 'cordonn' (expected one of ...)`) and raised
at once as one `ScenarioInvalid`.

Nodes are addressed by the name the simulator gives them, `<pool>-<i>` (`l4-0`, `l4-1`, ...,
in creation order, never reused), or by `pool` plus `index` (the same name); an action on a
`pool` without an index applies to every node the pool has at that moment.

Times (`end`, `at`, delays) are seconds as a number, or a duration such as `90s`, `30m`, `2h`,
`1h30m`, `1d`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode

from gpufleet.agent.runner import AgentConfig
from gpufleet.api import ValidationFailed, parse_object
from gpufleet.core.model import NodeChoice
from gpufleet.sim.cluster import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.fleet import FleetSpec
from gpufleet.store.port import Obj

API_VERSION: Final = "gpufleet.io/v1alpha1"
DEFAULT_NAMESPACE: Final = "default"
#: Built-in scenarios are package data: `gpufleet/sim/scenarios/<name>.yaml`.
BUILTIN_PACKAGE: Final = "gpufleet.sim.scenarios"


class ScenarioInvalid(ValueError):
    """A scenario that cannot run; `problems` lists every `path: message`."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(
            f"{head}invalid scenario ({len(self.problems)} problems):\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


class Accounting(StrEnum):
    """How the controller counts capacity."""

    #: From the agents' observations (histograms of nodes by free GPUs).
    FREE_GPU = "free-gpu"
    #: Observations are not fed to the controller: every claiming pod costs a whole node.
    WHOLE_NODE = "whole-node"


class ActionKind(StrEnum):
    APPLY = "apply"
    DELETE = "delete"
    SCALE = "scale"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    TAINT = "taint"
    UNTAINT = "untaint"
    FAIL_NODE = "failNode"
    RECOVER_NODE = "recoverNode"
    ADD_NODE = "addNode"
    REMOVE_NODE = "removeNode"
    KILL_AGENT = "killAgent"
    START_AGENT = "startAgent"
    PARTITION = "partition"
    HEAL = "heal"
    ADD_FOREIGN_CLAIM = "addForeignClaim"
    REMOVE_FOREIGN_CLAIM = "removeForeignClaim"


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    interval_s: float = 5.0
    stale_after_s: float = 60.0
    expire_after_s: float = 300.0
    accounting: Accounting = Accounting.FREE_GPU


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node by name, or a pool's node by index, or (neither) every node of the pool."""

    node: str = ""
    pool: str = ""
    index: int | None = None

    def names(self, existing: Sequence[str]) -> list[str]:
        if self.node:
            return [self.node]
        if self.index is not None:
            return [f"{self.pool}-{self.index}"]
        return [n for n in existing if n.rpartition("-")[0] == self.pool]

    def __str__(self) -> str:
        if self.node:
            return self.node
        return f"{self.pool}[{self.index}]" if self.index is not None else f"pool {self.pool}"


@dataclass(frozen=True, slots=True)
class Action:
    """One timeline entry; which fields matter depends on `kind` (docs/scenarios.md)."""

    at_s: float
    kind: ActionKind
    path: str
    cluster: str = ""
    target: NodeRef | None = None
    deployment: str = ""
    replicas: int = 0
    manifest: Obj | None = None
    key: str = ""
    value: str = ""
    effect: str = "NoSchedule"
    devices: int = 1
    claim: str = ""

    def describe(self) -> str:
        k = self.kind
        if k is ActionKind.APPLY and self.manifest is not None:
            meta = self.manifest["metadata"]
            return f"apply {meta['namespace']}/{meta['name']}"
        if k in (ActionKind.DELETE,):
            return f"delete {self.deployment}"
        if k is ActionKind.SCALE:
            return f"scale {self.deployment} to {self.replicas}"
        where = self.cluster + (f"/{self.target}" if self.target is not None else "")
        if k in (ActionKind.TAINT, ActionKind.UNTAINT):
            return f"{k.value} {where} {self.key}"
        if k is ActionKind.ADD_FOREIGN_CLAIM:
            return f"addForeignClaim {where} ({self.devices} devices)"
        if k is ActionKind.REMOVE_FOREIGN_CLAIM:
            return f"removeForeignClaim {self.cluster} {self.claim or self.target}"
        if k is ActionKind.ADD_NODE:
            return f"addNode {self.cluster}/{self.target.pool if self.target else ''}"
        return f"{k.value} {where}"


@dataclass(frozen=True, slots=True)
class PlacementExpectation:
    count: int | None = None
    #: Replicas per cluster; a cluster not named must hold none when `is_exact_clusters`.
    clusters: Mapping[str, int] | None = None
    is_exact_clusters: bool = True


@dataclass(frozen=True, slots=True)
class ConditionExpectation:
    type: str = "ReplicasScheduled"
    status: str | None = None
    reason: str | None = None
    #: A substring the message must contain.
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """What must hold at `at_s` (after the components of that instant ran, before actions)."""

    at_s: float
    path: str
    placements: Mapping[str, PlacementExpectation] = field(default_factory=dict)
    #: None: not checked; key "" is the fleet total.
    pending: Mapping[str, int] | None = None
    pods_running: Mapping[str, int] | None = None
    #: (cluster, pool) -> GPUs the cluster really has free: published, held by no claim.
    free_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: (cluster, pool) -> free GPUs in the agent's last report on the hub (its histogram).
    observed_free_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    allocated_gpus: Mapping[tuple[str, str], int] = field(default_factory=dict)
    histogram: Mapping[tuple[str, str], Mapping[int, int]] = field(default_factory=dict)
    nodes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    pool_state: Mapping[tuple[str, str], str] = field(default_factory=dict)
    conditions: Mapping[str, ConditionExpectation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    seed: int
    end_s: float
    fleet: FleetSpec
    controller: ControllerSettings
    #: ModelDeployments applied at time 0 (validated bodies, namespace filled in).
    manifests: tuple[Obj, ...]
    timeline: tuple[Action, ...]
    checks: tuple[Check, ...]
    #: How often metrics are sampled (0: automatic, about 240 samples per run).
    sample_interval_s: float = 0.0
    #: Where the scenario was read (a path, or `builtin:<name>`).
    source: str = ""

    def deployment_names(self) -> list[str]:
        """`namespace/name` of every deployment the scenario applies, in order."""
        out: list[str] = []
        bodies = [*self.manifests, *(a.manifest for a in self.timeline if a.manifest)]
        for body in bodies:
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            if key not in out:
                out.append(key)
        return out


# --- durations ----------------------------------------------------------------------------

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Seconds from a number or a duration string (`90s`, `30m`, `1h30m`); ValueError if not."""
    if isinstance(value, bool):
        raise ValueError("must be a duration (seconds, or like 30s, 5m, 2h)")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            return float(text)
        parts = _DURATION.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return sum(float(n) * _UNITS[u] for n, u in parts)
    raise ValueError(f"{value!r} is not a duration (seconds, or like 30s, 5m, 2h, 1h30m)")


def format_duration(seconds: float) -> str:
    """`1h02m05s`-style; whole seconds, `0s` for zero."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{sec:02d}s"
    if m:
        return f"{m}m{sec:02d}s"
    return f"{sec}s"


# --- reading ------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and keeps timestamps as strings."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def builtin_names() -> list[str]:
    """The built-in scenarios, sorted by name."""
    folder = resources.files(BUILTIN_PACKAGE)
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def builtin_text(name: str) -> str:
    return (resources.files(BUILTIN_PACKAGE) / f"{name}.yaml").read_text(encoding="utf-8")


def load_scenario(path_or_name: str | Path) -> Scenario:
    """A scenario from a file, or a built-in by name (a path that exists wins)."""
    path = Path(path_or_name)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ScenarioInvalid([f"cannot read: {error}"], str(path)) from None
        return parse_scenario_text(text, str(path))
    name = str(path_or_name)
    if name in builtin_names():
        return parse_scenario_text(builtin_text(name), f"builtin:{name}")
    raise ScenarioInvalid(
        [f"no such file, and not a built-in scenario (built-ins: {', '.join(builtin_names())})"],
        name,
    )


def parse_scenario_text(text: str, source: str = "") -> Scenario:
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioInvalid(
            [f"malformed YAML{where}: {error.problem or error.context}"], source
        ) from None
    except yaml.YAMLError as error:
        raise ScenarioInvalid([f"malformed YAML: {error}"], source) from None
    return parse_scenario(data, source)


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)


_TOP_KEYS: Final = (
    "name",
    "description",
    "seed",
    "end",
    "sampleInterval",
    "classes",
    "fleet",
    "controller",
    "manifests",
    "timeline",
    "checks",
)


def _mapping(value: object, path: str, problems: _Problems) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, "must be a mapping")
        return {}
    return value


def _list(value: object, path: str, problems: _Problems) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(path, "must be a list")
        return []
    return value


def _known(data: Mapping[str, Any], allowed: Sequence[str], path: str, problems: _Problems) -> None:
    for key in data:
        if isinstance(key, str) and key.startswith("x-"):
            continue  # extension fields, for YAML anchors
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            problems.add(where, f"unknown field (expected one of {', '.join(allowed)})")


def _str(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: _Problems,
    default: str | None = None,
) -> str:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return ""
        return default
    if not isinstance(value, str) or not value:
        problems.add(where, "must be a non-empty string")
        return default or ""
    return value


def _int(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: _Problems,
    default: int | None = None,
    minimum: int = 0,
) -> int:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return minimum
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        problems.add(where, "must be an integer")
        return default if default is not None else minimum
    if value < minimum:
        problems.add(where, f"must be at least {minimum}")
    return value


def _duration(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: _Problems,
    default: float | None = None,
) -> float:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return 0.0
        return default
    try:
        return parse_duration(value)
    except ValueError as error:
        problems.add(where, str(error))
        return default or 0.0


def _bool(data: Mapping[str, Any], key: str, path: str, problems: _Problems, default: bool) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.add(f"{path}.{key}", "must be true or false")
        return default
    return value


def _validated(
    body: object, path: str, problems: _Problems, expected_kind: str | None = None
) -> Obj | None:
    """A manifest validated with the API; its errors are reported under `path`."""
    if not isinstance(body, Mapping):
        problems.add(path, "must be a mapping (a Kubernetes object)")
        return None
    if expected_kind is not None and body.get("kind") != expected_kind:
        problems.add(f"{path}.kind", f"must be {expected_kind}, got {body.get('kind')!r}")
        return None
    try:
        parse_object(dict(body))
    except ValidationFailed as failure:
        for error in failure.errors:
            problems.add(f"{path}.{error.path}" if error.path else path, error.message)
        return None
    out: Obj = _plain(body)
    out["metadata"].setdefault("namespace", DEFAULT_NAMESPACE)
    return out


def _plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists (YAML anchors share objects)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- the fleet ----------------------------------------------------------------------------

_BEHAVIOUR_FIELDS: Final = {
    # yaml key: (ClusterBehaviour field, kind)
    "nodeChoice": ("node_choice", "choice"),
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


def _behaviour(data: Mapping[str, Any], path: str, problems: _Problems) -> ClusterBehaviour:
    _known(data, tuple(_BEHAVIOUR_FIELDS), path, problems)
    kwargs: dict[str, Any] = {}
    for key, (attr, kind) in _BEHAVIOUR_FIELDS.items():
        if key not in data:
            continue
        if kind == "duration":
            seconds = _duration(data, key, path, problems)
            if attr in ("tick_s", "report_interval_s") and seconds <= 0:
                problems.add(f"{path}.{key}", "must be more than 0")
                continue
            kwargs[attr] = seconds
        elif kind == "bool":
            kwargs[attr] = _bool(data, key, path, problems, False)
        else:
            value = data[key]
            choices = [c.value for c in NodeChoice]
            if value not in choices:
                problems.add(f"{path}.{key}", f"must be one of {', '.join(choices)}")
            else:
                kwargs[attr] = NodeChoice(value)
    return ClusterBehaviour(**kwargs)


def _devices(
    spec: object, path: str, problems: _Problems, class_name: str
) -> tuple[DeviceSpec, ...]:
    """Devices of an InferenceClass spec, validated as an InferenceClass."""
    body = {
        "apiVersion": API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": class_name},
        "spec": spec,
    }
    before = len(problems.items)
    try:
        parse_object(body)
    except ValidationFailed as failure:
        for error in failure.errors:
            where = error.path.removeprefix("spec.").removeprefix("spec")
            problems.add(f"{path}.{where}" if where else path, error.message)
    if len(problems.items) > before or not isinstance(spec, Mapping):
        return ()
    return tuple(DeviceSpec.from_class(d) for d in spec.get("devices") or [])


def _classes(value: object, problems: _Problems) -> dict[str, tuple[DeviceSpec, ...]]:
    out: dict[str, tuple[DeviceSpec, ...]] = {}
    for name, spec in _mapping(value, "classes", problems).items():
        if isinstance(spec, Mapping):
            _known(spec, ("devices",), f"classes.{name}", problems)
        out[str(name)] = _devices(spec, f"classes.{name}", problems, str(name))
    return out


def _pool(
    data: Mapping[str, Any],
    path: str,
    problems: _Problems,
    cluster: str,
    classes: Mapping[str, tuple[DeviceSpec, ...]],
) -> PoolSpec:
    _known(data, ("name", "class", "nodeCount", "minNodeCount", "maxNodeCount"), path, problems)
    name = _str(data, "name", path, problems)
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
        inner = {k: v for k, v in klass.items() if k != "name"}
        if isinstance(klass.get("name"), str):
            class_name = klass["name"]
        devices = _devices(inner, f"{path}.class", problems, class_name)
    else:
        problems.add(f"{path}.class", "is required: a class name, or {devices: [...]}")
    node_count = _int(data, "nodeCount", path, problems, 1)
    min_nodes = _int(data, "minNodeCount", path, problems, 0)
    max_nodes = data.get("maxNodeCount")
    if max_nodes is not None:
        max_nodes = _int(data, "maxNodeCount", path, problems, 1, minimum=1)
        if max_nodes < min_nodes:
            problems.add(f"{path}.maxNodeCount", "must be at least minNodeCount")
        if node_count > max_nodes:
            problems.add(f"{path}.nodeCount", "must be at most maxNodeCount")
    return PoolSpec(
        name=name,
        devices=devices or (DeviceSpec(),),
        node_count=node_count,
        min_node_count=min_nodes,
        max_node_count=max_nodes,
        class_name=class_name,
    )


def _taints(value: object, path: str, problems: _Problems) -> tuple[Mapping[str, str], ...]:
    out: list[Mapping[str, str]] = []
    for i, taint in enumerate(_list(value, path, problems)):
        where = f"{path}[{i}]"
        t = _mapping(taint, where, problems)
        _known(t, ("key", "value", "effect"), where, problems)
        key = _str(t, "key", where, problems)
        effect = _str(t, "effect", where, problems, "NoSchedule")
        if effect not in ("NoSchedule", "NoExecute"):
            problems.add(f"{where}.effect", "must be NoSchedule or NoExecute")
        body = {"key": key, "effect": effect}
        if t.get("value"):
            body["value"] = str(t["value"])
        out.append(body)
    return tuple(out)


def _fleet(
    data: Mapping[str, Any],
    problems: _Problems,
    classes: Mapping[str, tuple[DeviceSpec, ...]],
    controller_interval_s: float,
) -> FleetSpec:
    _known(data, ("clusters", "agent"), "fleet", problems)
    clusters: list[ClusterSpec] = []
    seen: set[str] = set()
    raw_clusters = _list(data.get("clusters"), "fleet.clusters", problems)
    if not raw_clusters:
        problems.add("fleet.clusters", "must have at least one cluster")
    for i, raw in enumerate(raw_clusters):
        path = f"fleet.clusters[{i}]"
        c = _mapping(raw, path, problems)
        _known(c, ("name", "labels", "taints", "behaviour", "pools"), path, problems)
        name = _str(c, "name", path, problems)
        if name in seen:
            problems.add(f"{path}.name", f"duplicate cluster {name!r}")
        seen.add(name)
        labels = {
            str(k): str(v) for k, v in _mapping(c.get("labels"), f"{path}.labels", problems).items()
        }
        behaviour = _behaviour(
            _mapping(c.get("behaviour"), f"{path}.behaviour", problems),
            f"{path}.behaviour",
            problems,
        )
        pools: list[PoolSpec] = []
        pool_names: set[str] = set()
        raw_pools = _list(c.get("pools"), f"{path}.pools", problems)
        if not raw_pools:
            problems.add(f"{path}.pools", "must have at least one pool")
        for j, raw_pool in enumerate(raw_pools):
            ppath = f"{path}.pools[{j}]"
            pool = _pool(_mapping(raw_pool, ppath, problems), ppath, problems, name, classes)
            if pool.name in pool_names:
                problems.add(f"{ppath}.name", f"duplicate pool {pool.name!r}")
            pool_names.add(pool.name)
            pools.append(pool)
        taints = _taints(c.get("taints"), f"{path}.taints", problems)
        spec = ClusterSpec(name, tuple(pools), behaviour, labels, taints)
        _check_cluster(spec, path, problems)
        clusters.append(spec)
    agent = _mapping(data.get("agent"), "fleet.agent", problems)
    _known(agent, ("heartbeatInterval", "minPushInterval"), "fleet.agent", problems)
    agent_config = AgentConfig(
        heartbeat_interval_s=_duration(agent, "heartbeatInterval", "fleet.agent", problems, 30.0),
        min_push_interval_s=_duration(agent, "minPushInterval", "fleet.agent", problems, 2.0),
    )
    return FleetSpec(tuple(clusters), controller_interval_s, agent_config)


def _check_cluster(spec: ClusterSpec, path: str, problems: _Problems) -> None:
    """Validate the InferenceCluster the fleet will publish for `spec` with the API."""
    from gpufleet.sim.fleet import inventory

    try:
        objs = inventory([spec])
    except ValueError as error:
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
                problems.add(f"{path}.{where}", field_error.message)


def _controller(data: Mapping[str, Any], problems: _Problems) -> ControllerSettings:
    path = "controller"
    _known(data, ("interval", "staleAfter", "expireAfter", "accounting"), path, problems)
    accounting = data.get("accounting", Accounting.FREE_GPU.value)
    choices = [a.value for a in Accounting]
    if accounting not in choices:
        problems.add(f"{path}.accounting", f"must be one of {', '.join(choices)}")
        accounting = Accounting.FREE_GPU.value
    interval = _duration(data, "interval", path, problems, 5.0)
    if interval <= 0:
        problems.add(f"{path}.interval", "must be more than 0")
        interval = 5.0
    stale = _duration(data, "staleAfter", path, problems, 60.0)
    expire = _duration(data, "expireAfter", path, problems, 300.0)
    if expire < stale:
        problems.add(f"{path}.expireAfter", "must be at least staleAfter")
    return ControllerSettings(interval, stale, expire, Accounting(accounting))


# --- the timeline -------------------------------------------------------------------------

_NODE_ACTIONS: Final = (
    ActionKind.CORDON,
    ActionKind.UNCORDON,
    ActionKind.FAIL_NODE,
    ActionKind.RECOVER_NODE,
    ActionKind.REMOVE_NODE,
)
_AGENT_ACTIONS: Final = (
    ActionKind.KILL_AGENT,
    ActionKind.START_AGENT,
    ActionKind.PARTITION,
    ActionKind.HEAL,
)
_ACTION_FIELDS: Final[dict[ActionKind, tuple[str, ...]]] = {
    ActionKind.APPLY: ("manifest",),
    ActionKind.DELETE: ("deployment",),
    ActionKind.SCALE: ("deployment", "replicas"),
    **{k: ("cluster", "node", "pool", "index") for k in _NODE_ACTIONS},
    ActionKind.TAINT: ("cluster", "node", "pool", "index", "key", "value", "effect"),
    ActionKind.UNTAINT: ("cluster", "node", "pool", "index", "key", "effect"),
    ActionKind.ADD_NODE: ("cluster", "pool"),
    **{k: ("cluster",) for k in _AGENT_ACTIONS},
    ActionKind.ADD_FOREIGN_CLAIM: ("cluster", "node", "pool", "index", "devices"),
    ActionKind.REMOVE_FOREIGN_CLAIM: ("cluster", "claim", "node", "pool", "index"),
}


class _Fleet:
    """Names the timeline and checks may refer to."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.pools = {c.name: {p.name for p in c.pools} for c in fleet.clusters}

    def cluster(self, data: Mapping[str, Any], path: str, problems: _Problems) -> str:
        name = _str(data, "cluster", path, problems)
        if name and name not in self.pools:
            problems.add(
                f"{path}.cluster",
                f"unknown cluster {name!r} (clusters: {', '.join(sorted(self.pools))})",
            )
        return name

    def pool_key(self, key: object, path: str, problems: _Problems) -> tuple[str, str]:
        text = str(key)
        cluster, sep, pool = text.partition("/")
        if not sep or not cluster or not pool:
            problems.add(path, f"{text!r} must be cluster/pool")
        elif cluster not in self.pools:
            problems.add(path, f"unknown cluster {cluster!r}")
        elif pool not in self.pools[cluster]:
            problems.add(path, f"cluster {cluster} has no pool {pool!r}")
        return cluster, pool


def _node_ref(
    data: Mapping[str, Any],
    path: str,
    problems: _Problems,
    fleet: _Fleet,
    cluster: str,
    *,
    required: bool,
) -> NodeRef | None:
    node = data.get("node")
    pool = data.get("pool")
    index = data.get("index")
    if node is not None:
        if pool is not None or index is not None:
            problems.add(path, "give node, or pool (and index), not both")
        if not isinstance(node, str) or not node:
            problems.add(f"{path}.node", "must be a node name like l4-0")
            return None
        pool_name = node.rpartition("-")[0]
        if cluster in fleet.pools and pool_name not in fleet.pools[cluster]:
            problems.add(
                f"{path}.node",
                f"{node!r} is not a node name of cluster {cluster} (nodes are <pool>-<i>)",
            )
        return NodeRef(node=node)
    if pool is not None:
        if not isinstance(pool, str) or (
            cluster in fleet.pools and pool not in fleet.pools[cluster]
        ):
            problems.add(f"{path}.pool", f"cluster {cluster} has no pool {pool!r}")
            return None
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            problems.add(f"{path}.index", "must be an integer")
            return None
        return NodeRef(pool=pool, index=index)
    if required:
        problems.add(path, "needs node (like l4-0), or pool (and index)")
    return None


def _deployment_ref(
    data: Mapping[str, Any], path: str, problems: _Problems, known: Sequence[str]
) -> str:
    name = _str(data, "deployment", path, problems)
    return resolve_deployment(name, known, f"{path}.deployment", problems)


def resolve_deployment(
    name: str, known: Sequence[str], path: str, problems: _Problems | None = None
) -> str:
    """`namespace/name` for a deployment named by `namespace/name` or, if unique, `name`."""
    if not name:
        return name
    if name in known:
        return name
    matches = [k for k in known if k.rpartition("/")[2] == name]
    if len(matches) == 1:
        return matches[0]
    if problems is not None:
        problems.add(
            path,
            f"unknown deployment {name!r} (deployments: {', '.join(known) or 'none'})"
            if not matches
            else f"{name!r} is ambiguous: {', '.join(matches)}",
        )
    return name


def _action(
    raw: object,
    path: str,
    problems: _Problems,
    fleet: _Fleet,
    known: list[str],
    end_s: float,
) -> Action | None:
    data = _mapping(raw, path, problems)
    at_s = _duration(data, "at", path, problems)
    if at_s > end_s:
        problems.add(f"{path}.at", f"is after the end ({format_duration(end_s)})")
    kind_text = data.get("action")
    choices = [k.value for k in ActionKind]
    if kind_text not in choices:
        problems.add(
            f"{path}.action",
            f"unknown action {kind_text!r} (expected one of {', '.join(choices)})"
            if kind_text is not None
            else f"is required (one of {', '.join(choices)})",
        )
        return None
    kind = ActionKind(kind_text)
    _known(data, ("at", "action", *_ACTION_FIELDS[kind]), path, problems)
    if kind is ActionKind.APPLY:
        manifest = _validated(data.get("manifest"), f"{path}.manifest", problems, "ModelDeployment")
        if manifest is None:
            return None
        key = f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
        if key not in known:
            known.append(key)
        return Action(at_s, kind, path, manifest=manifest, deployment=key)
    if kind is ActionKind.DELETE:
        return Action(at_s, kind, path, deployment=_deployment_ref(data, path, problems, known))
    if kind is ActionKind.SCALE:
        deployment = _deployment_ref(data, path, problems, known)
        replicas = _int(data, "replicas", path, problems)
        return Action(at_s, kind, path, deployment=deployment, replicas=replicas)
    cluster = fleet.cluster(data, path, problems)
    if kind in _AGENT_ACTIONS:
        return Action(at_s, kind, path, cluster=cluster)
    if kind is ActionKind.ADD_NODE:
        pool = _str(data, "pool", path, problems)
        if cluster in fleet.pools and pool and pool not in fleet.pools[cluster]:
            problems.add(f"{path}.pool", f"cluster {cluster} has no pool {pool!r}")
        return Action(at_s, kind, path, cluster=cluster, target=NodeRef(pool=pool))
    if kind in (ActionKind.TAINT, ActionKind.UNTAINT):
        target = _node_ref(data, path, problems, fleet, cluster, required=False)
        key = _str(data, "key", path, problems)
        effect = _str(data, "effect", path, problems, "NoSchedule")
        if effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            problems.add(f"{path}.effect", "must be NoSchedule, NoExecute or PreferNoSchedule")
        value = str(data.get("value") or "")
        return Action(
            at_s, kind, path, cluster=cluster, target=target, key=key, value=value, effect=effect
        )
    if kind is ActionKind.ADD_FOREIGN_CLAIM:
        target = _node_ref(data, path, problems, fleet, cluster, required=True)
        if target is not None and not target.node and target.index is None:
            problems.add(path, "addForeignClaim needs one node: node, or pool and index")
        devices = _int(data, "devices", path, problems, 1, minimum=1)
        return Action(at_s, kind, path, cluster=cluster, target=target, devices=devices)
    if kind is ActionKind.REMOVE_FOREIGN_CLAIM:
        claim = str(data.get("claim") or "")
        target = _node_ref(data, path, problems, fleet, cluster, required=not claim)
        return Action(at_s, kind, path, cluster=cluster, target=target, claim=claim)
    target = _node_ref(data, path, problems, fleet, cluster, required=True)
    return Action(at_s, kind, path, cluster=cluster, target=target)


# --- checks -------------------------------------------------------------------------------

_EXPECT_KEYS: Final = (
    "placements",
    "pending",
    "podsRunning",
    "freeGPUs",
    "observedFreeGPUs",
    "allocatedGPUs",
    "histogram",
    "nodes",
    "poolState",
    "conditions",
)


def _per_deployment_ints(
    value: object, path: str, problems: _Problems, known: Sequence[str]
) -> dict[str, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return {"": value}
    out: dict[str, int] = {}
    for name, n in _mapping(value, path, problems).items():
        key = resolve_deployment(str(name), known, f"{path}.{name}", problems)
        if isinstance(n, bool) or not isinstance(n, int):
            problems.add(f"{path}.{name}", "must be an integer")
            continue
        out[key] = n
    return out


def _per_pool_ints(
    value: object, path: str, problems: _Problems, fleet: _Fleet
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for key, n in _mapping(value, path, problems).items():
        pool = fleet.pool_key(key, f"{path}.{key}", problems)
        if isinstance(n, bool) or not isinstance(n, int):
            problems.add(f"{path}.{key}", "must be an integer")
            continue
        out[pool] = n
    return out


def _check(
    raw: object,
    path: str,
    problems: _Problems,
    fleet: _Fleet,
    known: Sequence[str],
    end_s: float,
) -> Check:
    data = _mapping(raw, path, problems)
    _known(data, ("at", "expect", "description"), path, problems)
    at_s = _duration(data, "at", path, problems)
    if at_s > end_s:
        problems.add(f"{path}.at", f"is after the end ({format_duration(end_s)})")
    epath = f"{path}.expect"
    expect = _mapping(data.get("expect"), epath, problems)
    if not expect:
        problems.add(epath, f"must expect something (one of {', '.join(_EXPECT_KEYS)})")
    _known(expect, _EXPECT_KEYS, epath, problems)

    placements: dict[str, PlacementExpectation] = {}
    for name, value in _mapping(expect.get("placements"), f"{epath}.placements", problems).items():
        where = f"{epath}.placements.{name}"
        key = resolve_deployment(str(name), known, where, problems)
        if isinstance(value, int) and not isinstance(value, bool):
            placements[key] = PlacementExpectation(count=value)
            continue
        v = _mapping(value, where, problems)
        _known(v, ("count", "clusters"), where, problems)
        count = _int(v, "count", where, problems, -1)
        clusters_raw = v.get("clusters")
        clusters: dict[str, int] | None = None
        if isinstance(clusters_raw, list):
            clusters = {}
            for c in clusters_raw:
                clusters[str(c)] = clusters.get(str(c), 0) + 1
        elif isinstance(clusters_raw, Mapping):
            clusters = {str(c): int(n) for c, n in clusters_raw.items()}
        elif clusters_raw is not None:
            problems.add(f"{where}.clusters", "must be a list of clusters or {cluster: count}")
        for c in clusters or {}:
            if c not in fleet.pools:
                problems.add(f"{where}.clusters", f"unknown cluster {c!r}")
        placements[key] = PlacementExpectation(None if count < 0 else count, clusters)

    histogram: dict[tuple[str, str], dict[int, int]] = {}
    for key, value in _mapping(expect.get("histogram"), f"{epath}.histogram", problems).items():
        where = f"{epath}.histogram.{key}"
        pool = fleet.pool_key(key, where, problems)
        buckets: dict[int, int] = {}
        for free, nodes in _mapping(value, where, problems).items():
            try:
                buckets[int(free)] = int(nodes)
            except (TypeError, ValueError):
                problems.add(f"{where}.{free}", "must map free GPUs to a node count")
        histogram[pool] = buckets

    pool_state: dict[tuple[str, str], str] = {}
    for key, value in _mapping(expect.get("poolState"), f"{epath}.poolState", problems).items():
        where = f"{epath}.poolState.{key}"
        pool = fleet.pool_key(key, where, problems)
        if value not in ("Fresh", "Stale", "Expired", "None"):
            problems.add(where, "must be Fresh, Stale, Expired or None")
        pool_state[pool] = str(value)

    conditions: dict[str, ConditionExpectation] = {}
    for name, value in _mapping(expect.get("conditions"), f"{epath}.conditions", problems).items():
        where = f"{epath}.conditions.{name}"
        key = resolve_deployment(str(name), known, where, problems)
        v = _mapping(value, where, problems)
        _known(v, ("type", "status", "reason", "message"), where, problems)
        status = v.get("status")
        if status is not None and str(status) not in ("True", "False", "Unknown"):
            problems.add(f"{where}.status", "must be True, False or Unknown (quoted in YAML)")
        conditions[key] = ConditionExpectation(
            type=str(v.get("type") or "ReplicasScheduled"),
            status=None if status is None else str(status),
            reason=None if v.get("reason") is None else str(v["reason"]),
            message=None if v.get("message") is None else str(v["message"]),
        )

    free_gpus = _per_pool_ints(expect.get("freeGPUs"), f"{epath}.freeGPUs", problems, fleet)
    observed = _per_pool_ints(
        expect.get("observedFreeGPUs"), f"{epath}.observedFreeGPUs", problems, fleet
    )
    return Check(
        at_s=at_s,
        path=path,
        placements=placements,
        pending=_per_deployment_ints(expect.get("pending"), f"{epath}.pending", problems, known),
        pods_running=_per_deployment_ints(
            expect.get("podsRunning"), f"{epath}.podsRunning", problems, known
        ),
        free_gpus=free_gpus,
        observed_free_gpus=observed,
        allocated_gpus=_per_pool_ints(
            expect.get("allocatedGPUs"), f"{epath}.allocatedGPUs", problems, fleet
        ),
        histogram=histogram,
        nodes=_per_pool_ints(expect.get("nodes"), f"{epath}.nodes", problems, fleet),
        pool_state=pool_state,
        conditions=conditions,
    )


# --- the whole scenario -------------------------------------------------------------------


def parse_scenario(data: object, source: str = "") -> Scenario:
    """A `Scenario` from parsed YAML; raise ScenarioInvalid listing every problem."""
    problems = _Problems()
    if not isinstance(data, Mapping):
        raise ScenarioInvalid(["must be a mapping with name, fleet, ..."], source)
    _known(data, _TOP_KEYS, "", problems)
    name = _str(data, "name", "", problems)
    description = str(data.get("description") or "").strip()
    seed = _int(data, "seed", "", problems, 0)
    end_s = _duration(data, "end", "", problems)
    if end_s <= 0 and "end" in data:
        problems.add("end", "must be more than 0")
    sample_s = _duration(data, "sampleInterval", "", problems, 0.0)
    classes = _classes(data.get("classes"), problems)
    controller = _controller(_mapping(data.get("controller"), "controller", problems), problems)
    fleet = _fleet(
        _mapping(data.get("fleet"), "fleet", problems), problems, classes, controller.interval_s
    )
    names = _Fleet(fleet)

    manifests: list[Obj] = []
    known: list[str] = []
    for i, raw in enumerate(_list(data.get("manifests"), "manifests", problems)):
        body = _validated(raw, f"manifests[{i}]", problems, "ModelDeployment")
        if body is None:
            continue
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        if key in known:
            problems.add(f"manifests[{i}].metadata.name", f"duplicate deployment {key}")
        known.append(key)
        manifests.append(body)

    raw_timeline = _list(data.get("timeline"), "timeline", problems)
    # Deployments applied later in the timeline may be named anywhere: collect them first.
    for raw in raw_timeline:
        if isinstance(raw, Mapping) and raw.get("action") == "apply":
            meta = (raw.get("manifest") or {}).get("metadata") or {}
            if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
                key = f"{meta.get('namespace') or DEFAULT_NAMESPACE}/{meta['name']}"
                if key not in known:
                    known.append(key)
    timeline: list[Action] = []
    for i, raw in enumerate(raw_timeline):
        action = _action(raw, f"timeline[{i}]", problems, names, known, end_s)
        if action is not None:
            timeline.append(action)
    checks = [
        _check(raw, f"checks[{i}]", problems, names, known, end_s)
        for i, raw in enumerate(_list(data.get("checks"), "checks", problems))
    ]
    if problems.items:
        raise ScenarioInvalid(problems.items, source)
    return Scenario(
        name=name,
        description=description,
        seed=seed,
        end_s=end_s,
        fleet=fleet,
        controller=controller,
        manifests=tuple(manifests),
        timeline=tuple(sorted(timeline, key=lambda a: a.at_s)),
        checks=tuple(sorted(checks, key=lambda c: c.at_s)),
        sample_interval_s=sample_s,
        source=source,
    )
