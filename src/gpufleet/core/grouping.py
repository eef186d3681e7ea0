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
- `group(key)` is that deployment's replicas in snapshot order, exactly what grouping the
  snapshot afresh gives (tests/core/test_grouping.py); `orphans(keys)` the replicas whose
  deployment is not among `keys`, in snapshot order.

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

    replicas: tuple[Replica, ...]
    #: Every replica's signature, in snapshot order.
    signatures: tuple[tuple[object, ...], ...]
    #: Each signature's position in the snapshot.
    positions: dict[tuple[object, ...], int]
    #: Per deployment (of the snapshot's replicas), its replicas' signatures (in any order).
    members: dict[DeploymentRef, tuple[tuple[object, ...], ...]]
    #: The deployments whose replicas' signatures differ from the previous grouping's; None
    #: when there was none to compare with (then every deployment counts as touched).
    touched: frozenset[DeploymentRef] | None

    def group(self, key: DeploymentRef) -> list[Replica]:
        """The replicas of deployment `key`, in snapshot order."""
        members = self.members.get(key)
        if not members:
            return []
        replicas = self.replicas
        return [replicas[i] for i in sorted(map(self.positions.__getitem__, members))]

    def orphans(self, keys: Collection[DeploymentRef]) -> list[Replica]:
        """The replicas whose deployment is not one of `keys`, in snapshot order."""
        gone = self.members.keys() - keys
        if not gone:
            return []
        positions = self.positions
        at = sorted(positions[s] for key in gone for s in self.members[key])
        return [self.replicas[i] for i in at]


def regroup(replicas: tuple[Replica, ...], last: Grouping | None) -> Grouping | None:
    """`replicas` grouped by deployment, from `last` (the previous call's grouping) where its
    signatures say the replicas are the same; None when a replica declares no signature or
    two declare the same one."""
    signatures = tuple(map(_SIGNATURE, replicas))
    if last is not None and signatures == last.signatures:
        return Grouping(replicas, signatures, last.positions, last.members, frozenset())
    positions = dict(zip(signatures, range(len(signatures)), strict=True))
    if len(positions) != len(signatures) or not all(signatures):
        return None
    if last is None:
        grouped: dict[DeploymentRef, list[tuple[object, ...]]] = {}
        for signature, key in zip(signatures, map(_DEPLOYMENT_OF, replicas), strict=True):
            grouped.setdefault(key, []).append(signature)
        members = {key: tuple(found) for key, found in grouped.items()}
        return Grouping(replicas, signatures, positions, members, None)
    added = positions.keys() - last.positions.keys()
    removed = last.positions.keys() - positions.keys()
    moved: dict[DeploymentRef, list[tuple[object, ...]]] = {}
    for signature in added:
        moved.setdefault(_DEPLOYMENT_OF(replicas[positions[signature]]), []).append(signature)
    before = last.replicas
    for signature in removed:
        moved.setdefault(_DEPLOYMENT_OF(before[last.positions[signature]]), [])
    members = dict(last.members)
    for key, new in moved.items():
        kept = [s for s in members.get(key, ()) if s in positions]
        kept.extend(new)
        if kept:
            members[key] = tuple(kept)
        else:
            members.pop(key, None)
    return Grouping(replicas, signatures, positions, members, frozenset(moved))
