"""Device-plugin pools (issue 27, section 1): GPUs a device plugin hands out as an extended
resource (`nvidia.com/gpu`), counted into the same histogram as DRA devices.

Pure. What it means:

- **Which pools.** A pool is a device-plugin pool when the hub says so: a device of its
  InferenceClass has `claim: DevicePlugin` (its `resourceName`, e.g. `nvidia.com/gpu`), as the
  agent's own InferenceCluster shows in `status.gpuPools[].devices` (`device_plugin_pools`).
  The agent reads no InferenceClass; the hub publishes the class's devices there.
- **Free** per node and resource = the Node's `status.allocatable[resource]` minus what every
  *holding* pod on the node requests of it, never negative. A pod holds when it is bound
  (`spec.nodeName`) and not terminated (phase neither Succeeded nor Failed: a terminating pod's
  devices are still in use, as kube-scheduler's NodeResourcesFit counts them), whoever owns it.
  Its request is kube-scheduler's (`PodRequests`): the sum over its containers and sidecars,
  or the largest init container's (with the sidecars started before it) when that is more; an
  extended resource's request is its limit when no request is given. A request that is not a
  whole number counts as all of the node's (errs toward full).
- **In the histogram** the resource is one more "driver" of the pool (its key is the resource
  name), so the hub reads one kind of report; a node without the resource in its allocatable
  publishes nothing of it (`NoSlices`, as a DRA node whose driver has not published yet).
- **Allocated since.** Without claims, a pod's devices are allocated from the time the agent
  first sees it holding (its uid in the same allocation clock as claims'; a pod without a uid
  is stamped `now` at every observation, as a claim without one). A pool's
  `lastAllocationTime` and a replica's per pool take these times as they take claims'.
- **A replica's pod** that names no claim but requests an extended resource (a device-plugin
  pod) counts allocated while it holds: it names a claim of its own, `pod:<name>` (`:` is never
  in a claim's name), which is allocated exactly while the pod holds (`pseudo_claim`).

`Holds` is the incremental form (`FreeDeviceTable` feeds it pod changes); `plain_holds`,
`hold_times` and `node_usage` are the plain computation `observe` uses, and its oracle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from gpufleet.agent.model import RawObject, as_list, as_map, as_str, parse_count_quantity
from gpufleet.agent.reads import NodeInfo, NodeState

__all__ = [
    "DEVICE_PLUGIN",
    "Hold",
    "Holds",
    "device_plugin_pools",
    "hold_times",
    "node_usage",
    "plain_holds",
    "pod_requests",
    "pseudo_claim",
    "read_hold",
    "with_device_plugin",
]

#: The claim mode of a device a device plugin hands out (`DeviceSpec.claim`).
DEVICE_PLUGIN: Final = "DevicePlugin"
#: What a malformed request counts as: all of any node's.
_ALL: Final = 2**63 - 1
#: The most pools and resources read from the InferenceCluster (untrusted).
_MAX_POOLS: Final = 8
_MAX_DEVICES: Final = 16

_Key = tuple[str, str]


def pseudo_claim(pod_name: str) -> str:
    """The claim a device-plugin pod names instead of a ResourceClaim (never a real name)."""
    return f"pod:{pod_name}"


def device_plugin_pools(cluster: RawObject | None) -> dict[str, frozenset[str]]:
    """Pool -> the extended resources its class's `DevicePlugin` devices name, from the
    InferenceCluster's `status.gpuPools[].devices` (read as untrusted; pools without such a
    device are left out)."""
    if cluster is None:
        return {}
    out: dict[str, frozenset[str]] = {}
    for entry in as_list(as_map(as_map(cluster).get("status")).get("gpuPools"))[:_MAX_POOLS]:
        entry = as_map(entry)
        name = as_str(entry.get("name"))
        resources = frozenset(
            r
            for d in as_list(entry.get("devices"))[:_MAX_DEVICES]
            if as_map(d).get("claim") == DEVICE_PLUGIN
            and "/" in (r := as_str(as_map(d).get("resourceName")))
            and len(r) <= 253
        )
        if name and resources:
            out[name] = resources
    return dict(sorted(out.items()))


# --- what one pod holds -------------------------------------------------------------------


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = as_map(container.get("resources"))
    requests, limits = as_map(resources.get("requests")), as_map(resources.get("limits"))
    out: dict[str, int] = {}
    for name in {*requests, *limits}:
        if not isinstance(name, str) or "/" not in name or name.startswith("hugepages-"):
            continue
        value = requests.get(name, limits.get(name))
        count = parse_count_quantity(value)
        out[name] = _ALL if count is None else count
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = min(_ALL, into.get(k, 0) + v)


def pod_requests(pod: RawObject) -> dict[str, int]:
    """The pod's requests of extended resources, as kube-scheduler sums them (`PodRequests`):
    containers and sidecars (init containers with `restartPolicy: Always`) add up; a regular
    init container, with the sidecars started before it, counts when it asks for more."""
    spec = as_map(pod.get("spec"))
    total: dict[str, int] = {}
    for c in as_list(spec.get("containers")):
        _add(total, _container_requests(as_map(c)))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in as_list(spec.get("initContainers")):
        c = as_map(c)
        own = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            at_start = dict(sidecars)
        else:
            at_start = dict(sidecars)
            _add(at_start, own)
        for k, v in at_start.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, 0), v)
    return {k: v for k, v in sorted(total.items()) if v > 0}


@dataclass(frozen=True, slots=True)
class Hold:
    """A bound, non-terminated pod that requests extended resources."""

    uid: str | None
    node: str
    requests: Mapping[str, int]


def read_hold(pod: RawObject) -> Hold | None:
    """What the pod holds on its node; None when it holds nothing."""
    node = as_map(pod.get("spec")).get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    if as_map(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
        return None
    requests = pod_requests(pod)
    if not requests:
        return None
    uid = as_map(pod.get("metadata")).get("uid")
    return Hold(uid if isinstance(uid, str) and uid else None, node, requests)


# --- the plain computation ----------------------------------------------------------------


def plain_holds(pods: Mapping[_Key, RawObject]) -> dict[_Key, Hold]:
    """The holds of the pods, by (namespace, name)."""
    return {k: h for k, obj in pods.items() if (h := read_hold(obj)) is not None}


def hold_times(
    holds: Mapping[_Key, Hold], prev: Mapping[str, datetime], now: datetime
) -> tuple[dict[_Key, datetime], dict[str, datetime]]:
    """Each hold's allocation time (first seen holding, by uid: `prev`, else `now`) and the
    clock's entries for them."""
    times: dict[_Key, datetime] = {}
    clock: dict[str, datetime] = {}
    for key, h in holds.items():
        t = now if h.uid is None else prev.get(h.uid, now)
        times[key] = t
        if h.uid is not None:
            clock[h.uid] = t
    return times, clock


#: A node's use of extended resources: resource -> requested by holding pods, and the latest
#: allocation time of a hold on it.
Usage = tuple[dict[str, int], datetime | None]


def node_usage(holds: Mapping[_Key, Hold], times: Mapping[_Key, datetime]) -> dict[str, Usage]:
    """Per node, what its holding pods request, and the latest of their times."""
    out: dict[str, Usage] = {}
    for key, h in holds.items():
        taken, last = out.get(h.node, ({}, None))
        _add(taken, h.requests)
        t = times[key]
        out[h.node] = (taken, t if last is None or t > last else last)
    return out


def with_device_plugin(
    state: NodeState, info: NodeInfo, resources: Iterable[str], usage: Usage | None
) -> NodeState:
    """The node's state with its pool's extended resources counted as devices: published its
    allocatable, taken what its holding pods request; its last allocation time the later of
    its claims' and its holds'."""
    published = dict(state.published)
    taken = dict(state.taken)
    used, last = usage if usage is not None else ({}, None)
    is_counted = False
    for r in sorted(resources):
        if r in info.extended:
            published[r] = info.extended[r]
            taken[r] = used.get(r, 0)
            is_counted = True
    if not is_counted:
        return state
    if last is not None and state.last is not None and state.last > last:
        last = state.last
    return replace(state, published=published, taken=taken, last=last or state.last)


# --- the incremental form -----------------------------------------------------------------


class Holds:
    """`plain_holds`, `hold_times` and `node_usage` kept from pod changes: `note` each
    changed pod, then `settle` at each snapshot."""

    def __init__(self) -> None:
        self._pending: dict[_Key, RawObject | None] = {}
        self._holds: dict[_Key, Hold] = {}
        self._times: dict[_Key, datetime] = {}
        self._uidless: set[_Key] = set()
        self._usage: dict[str, Usage] = {}
        self._by_node: dict[str, set[_Key]] = {}
        self._clock: dict[str, datetime] = {}
        self._is_clock_moved = False
        self._now: datetime | None = None
        #: The device-plugin pools and their resources, as the last snapshot took them.
        self.pools: Mapping[str, frozenset[str]] = {}
        #: What the hub last declared (`FreeDeviceTable.declare_device_plugin_pools`).
        self.wanted: Mapping[str, frozenset[str]] = {}
        #: (namespace, `pseudo_claim`) -> allocation time, of the holding pods.
        self.allocated: dict[_Key, datetime] = {}

    def note(self, key: _Key, obj: RawObject | None) -> None:
        self._pending[key] = obj

    def settle(self, now: datetime, prev: Mapping[str, datetime]) -> tuple[set[str], set[_Key]]:
        """Apply the pending pods at `now` (the clock `prev` the last snapshot's): the nodes
        whose usage moved, and the pseudo claims whose time moved."""
        moved: set[str] = set()
        retimed: set[_Key] = set()
        for key, obj in self._pending.items():
            hold = read_hold(obj) if obj is not None else None
            before = self._holds.get(key)
            if hold == before:
                continue
            if before is not None:
                self._drop(key, before)
                moved.add(before.node)
            if hold is not None:
                t = now if hold.uid is None else prev.get(hold.uid, now)
                self._take(key, hold, t)
                moved.add(hold.node)
            retimed.add((key[0], pseudo_claim(key[1])))
        self._pending.clear()
        if self._uidless and now != self._now:
            for key in self._uidless:
                self._times[key] = now
                self.allocated[(key[0], pseudo_claim(key[1]))] = now
                moved.add(self._holds[key].node)
                retimed.add((key[0], pseudo_claim(key[1])))
        self._now = now
        for node in moved:
            self._recount(node)
        return moved, retimed

    def _take(self, key: _Key, hold: Hold, t: datetime) -> None:
        self._holds[key] = hold
        self._times[key] = t
        self.allocated[(key[0], pseudo_claim(key[1]))] = t
        if hold.uid is None:
            self._uidless.add(key)
        self._by_node.setdefault(hold.node, set()).add(key)
        self._is_clock_moved = True

    def _drop(self, key: _Key, hold: Hold) -> None:
        del self._holds[key], self._times[key]
        del self.allocated[(key[0], pseudo_claim(key[1]))]
        self._uidless.discard(key)
        keys = self._by_node[hold.node]
        keys.discard(key)
        if not keys:
            del self._by_node[hold.node]
        self._is_clock_moved = True

    def _recount(self, node: str) -> None:
        keys = self._by_node.get(node)
        if not keys:
            self._usage.pop(node, None)
            return
        self._usage[node] = node_usage({k: self._holds[k] for k in keys}, self._times)[node]

    def usage(self, node: str) -> Usage | None:
        return self._usage.get(node)

    def clock(self) -> Mapping[str, datetime]:
        """The clock's entries of the holds (uid -> allocation time)."""
        if self._is_clock_moved:
            self._clock = {
                h.uid: self._times[k] for k, h in self._holds.items() if h.uid is not None
            }
            self._is_clock_moved = False
        return self._clock
