"""Placing one replica of a deployment on one cluster against the fleet ledger (reference 2.5).

Model.
- Engines are placed in deployment order against a trial of the cluster's ledger; the trial is
  discarded if any engine fails, committed if all fit. All engines of a replica go to one
  cluster; different engines may use different pools.
- An engine first needs a member that is *claimable anywhere* on the cluster (resolves a DRA
  device on some pool, ignoring capacity); otherwise it cannot go there (EngineCannotClaim).
- Pools are walked in published order; a pool hosts the engine when every member matches it,
  no claimable-anywhere member resolves only synthetic devices there (its GPU would be left
  behind), and the engine fits the trial: first fit wins, no scoring across pools. An engine is
  never split across pools; claimless members follow its pool at zero cost.
- Fit on a pool: whole-node pools compare the node cost of all the replica's engines there
  with `free_nodes`; free-GPU pools fit *all* the replica's pods on the pool (every engine that
  chose it, so P/D engines may share nodes) from the pool's ledger state, largest first.
- `explain=True` evaluates every pool for every engine and returns a verdict per (engine,
  pool) with its reasons; the placement chosen is the same as without it.

Which way it errs: first fit over pools in published order may refuse a replica that a
different pool choice for an earlier engine would admit (may refuse a fit, never overcommits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.core import diagnosis
from gpufleet.core.capacity import (
    Freshness,
    NodeChoicePolicy,
    PoolLedger,
)
from gpufleet.core.compile import (
    CompiledDeployment,
    EngineOnClass,
    EngineOnShape,
    PoolClass,
    compile_deployment,
)
from gpufleet.core.decision import (
    ClusterVerdict,
    ObservationState,
    PlacedEngine,
    PlacedMember,
    PoolState,
    PoolVerdict,
    Reason,
)
from gpufleet.core.fit import FitFailure, FitResult, Unit, fit, order_units
from gpufleet.core.matching import Matcher, MemberMatch
from gpufleet.core.memo import Generations
from gpufleet.core.model import (
    Cluster,
    ClusterName,
    Deployment,
    Device,
    Engine,
    Pool,
    PoolName,
    ReplicaEngine,
    ReplicaMember,
    SchedulingConfig,
)
from gpufleet.core.pool_ledgers import PoolLedgers


class ClusterLedger:
    """One cluster's pools (published order, first of each name) with its freshness.

    Mutable, for one call: its pools' ledgers, `version` (bumped by every `commit`, so "the
    same version" means "the same capacity"), `explained` (per explain profile, the verdicts
    of `explain_cluster` at a version) and `failures` (per explain profile, the version at
    which a replica did not fit)."""

    __slots__ = (
        "by_name",
        "cluster",
        "explained",
        "failures",
        "freshness",
        "gate_profile",
        "policy",
        "pools",
        "records",
        "shape",
        "unusable",
        "verdicts",
        "version",
    )

    def __init__(
        self,
        cluster: Cluster,
        pools: tuple[PoolLedger, ...],
        freshness: Freshness,
        policy: NodeChoicePolicy,
        memo: PlacementMemo,
    ) -> None:
        self.cluster = cluster
        self.pools = pools
        self.by_name: dict[PoolName, PoolLedger] = {p.pool.name: p for p in pools}
        self.freshness = freshness
        self.policy = policy
        #: What matching sees of the cluster, by id: its pools' classes and accounting modes,
        #: in order. Clusters of one shape match a deployment alike.
        self.shape = memo.shape_id(tuple((p.class_id, p.is_free_gpu) for p in pools))
        self.version = 0
        self.explained: dict[int, tuple[int, Explained]] = {}
        #: Per (pool name, pool version, explain profile, engine index): the verdict on a pool
        #: the engine cannot use (one dict per cluster rather than one per pool: fewer
        #: objects for the garbage collector; an entry of an older pool version is never
        #: asked again).
        self.unusable: dict[tuple[PoolName, int, int | None, int], PoolVerdict] = {}
        #: Per explain profile, the `ungated_verdict` at a version.
        self.verdicts: dict[int, tuple[int, ClusterVerdict]] = {}
        #: Per explain profile, the version at which a replica of it did not fit: every
        #: deployment of that profile fails here too until the version moves.
        self.failures: dict[int, int] = {}
        #: Whether its pools log every pod taken (then a fit needs the replica's name).
        self.records = any(p.log is not None for p in pools)
        #: The id of what gates a deployment here (set once by verdicts.py's `gate_profile`).
        self.gate_profile: int | None = None


@dataclass(frozen=True, slots=True)
class ReplicaFit:
    """The outcome of placing one replica on one cluster.

    On success `engines` is set and `commits` holds, per pool, the fit to apply (free-GPU) or
    the nodes to take (whole-node). On failure `reasons` says why (one per code).
    """

    engines: tuple[PlacedEngine, ...] | None
    commits: dict[PoolName, FitResult | int] = field(default_factory=dict)
    reasons: tuple[Reason, ...] = ()
    verdicts: tuple[PoolVerdict, ...] = ()


def _placed(stamp: ReplicaEngine) -> PlacedEngine:
    return PlacedEngine(
        name=stamp.name,
        copies=stamp.copies,
        phase=stamp.phase,
        members=tuple(
            PlacedMember(
                m.role,
                m.pool,
                m.worker_nodes,
                m.requests,
                (m.milli_cpu, m.memory) if m.proportional else None,
            )
            for m in stamp.members
        ),
    )


def _unique_codes(reasons: list[Reason]) -> tuple[Reason, ...]:
    seen: set[str] = set()
    unique: list[Reason] = []
    for reason in reasons:
        if reason.code not in seen:
            seen.add(reason.code)
            unique.append(reason)
    return tuple(unique)


def _fit(pool: PoolLedger, units: list[Unit], policy: NodeChoicePolicy, owner: str) -> FitResult:
    """`fit` memoised on the pool's current state (many deployments share shapes)."""
    if pool.log is not None:
        return fit(pool.free, units, policy, owner=owner, record=True)
    memo_key = ("fit", tuple(units))
    found = pool.memo.get(memo_key)
    if found is None:
        found = fit(pool.free, units, policy)
        pool.memo[memo_key] = found
    assert isinstance(found, FitResult)
    return found


def _refusal(
    pool: PoolLedger, units: list[Unit], failure: FitFailure, policy: NodeChoicePolicy
) -> Reason:
    memo_key = ("refusal", tuple(units))
    found = pool.memo.get(memo_key)
    if found is None:
        found = diagnosis.insufficient_devices(pool, units, failure, policy)
        pool.memo[memo_key] = found
    assert isinstance(found, Reason)
    return found


#: Per (engine index, pool name, pool class, what the engine can claim on the shape): why
#: the engine cannot use the pool, and the engine placed on it (`Compiled`); and the pool's
#: shareable room when the placed engine sizes proportional requests on it.
_PoolKey = tuple[int, PoolName, int, tuple[bool, ...], tuple[int, int] | None]


class Compiled:
    """A deployment's compiled matches on one shape of cluster (per engine, `EngineOnShape`),
    with what placing derives from them and a pool's name alone: why an engine cannot use a
    pool (`mismatch`) and what it looks like placed on one (`placed`). Each is a function of
    the engines and the pool's name, class and claimability, derived when first asked into
    `tables`, which alike deployments may share across shapes (`PlacementMemo.on_cluster`).
    Mutable only in those tables; every value in them is frozen."""

    __slots__ = ("engines", "tables")

    def __init__(
        self,
        engines: tuple[EngineOnShape, ...],
        tables: tuple[dict[_PoolKey, tuple[Reason, ...]], dict[_PoolKey, PlacedEngine]]
        | None = None,
    ) -> None:
        self.engines = engines
        self.tables = tables if tables is not None else ({}, {})

    def mismatch(
        self, index: int, engine: Engine, pool: PoolLedger, shape: EngineOnClass
    ) -> tuple[Reason, ...]:
        """Why engine `index` cannot use `pool` at all, as a tuple of one reason (or none)."""
        claimable = self.engines[index].claimable
        key = (index, pool.pool.name, pool.class_id, claimable, None)
        table = self.tables[0]
        found = table.get(key)
        if found is None:
            reason = _first_mismatch(engine, pool, shape, claimable)
            found = table[key] = (reason,) if reason else ()
        return found

    def placed(
        self, index: int, engine: Engine, shape: EngineOnClass, pool: PoolLedger
    ) -> PlacedEngine:
        """Engine `index` as placed on `pool`."""
        shareable = _shareable(pool)
        key = (index, pool.pool.name, pool.class_id, (), shareable)
        table = self.tables[1]
        found = table.get(key)
        if found is None:
            stamp = shape.sized(shareable, pool.pool.name)
            if stamp is None:
                stamp = _stamp(engine, shape.matches, pool.pool.name)
            found = table[key] = _placed(stamp)
        return found


class PlacementMemo:
    """What placing computes per (engine or deployment, class of pool or cluster shape),
    capacity aside; and, for a caller that keeps it, each pool's ledger as built.

    Shared by every cluster with pools of a class and, when the caller keeps it, by later
    calls (memo.py): entries are keyed by the engine's or deployment's `Matcher.ref` (its
    declared signature, or within one call its key), never by identity; classes, shapes and
    explain profiles get ids by value, never given to another.

    Compiled deployments (`compile`): each deployment's `CompiledDeployment` (compile.py) is
    kept by its ref and compiled again when the call has a pool class it does not cover;
    `on_shape` derives and keeps, per (ref, cluster shape), what each engine may use there.

    Mutable: the memo itself (its entries), for one caller at a time; every value it keeps is
    frozen or, for ledgers, only copied from.

    Ledgers (`pool_ledger`, `pool_state`): owned by `PoolLedgers` (pool_ledgers.py, `kept`),
    which keeps them across calls only when `keeps_ledgers`.
    """

    __slots__ = (
        "_alike",
        "_classes",
        "_engines",
        "_gate_ids",
        "_next_profile_id",
        "_next_shape_id",
        "_on_cluster",
        "_profile_ids",
        "_shape_ids",
        "_tables",
        "alike_profiles",
        "compiled",
        "hosts",
        "kept",
        "matcher",
        "on_shapes",
        "profiles",
    )

    def __init__(self, *, keeps_ledgers: bool = True) -> None:
        self.matcher = Matcher()
        self._shape_ids: Generations[tuple[tuple[int, bool], ...], int] = Generations()
        self._next_shape_id = 0
        #: Per deployment (by `Matcher.ref`: its declared signature), its compiled matches
        #: (compile.py), asked again when this call has a class it does not cover.
        self.compiled: Generations[tuple[object, ...], CompiledDeployment] = Generations()
        #: Per (deployment ref, cluster shape): `CompiledDeployment.on_shape`, per engine.
        self.on_shapes: Generations[tuple[object, int], tuple[EngineOnShape, ...]] = Generations()
        #: For one call: the classes of its pools (id -> devices), and what equal engines
        #: matched on a class (`compile_deployment`'s `engines`).
        self._classes: dict[int, tuple[Device, ...]] = {}
        self._engines: dict[tuple[Engine, int], EngineOnClass] = {}
        #: For one call: `on_shape` per (engines, cluster shape), shared by equal engines.
        self._alike: dict[tuple[tuple[Engine, ...], int], tuple[EngineOnShape, ...]] = {}
        #: For one call: `on_cluster` per (deployment ref, shape), and its tables per ref.
        self._on_cluster: dict[tuple[object, int], Compiled] = {}
        self._tables: dict[
            tuple[object, ...],
            tuple[dict[_PoolKey, tuple[Reason, ...]], dict[_PoolKey, PlacedEngine]],
        ] = {}
        #: For one call: the explain profile id per (engines, cluster shape).
        self.alike_profiles: dict[tuple[tuple[Engine, ...], int], int] = {}
        #: For one call: ids of the gate profiles of its clusters (schedule.py), by value.
        self._gate_ids: dict[tuple[object, ...], int] = {}
        self.hosts: Generations[tuple[object, int], bool] = Generations()
        #: Per (deployment ref, cluster shape): the id of its explain profile (by value).
        self.profiles: Generations[tuple[object, int], int] = Generations()
        self._profile_ids: Generations[tuple[object, ...], int] = Generations()
        self._next_profile_id = 0
        #: Pool ledgers as built (kept across calls when `keeps_ledgers`) and final states.
        self.kept = PoolLedgers(keeps=keeps_ledgers)

    def advance(self) -> None:
        """A new call starts (see memo.py)."""
        self.kept.advance()
        self.matcher.advance()
        self._shape_ids.advance()
        self.compiled.advance()
        self._classes = {}
        self._engines = {}
        self._alike = {}
        self._on_cluster = {}
        self._tables = {}
        self.alike_profiles = {}
        self._gate_ids = {}
        self.on_shapes.advance()
        self.hosts.advance()
        self.profiles.advance()
        self._profile_ids.advance()

    def use_config(self, config: SchedulingConfig) -> None:
        """Ledgers are built with `config` in this call (`PoolLedgers.use_config`)."""
        self.kept.use_config(config)

    def pool_ledger(
        self, cluster: ClusterName, pool: Pool, config: SchedulingConfig, *, record: bool
    ) -> PoolLedger:
        """`PoolLedgers.pool_ledger`, noting the pool's class for this call's compiling."""
        return self.kept.pool_ledger(
            cluster, pool, config, self.matcher, self._classes, record=record
        )

    def pool_state(self, ledger: PoolLedger, observation: ObservationState) -> PoolState:
        """`PoolLedgers.pool_state`."""
        return self.kept.pool_state(ledger, observation)

    def compile(self, deployment: Deployment) -> CompiledDeployment:
        """The deployment compiled against this call's classes: the one kept by its
        signature while it covers them, else compiled again (`compile_deployment`)."""
        ref = self.matcher.ref(deployment)
        found = self.compiled.get(ref)
        if found is not None and found.covers(tuple(self._classes)):
            return found
        classes = tuple(PoolClass(i, devices) for i, devices in self._classes.items())
        return self.compiled.put(
            ref, compile_deployment(deployment, classes, engines=self._engines)
        )

    def on_shape(self, deployment: Deployment, ledger: ClusterLedger) -> tuple[EngineOnShape, ...]:
        """Per engine, the deployment against the cluster's shape (kept per shape). Within a
        call, deployments with equal engines (by value) share it: it is a function of the
        engines and the shape's classes only, so a thousand deployments of a few dozen
        shapes compile a few dozen."""
        memo_key = (self.matcher.ref(deployment), ledger.shape)
        found = self.on_shapes.get(memo_key)
        if found is None:
            alike_key = (deployment.engines, ledger.shape)
            found = self._alike.get(alike_key)
            if found is None:
                class_ids = tuple(p.class_id for p in ledger.pools)
                found = self.compile(deployment).on_shape(class_ids)
                self._alike[alike_key] = found
            self.on_shapes.put(memo_key, found)
        return found

    def on_cluster(self, deployment: Deployment, ledger: ClusterLedger) -> Compiled:
        """`on_shape` as a `Compiled` for `place_replica`: one per (deployment, shape) in a
        call, shared by deployments with equal engines."""
        ref = self.matcher.ref(deployment)
        key = (ref, ledger.shape)
        found = self._on_cluster.get(key)
        if found is None:
            tables = self._tables.get(ref)
            if tables is None:
                tables = self._tables[ref] = ({}, {})
            found = self._on_cluster[key] = Compiled(self.on_shape(deployment, ledger), tables)
        return found

    def gate_id(self, profile: tuple[object, ...]) -> int:
        """An id for a cluster's gate profile in this call, by value (from 1)."""
        return self._gate_ids.setdefault(profile, len(self._gate_ids) + 1)

    def profile_id(self, profile: tuple[object, ...]) -> int:
        """An id for an explain profile (`explain_profile`), by value: never given to another."""
        found = self._profile_ids.get(profile)
        if found is not None:
            return found
        self._next_profile_id += 1
        return self._profile_ids.put(profile, self._next_profile_id)

    def shape_id(self, shape: tuple[tuple[int, bool], ...]) -> int:
        found = self._shape_ids.get(shape)
        if found is not None:
            return found
        self._next_shape_id += 1
        return self._shape_ids.put(shape, self._next_shape_id)

    def size(self) -> int:
        """Entries held, matching's included."""
        return (
            self.matcher.size()
            + len(self._shape_ids)
            + len(self.compiled)
            + len(self.on_shapes)
            + len(self.hosts)
            + len(self.profiles)
            + len(self._profile_ids)
            + self.kept.size()
        )


#: How memos name an engine: its deployment's `Matcher.ref` and its index.
EngineRef = tuple[tuple[object, ...], int]


def _stamp(engine: Engine, matches: tuple[MemberMatch, ...], pool: PoolName) -> ReplicaEngine:
    return ReplicaEngine(
        name=engine.name,
        members=tuple(
            ReplicaMember(m.role, pool, m.worker_nodes, match.resolved, m.milli_cpu, m.memory)
            for m, match in zip(engine.members, matches, strict=True)
        ),
        copies=engine.copies,
        phase=engine.phase,
    )


def _shareable(pool: PoolLedger) -> tuple[int, int] | None:
    """The pool's shareable room (`PoolObservation.shareable`), what proportional requests
    divide."""
    observation = pool.pool.observation
    return observation.shareable if observation is not None else None


def _first_mismatch(
    engine: Engine, pool: PoolLedger, shape: EngineOnClass, claimable: tuple[bool, ...]
) -> Reason | None:
    for member, match, is_claimable in zip(engine.members, shape.matches, claimable, strict=True):
        if not match.is_match:
            return diagnosis.member_unmatched(
                pool.pool.name, member.role.value, match.unmatched_request, match.is_selector_miss
            )
        if is_claimable and not match.is_claiming:
            return diagnosis.member_stranded(pool.pool.name, member.role.value)
    return None


def can_ever_host(ledger: ClusterLedger, deployment: Deployment, memo: PlacementMemo) -> bool:
    """Whether every engine has a pool it could use if the pool were empty (capacity aside).

    Matching does not change within a round, so a cluster that fails this never needs another
    fill attempt for the deployment (it is still diagnosed in full).
    """
    ref = memo.matcher.ref(deployment)
    memo_key = (ref, ledger.shape)
    found = memo.hosts.get(memo_key)
    if found is not None:
        return found
    return memo.hosts.put(memo_key, _can_host(ledger, deployment, ref, memo))


def _can_host(
    ledger: ClusterLedger, deployment: Deployment, ref: tuple[object, ...], memo: PlacementMemo
) -> bool:
    for on_shape in memo.on_shape(deployment, ledger):
        if not any(on_shape.claimable) or not any(on_shape.usable):
            return False
    return True


def _unusable_verdict(
    ledger: ClusterLedger,
    engine: Engine,
    index: int,
    pool: PoolLedger,
    shape: EngineOnClass,
    compiled: Compiled,
    profile: int | None,
) -> PoolVerdict:
    """The verdict on a pool the engine cannot use; with the deployment's explain `profile`,
    kept on the cluster's ledger per (pool, its version) for every deployment of it."""
    memo_key = (pool.pool.name, pool.version, profile, index)
    if profile is not None:
        found = ledger.unusable.get(memo_key)
        if found is not None:
            return found
    mismatch = compiled.mismatch(index, engine, pool, shape)
    reasons = (*mismatch, *pool.reasons) if pool.reasons else mismatch
    verdict = PoolVerdict(
        pool.pool.name, engine.name, pool.accounting, False, reasons, pool.summary()
    )
    if profile is not None:
        ledger.unusable[memo_key] = verdict
    return verdict


@dataclass(slots=True)
class _Trial:
    """What a replica's engines placed so far take, per pool: pods (free-GPU) or nodes."""

    units: dict[PoolName, list[Unit]] = field(default_factory=dict)
    nodes: dict[PoolName, int] = field(default_factory=dict)
    #: The deployment's explain profile, when the caller knows it (verdicts are kept by it).
    profile: int | None = None


#: An engine tried on one pool: the fit (or nodes taken), the units fitted, the refusal.
_Tried = tuple[FitResult | int, list[Unit], Reason | None]


def _try_pool(
    pool: PoolLedger,
    shape: EngineOnClass,
    trial: _Trial,
    policy: NodeChoicePolicy,
    owner: str,
    explain: bool,
) -> _Tried | None:
    """The engine on `pool` on top of the trial; None when it does not fit and the caller
    does not explain (then the reason is not built)."""
    name = pool.pool.name
    if pool.is_free_gpu:
        earlier = trial.units.get(name)
        mine = shape.units_on(True, _shareable(pool)) if pool.host else shape.units
        units = order_units([*earlier, *mine]) if earlier else list(mine)
        fitted = _fit(pool, units, policy, owner)
        if fitted.failure is None:
            return fitted, units, None
        if not explain:
            return None
        return fitted, units, _refusal(pool, units, fitted.failure, policy)
    nodes = trial.nodes.get(name, 0) + shape.node_cost
    if nodes <= pool.free_nodes:
        return nodes, [], None
    if not explain:
        return None
    return nodes, [], diagnosis.insufficient_nodes(pool, nodes)


#: The pool an engine goes to: its ledger, its shape there, the units and the outcome.
_Chosen = tuple[PoolLedger, EngineOnClass, list[Unit], FitResult | int]


def _place_engine(
    ledger: ClusterLedger,
    engine: Engine,
    index: int,
    compiled: Compiled,
    trial: _Trial,
    owner: str,
    verdicts: list[PoolVerdict] | None,
    avoid: Mapping[PoolName, Reason],
) -> _Chosen | ReplicaFit:
    """The first pool (published order) that takes the engine, or the failed `ReplicaFit`.
    With `verdicts` (explaining), every pool is tried and given a verdict. A pool in `avoid`
    (re-placement backoff) is not tried: its verdict is the reason given there."""
    explain = verdicts is not None
    on_shape = compiled.engines[index]
    chosen: _Chosen | None = None
    capacity_reasons: list[Reason] = []
    refused = False
    for pool, shape, is_usable in zip(ledger.pools, on_shape.shapes, on_shape.usable, strict=True):
        if not is_usable:
            if verdicts is not None:
                verdicts.append(
                    _unusable_verdict(ledger, engine, index, pool, shape, compiled, trial.profile)
                )
            continue
        avoided = avoid.get(pool.pool.name) if avoid else None
        if avoided is not None:
            capacity_reasons.append(avoided)
            if verdicts is not None:
                verdicts.append(
                    PoolVerdict(pool.pool.name, engine.name, pool.accounting, False, (avoided,))
                )
            continue
        policy = pool.choice(ledger.policy) if pool.host else ledger.policy
        tried = _try_pool(pool, shape, trial, policy, owner, explain)
        if tried is None:
            refused = True
            continue
        outcome, units, refusal = tried
        if refusal is None and chosen is None:
            chosen = (pool, shape, units, outcome)
        if refusal is not None:
            capacity_reasons.append(refusal)
        if verdicts is not None:
            verdicts.append(
                PoolVerdict(
                    pool.pool.name,
                    engine.name,
                    pool.accounting,
                    refusal is None,
                    (*((refusal,) if refusal else ()), *pool.reasons),
                    pool.summary(),
                )
            )
        elif chosen is not None:
            break
    if chosen is not None:
        return chosen
    if refused:
        # Not explaining: the caller only needs to know it does not fit.
        return ReplicaFit(None)
    reasons = _unique_codes(capacity_reasons) or (
        diagnosis.no_matching_pool(engine.name, len(ledger.pools)),
    )
    return ReplicaFit(None, reasons=reasons, verdicts=tuple(verdicts or ()))


def place_replica(
    ledger: ClusterLedger,
    deployment: Deployment,
    compiled: Compiled,
    *,
    owner: str = "",
    explain: bool = False,
    avoid: Mapping[PoolName, Reason] | None = None,
    profile: int | None = None,
) -> ReplicaFit:
    """One replica of the deployment on the cluster's ledger (not committed: `commit`),
    never on a pool in `avoid` (re-placement backoff; its reason becomes that pool's verdict).
    `profile`: its `explain_profile` on this cluster, when known (explaining keeps verdicts
    on pools by it). `compiled`: the deployment's compiled matches on this cluster's shape
    (`PlacementMemo.on_cluster`)."""
    trial = _Trial(profile=profile)
    commits: dict[PoolName, FitResult | int] = {}
    placed: list[PlacedEngine] = []
    verdicts: list[PoolVerdict] | None = [] if explain else None
    for i, engine in enumerate(deployment.engines):
        on_shape = compiled.engines[i]
        if on_shape.is_matched and not any(on_shape.claimable):
            reason = diagnosis.engine_cannot_claim(engine.name, len(ledger.pools))
            if verdicts is not None:
                verdicts.extend(
                    PoolVerdict(p.pool.name, engine.name, p.accounting, False, (reason,))
                    for p in ledger.pools
                )
            return ReplicaFit(None, reasons=(reason,), verdicts=tuple(verdicts or ()))
        chosen = _place_engine(ledger, engine, i, compiled, trial, owner, verdicts, avoid or {})
        if isinstance(chosen, ReplicaFit):
            return chosen
        pool, shape, units, outcome = chosen
        name = pool.pool.name
        if isinstance(outcome, int):
            trial.nodes[name] = outcome
        else:
            trial.units[name] = units
        commits[name] = outcome
        placed.append(compiled.placed(i, engine, shape, pool))
    return ReplicaFit(tuple(placed), commits, verdicts=tuple(verdicts or ()))


#: What explaining a replica on one cluster says (`explain_cluster`): whether it fits as far as
#: matching and capacity go, the reasons when not, and a verdict per (engine, pool).
Explained = tuple[bool, tuple[Reason, ...], tuple[PoolVerdict, ...]]


def explain_profile(ledger: ClusterLedger, deployment: Deployment, memo: PlacementMemo) -> int:
    """The id of everything `place_replica(explain=True)` reads of the deployment on a cluster
    of this shape: per engine its name, its members' roles and what it matches on each pool
    (`EngineOnShape`: matches, units, node costs). Deployments of one profile get the same
    verdicts on a cluster in one state, so a thousand clusters are explained once per profile,
    not once per deployment."""
    ref = memo.matcher.ref(deployment)
    memo_key = (ref, ledger.shape)
    found = memo.profiles.get(memo_key)
    if found is not None:
        return found
    # The profile is a function of the engines and the shape: deployments with equal engines
    # share it within a call (hashing the engines costs less than hashing what they match).
    alike_key = (deployment.engines, ledger.shape)
    found = memo.alike_profiles.get(alike_key)
    if found is None:
        profile = tuple(
            (engine.name, tuple(m.role for m in engine.members), on_shape)
            for engine, on_shape in zip(
                deployment.engines, memo.on_shape(deployment, ledger), strict=True
            )
        )
        found = memo.alike_profiles[alike_key] = memo.profile_id(profile)
    return memo.profiles.put(memo_key, found)


def explain_cluster(
    ledger: ClusterLedger,
    deployment: Deployment,
    memo: PlacementMemo,
    profiles: dict[int, int] | None = None,
) -> Explained:
    """`place_replica(..., explain=True)` as `Explained`, computed once per (explain profile,
    cluster version) and kept on the cluster's ledger: a plain function of the two.
    `profiles`: the deployment's profile per cluster shape, filled as they are asked."""
    return _explained(ledger, deployment, memo, _profile(ledger, deployment, memo, profiles))


def ungated_verdict(
    ledger: ClusterLedger,
    deployment: Deployment,
    memo: PlacementMemo,
    profiles: dict[int, int],
    notes: tuple[Reason, ...],
) -> ClusterVerdict:
    """The cluster's verdict for a deployment nothing gates there: `explain_cluster`'s, with
    `notes` (informational reasons of the cluster, the same all call) after its reasons; kept
    per (explain profile, cluster version) on the ledger, so deployments of one profile share
    it while the cluster is unchanged."""
    profile = _profile(ledger, deployment, memo, profiles)
    found = ledger.verdicts.get(profile)
    if found is not None and found[0] == ledger.version:
        return found[1]
    fits, reasons, pools = _explained(ledger, deployment, memo, profile)
    verdict = ClusterVerdict(
        ledger.cluster.name, fits, (*reasons, *notes) if notes else reasons, pools
    )
    ledger.verdicts[profile] = (ledger.version, verdict)
    return verdict


def _profile(
    ledger: ClusterLedger,
    deployment: Deployment,
    memo: PlacementMemo,
    profiles: dict[int, int] | None,
) -> int:
    profile = profiles.get(ledger.shape) if profiles is not None else None
    if profile is None:
        profile = explain_profile(ledger, deployment, memo)
        if profiles is not None:
            profiles[ledger.shape] = profile
    return profile


def _explained(
    ledger: ClusterLedger, deployment: Deployment, memo: PlacementMemo, profile: int
) -> Explained:
    found = ledger.explained.get(profile)
    if found is not None and found[0] == ledger.version:
        return found[1]
    compiled = memo.on_cluster(deployment, ledger)
    fitted = place_replica(ledger, deployment, compiled, explain=True, profile=profile)
    explained = (fitted.engines is not None, fitted.reasons, fitted.verdicts)
    ledger.explained[profile] = (ledger.version, explained)
    return explained


def commit(ledger: ClusterLedger, fitted: ReplicaFit) -> None:
    """Apply a successful `place_replica` to the cluster's ledger (bumps its version)."""
    ledger.version += 1
    for name, outcome in fitted.commits.items():
        pool = ledger.by_name[name]
        if isinstance(outcome, int):
            pool.take_nodes(outcome)
        else:
            pool.set_free(dict(outcome.free))
            if pool.log is not None:
                pool.log.extend(outcome.assignments)
