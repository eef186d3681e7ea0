"""Two-level matching: clusters by labels and taints, members against a pool's devices.

- A cluster is selected when every `cluster_selector` entry equals its label (string AND;
  empty selects all).
- A toleration matches a taint when its effect is empty or equal, and either it is `Exists`
  (an empty key tolerates every key) or `Equal` with the same key and value. Every taint must be
  tolerated; tolerating NoSchedule does not cover a NoExecute taint with the same key.
- A member matches a pool when each of its requests, in order, takes the first device (published
  order) with enough remaining count whose selectors all match; the device's remaining count
  drops by the request's count. A device count of 0 or less reads as 0. A request's `name` is
  its own name, not a device filter (only selectors choose the device). A
  member without requests matches every pool and resolves nothing. The resolution keeps the
  requests matched to DRA devices (with the device's class and driver); synthetic matches only
  gate placement.

Which way it errs: matching is greedy with no backtracking, so overlapping requests may be
refused although an assignment exists (may refuse a fit, never over-accepts).

Matching is pure but costs CEL evaluations, so `Matcher` memoises it per (member, device
list): pools of the same class share one entry. A `Matcher` may serve many `schedule` calls
(memo.py): a class keeps its id while it is in use, and a member is named by its
deployment's declared signature (`Deployment.signature`) and its place, never by identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.core.memo import Generations
from gpufleet.core.model import (
    Cluster,
    Deployment,
    Device,
    Member,
    ResolvedRequest,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)


def is_selected(cluster: Cluster, selector: Mapping[str, str]) -> bool:
    return all(cluster.labels.get(k) == v for k, v in selector.items())


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect is not None and toleration.effect is not taint.effect:
        return False
    if toleration.operator is TolerationOperator.EXISTS:
        return toleration.key in ("", taint.key)
    return toleration.key == taint.key and toleration.value == taint.value


def untolerated(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: frozenset[TaintEffect]
) -> tuple[Taint, ...]:
    """The taints with one of `effects` that no toleration matches, in published order."""
    return tuple(
        t
        for t in taints
        if t.effect in effects and not any(tolerates(tol, t) for tol in tolerations)
    )


REPELS_NEW = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
DRAINS = frozenset({TaintEffect.NO_EXECUTE})


@dataclass(frozen=True, slots=True)
class MemberMatch:
    """The outcome of matching one member against one pool's devices.

    `unmatched_request` names the first request no device could take ("" when matched);
    `is_selector_miss` says why: True when no device of the pool matches its selectors at all
    (a count would not help), False when some does but has too few devices left for it.
    """

    is_match: bool
    resolved: tuple[ResolvedRequest, ...] = ()
    unmatched_request: str = ""
    is_selector_miss: bool = False

    @property
    def is_claiming(self) -> bool:
        return bool(self.resolved)


def match_member(member: Member, devices: Sequence[Device]) -> MemberMatch:
    remaining = [max(0, d.count or 0) for d in devices]
    resolved: list[ResolvedRequest] = []
    for request in member.requests:
        for i, device in enumerate(devices):
            if remaining[i] <= 0 or remaining[i] < request.count:
                continue
            if not all(s.matches(device) for s in request.selectors):
                continue
            remaining[i] -= max(0, request.count)
            if device.is_counted:
                resolved.append(
                    ResolvedRequest(
                        name=request.name,
                        device_class_name=device.device_class_name or device.key,
                        count=request.count,
                        selectors=tuple(s.expression for s in request.selectors),
                        driver=device.key,
                    )
                )
            break
        else:
            is_selector_miss = not any(
                all(s.matches(d) for s in request.selectors) for d in devices
            )
            return MemberMatch(
                False, unmatched_request=request.name, is_selector_miss=is_selector_miss
            )
    return MemberMatch(True, tuple(resolved))


_DeviceKey = tuple[object, ...]
#: A class of pool: everything matching reads of its devices, in order.
ClassKey = tuple[_DeviceKey, ...]


def _device_key(device: Device) -> _DeviceKey:
    """Everything matching reads of a device, by value. Attribute values carry their type:
    `1`, `1.0` and `True` are equal in Python but not to CEL, so they are different classes."""
    attributes = tuple(
        (name, a.kind, type(a.value).__name__, a.value)
        for name, a in sorted(device.attributes.items(), key=lambda kv: kv[0])
    )
    capacity = tuple(sorted(device.capacity.items()))
    return (
        device.name,
        device.driver,
        device.claim,
        device.device_class_name,
        type(device.count).__name__,
        device.count,
        attributes,
        capacity,
    )


class Matcher:
    """Memoised `match_member`, for one `schedule` call or, kept by the caller, for many.

    Classes get ids by value (a class id is never given to another class); members are
    named by `ref`: their deployment's declared signature (or, when it declares none, its key
    within this call only) and their place in it, never by identity.
    `advance` starts a call (see memo.py): what the last two calls did not use is dropped.
    """

    __slots__ = ("_call", "_class_ids", "_matches", "_next_class_id")

    def __init__(self) -> None:
        self._class_ids: Generations[ClassKey, int] = Generations()
        self._next_class_id = 0
        self._matches: Generations[tuple[object, int], MemberMatch] = Generations()
        self._call = 0

    def advance(self) -> None:
        self._class_ids.advance()
        self._matches.advance()
        self._call += 1

    def ref(self, deployment: Deployment) -> tuple[object, ...]:
        """How memos name a deployment: its declared signature, reused across calls; else
        its key, which names it within this call only (keys are unique in a snapshot)."""
        if deployment.signature:
            return ("signed", deployment.signature)
        return ("call", self._call, deployment.key.namespace, deployment.key.name)

    def size(self) -> int:
        """Entries held (class ids and matches)."""
        return len(self._class_ids) + len(self._matches)

    def class_id(self, devices: Sequence[Device]) -> int:
        return self.class_of(devices)[1]

    def class_of(self, devices: Sequence[Device]) -> tuple[ClassKey, int]:
        """The class of a device list, by value, and its id."""
        key = tuple(_device_key(d) for d in devices)
        found = self._class_ids.get(key)
        if found is None:
            self._next_class_id += 1
            found = self._class_ids.put(key, self._next_class_id)
        return key, found

    def has_class(self, key: ClassKey, class_id: int) -> bool:
        """Whether `class_id` is still the id of the class `key` (a `class_of` answer), and
        keep it so for this call: for a caller that remembers a class instead of asking again."""
        return self._class_ids.get(key) == class_id

    def match(
        self, member: Member, devices: Sequence[Device], class_id: int, ref: tuple[object, ...]
    ) -> MemberMatch:
        """`match_member`; `ref` names the member (its deployment's `ref`, engine and member
        indices)."""
        memo_key = (ref, class_id)
        found = self._matches.get(memo_key)
        if found is None:
            return self._matches.put(memo_key, match_member(member, devices))
        return found
