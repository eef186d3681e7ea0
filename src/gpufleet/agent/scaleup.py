"""The cluster autoscaler's verdict on a replica's unschedulable pods, from their Events.

cluster-autoscaler says what it does about an unschedulable pod only in Events on that pod:
`TriggeredScaleUp` (a node is being added for it) or `NotTriggerScaleUp` (none will be: the
group is at its maximum, stocked out, or a new node would not fit the pod). `ScaleUpVerdicts`
follows the workload cluster's Events through its change feed (`Store.changes`, listed again
on `Expired`) and keeps, per pod, the latest of those two (by the event's `lastTimestamp`, or
`eventTime`, or `firstTimestamp`; an event without a time loses to one with a time). Events of
other reasons or about other kinds are not kept.

`annotate` writes the verdict onto each pool of each replica observation that has
unschedulable claiming pods (`ObservedReplica.unschedulable`): `NotTriggered` when the latest
verdict of some such pod is `NotTriggerScaleUp` (at the latest such time), else `Triggered`
when some pod's is `TriggeredScaleUp` (at the latest such time), else nothing. Which way it
errs: a pod with no verdict says nothing, so a replica whose autoscaler never speaks is judged
by `stuckAfter` alone on the hub; a `NotTriggered` anywhere outweighs a `Triggered`, since the
replica needs every pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from gpufleet.agent.model import ObservationResult, ObservedReplica
from gpufleet.api.times import parse_time
from gpufleet.core.model import ScaleUp
from gpufleet.store.port import EVENT, LATEST, ChangeType, Expired, Store

_REASONS: Final = {
    "TriggeredScaleUp": ScaleUp.TRIGGERED,
    "NotTriggerScaleUp": ScaleUp.NOT_TRIGGERED,
}

_Key = tuple[str, str]
#: Per Event (namespace, name): the pod it is about and its verdict and time.
_Said = tuple[_Key, ScaleUp, datetime | None]


def _read_event(obj: Mapping[str, Any]) -> _Said | None:
    reason = _REASONS.get(str(obj.get("reason")))
    involved = obj.get("involvedObject")
    if reason is None or not isinstance(involved, Mapping) or involved.get("kind") != "Pod":
        return None
    meta = obj.get("metadata")
    namespace = involved.get("namespace") or (meta or {}).get("namespace")
    name = involved.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    at = None
    for field in ("lastTimestamp", "eventTime", "firstTimestamp"):
        at = parse_time(obj.get(field))
        if at is not None:
            break
    return (namespace, name), reason, at


def _later(a: tuple[ScaleUp, datetime | None] | None, b: tuple[ScaleUp, datetime | None]) -> bool:
    """Whether verdict `b` is later than `a` (an untimed verdict is earliest)."""
    if a is None:
        return True
    if b[1] is None:
        return False
    return a[1] is None or b[1] > a[1]


class ScaleUpVerdicts:
    """The autoscaler's latest verdict per pod, kept from the Events' change feed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cursor: int | None = None
        self._events: dict[_Key, _Said] = {}
        #: Per pod, its latest verdict (recomputed for the pods whose events moved).
        self._latest: dict[_Key, tuple[ScaleUp, datetime | None]] = {}
        #: The verdict each replica was last annotated with, by (namespace, name).
        self._given: dict[_Key, tuple[object, ...]] = {}
        #: The replicas whose verdict moved in the last `annotate` call.
        self.moved: frozenset[_Key] = frozenset()
        #: Moves whenever a sync takes in an Event change or a listing (a version key of
        #: the verdicts, for the agent's quiet step).
        self.revision = 0

    def sync(self) -> None:
        """Read the Events that changed since the last call (raises what the store raises)."""
        if self._cursor is not None:
            try:
                changes, cursor = self.store.changes(self._cursor, (EVENT,))
            except Expired:
                self._cursor = None
            else:
                pods: set[_Key] = set()
                for change in changes:
                    meta = change.obj.get("metadata") or {}
                    key = (str(meta.get("namespace")), str(meta.get("name")))
                    before = self._events.pop(key, None)
                    if before is not None:
                        pods.add(before[0])
                    said = None if change.type is ChangeType.DELETED else _read_event(change.obj)
                    if said is not None:
                        self._events[key] = said
                        pods.add(said[0])
                self._cursor = cursor
                self.revision += 1 if changes else 0
                self._recompute(pods)
                return
        cursor = self.store.changes(LATEST, (EVENT,))[1]
        self._events = {}
        for obj in self.store.view(EVENT):
            said = _read_event(obj)
            if said is not None:
                meta = obj.get("metadata") or {}
                self._events[(str(meta.get("namespace")), str(meta.get("name")))] = said
        self._cursor = cursor
        self.revision += 1
        self._latest = {}
        self._recompute(None)

    def _recompute(self, pods: set[_Key] | None) -> None:
        if pods is not None and not pods:
            return
        for pod in pods or ():
            self._latest.pop(pod, None)
        for pod, verdict, at in self._events.values():
            if pods is not None and pod not in pods:
                continue
            if _later(self._latest.get(pod), (verdict, at)):
                self._latest[pod] = (verdict, at)

    def verdict(self, namespace: str, pods: list[str]) -> tuple[ScaleUp | None, datetime | None]:
        """The verdict over `pods` of `namespace` (see the module docstring)."""
        found = [self._latest.get((namespace, p)) for p in pods]
        for wanted in (ScaleUp.NOT_TRIGGERED, ScaleUp.TRIGGERED):
            times = [v[1] for v in found if v is not None and v[0] is wanted]
            if times:
                known = [t for t in times if t is not None]
                return wanted, max(known) if known else None
        return None, None

    def annotate(self, result: ObservationResult) -> ObservationResult:
        """`result` with the verdicts on the pools of replicas with unschedulable pods."""
        given: dict[_Key, tuple[object, ...]] = {}
        out: list[ObservedReplica] = []
        is_changed = False
        for observed in result.replicas:
            annotated = self._annotate(observed)
            if annotated is not observed:
                is_changed = True
                given[(observed.namespace, observed.name)] = _verdicts_of(annotated)
            out.append(annotated)
        before, self._given = self._given, given
        self.moved = frozenset(k for k, _ in given.items() ^ before.items())
        return dataclasses.replace(result, replicas=tuple(out)) if is_changed else result

    def annotated(self, observed: ObservedReplica | None) -> ObservedReplica | None:
        """One observation with the verdicts (itself when it has nothing unschedulable or the
        autoscaler said nothing)."""
        return None if observed is None else self._annotate(observed)

    def _annotate(self, observed: ObservedReplica) -> ObservedReplica:
        if not observed.unschedulable:
            return observed
        by_pool: dict[str, list[str]] = {}
        for pool, pod in observed.unschedulable:
            by_pool.setdefault(pool, []).append(pod)
        pools = []
        is_changed = False
        for p in observed.pools:
            waiting = by_pool.get(str(p.pool))
            verdict, at = self.verdict(observed.namespace, waiting) if waiting else (None, None)
            if verdict is None:
                pools.append(p)
                continue
            is_changed = True
            pools.append(dataclasses.replace(p, scale_up=verdict, scale_up_at=at))
        return dataclasses.replace(observed, pools=tuple(pools)) if is_changed else observed


def _verdicts_of(observed: ObservedReplica | None) -> tuple[object, ...]:
    if observed is None:
        return ()
    return tuple((p.pool, p.scale_up, p.scale_up_at) for p in observed.pools if p.scale_up)
