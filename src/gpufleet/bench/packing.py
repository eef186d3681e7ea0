"""B2, packing quality: seeded traces of mixed replicas through the real `schedule`, against
whole-node accounting and the exact optimum.

**Replicas.** On a pool of G-GPU nodes (G = 8 or 4), each arrival is one ModelDeployment with
one replica, drawn with fixed weights from: a standalone 1-, 2-, 4- or (G = 8 only) 8-GPU
engine (25/20/20/10%); a P/D pair, prefill 2 copies x G/4 GPUs + decode 1 x G/2 GPUs (15%); a
2-node gang, leader + 1 worker of G GPUs each (10%). A replica is placed whole or refused.

**The cluster model.** One cluster, one pool of N identical nodes, fixed size (no growth). We
keep the ground truth ourselves: a free-GPU count per node. Each arrival is scheduled by the
real `plan(snapshot, now, record=True)` against a snapshot holding only that deployment:

- *free-GPU* (Spread or Pack prediction, `SchedulingConfig.node_choice`): the pool carries a
  fresh observation whose histogram is built from the ground truth, with every placed pod
  already inside it (as if the agent reported after every placement, so the live replicas need
  not be in the snapshot: they would be fully accounted for). When the replica is placed, each
  pod of the recorded `Assignment`s is applied to a ground-truth node with exactly the free
  count the fit predicted (lowest node index; the pods of one gang copy on distinct nodes). So
  the cluster's scheduler chooses exactly as predicted: B2 measures the policy, B5 measures
  misprediction.
- *whole-node*: the pool has no observation and the snapshot carries every live replica
  (converted from the decision's placements), so the core charges one node per claiming pod
  (Modelplane HEAD). Where its pods land does not matter to its decisions.
- *free-GPU steered, Spread cluster* (issue 14): the cluster's agent steers (the hub predicts
  Pack), and the ground truth is not the prediction: the agent's real `Steerer` chooses each
  claiming pod's node by best fit from the ground truth and writes preferred node affinity,
  and the emulated default-profile kube-scheduler (`gpufleet.sim.emulated.kube_scoring`) binds each pod
  in creation order (`gpufleet.bench.steered`). A placed replica with a pod no node takes is
  released and counted as refused (the note says how many).

**Static instances** (no departures): arrivals totalling 1.25x the pool's GPUs are offered in
order. "At first refusal" is the GPUs allocated when the first replica is refused; "all
offered" keeps offering after refusals (a refused replica is skipped) and reports the GPUs
allocated at the end. The **optimum** (highspy, pattern formulation, see optimum.py) is, for
"at first refusal", the GPUs of the longest prefix of the arrival list that fits the pool
together (what a perfect packer holds when it first has to refuse: the same quantity the
heuristics report), and for "all offered", the most GPUs of any subset of the offered replicas
that fits. Both are exact for these shapes (gang pods fill a node, so distinct nodes are
implied). Every heuristic's result is a feasible packing, so the optimum is >= each of them.

**Dynamic traces** (seeded): Poisson arrivals, exponential lifetimes, offered load 1.1x the
pool's GPUs; a refused arrival is lost. Reported: the time-weighted average of GPUs allocated
(after a warm-up of 10% of the trace) and the share of offered GPUs refused.
"""

from __future__ import annotations

import collections
import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.bench import optimum
from gpufleet.bench.common import Figure, Section, Table, count, measure, percent, seconds
from gpufleet.bench.speed import NOW
from gpufleet.bench.steered import SteeredCluster
from gpufleet.bench.svg import bar_plot, line_plot
from gpufleet.core.decision import Placement
from gpufleet.core.model import (
    Bucket,
    ClaimMode,
    Cluster,
    ClusterName,
    Deployment,
    DeploymentKey,
    Device,
    DeviceRequest,
    DriverName,
    Engine,
    Member,
    NodeChoice,
    Phase,
    Pool,
    PoolName,
    PoolObservation,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    Role,
    SchedulingConfig,
    ServingMode,
    Snapshot,
    Steering,
)
from gpufleet.core.schedule import plan

GPU = DriverName("gpu.nvidia.com")
CLUSTER = ClusterName("c0")
POOL = PoolName("gpus")
WHOLE_NODE = "whole-node"
SPREAD = "free-GPU Spread"
PACK = "free-GPU Pack"
STEERED = "free-GPU steered, Spread cluster"
STEERED_REQUIRED = "free-GPU steered Required, Spread cluster"
STEERED_GATED = "free-GPU steered Gated, Spread cluster"
#: The steered rows and the agent's steering mode of each.
STEERED_MODES: dict[str, Steering] = {
    STEERED: Steering.PREFERRED,
    STEERED_REQUIRED: Steering.REQUIRED,
    STEERED_GATED: Steering.GATED,
}
POLICIES = (WHOLE_NODE, SPREAD, PACK, STEERED, STEERED_REQUIRED, STEERED_GATED)
STATIC_LOAD = 1.25
DYNAMIC_LOAD = 1.1


@dataclass(frozen=True, slots=True)
class Kind:
    """A replica shape: its engines (GPUs per pod, pods, roles) and the solver's view."""

    name: str
    weight: float
    deployment_engines: tuple[Engine, ...]
    serving_mode: ServingMode
    #: pod size -> pods, for the optimum.
    shape: optimum.Shape

    @property
    def gpus(self) -> int:
        return sum(size * n for size, n in self.shape)


def _member(role: Role, gpus: int) -> Member:
    return Member(role, 1, (DeviceRequest("gpu", gpus),))


def kinds(gpus_per_node: int) -> tuple[Kind, ...]:
    g = gpus_per_node
    out = [
        Kind(
            f"{n}-GPU",
            w,
            (Engine("main", (_member(Role.STANDALONE, n),)),),
            ServingMode.UNIFIED,
            ((n, 1),),
        )
        for n, w in ((1, 0.25), (2, 0.2), (4, 0.2), (8, 0.1))
        if n <= g
    ]
    pre, dec = g // 4, g // 2
    pd_shape: optimum.Shape = tuple(sorted({pre: 2, dec: 1}.items()))
    out.append(
        Kind(
            "P/D",
            0.15,
            (
                Engine("prefill", (_member(Role.STANDALONE, pre),), 2, Phase.PREFILL),
                Engine("decode", (_member(Role.STANDALONE, dec),), 1, Phase.DECODE),
            ),
            ServingMode.PREFILL_DECODE,
            pd_shape,
        )
    )
    out.append(
        Kind(
            "gang",
            0.1,
            (Engine("main", (_member(Role.LEADER, g), _member(Role.WORKER, g))),),
            ServingMode.UNIFIED,
            ((g, 2),),
        )
    )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Arrival:
    index: int
    kind: Kind
    at_s: float = 0.0
    leave_s: float = float("inf")

    def deployment(self) -> Deployment:
        return Deployment(
            key=DeploymentKey("bench", f"r{self.index:05d}"),
            replicas=1,
            engines=self.kind.deployment_engines,
            serving_mode=self.kind.serving_mode,
        )


def draw(rng: random.Random, choices: Sequence[Kind]) -> Kind:
    return rng.choices(choices, weights=[k.weight for k in choices])[0]


def static_trace(seed: int, nodes: int, gpus_per_node: int) -> list[Arrival]:
    rng = random.Random(seed)
    choices = kinds(gpus_per_node)
    out: list[Arrival] = []
    total = 0
    while total < STATIC_LOAD * nodes * gpus_per_node:
        kind = draw(rng, choices)
        out.append(Arrival(len(out), kind))
        total += kind.gpus
    return out


def dynamic_trace(seed: int, nodes: int, gpus_per_node: int, arrivals: int) -> list[Arrival]:
    """Poisson arrivals (rate 1/s) with exponential lifetimes sized for DYNAMIC_LOAD."""
    rng = random.Random(seed)
    choices = kinds(gpus_per_node)
    mean_gpus = sum(k.weight * k.gpus for k in choices) / sum(k.weight for k in choices)
    lifetime = DYNAMIC_LOAD * nodes * gpus_per_node / mean_gpus
    at = 0.0
    out = []
    for i in range(arrivals):
        at += rng.expovariate(1.0)
        kind = draw(rng, choices)
        out.append(Arrival(i, kind, at, at + rng.expovariate(1.0 / lifetime)))
    return out


# --- the replay ---------------------------------------------------------------------------


@dataclass(slots=True)
class PoolModel:
    """Ground truth of one pool under one policy, and the live replicas on it."""

    policy: str
    nodes: int
    gpus_per_node: int
    free: list[int] = field(default_factory=list)
    #: arrival index -> (placement, [(node, gpus)], gpus)
    live: dict[int, tuple[Placement, list[tuple[int, int]], int]] = field(default_factory=dict)
    allocated: int = 0
    calls: int = 0
    #: The steered cluster's ground truth (STEERED only; then `free` is its list).
    cluster: SteeredCluster | None = None

    def __post_init__(self) -> None:
        mode = STEERED_MODES.get(self.policy)
        if mode is not None:
            self.cluster = SteeredCluster(
                self.nodes, self.gpus_per_node, mode=mode, pool=POOL, driver=GPU
            )
            self.free = self.cluster.free
        else:
            self.free = [self.gpus_per_node] * self.nodes

    def _pool(self) -> Pool:
        device = Device("gpu", GPU, ClaimMode.DRA, "gpu.nvidia.com", self.gpus_per_node)
        observation = None
        if self.policy != WHOLE_NODE:
            histogram: dict[int, int] = {}
            for f in self.free:
                histogram[f] = histogram.get(f, 0) + 1
            observation = PoolObservation(
                observed_nodes=self.nodes,
                buckets=tuple(Bucket({GPU: f}, n) for f, n in sorted(histogram.items())),
                observed_at=NOW,
                last_allocation_time=NOW,
            )
        return Pool(POOL, "gpus", (device,), node_count=self.nodes, observation=observation)

    def offer(self, arrival: Arrival) -> bool:
        """Schedule one arrival; apply it to the ground truth when placed."""
        self.calls += 1
        is_whole = self.policy == WHOLE_NODE
        cluster = Cluster(
            CLUSTER,
            gateway_address="10.0.0.1",
            pools=(self._pool(),),
            agent_observed_at=None if is_whole else NOW,
            steering=self.cluster.mode if self.cluster is not None else Steering.OFF,
        )
        choice = NodeChoice.PACK if self.policy == PACK else NodeChoice.SPREAD
        snapshot = Snapshot(
            deployments=(arrival.deployment(),),
            clusters=(cluster,),
            replicas=tuple(_replica(p) for p, _, _ in self.live.values()) if is_whole else (),
            config=SchedulingConfig(node_choice={CLUSTER: choice}),
        )
        result = plan(snapshot, NOW, record=not is_whole)
        created = result.decision.deployments[0].created
        if not created:
            return False
        pods: list[tuple[int, int]] = []
        if self.cluster is not None:
            bound = self.cluster.bind(created[0], arrival.index)
            if bound is None:
                return False
            pods = bound
        elif not is_whole:
            trace = result.traces[(CLUSTER, POOL)]
            used: dict[tuple[str, int], set[int]] = {}
            for a in trace.assignments:
                if a.is_charge:
                    continue
                taken = used.setdefault((a.owner, a.unit), set())
                node = next(i for i, f in enumerate(self.free) if f == a.node[0] and i not in taken)
                taken.add(node)
                self.free[node] -= a.taken[0]
                pods.append((node, a.taken[0]))
        self.live[arrival.index] = (created[0], pods, arrival.kind.gpus)
        self.allocated += arrival.kind.gpus
        return True

    def leave(self, index: int) -> None:
        found = self.live.pop(index, None)
        if found is None:
            return
        _, pods, gpus = found
        if self.cluster is not None:
            self.cluster.release(pods, index)
        else:
            for node, taken in pods:
                self.free[node] += taken
        self.allocated -= gpus


def _replica(p: Placement) -> Replica:
    return Replica(
        name=p.name,
        deployment=p.deployment,
        cluster=p.cluster,
        index=p.index,
        engines=tuple(
            ReplicaEngine(
                e.name,
                tuple(ReplicaMember(m.role, m.pool, m.worker_nodes, m.requests) for m in e.members),
                e.copies,
                e.phase,
            )
            for e in p.engines
        ),
    )


@dataclass(frozen=True, slots=True)
class StaticResult:
    policy: str
    at_first_refusal: int
    all_offered: int
    #: Replicas the hub placed whose pods the steered cluster did not all bind.
    stranded: int = 0


def replay_static(policy: str, trace: Sequence[Arrival], nodes: int, g: int) -> StaticResult:
    model = PoolModel(policy, nodes, g)
    first: int | None = None
    for arrival in trace:
        if not model.offer(arrival) and first is None:
            first = model.allocated
    stranded = model.cluster.stranded if model.cluster is not None else 0
    return StaticResult(
        policy, model.allocated if first is None else first, model.allocated, stranded
    )


@dataclass(frozen=True, slots=True)
class DynamicResult:
    policy: str
    average_allocated: float
    refused_share: float
    calls: int
    #: (time, GPUs allocated) after each event.
    series: tuple[tuple[float, int], ...]
    stranded: int = 0


def replay_dynamic(policy: str, trace: Sequence[Arrival], nodes: int, g: int) -> DynamicResult:
    model = PoolModel(policy, nodes, g)
    events: list[tuple[float, int, int]] = []  # (time, 0 leave / 1 arrive, index)
    for a in trace:
        events.append((a.at_s, 1, a.index))
        events.append((a.leave_s, 0, a.index))
    events.sort()
    end = trace[-1].at_s if trace else 0.0
    warm = 0.1 * end
    area = 0.0
    last_t, offered, refused = warm, 0, 0
    series: list[tuple[float, int]] = []
    for t, is_arrival, index in events:
        if t > end:
            break
        if t > warm:
            area += model.allocated * (t - last_t)
            last_t = t
        if is_arrival:
            arrival = trace[index]
            placed = model.offer(arrival)
            if t > warm:
                offered += arrival.kind.gpus
                refused += 0 if placed else arrival.kind.gpus
        else:
            model.leave(index)
        series.append((t, model.allocated))
    span = max(1e-9, end - warm)
    return DynamicResult(
        policy,
        area / span,
        refused / offered if offered else 0.0,
        model.calls,
        tuple(series),
        model.cluster.stranded if model.cluster is not None else 0,
    )


# --- the optimum --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StaticOptimum:
    at_first_refusal: int
    all_offered: int
    is_proven: bool


def static_optimum(trace: Sequence[Arrival], nodes: int, g: int) -> StaticOptimum:
    shapes = [a.kind.shape for a in trace]
    k, proven_prefix = optimum.longest_packable_prefix(shapes, nodes, g)
    prefix_gpus = sum(a.kind.gpus for a in trace[:k])
    available: dict[optimum.Shape, int] = {}
    for s in shapes:
        available[s] = available.get(s, 0) + 1
    best = optimum.max_gpus(available, nodes, g)
    return StaticOptimum(prefix_gpus, round(best.value), proven_prefix and best.is_optimal)


# --- the section --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    nodes: int
    seeds: int
    arrivals: int


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _against_optimum(
    results: Sequence[StaticResult], optima: Sequence[StaticOptimum]
) -> tuple[list[float], str]:
    """Each seed's share of the optimum at the first refusal, and the mean share of all offered."""
    pairs = list(zip(results, optima, strict=True))
    ratios = [
        r.at_first_refusal / o.at_first_refusal if o.at_first_refusal else 1.0 for r, o in pairs
    ]
    every = [r.all_offered / o.all_offered if o.all_offered else 1.0 for r, o in pairs]
    return ratios, percent(_mean(every))


def _beats(results: Sequence[StaticResult], optima: Sequence[StaticOptimum]) -> bool:
    """A policy placed more than the optimum on some seed: a bug of the benchmark."""
    return any(
        r.at_first_refusal > o.at_first_refusal or r.all_offered > o.all_offered
        for r, o in zip(results, optima, strict=True)
    )


def run(quick: bool = False, with_optimum: bool | None = None) -> Section:
    sizes = Sizes(8, 1, 120) if quick else Sizes(64, 5, 3000)
    solve = optimum.is_available() if with_optimum is None else with_optimum
    static_rows: list[tuple[str, ...]] = []
    dynamic_rows: list[tuple[str, ...]] = []
    numbers: dict[str, float] = {}
    pct_first: dict[str, list[float]] = {p: [] for p in POLICIES}
    dynamic_series: dict[str, list[tuple[float, float]]] = {}
    notes: list[str] = []
    groups: list[str] = []
    #: Placed replicas the steered cluster did not bind (only STEERED can have any).
    stranded: dict[str, int] = collections.defaultdict(int)
    for g in (8, 4):
        capacity = sizes.nodes * g
        label = f"{sizes.nodes} x {g}-GPU"
        groups.append(label)
        per_policy: dict[str, list[StaticResult]] = {p: [] for p in POLICIES}
        optima: list[StaticOptimum] = []
        seconds_static: dict[str, float] = dict.fromkeys(POLICIES, 0.0)
        peak_static: dict[str, float] = dict.fromkeys(POLICIES, 0.0)
        for seed in range(sizes.seeds):
            trace = static_trace(seed, sizes.nodes, g)
            for policy in POLICIES:
                ms = measure(
                    functools.partial(replay_static, policy, trace, sizes.nodes, g),
                    1,
                    trace_memory=seed == 0,
                )
                per_policy[policy].append(ms.value)
                seconds_static[policy] += ms.best_s
                if ms.peak_mib is not None:
                    peak_static[policy] = max(peak_static[policy], ms.peak_mib)
            if solve:
                optima.append(static_optimum(trace, sizes.nodes, g))
        opt_first = _mean([o.at_first_refusal for o in optima]) if optima else None
        opt_all = _mean([o.all_offered for o in optima]) if optima else None
        for policy in POLICIES:
            results = per_policy[policy]
            first = _mean([r.at_first_refusal for r in results])
            every = _mean([r.all_offered for r in results])
            ratio_first = ratio_all = worst = "-"
            if optima:
                ratios, ratio_all = _against_optimum(results, optima)
                ratio_first = percent(_mean(ratios))
                worst = percent(min(ratios))
                pct_first[policy].append(100 * _mean(ratios))
                if _beats(results, optima):
                    notes.append(f"BUG: {policy} beats the optimum on {label}")
            static_rows.append(
                (
                    label,
                    policy,
                    f"{first:,.1f}",
                    percent(first / capacity),
                    ratio_first,
                    worst,
                    f"{every:,.1f}",
                    percent(every / capacity),
                    ratio_all,
                    seconds(seconds_static[policy]),
                    f"{peak_static[policy]:,.1f}",
                )
            )
            numbers[f"static/{g}/{policy}/first"] = first
            numbers[f"static/{g}/{policy}/all"] = every
            stranded[f"{label}, static"] += sum(r.stranded for r in results)
        if opt_first is not None and opt_all is not None:
            proven = all(o.is_proven for o in optima)
            static_rows.append(
                (
                    label,
                    "optimum" + ("" if proven else " (bound, time limit)"),
                    f"{opt_first:,.1f}",
                    percent(opt_first / capacity),
                    "100.0%",
                    "",
                    f"{opt_all:,.1f}",
                    percent(opt_all / capacity),
                    "100.0%",
                    "",
                    "",
                )
            )
            numbers[f"static/{g}/optimum/first"] = opt_first
            numbers[f"static/{g}/optimum/all"] = opt_all
        trace = dynamic_trace(1000 + g, sizes.nodes, g, sizes.arrivals)
        for policy in POLICIES:
            m = measure(functools.partial(replay_dynamic, policy, trace, sizes.nodes, g), 1)
            d = m.value
            dynamic_rows.append(
                (
                    label,
                    policy,
                    count(len(trace)),
                    f"{d.average_allocated:,.1f}",
                    percent(d.average_allocated / capacity),
                    percent(d.refused_share),
                    count(d.calls),
                    seconds(m.best_s),
                    f"{1000 * m.best_s / max(1, d.calls):.2f}",
                    m.peak_text,
                )
            )
            numbers[f"dynamic/{g}/{policy}/average"] = d.average_allocated
            numbers[f"dynamic/{g}/{policy}/share"] = d.average_allocated / capacity
            stranded[f"{label}, dynamic"] += d.stranded
            if g == 8:
                dynamic_series[policy] = _thin(d.series, 400)
    notes.append(
        f"{STEERED}: placed replicas the cluster did not bind (counted as refused): "
        + "; ".join(f"{k}: {v}" for k, v in stranded.items())
        + "."
    )
    if not solve:
        notes.append(
            "Optimum column skipped: highspy is not installed (pip install highspy==1.15.1)."
        )
    else:
        notes.append(f"Optimum solved with {optimum.solver_version()} (pattern formulation).")
    static_headers = (
        "pool",
        "accounting",
        "GPUs at 1st refusal",
        "of capacity",
        "of optimum",
        "worst seed",
        "GPUs all offered",
        "of capacity",
        "of optimum",
        "seconds",
        "peak MiB",
    )
    dynamic_headers = (
        "pool",
        "accounting",
        "arrivals",
        "avg GPUs allocated",
        "of capacity",
        "GPUs refused",
        "schedule calls",
        "seconds",
        "ms/call",
        "peak MiB",
    )
    figures = []
    if any(pct_first.values()):
        figures.append(
            Figure(
                "b2-static.svg",
                "GPUs allocated at the first refusal, % of the optimum (static instances)",
                bar_plot(
                    "B2: GPUs at first refusal, % of optimum",
                    groups,
                    {p: v for p, v in pct_first.items() if v},
                    y_label="% of optimum",
                    y_max=100.0,
                ),
            )
        )
    if dynamic_series:
        figures.append(
            Figure(
                "b2-dynamic.svg",
                f"GPUs allocated over the dynamic trace ({groups[0]} pool, capacity "
                f"{sizes.nodes * 8:,} GPUs)",
                line_plot(
                    f"B2: GPUs allocated over time ({groups[0]})",
                    dynamic_series,
                    x_label="simulated seconds (1 arrival/s on average)",
                    y_label="GPUs allocated",
                ),
            )
        )
    return Section(
        key="B2",
        title="B2. Packing quality",
        intro=__doc__ or "",
        tables=(
            Table(
                f"B2a: static instances (mean of {sizes.seeds} seed(s), offered "
                f"{STATIC_LOAD:g}x capacity)",
                static_headers,
                tuple(static_rows),
            ),
            Table(
                f"B2b: dynamic traces (offered load {DYNAMIC_LOAD:g}x capacity)",
                dynamic_headers,
                tuple(dynamic_rows),
            ),
        ),
        figures=tuple(figures),
        notes=tuple(notes),
        numbers=numbers,
    )


def _thin(series: Sequence[tuple[float, int]], points: int) -> list[tuple[float, float]]:
    step = max(1, len(series) // points)
    return [(t, float(v)) for t, v in series[::step]]


__all__ = ["dynamic_trace", "kinds", "replay_dynamic", "replay_static", "run", "static_trace"]
