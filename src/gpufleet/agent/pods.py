"""The observe model's pieces for replicas: what a ModelReplica and a Pod say, and a replica's
observation from its pods (`gpufleet.agent.reads` holds the rest; both are pure and shared by
`observe` and `FreeDeviceTable`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from gpufleet.agent.device_plugin import pseudo_claim
from gpufleet.agent.model import (
    ENGINE_LABEL,
    MAX_NAMES_IN_MESSAGE,
    MEMBER_LABEL,
    REPLICA_GENERATION_LABEL,
    REPLICA_LABEL,
    ObservedReplica,
    Problem,
    ProblemCode,
    RawObject,
    as_int,
    as_list,
    as_map,
    as_str,
    ns_name,
)
from gpufleet.api.times import parse_time
from gpufleet.core.model import MemberPods, PoolName, ReplicaPoolStatus, Role

# --- replicas ---------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    engine: str
    role: Role
    pool: str | None
    is_claiming: bool
    pods_needed: int
    live_pods: int = 0
    allocated_pods: int = 0
    #: Live unbound pods of a claiming member marked Unschedulable: their names, and the
    #: earliest time one was so marked (None: no such pod gives a time).
    unschedulable: list[str] = field(default_factory=list)
    unschedulable_since: datetime | None = None
    #: Live pods of any generation that are Running and Ready: the member serves.
    ready_pods: int = 0
    #: Live pods of any generation bound to a cordoned node: the hub replaces their replica
    #: first, as a rollout step (a node being drained).
    draining_pods: int = 0


@dataclass(slots=True)
class Replica:
    namespace: str
    name: str
    generation: int | None
    members: dict[tuple[str, str], Member]
    #: `generation` as the pods' label spells it (a fast path for comparing).
    generation_label: str | None
    is_readable: bool
    problems: set[str] = field(default_factory=set)
    #: pool -> latest allocation time over the replica's pods' claims there
    pool_last: dict[str, datetime] = field(default_factory=dict)
    #: The pools its members name.
    pools: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def fresh(self) -> Replica:
        """A copy with nothing counted yet: a cached read is shared between calls."""
        members = {
            key: Member(m.engine, m.role, m.pool, m.is_claiming, m.pods_needed)
            for key, m in self.members.items()
        }
        return Replica(
            self.namespace,
            self.name,
            self.generation,
            members,
            self.generation_label,
            self.is_readable,
            set(self.problems),
            pools=self.pools,
        )


def read_replica(obj: RawObject) -> Replica:
    meta = as_map(obj.get("metadata"))
    spec = as_map(obj.get("spec"))
    ns, name = as_str(meta.get("namespace")), as_str(meta.get("name"))
    generation = as_int(meta.get("generation"))
    rep = Replica(ns, name, generation, {}, None if generation is None else str(generation), True)
    if generation is None:
        rep.is_readable = False
        rep.problems.add("metadata.generation")
    engines = spec.get("engines")
    if not isinstance(engines, list | tuple):
        rep.is_readable = False
        rep.problems.add("spec.engines")
        engines = ()
    for i, engine in enumerate(engines):
        engine = as_map(engine)
        engine_name = as_str(engine.get("name"))
        copies = as_int(engine.get("copies", 1))
        if not engine_name or copies is None or copies < 0:
            rep.is_readable = False
            rep.problems.add(f"spec.engines[{i}]")
            copies = copies if copies is not None and copies >= 0 else 0
        members = engine.get("members")
        if not isinstance(members, list | tuple):
            rep.is_readable = False
            rep.problems.add(f"spec.engines[{i}].members")
            members = ()
        for j, member in enumerate(members):
            member = as_map(member)
            where = f"spec.engines[{i}].members[{j}]"
            try:
                role = Role(member.get("role", Role.STANDALONE))
            except ValueError:
                rep.is_readable = False
                rep.problems.add(f"{where}.role")
                continue
            worker_nodes = 1
            if role is Role.WORKER:
                wn = as_int(as_map(member.get("worker")).get("nodes", 1))
                if wn is None or wn < 1:
                    rep.is_readable = False
                    rep.problems.add(f"{where}.worker.nodes")
                    wn = 1
                worker_nodes = wn
            pool = member.get("nodePoolName")
            if not isinstance(pool, str) or not pool:
                rep.is_readable = False
                rep.problems.add(f"{where}.nodePoolName")
                pool = None
            requests = member.get("deviceRequests")
            is_claiming = bool(requests)
            if requests is not None and not isinstance(requests, list | tuple):
                rep.is_readable = False
                rep.problems.add(f"{where}.deviceRequests")
                is_claiming = True  # unknown: assume it claims, so it must be seen allocated
            key = (engine_name, str(role))
            if key in rep.members:
                rep.is_readable = False
                rep.problems.add(f"{where}: duplicate {engine_name}/{role}")
                continue
            rep.members[key] = Member(engine_name, role, pool, is_claiming, copies * worker_nodes)
    rep.pools = frozenset(m.pool for m in rep.members.values() if m.pool is not None)
    return rep


def _pod_claim_names(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[tuple[str, ...], bool] | None:
    """The claim names a pod uses, and whether every claim it asks for has been created.

    None when the fields are malformed.
    """
    spec_claims = spec.get("resourceClaims") or ()
    status_claims = status.get("resourceClaimStatuses") or ()
    if not isinstance(spec_claims, list | tuple) or not isinstance(status_claims, list | tuple):
        return None
    if len(spec_claims) == 1 and len(status_claims) == 1:
        # The common case (one claim from a template), without the general bookkeeping.
        spec_entry, status_entry = spec_claims[0], status_claims[0]
        if type(spec_entry) is dict and type(status_entry) is dict:
            ref = spec_entry.get("name")
            claim_name = status_entry.get("resourceClaimName")
            if (
                type(ref) is str
                and ref == status_entry.get("name")
                and not spec_entry.get("resourceClaimName")
            ):
                return ((claim_name,) if type(claim_name) is str and claim_name else ()), True
    generated: dict[str, str | None] = {}
    for entry in status_claims:
        if not (type(entry) is dict or isinstance(entry, Mapping)) or not isinstance(
            entry.get("name"), str
        ):
            return None
        claim_name = entry.get("resourceClaimName")
        generated[entry["name"]] = claim_name if isinstance(claim_name, str) else None
    names: list[str] = []
    is_complete = True
    seen_spec: set[str] = set()
    for entry in spec_claims:
        if not (type(entry) is dict or isinstance(entry, Mapping)):
            return None
        ref = as_str(entry.get("name"))
        seen_spec.add(ref)
        direct = entry.get("resourceClaimName")
        if isinstance(direct, str) and direct:
            names.append(direct)
        elif ref in generated:
            generated_name = generated[ref]
            if generated_name:
                names.append(generated_name)
        else:
            is_complete = False  # template not yet turned into a claim
    for ref, claim_name in generated.items():
        if ref not in seen_spec and claim_name:
            names.append(claim_name)
    return tuple(names), is_complete


#: What a Pod says about the replica it belongs to, read once per version:
#: `(key, replica, engine, member, generation, claim_names, is_complete, is_malformed,
#: is_live, node_name)`: its (namespace, name); its replica, engine and member labels (the
#: replica None when the pod belongs to none, and the rest then unread); the replica
#: generation label as found; the claims it names, and whether every claim it asks for has
#: been created; whether its claim fields are malformed (never counted allocated); whether
#: it is neither Succeeded, Failed nor deleting; its node; whether it waits unbound with
#: `PodScheduled=False, reason Unschedulable`, and since when (that condition's
#: `lastTransitionTime`; None when absent or unparsable); whether it is Running with
#: `Ready=True`. A plain tuple (see `ClaimInfo`).
PodInfo = tuple[
    tuple[str, str],
    str | None,
    str,
    str,
    object,
    tuple[str, ...],
    bool,
    bool,
    bool,
    str,
    bool,
    datetime | None,
    bool,
]
_NO_REPLICA: Final = (None, "", "", None, (), False, False, False, "", False, None, False)


def _unschedulable(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[bool, datetime | None]:
    """Whether an unbound pod is marked `PodScheduled=False, reason Unschedulable`, and since
    when (kube-scheduler's verdict; cluster-autoscaler acts on the same condition)."""
    if spec.get("nodeName"):
        return False, None
    conditions = status.get("conditions")
    if not isinstance(conditions, list | tuple):
        return False, None
    for c in conditions:
        if (
            isinstance(c, Mapping)
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            return True, parse_time(c.get("lastTransitionTime"))
    return False, None


def _is_ready(status: Mapping[str, Any]) -> bool:
    """Running with `Ready=True`: the pod serves."""
    if status.get("phase") != "Running":
        return False
    conditions = status.get("conditions")
    if not isinstance(conditions, list | tuple):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _has_extended(spec: Mapping[str, Any]) -> bool:
    """Whether a container asks for an extended resource (`nvidia.com/gpu`) in its limits."""
    for c in as_list(spec.get("containers")):
        limits = as_map(as_map(as_map(c).get("resources")).get("limits"))
        if any(isinstance(k, str) and "/" in k and not k.startswith("hugepages-") for k in limits):
            return True
    return False


def read_pod(pod: RawObject) -> PodInfo:
    meta = pod.get("metadata")
    if not (type(meta) is dict or isinstance(meta, Mapping)):
        return (ns_name(pod), *_NO_REPLICA)
    ns, name = meta.get("namespace"), meta.get("name")
    key = (ns if type(ns) is str else as_str(ns)), (name if type(name) is str else as_str(name))
    labels = meta.get("labels")
    if not (type(labels) is dict or isinstance(labels, Mapping)):
        return (key, *_NO_REPLICA)
    replica_name = labels.get(REPLICA_LABEL)
    if not isinstance(replica_name, str):
        return (key, *_NO_REPLICA)
    spec, status = as_map(pod.get("spec")), as_map(pod.get("status"))
    claim_info = _pod_claim_names(spec, status)
    claim_names, is_complete = claim_info if claim_info is not None else ((), False)
    if claim_info is not None and not claim_names and is_complete and _has_extended(spec):
        # A device-plugin pod: allocated while it holds (`device_plugin.pseudo_claim`).
        claim_names = (pseudo_claim(key[1]),)
    engine, role, node = labels.get(ENGINE_LABEL), labels.get(MEMBER_LABEL), spec.get("nodeName")
    is_unschedulable, since = _unschedulable(spec, status) if not node else (False, None)
    is_live = status.get("phase") not in ("Succeeded", "Failed") and (
        meta.get("deletionTimestamp") is None
    )
    return (
        key,
        replica_name,
        engine if type(engine) is str else as_str(engine),
        role if type(role) is str else as_str(role),
        labels.get(REPLICA_GENERATION_LABEL),
        claim_names,
        is_complete,
        claim_info is None,
        is_live,
        node if type(node) is str else as_str(node),
        is_unschedulable,
        since,
        is_live and _is_ready(status),
    )


def count_pods(
    rep: Replica,
    pods: Iterable[PodInfo],
    allocated: Mapping[tuple[str, str], datetime],
    node_pool: Mapping[str, str],
    cordoned: Container[str] = frozenset(),
) -> None:
    """Count the replica's pods (those labelled with it, in its namespace) into `rep`;
    `cordoned` names the nodes marked unschedulable."""
    ns = rep.namespace
    for pod in pods:
        (
            key,
            _,
            engine,
            role,
            pod_generation,
            claim_names,
            is_complete,
            is_malformed,
            is_live,
            node_name,
            is_unschedulable,
            since,
            is_ready,
        ) = pod
        if is_malformed:
            rep.problems.add(f"pod {key[1]}: resourceClaims")
        times = []
        for c in claim_names:
            t = allocated.get((ns, c))
            if t is not None:
                times.append(t)
        is_allocated = is_complete and bool(claim_names) and len(times) == len(claim_names)
        member = rep.members.get((engine, role))
        if times:
            pool = member.pool if member is not None else None
            if pool is None:
                pool = node_pool.get(node_name)
            if pool is not None:
                latest = max(times)
                prev = rep.pool_last.get(pool)
                if prev is None or latest > prev:
                    rep.pool_last[pool] = latest
        if member is None or rep.generation is None or not is_live:
            continue
        # Serving and stuck are judged over the pods of every generation (a replica whose
        # old pod serves while its new one waits is not stuck); accounting, over the current.
        member.ready_pods += is_ready
        if node_name and node_name in cordoned:
            member.draining_pods += 1
        if is_unschedulable and member.is_claiming and not is_allocated:
            member.unschedulable.append(key[1])
            if since is not None and (
                member.unschedulable_since is None or since < member.unschedulable_since
            ):
                member.unschedulable_since = since
        if pod_generation != rep.generation_label and as_int(pod_generation) != rep.generation:
            continue
        member.live_pods += 1
        if is_allocated:
            member.allocated_pods += 1


def observed_replica(rep: Replica) -> ObservedReplica:
    by_pool: dict[str, list[MemberPods]] = defaultdict(list)
    stuck: dict[str, tuple[int, datetime | None]] = {}
    ready: dict[str, int] = defaultdict(int)
    draining: dict[str, int] = defaultdict(int)
    waiting: list[tuple[str, str]] = []
    is_scheduled = rep.is_readable
    for key in sorted(rep.members):
        m = rep.members[key]
        if m.is_claiming and m.allocated_pods < m.pods_needed:
            is_scheduled = False
        if m.pool is not None:
            by_pool[m.pool].append(MemberPods(m.engine, m.role, m.live_pods, m.allocated_pods))
            ready[m.pool] += m.ready_pods
            draining[m.pool] += m.draining_pods
            if m.unschedulable:
                stuck[m.pool] = _stuck_add(stuck.get(m.pool), m)
                waiting.extend((m.pool, pod) for pod in m.unschedulable)
    for pool in rep.pool_last:
        by_pool.setdefault(pool, [])
    pools = tuple(
        ReplicaPoolStatus(
            PoolName(p),
            rep.pool_last.get(p),
            tuple(by_pool[p]),
            *stuck.get(p, (0, None)),
            ready_pods=ready.get(p, 0),
            draining_pods=draining.get(p, 0),
        )
        for p in sorted(by_pool)
    )
    problems: tuple[Problem, ...] = ()
    if rep.problems:
        names = sorted(rep.problems)
        shown = ", ".join(names[:MAX_NAMES_IN_MESSAGE])
        more = len(names) - MAX_NAMES_IN_MESSAGE
        suffix = f" and {more} more" if more > 0 else ""
        problems = (
            Problem(ProblemCode.MALFORMED_REPLICA, f"{len(names)}: {shown}{suffix}", len(names)),
        )
    return ObservedReplica(
        rep.namespace,
        rep.name,
        rep.generation,
        is_scheduled,
        pools,
        problems,
        unschedulable=tuple(sorted(waiting)),
    )


def _stuck_add(
    known: tuple[int, datetime | None] | None, member: Member
) -> tuple[int, datetime | None]:
    """A pool's (unschedulable pods, earliest since) with `member`'s added."""
    pods, since = known or (0, None)
    other = member.unschedulable_since
    if since is None or (other is not None and other < since):
        since = other
    return pods + len(member.unschedulable), since
