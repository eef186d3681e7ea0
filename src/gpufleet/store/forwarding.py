"""`ForwardingStore`: a `Store` that hands every call to another one.

The simulator's views of the hub (an agent's link that a partition cuts, a controller that
sees no observations) and the tests' lagging cache are each a store that changes one or two
things about another; they subclass this and override only those.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.store.port import Change, Kind, Obj, Store


class ForwardingStore:
    """Forwards every `Store` call to `inner`, after `before_call()` (a no-op here)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def before_call(self) -> None:
        """Runs before every forwarded call; raise to refuse it (e.g. a partition)."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        self.before_call()
        return self.inner.get(kind, name, namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        self.before_call()
        return self.inner.list(kind, namespace, label_selector)

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> Sequence[Mapping[str, Any]]:
        self.before_call()
        return self.inner.view(kind, namespace, label_selector)

    def create(self, obj: Obj) -> Obj:
        self.before_call()
        return self.inner.create(obj)

    def update(self, obj: Obj) -> Obj:
        self.before_call()
        return self.inner.update(obj)

    def patch_status(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Mapping[str, Any]:
        self.before_call()
        return self.inner.patch_status(kind, name, namespace, status, resource_version)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self.before_call()
        self.inner.delete(kind, name, namespace)

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        self.before_call()
        return self.inner.changes(cursor, kinds)
