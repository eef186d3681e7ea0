"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

The Lease spec is the election record: `holderIdentity`, `leaseDurationSeconds`,
`acquireTime`, `renewTime`, `leaseTransitions`. Each candidate, every `retry_period_s`:

1. reads the Lease; if there is none, creates it holding it (`leaseTransitions` 0);
2. if the record differs from the one it saw last, notes it and the time on *its own* clock
   (`observed_at`). Expiry is judged on that observation clock, never by comparing
   `renewTime` with the local clock, so clock skew between candidates does not matter: a
   standby takes over once the record has not changed for `leaseDurationSeconds` of its own
   time (client-go's `observedTime + leaseDuration`);
3. if another identity holds an unexpired record, follows; otherwise writes the record with
   itself as holder, `renewTime` now, and, when the holder changes, `acquireTime` now and
   `leaseTransitions + 1`. The write is an update guarded by `resourceVersion`, so of two
   candidates racing for a lapsed lease exactly one wins; the other gets a conflict and
   follows.

A leader that has not renewed successfully for `renew_deadline_s` stops leading (it must stop
acting: another candidate may take over once `lease_duration_s` passes on its clock, and
`renew_deadline_s < lease_duration_s` leaves the margin). `leaseTransitions` after a
successful acquisition is the leader's *epoch*: the agent stamps it on its reports with the
Lease's uid (`lease_uid`, the Lease's *incarnation*), and the controller rejects reports of an
older epoch of the same incarnation. A Lease deleted and created again (a reinstalled agent, a
rebuilt cluster) counts its transitions from 0 again under a new uid: the controller lets the
new incarnation take over once the old one has gone silent (controller/fence.py).

`decide` is the whole decision as a pure function of (Lease, identity, now, state, config);
`LeaderElector` is a thin runner that reads and writes the Lease through a `Store` and keeps the
state. Time is always passed in.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from gpufleet.store.port import LEASE, AlreadyExists, Conflict, NotFound, Obj, Store, StoreError

log = logging.getLogger(__name__)

_MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_microtime(at: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return at.astimezone(UTC).strftime(_MICROTIME)


def parse_microtime(text: str | None) -> datetime | None:
    if not text:
        return None
    for fmt in (_MICROTIME, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


@dataclass(frozen=True, slots=True)
class LeaderConfig:
    """The Lease and the periods (seconds) of an election, as client-go names them."""

    lease_name: str
    namespace: str
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if self.retry_period_s <= 0:
            raise ValueError("retry_period_s must be positive")
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "need retry_period_s < renew_deadline_s < lease_duration_s "
                f"(got {self.retry_period_s}, {self.renew_deadline_s}, {self.lease_duration_s})"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease spec."""

    holder_identity: str = ""
    lease_duration_s: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


@dataclass(frozen=True, slots=True)
class ElectorState:
    """What a candidate remembers between attempts."""

    #: The record seen last, and when (candidate's clock) it was first seen in that form.
    observed: LeaseRecord | None = None
    observed_at: datetime | None = None
    #: When this candidate last acquired or renewed successfully; None when not leading.
    renewed_at: datetime | None = None

    def is_leading(self, now: datetime, config: LeaderConfig) -> bool:
        return self.renewed_at is not None and (now - self.renewed_at) < timedelta(
            seconds=config.renew_deadline_s
        )


class Action(StrEnum):
    CREATE = "Create"  # no Lease: create it, holding it
    ACQUIRE = "Acquire"  # expired or released, or held by another: take it over
    RENEW = "Renew"  # ours: refresh renewTime
    FOLLOW = "Follow"  # another holds an unexpired lease: wait


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    #: The Lease to write (create or resourceVersion-guarded update); None to follow.
    lease: Obj | None
    #: The state after observing the Lease, before any write.
    state: ElectorState
    #: The epoch this candidate leads under if the write succeeds.
    epoch: int | None = None


def decide(
    lease: Obj | None,
    identity: str,
    now: datetime,
    state: ElectorState,
    config: LeaderConfig,
) -> Decision:
    """client-go's tryAcquireOrRenew as a pure function; `now` is the candidate's clock."""
    stamp = format_microtime(now)
    if lease is None:
        record = LeaseRecord(identity, config.lease_duration_s, stamp, stamp, 0)
        body: Obj = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": config.lease_name, "namespace": config.namespace},
            "spec": record.to_spec(),
        }
        return Decision(Action.CREATE, body, state, epoch=0)

    record = LeaseRecord.of(lease)
    if record != state.observed:
        state = replace(state, observed=record, observed_at=now)
    assert state.observed_at is not None
    duration = timedelta(seconds=record.lease_duration_s or config.lease_duration_s)
    held_by_other = bool(record.holder_identity) and record.holder_identity != identity
    if held_by_other and state.observed_at + duration > now:
        return Decision(Action.FOLLOW, None, replace(state, renewed_at=None))

    if record.holder_identity == identity:
        action, acquire_time, transitions = (
            Action.RENEW,
            record.acquire_time,
            record.lease_transitions,
        )
    else:
        action, acquire_time, transitions = Action.ACQUIRE, stamp, record.lease_transitions + 1
    new_record = LeaseRecord(identity, config.lease_duration_s, acquire_time, stamp, transitions)
    body = copy.deepcopy(lease)
    body["spec"] = {**(body.get("spec") or {}), **new_record.to_spec()}
    return Decision(action, body, state, epoch=transitions)


def released(lease: Obj, identity: str, now: datetime) -> Obj | None:
    """The Lease given up by `identity` (client-go's release on cancel), or None if not ours."""
    record = LeaseRecord.of(lease)
    if record.holder_identity != identity:
        return None
    stamp = format_microtime(now)
    body = copy.deepcopy(lease)
    body["spec"] = {
        **(body.get("spec") or {}),
        **LeaseRecord("", 1, stamp, stamp, record.lease_transitions).to_spec(),
    }
    return body


@dataclass
class LeaderElector:
    """Runs `decide` against a Lease in a `Store`; call `step()` every `retry_period_s`."""

    store: Store
    identity: str
    config: LeaderConfig
    clock: Callable[[], datetime]
    state: ElectorState = field(default_factory=ElectorState)
    #: The epoch (`leaseTransitions`) of the current leadership, None when not leading.
    epoch: int | None = None
    #: The uid of the Lease the epoch counts in (its incarnation), None when not leading. A
    #: Lease deleted and created again is another incarnation, whose transitions start at 0.
    lease_uid: str | None = None

    def step(self) -> bool:
        """One attempt to acquire or renew; returns whether this candidate leads now."""
        now = self.clock()
        try:
            lease = self.store.get(LEASE, self.config.lease_name, self.config.namespace)
        except StoreError as e:
            log.warning("leader election %s: cannot read the lease: %s", self.identity, e)
            return self._still_leading(now)
        decision = decide(lease, self.identity, now, self.state, self.config)
        self.state = decision.state
        if decision.lease is None:
            self.epoch = self.lease_uid = None
            return False
        try:
            if decision.action is Action.CREATE:
                written = self.store.create(decision.lease)
            else:
                written = self.store.update(decision.lease)
        except (Conflict, AlreadyExists, NotFound):
            # Another candidate wrote first: follow what it wrote on the next step.
            return self._still_leading(now)
        except StoreError as e:
            log.warning("leader election %s: cannot write the lease: %s", self.identity, e)
            return self._still_leading(now)
        record = LeaseRecord.of(written)
        self.state = ElectorState(observed=record, observed_at=now, renewed_at=now)
        if decision.action is not Action.RENEW:
            log.info(
                "%s leads %s (epoch %d)",
                self.identity,
                self.config.lease_name,
                record.lease_transitions,
            )
        self.epoch = record.lease_transitions
        uid = (written.get("metadata") or {}).get("uid")
        self.lease_uid = uid if isinstance(uid, str) and uid else None
        return True

    def is_leading(self) -> bool:
        return self.state.is_leading(self.clock(), self.config)

    def release(self) -> None:
        """Give the Lease up so a standby takes over at once (call when shutting down)."""
        self.epoch = self.lease_uid = None
        self.state = replace(self.state, renewed_at=None)
        try:
            lease = self.store.get(LEASE, self.config.lease_name, self.config.namespace)
            body = released(lease, self.identity, self.clock()) if lease else None
            if body is not None:
                self.store.update(body)
        except StoreError as e:
            log.warning("leader election %s: cannot release the lease: %s", self.identity, e)

    def _still_leading(self, now: datetime) -> bool:
        if self.state.is_leading(now, self.config):
            return True
        if self.epoch is not None:
            log.warning("%s stops leading: no renewal within the renew deadline", self.identity)
        self.epoch = None
        self.state = replace(self.state, renewed_at=None)
        return False
