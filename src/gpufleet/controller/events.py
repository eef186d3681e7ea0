"""Kubernetes `v1` Events the controller writes, and when it writes them.

An event is keyed by (involved object, type, reason, message): its name is the involved
object's name plus a hash of that key, so the same event recurring increments `count` and
moves `lastTimestamp` on the existing object, as the API server's event correlator does.

The controller writes an event when the situation it describes changes, not every step:
`Scheduled` and `Dropped` accompany the write they report (a create, a delete) and so happen
once; `FailedScheduling`, `InvalidSpec` and `StaleAgentReport` describe a standing situation and
are remembered per subject (`Recorder`): written when the message differs from the last one
written for that subject, forgotten when the situation clears. A restarted controller has an
empty memory and writes each standing situation once more (the event's `count` grows by one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from gpufleet.controller.conditions import Obj, ReadObj
from gpufleet.controller.config import CLUSTER_EVENT_NAMESPACE
from gpufleet.store import format_time

_NAME_PREFIX_MAX_CHARS: Final = 200


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(StrEnum):
    #: A replica of the deployment was created on a cluster.
    SCHEDULED = "Scheduled"
    #: A replica of the deployment was deleted (scale-down, cluster gone, shape changed...).
    DROPPED = "Dropped"
    #: A replica that could not run (pods Unschedulable past `stuckAfter`, or refused by the
    #: cluster's policy) was deleted to be placed elsewhere; the message says why, with numbers.
    REPLACED = "Replaced"
    #: The deployment has fewer replicas than asked; the message is the roll-up.
    FAILED_SCHEDULING = "FailedScheduling"
    #: The deployment does not validate; the message lists the errors.
    INVALID_SPEC = "InvalidSpec"
    #: A cluster's observation came from an agent with an older lease epoch and was ignored.
    STALE_AGENT_REPORT = "StaleAgentReport"
    #: A pool report's numbers cannot be true of the declared pool and class: refused.
    IMPLAUSIBLE_REPORT = "ImplausibleReport"
    #: A cluster's observation is stamped beyond the clock-skew tolerance: not accepted.
    FUTURE_AGENT_REPORT = "FutureAgentReport"
    #: Processing the object raised: it is quarantined and retried with backoff (barrier.py).
    PROCESSING_FAILED = "ProcessingFailed"


@dataclass(frozen=True, slots=True)
class Event:
    """An event to record: about `involved` (an object body or reference)."""

    involved: Mapping[str, object]
    type: EventType
    reason: EventReason
    message: str


def involved_reference(obj: Mapping[str, object]) -> Obj:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


def event_namespace(ref: Mapping[str, object]) -> str:
    namespace = ref.get("namespace")
    return namespace if isinstance(namespace, str) and namespace else CLUSTER_EVENT_NAMESPACE


def event_name(ref: Mapping[str, object], event: Event) -> str:
    key = "\x00".join(
        str(x)
        for x in (
            ref.get("kind"),
            ref.get("namespace", ""),
            ref.get("name"),
            ref.get("uid", ""),
            event.type,
            event.reason,
            event.message,
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{str(ref.get('name'))[:_NAME_PREFIX_MAX_CHARS]}.{digest}"


def event_body(event: Event, now: datetime, component: str, instance: str) -> Obj:
    """A new `v1` Event (count 1)."""
    ref = involved_reference(event.involved)
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(ref, event), "namespace": event_namespace(ref)},
        "involvedObject": ref,
        "reason": event.reason.value,
        "message": event.message,
        "type": event.type.value,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def repeated(existing: ReadObj, now: datetime) -> Obj:
    """An existing Event recorded once more."""
    updated = dict(existing)
    updated["count"] = int(existing.get("count") or 1) + 1
    updated["lastTimestamp"] = format_time(now)
    return updated


class Recorder:
    """What was last reported per standing subject (a deployment's refusal, a stale report)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, ...], str] = {}

    def is_new(self, subject: tuple[str, ...], message: str) -> bool:
        return self._last.get(subject) != message

    def remember(self, subject: tuple[str, ...], message: str) -> None:
        self._last[subject] = message

    def forget(self, subject: tuple[str, ...]) -> None:
        self._last.pop(subject, None)

    def forget_missing(self, prefix: str, alive: set[tuple[str, ...]]) -> None:
        """Forget subjects under `prefix` that are not `alive` (their situation cleared)."""
        for subject in [s for s in self._last if s[0] == prefix and s not in alive]:
            del self._last[subject]
