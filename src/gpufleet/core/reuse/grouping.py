"""A snapshot's replicas grouped by deployment, kept from one `schedule` call to the next by
the replicas' declared signatures (`Replica.signature`), so that a call on a fleet where few
replicas changed regroups only the deployments whose replicas did.

Model.
- A replica's signature names its content (the caller's promise: equal signatures, equal
  replicas), so the deployment a signature belongs to never changes, and a deployment whose
  replicas have the same set of signatures as in the previous call has equal replicas.
- `regroup(replicas, last)` keeps, per deployment key (namespace, name), the signatures of its
  replicas; against the previous call's grouping it asks only for the signatures added and
  removed (set operations made in C, no Python code per replica) and regroups the
  deployments they name (`touched`). A grouping is made only when every replica declares a
  signature and no two declare the same one; else None, and the caller groups plainly.
- `group(key)` is that deployment's replicas, those grouping the snapshot afresh gives
  (tests/core/test_grouping.py): in snapshot order when two share a name (retaining keeps
  the first of one identity), else in an order of their own (retaining sorts them by name);
  `orphans(keys)` the replicas whose deployment is not among `keys`, in snapshot order.

Keyed by signatures and keys, never by identity; nothing here is mutated once made.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from gpufleet.core.model import Replica

#: A deployment as a tuple of strings (namespace, name): hashes and compares in C.
DeploymentRef = tuple[str, str]

_SIGNATURE: Final = operator.attrgetter("signature")
_DEPLOYMENT_OF: Final = operator.attrgetter("deployment.namespace", "deployment.name")


@dataclass(frozen=True, slots=True)
class Grouping:
    """One snapshot's replicas, by declared signature and by deployment."""

    #: The snapshot's replicas, in its order.
    replicas: tuple[Replica, ...]
    #: Every replica's signature, in snapshot order.
    signatures: tuple[tuple[object, ...], ...]
    #: The replica of each signature (equal to the snapshot's, by the caller's promise).
    by_signature: dict[tuple[object, ...], Replica]
    known: frozenset[tuple[object, ...]]
    #: Per deployment (of the snapshot's replicas), its replicas' signatures.
    members: dict[DeploymentRef, tuple[tuple[object, ...], ...]]
    #: The deployments whose replicas' signatures differ from the previous grouping's; None
    #: when there was none to compare with (then every deployment counts as touched).
    touched: frozenset[DeploymentRef] | None

    def group(self, key: DeploymentRef) -> list[Replica]:
        """The replicas of deployment `key`: in snapshot order when two share a name (their
        order then matters: retaining keeps the first of one identity), else in the order
        they joined the grouping (retaining sorts them by name)."""
        members = self.members.get(key)
        if not members:
            return []
        group = list(map(self.by_signature.__getitem__, members))
        if len(group) > 1 and len({r.name for r in group}) < len(group):
            return [r for r in self.replicas if _DEPLOYMENT_OF(r) == key]
        return group

    def orphans(self, keys: Collection[DeploymentRef]) -> list[Replica]:
        """The replicas whose deployment is not one of `keys`, in snapshot order."""
        gone = self.members.keys() - keys
        if not gone:
            return []
        return [r for r in self.replicas if _DEPLOYMENT_OF(r) in gone]


def regroup(replicas: tuple[Replica, ...], last: Grouping | None) -> Grouping | None:
    """`replicas` grouped by deployment, from `last` (the previous call's grouping) where its
    signatures say the replicas are the same; None when a replica declares no signature or
    two declare the same one."""
    signatures = tuple(map(_SIGNATURE, replicas))
    if last is not None and signatures == last.signatures:
        return Grouping(
            replicas, signatures, last.by_signature, last.known, last.members, frozenset()
        )
    by_signature = dict(zip(signatures, replicas, strict=True))
    if len(by_signature) != len(signatures) or not all(signatures):
        return None
    known = frozenset(by_signature)  # from the dict: no signature is hashed again
    if last is None:
        grouped: dict[DeploymentRef, list[tuple[object, ...]]] = {}
        for signature, key in zip(signatures, map(_DEPLOYMENT_OF, replicas), strict=True):
            grouped.setdefault(key, []).append(signature)
        members = {key: tuple(found) for key, found in grouped.items()}
        return Grouping(replicas, signatures, by_signature, known, members, None)
    moved: dict[DeploymentRef, list[tuple[object, ...]]] = {}
    for signature in known - last.known:
        moved.setdefault(_DEPLOYMENT_OF(by_signature[signature]), []).append(signature)
    for signature in last.known - known:
        moved.setdefault(_DEPLOYMENT_OF(last.by_signature[signature]), [])
    members = dict(last.members)
    for key, new in moved.items():
        kept = [s for s in members.get(key, ()) if s in by_signature]
        kept.extend(new)
        if kept:
            members[key] = tuple(kept)
        else:
            members.pop(key, None)
    return Grouping(replicas, signatures, by_signature, known, members, frozenset(moved))
