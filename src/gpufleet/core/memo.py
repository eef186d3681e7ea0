"""Memos that may outlive one `schedule` call, bounded by what the last two calls used.

Why. The hub controller calls `schedule` whenever a scheduling input changed, on a fleet that
mostly does not change, and declares what identifies each input's content (its signature:
uid and generation or resourceVersion). What the core derives from an input alone (matching
a member against a class of pool, re-stamping a retained replica) need not be derived again
while its signature is the same.

Model.
- An entry is keyed by value: small tuples of ints and names, and the *signature* an input
  declares (`Deployment.signature`: e.g. an object's uid and generation, given by the caller;
  or, for an input that declares none, a key that names it within one call only). Never by
  identity.
- Two generations: `advance` (once per call, before it reads anything) makes the current
  generation the previous one. A lookup that finds an entry in the previous generation moves
  it to the current one; anything else is dropped at the next `advance`. So a memo holds at
  most what the last two calls used, and a day of deployments coming and going leaves only
  the live ones behind.
- Entries are stored without a wrapper object per entry: every object that survives a call
  counts towards the garbage collector's next collection, and in a large process a full
  collection costs more than the lookups a memo saves.

Invariant: a memo changes how long a call takes, never what it returns; values are never
changed once stored (they are frozen, or never mutated by readers), and never None.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Generations(Generic[K, V]):
    """A dictionary that keeps only what the current or the previous call used."""

    __slots__ = ("_current", "_previous")

    def __init__(self) -> None:
        self._current: dict[K, V] = {}
        self._previous: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """The value stored for `key`, else None (moved to the current generation)."""
        found = self._current.get(key)
        if found is None:
            found = self._previous.get(key)
            if found is None:
                return None
            self._current[key] = found
        return found

    def carry(self, key: K) -> V | None:
        """What the previous call used or stored for `key`, moved to this call as by `get`;
        None when this call has already used `key` (then `get` answers) or the previous
        call did not. For a caller whose entries the previous call checked: a carried entry
        was valid then."""
        if key in self._current:
            return None
        found = self._previous.get(key)
        if found is not None:
            self._current[key] = found
        return found

    def put(self, key: K, value: V) -> V:
        """Store `value` (not None)."""
        self._current[key] = value
        return value

    def advance(self) -> None:
        """A new call starts: what neither it nor the previous call uses will be dropped."""
        self._previous, self._current = self._current, {}

    def __len__(self) -> int:
        return len(self._current.keys() | self._previous.keys())
