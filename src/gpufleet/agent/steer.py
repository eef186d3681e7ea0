"""Steering: the agent chooses each claiming pod's node, and steers kube-scheduler there.

kube-scheduler has no DRA scoring (KEP-4970 is open), so on its own it spreads DRA pods and
fragments nodes, and the hub's exact fit is only a guess. The agent knows every node's free
devices exactly (`FreeDeviceTable.free_devices`), so when it materializes a replica it picks
the nodes itself and writes them into the pod templates:

- **Choice** (`Steerer.choose`). A replica's claiming pods, per pool, are fitted as the hub's
  fit does (`gpufleet.core.fit`): units (one pod of a Standalone copy; the claiming pods of one
  gang copy, on distinct nodes) largest first, each pod on the *fullest node that fits* (the
  fewest free devices; ties by the free devices, then by name), which is what the hub's `Pack`
  prediction assumes. A pod's CPU and memory requests (its template's, `pod_requests`) must
  fit the node's host room too (`HostRoomTable.room`: allocatable less bound pods' requests),
  as kube-scheduler's NodeResourcesFit and the hub's fit check them; what a choice takes of
  them is assumed with its devices. A member whose every pod found a node is steered; one with a pod that fits
  nowhere is left to the scheduler (nothing is steered or assumed for it).
- **Assume.** What a choice takes is held against the table's free devices until the
  replica's observation shows its claiming pods allocated (the table then counts them), the
  replica goes, or `assume_passes` passes go by; so two replicas materialized in one pass, or
  in two passes before the first one's pods bind, never choose the same free devices.
- **Steer** (`steer_template`). The copies of one member share one pod template, so it is
  steered to the *set* of nodes chosen for them, by node affinity on `kubernetes.io/hostname`:
  `Preferred` adds one preferred term of weight 100 listing them (kube-scheduler's NodeAffinity
  score then outweighs its spreading; a node that filled up first is passed over for another
  that fits); `Required` adds `hostname In (set)` to every required term (ANDed with the
  tenant's own; a pod whose nodes filled up first stays Pending until it is re-placed or the
  devices free up). Never inter-pod affinity (slow at scale). The nodes are also written in the
  annotation `gpufleet.io/steered-nodes`, which is how the steering is found again.
- **Kept.** A choice is made once per replica version (the materializer holds what a replica
  wants while its uid, generation and labels stay); a local workload that already holds the
  same object but for its steering keeps its steering (`keep_steering`), so a restarted agent
  does not roll running pods to move them.
- **Gangs.** The claiming pods of one gang copy (LeaderWorkerSet group) must land on distinct
  nodes, as the hub's fit assumes: each claiming member's template carries a required pod
  anti-affinity on `kubernetes.io/hostname` over the claiming pods of its engine with the same
  LeaderWorkerSet group key (`matchLabelKeys`, Kubernetes 1.31+ by default). A claimless Leader
  is not in it: it may share a node with a Worker of its group, as the fit lets it ride free.

Which way it errs: the choice is greedy, like the hub's fit; selectors are not looked at (a pool
is one device kind), and a request without a driver is charged to the node's only driver (or not
steered). Pods that kube-scheduler puts elsewhere despite a preferred term are counted where
they land by the next observation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.core import labels
from gpufleet.core.model import DriverName, Steering
from gpufleet.core.pod_requests import template_requests
from gpufleet.store.merge import copy_json

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
#: The pod-template annotation that lists the nodes a template is steered to (comma-separated).
STEERED_NODES: Final = "gpufleet.io/steered-nodes"
#: The pod-template annotation that lists the node chosen for each pod, copy by copy: copies
#: separated by `;`, the pods of one copy (a gang's) by `,`. How a restarted agent finds its
#: choices again (`restore`) and how a gated pod finds its own node (`gpufleet.agent.gates`).
STEERED_PODS: Final = "gpufleet.io/steered-pods"
#: The scheduling gate of a `Gated` member's pods, lifted once the pod has its node.
GATE: Final = "gpufleet.io/steer"
#: The label of the pods of a claiming member of a gang (what its anti-affinity selects).
CLAIMING: Final = "gpufleet.io/claiming"
#: The LeaderWorkerSet label that tells the groups (copies) of one set apart.
LWS_GROUP_KEY: Final = "leaderworkerset.sigs.k8s.io/group-key"
#: The weight of the preferred term: the most NodeAffinity allows.
PREFERRED_WEIGHT: Final = 100
#: How many passes a choice stays assumed when its pods are never seen allocated.
DEFAULT_ASSUME_PASSES: Final = 24

#: (engine, role) of a member.
MemberKey = tuple[str, str]
#: Per member, the nodes chosen for its pods (one per pod, sorted).
Choice = Mapping[MemberKey, tuple[str, ...]]
#: Free devices per driver of each node of a pool.
FreeNodes = Mapping[str, Mapping[DriverName, int]]
#: Per member, the steering written on a replica's workload: the node of each pod (in the
#: annotation's order) and those of them no bound pod of the member holds yet.
Written = Mapping[MemberKey, tuple[tuple[str, ...], tuple[str, ...]]]

_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=4096)  # a pure function of the name: node names recur
def _natural(name: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (0, p) for p in _DIGITS.split(name))


#: The keys a node's free CPU (millicores) and memory (bytes) take beside its drivers in the
#: choice's free mappings (not DRA driver names: those are DNS subdomains).
HOST_CPU: Final = "#cpu"
HOST_MEMORY: Final = "#memory"
_HOST: Final = frozenset((HOST_CPU, HOST_MEMORY))
#: A node's host room when the steerer is given none to check.
_UNCHECKED: Final = 2**62


def _devices(free: Mapping[str, int]) -> int:
    return sum(n for d, n in free.items() if d not in _HOST)


@dataclass(frozen=True, slots=True)
class _Pod:
    member: MemberKey
    pool: str
    #: (driver, devices), sorted by driver; then the pod's CPU and memory requests, when any
    #: (`HOST_CPU`, `HOST_MEMORY`), checked against the node's host room like devices.
    demand: tuple[tuple[str, int], ...]

    @property
    def size(self) -> int:
        return sum(n for d, n in self.demand if d not in _HOST)


def _whole(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def member_demand(member: Mapping[str, Any]) -> tuple[tuple[str, int], ...] | None:
    """Devices per driver one pod of `member` claims; () when it claims nothing; None when a
    request has no driver (then the node's only driver is assumed: see `_resolve`)."""
    out: dict[str, int] = {}
    for request in member.get("deviceRequests") or ():
        driver = request.get("driver") if isinstance(request, Mapping) else None
        count = request.get("count", 1) if isinstance(request, Mapping) else 1
        if not isinstance(count, int) or count < 1:
            return None
        key = str(driver) if driver else ""
        out[key] = out.get(key, 0) + count
    if not out:
        return ()
    cpu, memory = template_requests(member.get("template"))
    sized = member.get("hostRequests")
    if isinstance(sized, Mapping):  # proportional: as materialize writes them (explicit win)
        cpu = cpu or _whole(sized.get("milliCpu"))
        memory = memory or _whole(sized.get("memory"))
    host = tuple((k, v) for k, v in ((HOST_CPU, cpu), (HOST_MEMORY, memory)) if v > 0)
    return (*sorted(out.items()), *host)


def _units(replica: Mapping[str, Any]) -> list[list[_Pod]]:
    """The replica's claiming pods as units (see the module docstring), in no order."""
    units: list[list[_Pod]] = []
    for engine in (replica.get("spec") or {}).get("engines") or ():
        name = str(engine.get("name", ""))
        copies = int(engine.get("copies", 1))
        members = engine.get("members") or ()
        per_copy: list[_Pod] = []
        for member in members:
            demand = member_demand(member)
            if not demand:
                continue
            role = str(member.get("role", "Standalone"))
            pods = int((member.get("worker") or {}).get("nodes", 1)) if role == "Worker" else 1
            pod = _Pod((name, role), str(member.get("nodePoolName", "")), demand)
            per_copy.extend([pod] * pods)
        if not per_copy:
            continue
        is_gang = any(str(m.get("role", "Standalone")) != "Standalone" for m in members)
        for _ in range(copies):
            if is_gang:
                units.append(list(per_copy))
            else:
                units.extend([p] for p in per_copy)
    return units


def _unit_key(unit: Sequence[_Pod]) -> tuple[int, int, int, tuple[Any, ...]]:
    return (
        unit[0].size,
        sum(p.size for p in unit),
        len(unit),
        tuple((p.demand, p.member) for p in unit),
    )


def _fits(free: Mapping[str, int], demand: Iterable[tuple[str, int]]) -> bool:
    return all(free.get(d, 0) >= n for d, n in demand)


def _resolve(free: Mapping[str, int], demand: tuple[tuple[str, int], ...]) -> tuple[Any, ...]:
    """The demand with a driverless request charged to the node's only driver."""
    if not any(d == "" for d, _ in demand):
        return demand
    drivers = [d for d in free if d and d not in _HOST]
    if len(drivers) != 1:
        return (("", 1),)  # cannot tell: fits nowhere
    merged: dict[str, int] = {}
    for d, n in demand:
        merged[d or drivers[0]] = merged.get(d or drivers[0], 0) + n
    return tuple(sorted(merged.items()))


def best_fit(free: Mapping[str, dict[str, int]], pod: _Pod, taken: set[str]) -> str | None:
    """The fullest node that fits `pod` (fewest free devices, then the free devices, then the
    name), not in `taken`."""
    best: str | None = None
    best_key: tuple[Any, ...] | None = None
    for node, devices in free.items():
        if node in taken or not _fits(devices, _resolve(devices, pod.demand)):
            continue
        key = (_devices(devices), tuple(sorted(devices.items())), _natural(node))
        if best_key is None or key < best_key:
            best, best_key = node, key
    return best


def place(
    units: Sequence[Sequence[_Pod]], free: Mapping[str, dict[str, dict[str, int]]]
) -> tuple[dict[MemberKey, list[str]], dict[str, dict[str, int]], set[MemberKey]]:
    """Fit `units` (largest first) on `free` (pool -> node -> driver -> free; changed in
    place): the nodes per member, what was taken per node, and the members with a pod that fit
    nowhere."""
    chosen: dict[MemberKey, list[str]] = {}
    taken: dict[str, dict[str, int]] = {}
    failed: set[MemberKey] = set()
    for unit in sorted(units, key=_unit_key, reverse=True):
        aside: set[str] = set()
        for pod in sorted(unit, key=lambda p: (p.size, p.demand, p.member), reverse=True):
            nodes = free.get(pod.pool)
            node = None if nodes is None else best_fit(nodes, pod, aside)
            if node is None or nodes is None:
                failed.add(pod.member)
                continue
            aside.add(node)
            chosen.setdefault(pod.member, []).append(node)
            for driver, n in _resolve(nodes[node], pod.demand):
                nodes[node][driver] = nodes[node].get(driver, 0) - n
                took = taken.setdefault(node, {})
                took[driver] = took.get(driver, 0) + n
    return chosen, taken, failed


@dataclass(slots=True)
class _Assumed:
    #: node -> driver -> devices the choice takes.
    taken: dict[str, dict[str, int]]
    claiming_pods: int
    passes_left: int


@dataclass(slots=True)
class Steerer:
    """Chooses nodes for replicas' claiming pods against a cluster's free devices (see the
    module docstring). `free_devices(pool)` and `allocated_pods((namespace, name))` read the
    agent's table as of its last snapshot."""

    mode: Steering
    free_devices: Callable[[str], FreeNodes]
    allocated_pods: Callable[[tuple[str, str]], int | None]
    assume_passes: int = DEFAULT_ASSUME_PASSES
    #: A node's free (millicores, memory bytes) (`HostRoomTable.room`); None: not checked.
    room: Callable[[str], tuple[int, int]] | None = None
    _assumed: dict[tuple[str, str], _Assumed] = field(default_factory=dict)
    #: Per replica, the steering written on its local workloads, found when the agent (or
    #: its materializer) started (`restore`): taken over by the replica's next `choose`.
    _written: dict[tuple[str, str], Written] = field(default_factory=dict)

    def restore(self, written: Mapping[tuple[str, str], Written]) -> None:
        """Hold the steering found on the local workloads (`written_steering`), so that the
        next `choose` of each of those replicas keeps it, and assumes what its pods not yet
        bound take, instead of choosing anew: a restarted agent keeps its choices, and never
        chooses for a new replica the devices it chose for one whose pods are unbound."""
        self._written = dict(written)

    def forget_written(self) -> None:
        """Drop what `restore` found and no `choose` took (replicas that are gone)."""
        self._written.clear()

    @property
    def is_on(self) -> bool:
        return self.mode is not Steering.OFF

    def begin(self, replicas: Iterable[Mapping[str, Any]]) -> None:
        """Start a pass: forget the choices of replicas that are gone, whose claiming pods are
        all allocated (the table counts them now), or whose time is up."""
        if not self._assumed:
            return  # nothing to forget: the replicas need not be read
        present = {_key(r) for r in replicas}
        for key in list(self._assumed):
            assumed = self._assumed[key]
            assumed.passes_left -= 1
            allocated = self.allocated_pods(key)
            if (
                key not in present
                or assumed.passes_left <= 0
                or (allocated is not None and allocated >= assumed.claiming_pods)
            ):
                del self._assumed[key]

    def choose(self, replica: Mapping[str, Any]) -> Choice:
        """The nodes for the replica's claiming pods, per member (only members whose every pod
        found a node), assumed until its pods are seen allocated."""
        key = _key(replica)
        self._assumed.pop(key, None)  # a new choice replaces an older one of the replica
        units = _units(replica)
        if not self.is_on or not units:
            return {}
        written = self._written.pop(key, None)
        if written:
            return self._adopt(key, units, written)
        pools = sorted({p.pool for u in units for p in u})
        chosen, taken, failed = place(units, {pool: self._free(pool) for pool in pools})
        if failed:
            # Members with a pod that fits nowhere are not steered and take nothing: fit the
            # others again without them.
            units = [[p for p in u if p.member not in failed] for u in units]
            units = [u for u in units if u]
            chosen, taken, again = place(units, {pool: self._free(pool) for pool in pools})
            failed |= again
        # Gated: in the fit's order, copy after copy (a gang copy's pods together), so that
        # each pod is given the node the fit chose for it; otherwise a set, sorted.
        order = (lambda n: tuple(n)) if self.mode is Steering.GATED else _sorted_nodes
        kept = {m: order(n) for m, n in chosen.items() if m not in failed}
        if kept:
            pods = sum(len(u) for u in units)
            self._assumed[key] = _Assumed(taken, pods, max(1, self.assume_passes))
        return kept

    def _adopt(
        self, key: tuple[str, str], units: Sequence[Sequence[_Pod]], written: Written
    ) -> Choice:
        """The written steering as the replica's choice, with what its pods not yet bound
        take assumed (a member the replica no longer has is dropped)."""
        pods = {p.member: p for u in units for p in u}
        taken: dict[str, dict[str, int]] = {}
        kept: dict[MemberKey, tuple[str, ...]] = {}
        for member, (nodes, unbound) in sorted(written.items()):
            pod = pods.get(member)
            if pod is None or not nodes:
                continue
            kept[member] = nodes
            free = self.free_devices(pod.pool)
            for node in unbound:
                devices = {str(d): n for d, n in (free.get(node) or {}).items()}
                if not devices:
                    continue  # the node is gone: nothing of it to hold
                took = taken.setdefault(node, {})
                for driver, n in _resolve(devices, pod.demand):
                    took[driver] = took.get(driver, 0) + n
        if kept:
            total = sum(len(u) for u in units)
            self._assumed[key] = _Assumed(taken, total, max(1, self.assume_passes))
        return kept

    def _free(self, pool: str) -> dict[str, dict[str, int]]:
        """The pool's free devices minus what the held choices take."""
        free = {
            node: {str(d): n for d, n in devices.items()}
            for node, devices in self.free_devices(pool).items()
        }
        for node, devices in free.items():
            devices[HOST_CPU], devices[HOST_MEMORY] = (
                self.room(node) if self.room is not None else (_UNCHECKED, _UNCHECKED)
            )
        for assumed in self._assumed.values():
            for node, devices in assumed.taken.items():
                if node in free:
                    for driver, n in devices.items():
                        free[node][driver] = free[node].get(driver, 0) - n
        return free


def _sorted_nodes(nodes: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(nodes, key=_natural))


def steering_of(cluster: Mapping[str, Any] | None, default: Steering) -> Steering:
    """The InferenceCluster's `spec.steering` (read as untrusted: absent is the API's default,
    Preferred; a value that is not a mode is `default`); `default` when there is none."""
    if not isinstance(cluster, Mapping):
        return default
    spec = cluster.get("spec")
    value = spec.get("steering", Steering.PREFERRED.value) if isinstance(spec, Mapping) else None
    if not isinstance(value, str) or value not in {s.value for s in Steering}:
        return default
    return Steering(value)


def _key(replica: Mapping[str, Any]) -> tuple[str, str]:
    meta = replica.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


# --- the pod template ---------------------------------------------------------------------


def _hostname_in(nodes: Sequence[str]) -> dict[str, Any]:
    return {"key": HOSTNAME_KEY, "operator": "In", "values": list(nodes)}


def steer_template(
    template: Mapping[str, Any], nodes: Sequence[str], mode: Steering, per_copy: int = 1
) -> dict[str, Any]:
    """A copy of the pod template steered to `nodes` (one per pod, `per_copy` pods a copy);
    unchanged when `nodes` is empty or `mode` is Off. Preferred and Required steer the
    template to the set of them (distinct, in order); Gated gives the pods a scheduling gate
    and leaves the node of each pod to `gpufleet.agent.gates`."""
    out = copy_json(dict(template))
    distinct = list(dict.fromkeys(nodes))
    if not distinct or mode is Steering.OFF:
        return out
    meta = out.setdefault("metadata", {})
    step = max(1, per_copy)
    copies = ";".join(",".join(nodes[i : i + step]) for i in range(0, len(nodes), step))
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        STEERED_NODES: ",".join(distinct),
        STEERED_PODS: copies,
    }
    spec = out.setdefault("spec", {})
    if mode is Steering.GATED:
        spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": GATE}]
        return out
    affinity = spec["affinity"] = dict(spec.get("affinity") or {})
    node_affinity = affinity["nodeAffinity"] = dict(affinity.get("nodeAffinity") or {})
    if mode is Steering.PREFERRED:
        key = "preferredDuringSchedulingIgnoredDuringExecution"
        node_affinity[key] = [
            *(node_affinity.get(key) or []),
            {
                "weight": PREFERRED_WEIGHT,
                "preference": {"matchExpressions": [_hostname_in(distinct)]},
            },
        ]
        return out
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    required = dict(node_affinity.get(key) or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:  # terms are ORed: the hostname goes into each (ANDed with the tenant's)
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), _hostname_in(distinct)]
    required["nodeSelectorTerms"] = terms
    node_affinity[key] = required
    return out


def steered_nodes(template: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes a pod template is steered to (its annotation); () when it is not."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(STEERED_NODES)
    return tuple(n for n in str(text).split(",") if n) if text else ()


def steered_pods(annotations: Mapping[str, Any] | None) -> list[list[str]]:
    """The node chosen for each pod, copy by copy (`STEERED_PODS`); [] when there is none."""
    text = (annotations or {}).get(STEERED_PODS)
    if not isinstance(text, str) or not text:
        return []
    return [[n for n in copy.split(",") if n] for copy in text.split(";")]


def unsteer_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the pod template without the steering `steer_template` added (either mode)."""
    out = copy_json(dict(template))
    nodes = steered_nodes(out)
    if not nodes:
        return out
    expression = _hostname_in(nodes)
    meta = out["metadata"]
    annotations = {
        k: v for k, v in meta["annotations"].items() if k not in (STEERED_NODES, STEERED_PODS)
    }
    _set_or_drop(meta, "annotations", annotations)
    _set_or_drop(out, "metadata", meta)
    spec = out.get("spec") or {}
    gates = [g for g in spec.get("schedulingGates") or [] if g != {"name": GATE}]
    if "schedulingGates" in spec:
        _set_or_drop(spec, "schedulingGates", gates)
    node_affinity = dict(((spec.get("affinity") or {}).get("nodeAffinity")) or {})
    pkey = "preferredDuringSchedulingIgnoredDuringExecution"
    ours = {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": [expression]}}
    preferred = [t for t in node_affinity.get(pkey) or [] if t != ours]
    rkey = "requiredDuringSchedulingIgnoredDuringExecution"
    required = dict(node_affinity.get(rkey) or {})
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        t = dict(term)
        t["matchExpressions"] = [e for e in t.get("matchExpressions") or [] if e != expression]
        if not t["matchExpressions"]:
            del t["matchExpressions"]
        if t:
            terms.append(t)
    _set_or_drop(node_affinity, pkey, preferred)
    _set_or_drop(node_affinity, rkey, {**required, "nodeSelectorTerms": terms} if terms else {})
    affinity = {**(spec.get("affinity") or {}), "nodeAffinity": node_affinity}
    _set_or_drop(affinity, "nodeAffinity", node_affinity)
    _set_or_drop(spec, "affinity", affinity)
    return out


def _set_or_drop(obj: dict[str, Any], key: str, value: Any) -> None:
    if value:
        obj[key] = value
    else:
        obj.pop(key, None)


def gang_anti_affinity(template: Mapping[str, Any], replica: str, engine: str) -> dict[str, Any]:
    """A copy of a claiming gang member's pod template that keeps it off the nodes of the
    other claiming pods of its copy (LeaderWorkerSet group), and labels it as claiming."""
    out = copy_json(dict(template))
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), CLAIMING: "true"}
    spec = out.setdefault("spec", {})
    affinity = spec["affinity"] = dict(spec.get("affinity") or {})
    anti = affinity["podAntiAffinity"] = dict(affinity.get("podAntiAffinity") or {})
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    term = {
        "labelSelector": {
            "matchLabels": {labels.REPLICA: replica, labels.ENGINE: engine, CLAIMING: "true"}
        },
        "matchLabelKeys": [LWS_GROUP_KEY],
        "topologyKey": HOSTNAME_KEY,
    }
    anti[key] = [*(anti.get(key) or []), term]
    return out


def keep_steering(want: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """`want` (a Deployment or LeaderWorkerSet) with each pod template steered as `current`'s
    is (not steered when current's is not): what to compare with `current`, so that a workload
    equal to what is wanted but for its steering is left as it is."""
    out = copy_json(dict(want))
    for path in _TEMPLATE_PATHS:
        w, c = _at(out, path), _at(current, path)
        if w is None or c is None:
            continue
        base = unsteer_template(w)
        mode = _mode_of(c)
        kept = base
        if mode is not None:
            copies = steered_pods((c.get("metadata") or {}).get("annotations"))
            if copies:
                nodes = [n for copy in copies for n in copy]
                kept = steer_template(base, nodes, mode, max(len(copy) for copy in copies))
            else:  # steered before `STEERED_PODS` was written: the set alone
                kept = steer_template(base, steered_nodes(c), mode)
                kept["metadata"]["annotations"].pop(STEERED_PODS, None)
        _put(out, path, kept)
    return out


_TEMPLATE_PATHS: Final = (
    ("spec", "template"),
    ("spec", "leaderWorkerTemplate", "leaderTemplate"),
    ("spec", "leaderWorkerTemplate", "workerTemplate"),
)


def _mode_of(template: Mapping[str, Any]) -> Steering | None:
    nodes = steered_nodes(template)
    if not nodes:
        return None
    if {"name": GATE} in ((template.get("spec") or {}).get("schedulingGates") or []):
        return Steering.GATED
    node_affinity = ((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    ours = {
        "weight": PREFERRED_WEIGHT,
        "preference": {"matchExpressions": [_hostname_in(nodes)]},
    }
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return Steering.PREFERRED if ours in preferred else Steering.REQUIRED


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Mapping) else None


def _put(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def written_steering(
    workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], dict[MemberKey, tuple[tuple[str, ...], tuple[str, ...]]]]:
    """Per replica (namespace, name), the steering written on its local workloads'
    templates (`STEERED_PODS`, else the set `STEERED_NODES`), with each node that a bound,
    live pod of the member holds taken out of what is still to come (`Steerer.restore`)."""
    out: dict[tuple[str, str], dict[MemberKey, tuple[tuple[str, ...], tuple[str, ...]]]] = {}
    bound: dict[tuple[str, str, str, str], list[str]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        pl = meta.get("labels") or {}
        key = (
            str(meta.get("namespace", "")),
            str(pl.get(labels.REPLICA, "")),
            str(pl.get(labels.ENGINE, "")),
            str(pl.get(labels.MEMBER, "")),
        )
        bound.setdefault(key, []).append(str(node))
    for workload in workloads:
        namespace = str((workload.get("metadata") or {}).get("namespace", ""))
        for path in _TEMPLATE_PATHS:
            template = _at(workload, path)
            if template is None:
                continue
            tmeta = template.get("metadata") or {}
            tl = tmeta.get("labels") or {}
            copies = steered_pods(tmeta.get("annotations"))
            nodes = tuple(n for copy in copies for n in copy) or steered_nodes(template)
            replica = str(tl.get(labels.REPLICA, ""))
            if not nodes or not replica:
                continue
            member = (str(tl.get(labels.ENGINE, "")), str(tl.get(labels.MEMBER, "Standalone")))
            unbound = list(nodes)
            for node in bound.get((namespace, replica, *member), ()):
                if node in unbound:
                    unbound.remove(node)
            out.setdefault((namespace, replica), {})[member] = (nodes, tuple(unbound))
    return out
