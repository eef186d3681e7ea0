"""The claim index of `FreeDeviceTable`: the ResourceClaims, the allocated ones' effects on the
nodes (devices taken, allocation times, poison), which DRA pools each reads, and their clock
(issue 24 section 3: the second of the table's four collaborators)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.agent.model import Found, RawObject
from gpufleet.agent.reads import (
    ClaimEffect,
    ClaimInfo,
    DraKey,
    DraPool,
    Inventory,
    claim_effect,
    claim_pools,
    read_claim,
)
from gpufleet.agent.table_nodes import NodeInfos

_Key = tuple[str, str]


@dataclass(slots=True)
class _Claim:
    """An allocated claim in the table: its read, object, effect and allocation time."""

    info: ClaimInfo
    obj: RawObject
    effect: ClaimEffect
    time: datetime


class ClaimIndex:
    """The claims by key; each allocated claim's effect counted on the node infos."""

    def __init__(
        self,
        nodes: NodeInfos,
        inventory: Inventory,
        set_found: Callable[[tuple[str, object], tuple[Found, ...]], None],
    ) -> None:
        self._nodes = nodes
        self._inventory = inventory
        self._set_found = set_found
        self.claims: dict[_Key, ClaimInfo] = {}
        self._allocated_claims: dict[_Key, _Claim] = {}
        self._by_pool: dict[DraKey, set[_Key]] = {}
        #: Allocated claims whose results cannot be read (their effect may read any DRA pool).
        self._irregular: set[_Key] = set()
        #: Allocated claims without a uid: their time is always `now`.
        self.uidless: set[_Key] = set()
        self._device_claims: dict[tuple[str, str, str], int] = {}
        self._uids: dict[str, int] = {}
        #: uid -> allocation time, of the allocated claims with a uid.
        self.clock: dict[str, datetime] = {}
        #: (namespace, name) -> allocation time, of the allocated claims.
        self.allocated: dict[_Key, datetime] = {}
        #: Claims whose allocation time changed since the last snapshot.
        self.times_moved: set[_Key] = set()

    def apply(
        self,
        pending: Mapping[_Key, RawObject | None],
        now: datetime,
        prev_clock: Mapping[str, datetime],
    ) -> None:
        """Take the claims' new versions (None: deleted)."""
        for key, obj in pending.items():
            info = read_claim(obj) if obj is not None else None
            before = self.claims.get(key)
            if info is not None and info == before and (not info[1] or info[3] is not None):
                continue  # the same read (a status write that left the allocation alone)
            held = self._allocated_claims.pop(key, None)
            if held is not None:
                self._forget_claim(key, held)
            if info is None:
                self.claims.pop(key, None)
                continue
            self.claims[key] = info
            if info[1]:
                assert obj is not None
                self._add_claim(
                    key, info, obj, now if info[2] is None else prev_clock.get(info[2], now)
                )

    def reread_pools(self, made: Mapping[DraKey, DraPool | None]) -> None:
        """Put the DRA pools `made` read again into the inventory; the claims that read them
        are counted again over it."""
        inv = self._inventory
        dependents = set(self._irregular)
        for key in made:
            dependents |= self._by_pool.get(key, set())
        claims = [self._allocated_claims[k] for k in sorted(dependents)]
        for claim in claims:
            self._count_effect(claim, -1)
        for key, pool in made.items():
            self._nodes.touch(inv.remove(key))
            self._set_found(("pool", key), pool.found if pool is not None else ())
            if pool is not None:
                self._nodes.touch(inv.add(pool))
        for claim in claims:
            claim.effect = claim_effect(claim.info, claim.obj, inv)
            self._count_effect(claim, 1)

    def retime(self, now: datetime) -> None:
        """Stamp the uidless claims `now` (their time is always the call's)."""
        for key in sorted(self.uidless):
            claim = self._allocated_claims[key]
            self._count_effect(claim, -1)
            claim.time = now
            self._count_effect(claim, 1)
            if claim.info[4] is None:
                self._set_time(key, now)

    def _add_claim(self, key: _Key, info: ClaimInfo, obj: RawObject, t: datetime) -> None:
        uid = info[2]
        claim = _Claim(info, obj, claim_effect(info, obj, self._inventory), t)
        self._allocated_claims[key] = claim
        self._count_effect(claim, 1)
        pools = claim_pools(info)
        if pools is None:
            self._irregular.add(key)
        else:
            for pool in pools:
                self._by_pool.setdefault(pool, set()).add(key)
        if uid is None:
            self.uidless.add(key)
        else:
            self._uids[uid] = self._uids.get(uid, 0) + 1
            self.clock[uid] = t
        if info[4] is None:  # else its pods cannot use it yet: not counted allocated
            self._set_time(key, t)

    def _forget_claim(self, key: _Key, claim: _Claim) -> None:
        self._count_effect(claim, -1)
        pools = claim_pools(claim.info)
        if pools is None:
            self._irregular.discard(key)
        else:
            for pool in pools:
                holders = self._by_pool[pool]
                holders.discard(key)
                if not holders:
                    del self._by_pool[pool]
        uid = claim.info[2]
        if uid is None:
            self.uidless.discard(key)
        else:
            n = self._uids[uid] - 1
            if n:
                self._uids[uid] = n
            else:
                del self._uids[uid], self.clock[uid]
        self._set_time(key, None)

    def _set_time(self, key: _Key, t: datetime | None) -> None:
        if self.allocated.get(key) == t:
            return
        if t is None:
            del self.allocated[key]
        else:
            self.allocated[key] = t
        self.times_moved.add(key)

    def _count_effect(self, claim: _Claim, by: int) -> None:
        effect, t = claim.effect, claim.time
        counts = self._device_claims
        nodes = self._nodes
        moved: list[str] = []
        for dev, holder in effect.devices:
            n = counts.get(dev, 0) + by
            if n:
                counts[dev] = n
            else:
                del counts[dev]
            if (n == 1 and by > 0) or (n == 0 and by < 0):
                _add(nodes.entry(holder).taken, dev[0], by)
        for node in effect.touched:
            _add(nodes.entry(node).times, t, by)
            moved.append(node)
        for node, driver in effect.poison:
            _add(nodes.entry(node).poison, driver, by)
        nodes.touch(moved)
        nodes.touch(n for n, _ in effect.poison)
        if effect.found:
            source = ("claim", claim.info[0])
            self._set_found(source, effect.found if by > 0 else ())


def _add(counts: dict[Any, int], key: Any, by: int) -> None:
    n = counts.get(key, 0) + by
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)
