"""`PoolLedgers`: where a call's pool ledgers come from and its final pool states go (what
`PlacementMemo` owns of ledgers, split out of it).

Model. A pool's ledger as built is a function of the pool, its cluster's name, its class and
the config (capacity.py). With `keeps` (a caller that keeps its memo across calls), it is kept
per declared `Pool.signature` with the class key it was built for, and a later call that sees
a pool of that signature gets a copy instead of reading devices and buckets again; the config
is compared once per call (`use_config`): another config drops every kept ledger. The
`PoolState` of a copy that nothing charged or placed on is the kept ledger's, per observation
state. Within a call: what a ledger reads of a class's devices (`class_facts`) once per class,
and equal histogram buckets of the pool states shared (frozen values).

Mutable: its tables, for one caller at a time; every value kept is frozen or, for ledgers,
only copied from. Bounded (memo.py): a call keeps what it or the previous call used.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from gpufleet.core.capacity import ClassFacts, PoolLedger, Vector, class_facts
from gpufleet.core.decision import FreeBucket, ObservationState, PoolState
from gpufleet.core.matching import ClassKey, Matcher
from gpufleet.core.memo import Generations
from gpufleet.core.model import ClusterName, Device, DriverName, Pool, SchedulingConfig


class PoolLedgers:
    """Pool ledgers as built (kept across calls by `Pool.signature` when `keeps`) and the
    final pool states of unchanged copies (module docstring)."""

    __slots__ = ("_buckets", "_config", "_facts", "keeps", "ledgers", "states")

    def __init__(self, *, keeps: bool) -> None:
        #: False for a memo made for one call: it would keep ledgers no call reads.
        self.keeps = keeps
        #: Per Pool signature (`Pool.signature`; a pool without one is not kept): its ledger
        #: as built (never used by a call, only copied) and the class key its class id is for.
        self.ledgers: Generations[tuple[object, ...], tuple[PoolLedger, ClassKey]] = Generations()
        #: Per (kept ledger's pool signature, cluster, observation state): its pool state.
        self.states: Generations[tuple[object, ...], PoolState] = Generations()
        self._config: SchedulingConfig | None = None
        #: For one call: what a ledger reads of a class's devices (`class_facts`), by class id.
        self._facts: dict[int, ClassFacts] = {}
        #: For one call: equal histogram buckets of its pool states, shared (frozen values).
        self._buckets: dict[tuple[DriverName, ...], dict[Vector, dict[int, FreeBucket]]] = {}

    def advance(self) -> None:
        """A new call starts (see memo.py)."""
        self._buckets = {}
        self._facts = {}
        self.ledgers.advance()
        self.states.advance()

    def use_config(self, config: SchedulingConfig) -> None:
        """Ledgers are built with `config` in this call: kept ones built with another go."""
        if config is not self._config and config != self._config:
            self.ledgers = Generations()
            self.states = Generations()
        self._config = config

    def pool_ledger(
        self,
        cluster: ClusterName,
        pool: Pool,
        config: SchedulingConfig,
        matcher: Matcher,
        classes: MutableMapping[int, tuple[Device, ...]],
        *,
        record: bool,
    ) -> PoolLedger:
        """A ledger for `pool` of `cluster` as built from it with `config` (the one given to
        `use_config`): a copy of the kept one when there is one for this object. Notes the
        pool's class in `classes` (id -> devices)."""
        signature = pool.signature
        found = self.ledgers.get(signature) if signature else None
        if found is not None:
            kept, key = found
            if kept.cluster == cluster and matcher.has_class(key, kept.class_id):
                classes.setdefault(kept.class_id, kept.pool.devices)
                return kept.copy(record=record)
        key, class_id = matcher.class_of(pool.devices)
        classes.setdefault(class_id, pool.devices)
        facts = self._facts.get(class_id)
        if facts is None:
            facts = self._facts[class_id] = class_facts(pool.devices)
        if not self.keeps or not signature:
            return PoolLedger(cluster, pool, class_id, config, record=record, facts=facts)
        kept = PoolLedger(cluster, pool, class_id, config, facts=facts)
        self.ledgers.put(signature, (kept, key))
        return kept.copy(record=record)

    def pool_state(self, ledger: PoolLedger, observation: ObservationState) -> PoolState:
        """`ledger.state(observation)`, shared with every unchanged copy of one kept ledger."""
        origin = ledger.origin
        if origin is None or ledger.version != 0:
            return ledger.state(observation, self._buckets)
        memo_key = (origin.pool.signature, origin.cluster, origin.class_id, observation)
        found = self.states.get(memo_key)
        if found is None:
            found = self.states.put(memo_key, ledger.state(observation, self._buckets))
        return found

    def size(self) -> int:
        """Entries held."""
        return len(self.ledgers) + len(self.states)
