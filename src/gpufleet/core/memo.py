"""Memos that may outlive one `schedule` call, bounded by what the last two calls used.

Why. The hub controller calls `schedule` every 10 s on a fleet that mostly does not change, and
its parse cache hands out the same Deployment and Replica objects step after step while their
manifests are unchanged. What the core derives from such objects alone (matching a member
against a class of pool, re-stamping a retained replica) need not be derived again.

Model.
- An entry is keyed by value (small tuples of ints and names) and by the identity (`id`) of
  the objects it was computed from; it *holds* those objects, so no other object can take
  their id while the entry lives, and an identity key can never answer for a different object.
- Two generations: `advance` (once per call, before it reads anything) makes the current
  generation the previous one. A lookup that finds an entry in the previous generation moves
  it to the current one; anything else is dropped at the next `advance`. So a memo holds at
  most what the last two calls used, and a day of deployments coming and going leaves only
  the live ones behind.

Invariant: a memo changes how long a call takes, never what it returns; entries are never
changed once stored (their values are frozen or never mutated by readers).
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
        self._current: dict[K, tuple[V, object]] = {}
        self._previous: dict[K, tuple[V, object]] = {}

    def get(self, key: K) -> tuple[V, object] | None:
        """The entry `(value, held)` stored for `key`, else None (so a value may be None)."""
        entry = self._current.get(key)
        if entry is None:
            entry = self._previous.get(key)
            if entry is None:
                return None
            self._current[key] = entry
        return entry

    def put(self, key: K, value: V, held: object = None) -> V:
        """Store `value`; `held` is kept alive with it (the objects whose ids are in `key`)."""
        self._current[key] = (value, held)
        return value

    def advance(self) -> None:
        """A new call starts: what neither it nor the previous call uses will be dropped."""
        self._previous = self._current
        self._current = {}

    def __len__(self) -> int:
        return len(self._current.keys() | self._previous.keys())
