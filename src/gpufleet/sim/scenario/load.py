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
`1h30m`, `1d`. Everything a run may take is bounded (`scenario_model.MAX_*`: durations,
periods, samples, steps; `MAX_YAML_VALUES` once aliases are expanded), so a scenario past the
bounds is invalid rather than a run that overflows or exhausts memory; `size.estimate` counts
nodes, replicas, actions and the work of the run before it starts and `size.check` refuses past
its bounds, naming the field that makes it large. A file is at most `MAX_SCENARIO_BYTES` (1 MiB),
a regular file (a FIFO is refused, not waited on).

The readers of each section live beside this module: `fields` (field readers and the
problems they collect), `parse_fleet`, `parse_timeline`, `parse_checks`; the data model in
`scenario_model`, re-exported here.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Hashable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode

from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.sim.scenario import size
from gpufleet.sim.scenario.fields import (
    Problems,
    check_known,
    get_duration,
    get_int,
    get_list,
    get_mapping,
    get_str,
    validated,
)
from gpufleet.sim.scenario.model import (
    API_VERSION,
    DEFAULT_NAMESPACE,
    MAX_SAMPLES,
    MAX_STEPS,
    MIN_PERIOD_S,
    Accounting,
    Action,
    ActionKind,
    Check,
    ConditionExpectation,
    ControllerSettings,
    NodeRef,
    PlacementExpectation,
    Scenario,
    ScenarioInvalid,
    format_duration,
    parse_duration,
)
from gpufleet.sim.scenario.parse_checks import read_check
from gpufleet.sim.scenario.parse_fleet import read_classes, read_controller, read_fleet
from gpufleet.sim.scenario.parse_timeline import FleetNames, read_action, resolve_deployment
from gpufleet.store.port import Obj

__all__ = [
    "API_VERSION",
    "BUILTIN_PACKAGE",
    "DEFAULT_NAMESPACE",
    "Accounting",
    "Action",
    "ActionKind",
    "Check",
    "ConditionExpectation",
    "ControllerSettings",
    "NodeRef",
    "PlacementExpectation",
    "Scenario",
    "ScenarioInvalid",
    "builtin_names",
    "builtin_text",
    "format_duration",
    "load_scenario",
    "parse_duration",
    "parse_scenario",
    "parse_scenario_text",
    "resolve_deployment",
]

#: Built-in scenarios are package data: `gpufleet/sim/scenario/builtin/<name>.yaml`.
BUILTIN_PACKAGE: Final = "gpufleet.sim.scenario.builtin"


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
    if path.exists():
        return parse_scenario_text(_read(path), str(path))
    name = str(path_or_name)
    if name in builtin_names():
        return parse_scenario_text(builtin_text(name), f"builtin:{name}")
    raise ScenarioInvalid(
        [f"no such file, and not a built-in scenario (built-ins: {', '.join(builtin_names())})"],
        name,
    )


#: A scenario file larger than this is refused unread (the largest built-in is 5 KB).
MAX_SCENARIO_BYTES: Final = 1024 * 1024


def _read(path: Path) -> str:
    """The file's text: a regular file (opened without waiting, so a FIFO is refused, not
    waited on) of at most `MAX_SCENARIO_BYTES`, in UTF-8; ScenarioInvalid otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ScenarioInvalid(["not a regular file"], str(path))
            data = f.read(MAX_SCENARIO_BYTES + 1)
    except OSError as error:
        raise ScenarioInvalid([f"cannot read: {error.strerror or error}"], str(path)) from None
    if len(data) > MAX_SCENARIO_BYTES:
        message = f"file is larger than {MAX_SCENARIO_BYTES:,} bytes (the limit)"
        raise ScenarioInvalid([message], str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScenarioInvalid([f"cannot read: {error}"], str(path)) from None


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
    if _expanded_size(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise ScenarioInvalid(
            [f"more than {MAX_YAML_VALUES:,} values once YAML aliases are expanded"], source
        )
    return parse_scenario(data, source)


#: The most values (scalars, lists, mappings) a scenario may hold with its aliases expanded:
#: an alias of an alias of ... is cheap to write and exponential to read.
MAX_YAML_VALUES: Final = 1_000_000


def _expanded_size(data: object, budget: int) -> int:
    """How many values `data` holds with shared objects counted each time (stops past
    `budget`)."""
    count = 0
    stack = [data]
    while stack and count <= budget:
        value = stack.pop()
        count += 1
        if isinstance(value, Mapping):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return count


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


# --- the whole scenario -------------------------------------------------------------------


def _check_size(
    end_s: float,
    sample_s: float,
    fleet: FleetSpec,
    controller: ControllerSettings,
    checks: Sequence[Check],
    problems: Problems,
) -> None:
    """Refuse a scenario whose run would take more samples or steps than the bounds allow."""
    if sample_s and end_s / sample_s > MAX_SAMPLES:
        problems.add(
            "sampleInterval",
            f"implies {math.ceil(end_s / sample_s):,} samples over the run, more than "
            f"{MAX_SAMPLES:,}: lengthen it or shorten end",
        )
    steps = end_s / controller.interval_s + sum(
        end_s / c.behaviour.tick_s + end_s / c.behaviour.report_interval_s for c in fleet.clusters
    )
    steps += sum(c.evaluations() for c in checks)
    if steps > MAX_STEPS:
        problems.add(
            "end",
            f"implies {math.ceil(steps):,} steps (cluster ticks, agent reports, controller "
            f"steps, check evaluations), more than {MAX_STEPS:,}: shorten end or lengthen "
            "the periods",
        )


def _check_work(
    end_s: float,
    fleet: FleetSpec,
    controller: ControllerSettings,
    manifests: Sequence[Obj],
    timeline: Sequence[Action],
    problems: Problems,
) -> None:
    """Refuse a scenario too large to run (`size`), unless its step counts already are: one
    problem for a run too long."""
    if not problems.items:
        size.check(size.estimate(end_s, fleet, controller, manifests, timeline), problems)


def _manifest_key(raw: object) -> str:
    """`namespace/name` of a manifest, valid or not; "" when it has no name."""
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return ""
    namespace = meta.get("namespace")
    return f"{namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE}/{meta['name']}"


def parse_scenario(data: object, source: str = "") -> Scenario:
    """A `Scenario` from parsed YAML; raise ScenarioInvalid listing every problem."""
    problems = Problems()
    if not isinstance(data, Mapping):
        raise ScenarioInvalid(["must be a mapping with name, fleet, ..."], source)
    check_known(data, _TOP_KEYS, "", problems)
    name = get_str(data, "name", "", problems)
    description = str(data.get("description") or "").strip()
    seed = get_int(data, "seed", "", problems, 0)
    end_s = get_duration(data, "end", "", problems)
    if end_s <= 0 and "end" in data:
        problems.add("end", "must be more than 0")
    sample_s = get_duration(data, "sampleInterval", "", problems, 0.0)
    if "sampleInterval" in data and sample_s < MIN_PERIOD_S:
        problems.add("sampleInterval", "must be at least 1ms (it is a period)")
    classes = read_classes(data.get("classes"), problems)
    controller = read_controller(
        get_mapping(data.get("controller"), "controller", problems), problems
    )
    fleet = read_fleet(
        get_mapping(data.get("fleet"), "fleet", problems), problems, classes, controller.interval_s
    )
    names = FleetNames(fleet)

    manifests: list[Obj] = []
    known: list[str] = []
    for i, raw in enumerate(get_list(data.get("manifests"), "manifests", problems)):
        body = validated(raw, f"manifests[{i}]", problems, "ModelDeployment")
        if body is None:
            # Named anyway, so that what refers to it is not reported as a second problem.
            key = _manifest_key(raw)
            if key and key not in known:
                known.append(key)
            continue
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        if key in known:
            problems.add(f"manifests[{i}].metadata.name", f"duplicate deployment {key}")
        known.append(key)
        manifests.append(body)

    raw_timeline = get_list(data.get("timeline"), "timeline", problems)
    # Deployments applied later in the timeline may be named anywhere: collect them first.
    for raw in raw_timeline:
        if isinstance(raw, Mapping) and raw.get("action") == "apply":
            key = _manifest_key(raw.get("manifest"))
            if key and key not in known:
                known.append(key)
    timeline: list[Action] = []
    for i, raw in enumerate(raw_timeline):
        action = read_action(raw, f"timeline[{i}]", problems, names, known, end_s)
        if action is not None:
            timeline.append(action)
    checks = [
        read_check(raw, f"checks[{i}]", problems, names, known, end_s)
        for i, raw in enumerate(get_list(data.get("checks"), "checks", problems))
    ]
    if not problems.items:
        _check_size(end_s, sample_s, fleet, controller, checks, problems)
        _check_work(end_s, fleet, controller, manifests, timeline, problems)
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
