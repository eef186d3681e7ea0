"""What the API server lets an update change in a Pod's spec (pod scheduling readiness,
KEP-3521, and mutable pod scheduling directives, KEP-3838; both GA in Kubernetes 1.30).

A Pod's spec is immutable but for a few fields. The ones modelled here:

- `schedulingGates` can only be set at creation: afterwards a gate may be removed, in any
  order, never added (nor renamed).
- While the pod is gated (the stored pod has a gate), its scheduling directives may only be
  *narrowed*, so that it can land on a subset of the nodes it could before:
  `nodeSelector` gains entries (an existing one never changes or goes); a missing
  `affinity.nodeAffinity` may be set to anything; a missing or empty required
  `nodeSelectorTerms` may be set; non-empty terms only gain `matchExpressions` /
  `matchFields` (each existing requirement stays as it is, the number of terms is kept: terms
  are ORed, requirements ANDed); the preferred terms may change freely (they are not
  authoritative). An ungated pod's nodeSelector and affinity never change.
- `spec.nodeName` is set once, from empty, by the binding (kube-scheduler's Bind); a gated
  pod cannot be bound. The simulator's scheduler writes it with an update, so an update that
  only sets it on an ungated pod is the binding.
- Everything else in the spec (containers but for their `image`, tolerations, volumes, pod
  affinity and anti-affinity, ...) stays as it is (the API server allows a few more changes,
  such as added tolerations and `activeDeadlineSeconds`; nothing here needs them).

`violation(old, new)` returns the first rule an update breaks, as the API server's message
names the field, or None. The simulator's cluster store (`SimStore`) calls it on every pod
update; the plain `MemoryStore` (a generic object store for tests) does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

_SCHEDULING: Final = frozenset({"schedulingGates", "nodeSelector", "affinity", "nodeName"})
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def gate_names(spec: Mapping[str, Any]) -> list[str]:
    """The names of the pod spec's scheduling gates, in order."""
    return [
        str(g.get("name", "")) for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping)
    ]


def violation(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The rule an update of a Pod's spec from `old` to `new` breaks (a message naming the
    field), or None when the API server allows it."""
    old_gates, new_gates = gate_names(old), gate_names(new)
    if any(g not in old_gates for g in new_gates):
        return "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gates"
    is_gated = bool(old_gates)
    if old.get("nodeName") != new.get("nodeName"):
        if old.get("nodeName"):
            return "spec.nodeName: Forbidden: a bound pod's node cannot change"
        if new_gates:
            return "spec.nodeName: Forbidden: a pod with scheduling gates cannot be bound"
    for key in sorted(set(old) | set(new)):
        if key not in _SCHEDULING and key != "containers" and old.get(key) != new.get(key):
            return f"spec.{key}: Forbidden: pod updates may not change fields other than scheduling directives"
    if _images_aside(old.get("containers")) != _images_aside(new.get("containers")):
        return "spec.containers: Forbidden: pod updates may only change a container's image"
    old_affinity = dict(old.get("affinity") or {})
    new_affinity = dict(new.get("affinity") or {})
    if {k: v for k, v in old_affinity.items() if k != "nodeAffinity"} != {
        k: v for k, v in new_affinity.items() if k != "nodeAffinity"
    }:
        return "spec.affinity: Forbidden: pod affinity and anti-affinity cannot change"
    same = old.get("nodeSelector") == new.get("nodeSelector") and old_affinity.get(
        "nodeAffinity"
    ) == new_affinity.get("nodeAffinity")
    if same:
        return None
    if not is_gated:
        return "spec: Forbidden: nodeSelector and node affinity may only change while the pod has scheduling gates"
    return _narrowing_violation(old, new)


def _images_aside(containers: Any) -> Any:
    if not isinstance(containers, Sequence) or isinstance(containers, str):
        return containers
    return [
        {k: v for k, v in c.items() if k != "image"} if isinstance(c, Mapping) else c
        for c in containers
    ]


def _narrowing_violation(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    old_selector = dict(old.get("nodeSelector") or {})
    new_selector = dict(new.get("nodeSelector") or {})
    if any(new_selector.get(k) != v for k, v in old_selector.items()):
        return "spec.nodeSelector: Invalid value: only additions to the nodeSelector are allowed while gated"
    old_na = (old.get("affinity") or {}).get("nodeAffinity")
    new_na = (new.get("affinity") or {}).get("nodeAffinity")
    if not old_na:
        return None  # nothing to narrow: anything may be set
    if not new_na:
        return (
            "spec.affinity.nodeAffinity: Invalid value: node affinity cannot be removed while gated"
        )
    old_terms = list((old_na.get(_REQUIRED) or {}).get("nodeSelectorTerms") or [])
    new_terms = list((new_na.get(_REQUIRED) or {}).get("nodeSelectorTerms") or [])
    if not old_terms:
        return None
    field = f"spec.affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms"
    if len(new_terms) != len(old_terms):
        return f"{field}: Invalid value: the number of terms cannot change while gated"
    for i, (was, now) in enumerate(zip(old_terms, new_terms, strict=True)):
        for part in ("matchExpressions", "matchFields"):
            before, after = list(was.get(part) or []), list(now.get(part) or [])
            if after[: len(before)] != before:
                return f"{field}[{i}].{part}: Invalid value: only additions are allowed while gated"
    return None
