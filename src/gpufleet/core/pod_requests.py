"""What a pod asks of its node's CPU and memory, as kube-scheduler counts it.

`pod_requests(spec)` reads a PodSpec (a plain camelCase mapping, as a template or a Pod holds
it) and returns its effective requests in (millicores, bytes), as Kubernetes'
`resourcehelper.PodRequests` does for the NodeResourcesFit filter:

- each container's `resources.requests`, or its `resources.limits` when the request is absent
  (the API server defaults a request to its limit);
- the regular containers summed, plus every restartable init container (a sidecar,
  `restartPolicy: Always`), which runs alongside them;
- at least each regular init container's request plus the sidecars started before it (init
  containers run one at a time);
- plus `overhead` (a RuntimeClass's).

Which way it errs: a quantity that does not parse, or is negative, counts 0 (the workload
cluster's API server refuses such a pod anyway); CPU rounds up to the next millicore and
memory up to the next byte, as Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.core.quantity import QuantityError, parse_quantity

#: (millicores, memory bytes).
Requests = tuple[int, int]

_NANOS_PER_MILLI = 10**6
_NANOS_PER_UNIT = 10**9


def _amount(resources: Mapping[str, Any], name: str, per: int) -> int:
    for field in ("requests", "limits"):
        values = resources.get(field)
        if isinstance(values, Mapping) and name in values:
            value = values[name]
            try:
                nanos = parse_quantity(value if isinstance(value, str) else str(value)).nanos
            except QuantityError:
                return 0
            return max(0, -(-nanos // per))
    return 0


def container_requests(container: object) -> Requests:
    """One container's CPU and memory requests (limits when a request is absent)."""
    if not isinstance(container, Mapping):
        return (0, 0)
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return (0, 0)
    return (
        _amount(resources, "cpu", _NANOS_PER_MILLI),
        _amount(resources, "memory", _NANOS_PER_UNIT),
    )


def _list(spec: Mapping[str, Any], name: str) -> list[Any]:
    value = spec.get(name)
    return value if isinstance(value, list) else []


def pod_requests(spec: object) -> Requests:
    """The pod's effective CPU and memory requests (see the module docstring)."""
    if not isinstance(spec, Mapping):
        return (0, 0)
    cpu = memory = 0
    for container in _list(spec, "containers"):
        c, m = container_requests(container)
        cpu, memory = cpu + c, memory + m
    side_cpu = side_memory = init_cpu = init_memory = 0
    for container in _list(spec, "initContainers"):
        c, m = container_requests(container)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            side_cpu, side_memory = side_cpu + c, side_memory + m
            init_cpu, init_memory = max(init_cpu, side_cpu), max(init_memory, side_memory)
        else:
            init_cpu = max(init_cpu, c + side_cpu)
            init_memory = max(init_memory, m + side_memory)
    cpu, memory = max(cpu + side_cpu, init_cpu), max(memory + side_memory, init_memory)
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        extra = {"requests": overhead}
        cpu += _amount(extra, "cpu", _NANOS_PER_MILLI)
        memory += _amount(extra, "memory", _NANOS_PER_UNIT)
    return (cpu, memory)


def template_requests(template: object) -> Requests:
    """`pod_requests` of a PodTemplateSpec's `spec`."""
    if not isinstance(template, Mapping):
        return (0, 0)
    return pod_requests(template.get("spec"))


def proportional_requests(
    shareable: Requests, claimed: int, per_node: int, explicit: Requests
) -> Requests:
    """A pod's requests sized in proportion to its devices: `claimed` of the node's
    `per_node` devices get that share of the node's `shareable` room (allocatable less its
    DaemonSets' requests), rounded down, so the pods filling a node's devices never ask more
    than it can share; a resource `explicit` requests (above 0) keeps its explicit figure."""
    if per_node <= 0 or claimed <= 0:
        return explicit
    share = min(claimed, per_node)
    cpu = explicit[0] or shareable[0] * share // per_node
    memory = explicit[1] or shareable[1] * share // per_node
    return (cpu, memory)
