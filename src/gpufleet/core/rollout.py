"""Fleet-level rolling updates (DESIGN.md decision 11, issue 25): which replicas of a
deployment a template change replaces in this step, and how many new ones to place.

Model. A deployment's `revision` names what its replicas run (the controller hashes the
template's engines, serving and metadata: a change that only scales, or that only moves the
selector or tolerations, is no new revision). A replica's `revision` is the one it was made
for; one of another revision is *old*. "" on either side means unknown: the replica counts as
current and is re-stamped in place, as before rollouts existed (objects made by an older
controller, snapshots that declare no revisions).

Old replicas are kept as they are (never re-stamped with the new template: their pods keep
running what they run) while new ones are placed beside them, as a Deployment rolls pods:

- At most `desired + max_surge` replicas exist: new replicas are placed like any other (any
  cluster and pool where they fit, charged, explained) up to that total and to `desired`
  new ones.
- At least `desired - max_unavailable` replicas are available. A new replica is available
  once it is *whole*: its pods of its current generation all scheduled and every pod Running
  and Ready. An old one while it *serves* (some pod Running and Ready): errs toward keeping.
- Old replicas go, first those that serve nothing, then (scale-down order: most loaded
  cluster, highest index) those that serve, only as far as availability allows: with
  `max_unavailable` 0 an old replica is removed only when a whole replacement stands in for it
  (make-before-break). With `max_unavailable` > 0 one may go first, and its replacement is
  placed once its devices are seen free (break-before-make, one bounded step at a time).

The Deployment controller's arithmetic (`maxScaledDown = all - minAvailable -
newUnavailable`, then available ones down to `minAvailable`). It never deadlocks: while old
replicas exist, either a new one can be placed (room), an old one can go (unavailability
allowed, or a whole replacement stands), or the rollout waits for room and says so
(`NoRoomForSurge`, with the numbers of the best pool). Pure; no clock: the progress deadline
is the controller's (it knows time).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gpufleet.core import diagnosis
from gpufleet.core.decision import Condition, Diagnosis, Reason, RolloutProgress
from gpufleet.core.model import ClusterName, Deployment, Replica, RolloutStrategy

#: Condition type, and its reasons (docs/controller.md, "Rollouts").
PROGRESSING: Final = "Progressing"
ROLLING_OUT: Final = "RollingOut"
ROLLOUT_COMPLETE: Final = "RolloutComplete"
NO_ROOM_FOR_SURGE: Final = "NoRoomForSurge"


def is_current(replica: Replica, deployment: Deployment) -> bool:
    """Whether `replica` runs the deployment's revision (unknown on either side: it does)."""
    return (
        not deployment.revision or not replica.revision or replica.revision == deployment.revision
    )


def pods_of(replica: Replica) -> int:
    """Pods the replica runs: copies times pods per copy, every member."""
    return sum(e.copies * m.pods_per_copy for e in replica.engines for m in e.members)


def is_whole(replica: Replica) -> bool:
    """Every pod of the replica scheduled for its generation, Running and Ready."""
    status = replica.status
    return (
        status.pods_scheduled
        and status.observed_generation == replica.generation
        and sum(p.ready_pods for p in status.pools) >= pods_of(replica)
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A kept replica as the rollout reads it (its place in the deployment's kept list)."""

    position: int
    cluster: ClusterName
    index: int
    is_current: bool
    #: Current: whole. Old: serves.
    is_available: bool


@dataclass(frozen=True, slots=True)
class RolloutStep:
    """What one step of a rollout does: the kept replicas that go (`superseded`, positions),
    those that go because there are more current replicas than desired (`scaled_down`), and
    how many new replicas to place (`create`)."""

    superseded: tuple[int, ...]
    scaled_down: tuple[int, ...]
    create: int
    #: Counts before this step: current replicas kept, of them whole, and old ones kept.
    current: int
    whole: int
    old: int


def _removal_order(items: Sequence[Candidate]) -> list[Candidate]:
    """Scale-down order: most loaded cluster first (ties: the later name), highest index."""
    left = list(items)
    order: list[Candidate] = []
    while left:
        load = Counter(c.cluster for c in left)
        cluster = max(load, key=lambda c: (load[c], c))
        victim = max((c for c in left if c.cluster == cluster), key=lambda c: c.index)
        left.remove(victim)
        order.append(victim)
    return order


def step(
    desired: int, strategy: RolloutStrategy, candidates: Sequence[Candidate]
) -> RolloutStep | None:
    """One step of the rollout of the kept replicas `candidates`; None when none is old (no
    rollout: retaining scales down as always)."""
    old = [c for c in candidates if not c.is_current]
    if not old:
        return None
    desired = max(0, desired)
    surge = max(0, strategy.max_surge)
    unavailable = min(desired, max(0, strategy.max_unavailable))
    if surge == 0 and unavailable == 0:
        surge = 1
    current = [c for c in candidates if c.is_current]
    # More current replicas than desired (scaled down mid-rollout): those not whole go first.
    excess = max(0, len(current) - desired)
    by_need = _removal_order([c for c in current if not c.is_available]) + _removal_order(
        [c for c in current if c.is_available]
    )
    scaled_down = [c.position for c in by_need[:excess]]
    current = [c for c in current if c.position not in scaled_down]
    whole = sum(1 for c in current if c.is_available)
    total = len(current) + len(old)
    min_available = desired - unavailable
    # As the Deployment controller: what may go at all, then the serving ones down to the floor.
    may_go = max(0, total - min_available - (len(current) - whole))
    idle = [c for c in old if not c.is_available]
    serving = [c for c in old if c.is_available]
    gone = _removal_order(idle)[:may_go]
    available = whole + len(serving)
    more = min(may_go - len(gone), max(0, available - min_available))
    gone += _removal_order(serving)[: max(0, more)]
    left = total - len(gone)
    create = max(0, min(desired - len(current), desired + surge - left))
    return RolloutStep(
        tuple(sorted(c.position for c in gone)),
        tuple(sorted(scaled_down)),
        create,
        len(current),
        whole,
        len(old),
    )


def must_move(replica: Replica, deployment: Deployment) -> bool:
    """Whether the rollout replaces `replica`: it runs an older revision, or some pod of it is
    on a cordoned node (a drain is a rollout step: its replacement is placed first)."""
    return not is_current(replica, deployment) or replica.status.is_draining


def plan(deployment: Deployment, kept: Sequence[Replica]) -> RolloutStep | None:
    """`step` for a deployment's kept replicas (positions index `kept`); None: no rollout."""
    candidates = []
    for position, replica in enumerate(kept):
        current = not must_move(replica, deployment)
        available = is_whole(replica) if current else replica.status.is_serving
        candidates.append(Candidate(position, replica.cluster, replica.index, current, available))
    if all(c.is_current for c in candidates):
        return None
    return step(deployment.replicas, deployment.strategy, candidates)


def why_gone(deployment: Deployment, replica: Replica, stepped: RolloutStep) -> Reason:
    """The drop reason of a kept replica the step removes."""
    if not must_move(replica, deployment):
        return diagnosis.scaled_down(max(0, deployment.replicas), stepped.current)
    if is_current(replica, deployment):
        return diagnosis.drained(replica.status.is_serving)
    return diagnosis.superseded(deployment.revision, replica.status.is_serving)


def progress(
    deployment: Deployment,
    stepped: RolloutStep,
    created: int,
    why_not: Diagnosis | None,
) -> RolloutProgress:
    """The rollout's state after a step that placed `created` new replicas; `why_not` is the
    diagnosis of the first new replica that did not fit (None: none was refused)."""
    desired = max(0, deployment.replicas)
    updated = stepped.current + created
    old = stepped.old - len(stepped.superseded)
    gone = len(stepped.superseded)
    revision = deployment.revision
    counts = f"{updated} of {desired} replicas at revision {revision}, {old} to replace"
    if old == 0 and updated >= desired:
        condition = Condition(
            PROGRESSING, "True", ROLLOUT_COMPLETE, f"all {desired} replicas run revision {revision}"
        )
        return RolloutProgress(revision, desired, updated, old, gone, condition)
    is_stalled = (
        why_not is not None
        and created == 0
        and gone == 0
        and stepped.whole == stepped.current
        and stepped.current + stepped.old >= desired
    )
    if is_stalled and why_not is not None:
        summary = why_not.summary(why_not.blocking_counts())
        top = why_not.top_reason()
        if top is not None:
            summary += f"; {top[1]}: {top[0].message}" if top[1] else f"; {top[0].message}"
        condition = Condition(
            PROGRESSING,
            "False",
            NO_ROOM_FOR_SURGE,
            f"{counts}: no room for a new replica beside the old ones, and maxUnavailable "
            f"{deployment.strategy.max_unavailable} lets none go first: {summary}",
        )
        return RolloutProgress(revision, desired, updated, old, gone, condition, why_not)
    condition = Condition(PROGRESSING, "True", ROLLING_OUT, counts)
    return RolloutProgress(revision, desired, updated, old, gone, condition, why_not)
