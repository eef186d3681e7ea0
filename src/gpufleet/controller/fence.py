"""Which agent's reports a cluster believes: the fence, per Lease incarnation (issue 17, point 2).

An agent stamps its reports with its Lease's uid (`leaseUID`, the *incarnation*) and the
Lease's `leaseTransitions` when it acquired it (`leaseEpoch`). A cluster is fenced to one
(incarnation, epoch):

- Within the fenced incarnation the highest epoch wins, as Lease transitions only grow: a
  report of a lower epoch comes from a leader that lost the Lease (`StaleLeaseEpoch`). But
  a fence within one incarnation recovers: once the fenced epoch has been silent for
  `silence_s` while a lower epoch of the same Lease was heard after it and within the last
  `silence_s` (it keeps reporting), that lower epoch is fenced (the one heard last). So an
  epoch no leader holds -- one forged with the cluster's own hub credentials (up to int32,
  2,147,483,647), or a leader that died right after a transition -- keeps the cluster's
  honest agent out for `silence_s` at most, not for good; the cluster is Expired meanwhile
  (docs/operations.md, "Security model", says what an operator does).
- A report of another incarnation (a recreated Lease: a reinstalled agent, a deleted namespace,
  a rebuilt cluster of the same name, a switch to or from `--no-leader-elect`, whose
  incarnation is `standalone`) is ignored while the fenced incarnation is alive
  (`OtherLeaseIncarnation`). Once the fenced one has been silent (no accepted report) for
  `silence_s` -- the controller passes `expire_after_s`, the time after which the cluster is
  Expired anyway and takes no new placements -- the incarnation heard from most recently
  after it takes over, at whatever epoch it reports (0 for a new Lease), and is the fenced
  one from then on. Only an incarnation heard *after* the fenced one was last heard can take
  over, so the old incarnation's leftover reports never take the cluster back.
- A fence persisted without an incarnation (by a controller before incarnations, `uid` "")
  is taken over at once by an incarnation reporting at an epoch at least its own (what a
  higher epoch always did).

Silence is judged by the hub's receipt of reports (`AgentReport.aged_from`), never by an
agent's clock alone. Bounds: the API model limits epochs to int32 (a Lease's
`leaseTransitions`) and the uid to 64 characters, so no report can claim an epoch no real
Lease reaches.

The fence is kept in the controller's memory and in the cluster's `status.agent`
(`leaseUID`, `leaseEpoch`, and `observedAt`: when the hub last heard from it), so a restarted
controller re-reads it (`known_fence`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from gpufleet.api.models import STANDALONE_LEASE
from gpufleet.api.times import parse_time
from gpufleet.core.durations import format_duration

#: The incarnation of an agent run without leader election (`--no-leader-elect`): one fixed
#: name, so a restarted standalone agent is the same incarnation (epoch 0) and is accepted
#: at once; switching to or from leader election is a change of incarnation.
STANDALONE: Final = STANDALONE_LEASE

#: Reason codes of an ignored report.
STALE_LEASE_EPOCH: Final = "StaleLeaseEpoch"
OTHER_LEASE_INCARNATION: Final = "OtherLeaseIncarnation"


@dataclass(frozen=True, slots=True)
class Fence:
    """The (Lease incarnation, epoch) a cluster accepts reports from."""

    uid: str
    epoch: int


class Stamped(Protocol):
    """What the fence reads of a report (`status.AgentReport`)."""

    @property
    def lease_uid(self) -> str: ...
    @property
    def lease_epoch(self) -> int: ...
    @property
    def aged_from(self) -> datetime: ...


@dataclass(slots=True)
class _Seen:
    """One incarnation's reports: its highest epoch and when that epoch was last heard."""

    epoch: int
    heard: datetime


def _incarnations(reports: Iterable[Stamped]) -> dict[str, _Seen]:
    seen: dict[str, _Seen] = {}
    for report in reports:
        found = seen.get(report.lease_uid)
        if found is None or report.lease_epoch > found.epoch:
            seen[report.lease_uid] = _Seen(report.lease_epoch, report.aged_from)
        elif report.lease_epoch == found.epoch and report.aged_from > found.heard:
            found.heard = report.aged_from
    return seen


def _stamps(reports: Iterable[Stamped]) -> dict[tuple[str, int], datetime]:
    """When each (incarnation, epoch) was last heard."""
    out: dict[tuple[str, int], datetime] = {}
    for report in reports:
        key = (report.lease_uid, report.lease_epoch)
        found = out.get(key)
        if found is None or report.aged_from > found:
            out[key] = report.aged_from
    return out


def _latest(seen: Mapping[str, _Seen]) -> str:
    """The incarnation heard from last (ties: the higher epoch, then the greater uid)."""
    return max(seen, key=lambda uid: (seen[uid].heard, seen[uid].epoch, uid))


def choose_fence(
    reports: Iterable[Stamped],
    known: Fence | None,
    heard_at: datetime | None = None,
    now: datetime | None = None,
    silence_s: float | None = None,
) -> tuple[Fence | None, bool]:
    """The fence after judging `reports` (see the module docstring), and whether it is
    *contested*: another incarnation, heard after the fenced one, waits for its silence (the
    judgement then moves with `now` alone). `known` is the fence so far and `heard_at` when
    the hub last accepted a report of it; without `now` and `silence_s` no takeover happens."""
    seen = _incarnations(reports)
    if known is None:
        if not seen:
            return None, False
        uid = _latest(seen)
        fenced = Fence(uid, seen[uid].epoch)
        heard: datetime | None = seen[uid].heard
    else:
        mine = seen.get(known.uid)
        epoch = max(known.epoch, mine.epoch) if mine is not None else known.epoch
        fenced = Fence(known.uid, epoch)
        heard = heard_at
        if mine is not None and mine.epoch == epoch and (heard is None or mine.heard > heard):
            heard = mine.heard
    if fenced.uid == "":
        adopting = {u: s for u, s in seen.items() if u and s.epoch >= fenced.epoch}
        if adopting:
            uid = max(adopting, key=lambda u: (adopting[u].epoch, adopting[u].heard, u))
            return Fence(uid, adopting[uid].epoch), False
    waiting = {
        u: s for u, s in seen.items() if u != fenced.uid and (heard is None or s.heard > heard)
    }
    lower = _lower_epochs(reports, fenced, heard, now, silence_s)
    if not waiting and not lower:
        return fenced, False
    is_silent = heard is None or (
        now is not None and silence_s is not None and (now - heard).total_seconds() > silence_s
    )
    if not is_silent:
        return fenced, True
    taker = _latest(waiting) if waiting else None
    if taker is None or (lower and max(lower.values()) >= waiting[taker].heard):
        epoch = max(lower, key=lambda e: (lower[e], e))
        return Fence(fenced.uid, epoch), False
    return Fence(taker, waiting[taker].epoch), False


def _lower_epochs(
    reports: Iterable[Stamped],
    fenced: Fence,
    heard: datetime | None,
    now: datetime | None,
    silence_s: float | None,
) -> dict[int, datetime]:
    """The lower epochs of the fenced incarnation heard after the fenced epoch and still
    alive (heard within `silence_s` of `now`), with when each was last heard: what the fence
    falls back to once the fenced epoch is silent. Without a clock: none."""
    if now is None or silence_s is None:
        return {}
    return {
        epoch: when
        for (uid, epoch), when in _stamps(reports).items()
        if uid == fenced.uid
        and epoch < fenced.epoch
        and (heard is None or when > heard)
        and (now - when).total_seconds() <= silence_s
    }


def is_fenced(report: Stamped, fence: Fence | None) -> bool:
    """Whether `report` is of the fence's incarnation and epoch (accepted, unless future)."""
    return fence is not None and (report.lease_uid, report.lease_epoch) == (
        fence.uid,
        fence.epoch,
    )


def rejection(report: Stamped, fence: Fence, silence_s: float) -> tuple[str, str]:
    """(reason code, why) a report not of `fence` is ignored; the message names no time, so
    it stays the same while the situation does (an event is written once per message)."""
    if report.lease_uid == fence.uid:
        return STALE_LEASE_EPOCH, (
            f"an older leader of the same Lease; the cluster's agent holds lease epoch "
            f"{fence.epoch}"
        )
    return OTHER_LEASE_INCARNATION, (
        f"it reports for Lease {report.lease_uid or '(none)'}, but the cluster is fenced to "
        f"Lease {fence.uid or '(none)'} at lease epoch {fence.epoch}; another Lease takes "
        f"over once that one has been silent for {format_duration(silence_s)}"
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def published_fence(cluster: Mapping[str, Any]) -> tuple[Fence, datetime | None] | None:
    """The fence persisted in a cluster's `status.agent` (`leaseUID`, `leaseEpoch`) and when
    it was last heard (`observedAt`); None when none is. A function of the object alone: the
    step reads it again only when the object's version moved."""
    agent = (cluster.get("status") or {}).get("agent") or {}
    epoch = _int(agent.get("leaseEpoch"))
    if epoch is None:
        return None
    uid = agent.get("leaseUID")
    return Fence(uid if isinstance(uid, str) else "", epoch), parse_time(
        agent.get("observedAt"), offset_required=True
    )


def known_fence(
    published: tuple[Fence, datetime | None] | None,
    remembered: tuple[Fence, datetime | None] | None,
) -> tuple[Fence | None, datetime | None]:
    """The fence a cluster is known to hold, and when it was last heard: the one persisted in
    its status (`published_fence`) or the one this controller remembers, whichever was heard
    last (a takeover always comes after the old incarnation's silence, so the later one is the
    newer fence); of one incarnation too (epochs grow with time, but for a fallback), and the
    higher epoch when neither was heard later."""
    if published is None or remembered is None:
        return remembered or published or (None, None)
    (mine, my_heard), (theirs, their_heard) = remembered, published
    if mine.uid == theirs.uid:
        if my_heard is not None and their_heard is not None and my_heard != their_heard:
            # The one heard last: a fence that fell back to a lower epoch (after the higher
            # one's silence) is newer than the higher epoch its status may still hold.
            return remembered if my_heard > their_heard else published
        heard = max((t for t in (my_heard, their_heard) if t is not None), default=None)
        return Fence(mine.uid, max(mine.epoch, theirs.epoch)), heard
    if their_heard is not None and (my_heard is None or their_heard > my_heard):
        return published
    return remembered


def remember(
    known: Fence | None, heard_at: datetime | None, fence: Fence, heard: datetime | None
) -> tuple[Fence, datetime | None]:
    """What to remember after a judgement to `fence`, last heard at `heard` (None: nothing
    of it accepted now): of the same incarnation as `known`, the later of both times."""
    if known is not None and known.uid == fence.uid and heard_at is not None:
        heard = heard_at if heard is None or heard_at > heard else heard
    return fence, heard
