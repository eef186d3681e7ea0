"""The controller's writes of a scheduling decision: per deployment, delete the dropped
replicas (an event each: `Dropped`, or `Replaced` for a replica re-placed because it could not
run), re-stamp the retained ones, create the new ones (`Scheduled`), then, when all of that was
applied, the deployment's status: `replicas` (total, ready, pending), `ReplicasScheduled` (the
decision's condition) and `ReplicasRunning` (placed versus running, replace.py). A deployment
that does not validate gets only its status and an `InvalidSpec` event.

`DecisionApplier` is the controller's collaborator that does this: it has a writer (the
controller's writes, writes.py, `HubWriter`), runs each deployment behind the controller's
fault barrier (faulted.py), and remembers the last decision it applied, so that a step
applies only the deployment decisions that changed.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from gpufleet.api import FieldError
from gpufleet.controller import replicas as replica_docs
from gpufleet.controller.barrier import FaultPoint
from gpufleet.controller.conditions import Obj, ReadObj, find_condition
from gpufleet.controller.events import Event, EventReason, EventType
from gpufleet.controller.index import Key, key_of
from gpufleet.controller.replace import Replacer, running_condition
from gpufleet.controller.report_events import ReportedSteps, ReportEvents
from gpufleet.controller.result import StepResult
from gpufleet.controller.rollouts import DEFAULT_PROGRESS_DEADLINE_S, RolloutClock, is_rolling
from gpufleet.controller.status import MODEL_PODS_SCHEDULED, is_pods_scheduled
from gpufleet.controller.writes import HubWriter, guard
from gpufleet.core.decision import Decision, DeploymentDecision, ReasonCode
from gpufleet.store.port import MODEL_DEPLOYMENT, MODEL_REPLICA


def _decision_key(decided: DeploymentDecision) -> Key:
    return (decided.key.namespace, decided.key.name)


class AppliedSteps(ReportedSteps, Protocol):
    """A step's result, with its numbers of replicas and refusals (`StepResult`)."""

    refusals: Counter[str]
    placements: int
    drops: int

    @property
    def write_count(self) -> int: ...


class DecisionApplier:
    """Applies deployment decisions (see the module docstring) through its writer
    (`HubWriter`), behind the controller's fault barrier (faulted.py), and remembers the
    last decision applied. All of that memory is derived state (`forget`) but the rollouts'
    clock (since when each rollout's counts hold) and the count of quiet steps."""

    def __init__(self, writer: HubWriter, barrier: ReportEvents, replacer: Replacer) -> None:
        self.writer = writer
        #: The controller's fault barrier, and the step's tables it reads (`inputs`).
        self.barrier = barrier
        #: What was re-placed (the `Replaced` events, `ReplicasRunning`).
        self.replacer = replacer
        self.rollouts = RolloutClock()
        #: Steps that found nothing to schedule (metrics, tests).
        self.quiet_steps = 0
        self.forget()

    def forget(self) -> None:
        """Forget the decisions applied: the next step schedules and applies every one."""
        #: The last decision, and the clusters' freshness it was made with.
        self.last: Decision | None = None
        self.scheduled_with: dict[str, tuple[object, ...]] | None = None
        #: Per deployment: the decision last applied with nothing to write (dirty marks a
        #: deployment whose object or replicas changed since).
        self.applied: dict[Key, DeploymentDecision] = {}
        #: Per deployment with a shortfall in the last decision: (reason, shortfall); their
        #: sums; and whether that decision creates or drops replicas.
        self.short: dict[Key, tuple[str, int]] = {}
        self.numbers: tuple[Counter[str], int] | None = None
        self.has_replica_writes = False

    def _replica_of(self, cluster: str, namespace: str, name: str) -> ReadObj | None:
        """The replica `name` of a deployment in `namespace` on `cluster`, as the step reads it."""
        key = replica_docs.replica_key(cluster, namespace, name)
        return None if key is None else self.barrier.inputs.replica_objs.get(key)

    def is_settled(self, fresh: Mapping[str, tuple[object, ...]]) -> bool:
        """Whether the last decision stands, its inputs aside: made with the clusters'
        freshness `fresh`, and creating or dropping no replica."""
        with_ = self.scheduled_with
        return (
            self.last is not None
            and (fresh is with_ or fresh == with_)
            and not self.has_replica_writes
        )

    def quiet(self, result: StepResult) -> None:
        """A step with nothing to schedule: the last decision, already applied."""
        assert self.last is not None
        result.decision = self.last
        result.is_quiet = True
        self.add_numbers(result)
        self.quiet_steps += 1

    def add_numbers(self, result: StepResult) -> None:
        """The refusals and shortfall of the last decision, into the step's numbers (added
        up again only when a decision changed)."""
        if self.numbers is None:
            refusals: Counter[str] = Counter()
            shortfall = 0
            for reason, short in self.short.values():
                refusals[reason] += 1
                shortfall += short
            self.numbers = (refusals, shortfall)
        result.refusals.update(self.numbers[0])
        result.shortfall += self.numbers[1]

    def check_invalid(self, now: datetime, result: StepResult) -> None:
        """Say why of each invalid deployment not being deleted (`_invalid_deployment`)."""
        alive: set[tuple[str, ...]] = set()
        for key, (obj, errors) in sorted(self.barrier.inputs.invalid.items()):
            say = functools.partial(self._invalid_deployment, obj, errors, now, result)
            self.barrier.behind_barrier(FaultPoint.APPLY, MODEL_DEPLOYMENT, obj, now, result, say)
            alive.add(("invalid", *key))
        self.barrier.forget_cleared("invalid", alive)

    def _changed_decisions(self, decision: Decision, dirty: set[Key]) -> list[int]:
        """The positions in `decision` of the deployment decisions to look at again: those
        that are not the last decision's at their place, and those of dirty deployments (a
        decision lists deployments in key order, so each is found by bisection)."""
        decided = decision.deployments
        last = self.last.deployments if self.last is not None else None
        if last is None or len(last) != len(decided):
            return list(range(len(decided)))
        positions = set(itertools.compress(itertools.count(), map(operator.is_not, decided, last)))
        for key in dirty:
            at = bisect.bisect_left(decided, key, key=_decision_key)
            if at < len(decided) and _decision_key(decided[at]) == key:
                positions.add(at)
        return sorted(positions)

    def apply(
        self,
        decision: Decision,
        fresh: dict[str, tuple[object, ...]],
        dirty: set[Key],
        now: datetime,
        result: StepResult,
    ) -> None:
        """Apply each deployment decision that differs from the last one applied with nothing
        to write, or whose deployment or retained replicas (`dirty`) changed since
        (`_apply_once`); `fresh` is the clusters' freshness it was made with."""
        self.scheduled_with = fresh
        positions = self._changed_decisions(decision, dirty)
        if len(positions) == len(decision.deployments):
            self.short = {}
        short = self.short
        self.numbers = None
        self.has_replica_writes = any(d.created or d.dropped for d in decision.deployments)
        for at in positions:
            decided = decision.deployments[at]
            key = _decision_key(decided)
            if decided.shortfall > 0:
                short[key] = (decided.condition.reason, decided.shortfall)
            else:
                short.pop(key, None)
            last = self.applied.get(key)
            if last is not None and key not in dirty and (last is decided or last == decided):
                continue
            self.applied.pop(key, None)
            obj = self.barrier.inputs.deployments[key][0]
            apply = functools.partial(self._apply_once, obj, decided, now, result)
            is_applied, _ = self.barrier.behind_barrier(
                FaultPoint.APPLY, MODEL_DEPLOYMENT, obj, now, result, apply
            )
            if is_applied:
                self.applied[key] = decided
        self.add_numbers(result)
        self.barrier.forget_cleared("refusal", {("refusal", *key) for key in short})
        self.last = decision

    def _invalid_deployment(
        self, obj: ReadObj, errors: list[FieldError], now: datetime, result: AppliedSteps
    ) -> None:
        """Say why the deployment is not scheduled; its replicas are left as they are."""
        scheduled = replica_docs.invalid_condition(errors)
        result.refusals[scheduled["reason"]] += 1
        namespace, name = key_of(obj)
        mine = [
            r
            for r in self.barrier.inputs.replica_objs.values()
            if replica_docs.deployment_of(r) == (namespace, name)
        ]
        ready = sum(1 for r in mine if is_pods_scheduled(r.get("status") or {}))

        def desire(current: ReadObj) -> Obj:
            return replica_docs.deployment_status(current, scheduled, len(mine), ready, now)

        self.writer.write_status(
            MODEL_DEPLOYMENT, obj, desire, replica_docs.DEPLOYMENT_OWNED, now, result
        )
        event = Event(obj, EventType.WARNING, EventReason.INVALID_SPEC, scheduled["message"])
        self.writer.record_once(("invalid", namespace, name), event, now, result)

    def _apply_once(
        self, deployment: ReadObj, decided: DeploymentDecision, now: datetime, result: AppliedSteps
    ) -> bool:
        """`_apply`; True when it wrote nothing and met no error, so that the next step may
        skip it (`_apply` is a function of the decision, the deployment and its replicas, and
        of `now` only through the times of writes it then did not need, and the deadline of a
        rollout under way: `is_rolling`)."""
        writes, errors = result.write_count, len(result.errors)
        self._apply(deployment, decided, now, result)
        return (
            not decided.created
            and not decided.dropped
            and result.write_count == writes
            and len(result.errors) == errors
            and not is_rolling(decided)
        )

    def _apply(
        self, deployment: ReadObj, decided: DeploymentDecision, now: datetime, result: AppliedSteps
    ) -> None:
        namespace = decided.key.namespace
        known = self.barrier.inputs.deployments.get((namespace, decided.key.name))
        revision: str = known[1].revision if known is not None else ""
        is_applied = self._drop(deployment, decided, now, result)
        updated = 0
        for placement in decided.retained:
            current = self._replica_of(placement.cluster, namespace, placement.name)
            if current is not None and replica_docs.is_old_revision(current, revision):
                continue  # runs as it is until the rollout replaces it
            updated += 1
            if (
                current is None
                or replica_docs.restamped(current, placement, deployment, revision) is None
            ):
                continue
            restamp = functools.partial(
                replica_docs.restamped,
                placement=placement,
                deployment=deployment,
                revision=revision,
            )
            update = functools.partial(
                self.writer.update, MODEL_REPLICA, current, restamp, now, result
            )
            if not guard(result, f"update ModelReplica {namespace}/{placement.name}", update):
                is_applied = False
        created, is_created = self._create_replicas(deployment, decided, now, result, revision)
        is_applied = is_applied and is_created
        if decided.shortfall > 0:
            event = Event(
                deployment,
                EventType.WARNING,
                EventReason.FAILED_SCHEDULING,
                decided.condition.message,
            )
            self.writer.record_once(("refusal", namespace, decided.key.name), event, now, result)
        if not is_applied:
            return  # not fully applied: no status claims it; the next step retries
        total = len(decided.retained) + created
        pending: list[tuple[str, Obj | None]] = []
        for p in decided.retained:
            status = (self._replica_of(p.cluster, namespace, p.name) or {}).get("status") or {}
            if not is_pods_scheduled(status):
                found = find_condition(status.get("conditions") or [], MODEL_PODS_SCHEDULED)
                pending.append((p.name, found))
        pending.extend((p.name, None) for p in decided.created)
        ready = total - len(pending)
        scheduled = replica_docs.decision_condition(decided.condition)
        replaced = self.replacer.replaced(namespace, decided.key.name, now)
        short = decided.condition.reason if decided.condition.status == "False" else ""
        if not short and decided.diagnosis is not None:
            code = decided.diagnosis.dominant_code(decided.diagnosis.blocking_counts())
            short = code.value if code is not None else ""
        if decided.rollout is not None and ready >= decided.desired:
            # Every desired replica runs; a new one starting beside them is the rollout's
            # business (Progressing), not a replica short.
            running = running_condition(decided.desired, ready, [], replaced, decided.desired)
        else:
            running = running_condition(total, ready, pending, replaced, decided.desired, short)
        deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
        progressing = self.rollouts.condition(
            (namespace, decided.key.name),
            decided.rollout,
            revision,
            updated + created,
            float(deadline) if isinstance(deadline, int) else DEFAULT_PROGRESS_DEADLINE_S,
            now,
        )
        rollout = (revision, updated + created, progressing) if revision else None

        def desire(current: ReadObj) -> Obj:
            return replica_docs.deployment_status(
                current, scheduled, total, ready, now, running, rollout
            )

        self.writer.write_status(
            MODEL_DEPLOYMENT, deployment, desire, replica_docs.DEPLOYMENT_OWNED, now, result
        )

    def _drop(
        self, deployment: ReadObj, decided: DeploymentDecision, now: datetime, result: AppliedSteps
    ) -> bool:
        """Delete the dropped replicas; False when a delete failed."""
        namespace = decided.key.namespace
        is_applied = True
        for dropped in decided.dropped:
            current = self._replica_of(dropped.cluster, namespace, dropped.name)
            if current is None:
                continue
            delete = functools.partial(self.writer.delete, MODEL_REPLICA, current, now, result)
            if not guard(result, f"delete ModelReplica {namespace}/{dropped.name}", delete):
                is_applied = False
                continue
            result.drops += 1
            reason = dropped.reason
            kind = EventType.NORMAL if reason.code is ReasonCode.SCALED_DOWN else EventType.WARNING
            what = EventReason.DROPPED
            if reason.code is ReasonCode.SUPERSEDED:
                kind = EventType.NORMAL
            message = f"deleted replica {dropped.name} on cluster {dropped.cluster}: "
            if reason.code in (ReasonCode.PODS_UNSCHEDULABLE, ReasonCode.POLICY_DENIED):
                what = EventReason.REPLACED
                message = f"deleted replica {dropped.name} to place it elsewhere: "
            message += f"{reason.code.value}: {reason.message}"
            self.writer.record(Event(deployment, kind, what, message), now, result)
        return is_applied

    def _create_replicas(
        self,
        deployment: ReadObj,
        decided: DeploymentDecision,
        now: datetime,
        result: AppliedSteps,
        revision: str = "",
    ) -> tuple[int, bool]:
        """Create the new replicas; how many were, and whether every one was."""
        namespace = decided.key.namespace
        created = 0
        is_applied = True
        for placement in decided.created:
            restamp = functools.partial(
                replica_docs.restamped,
                placement=placement,
                deployment=deployment,
                revision=revision,
            )
            create = functools.partial(
                self.writer.create_replica, placement, deployment, restamp, now, result, revision
            )
            if not guard(result, f"create ModelReplica {namespace}/{placement.name}", create):
                is_applied = False
                continue
            created += 1
            result.placements += 1
            pools = sorted({m.pool for e in placement.engines for m in e.members})
            message = (
                f"created replica {placement.name} on cluster {placement.cluster} "
                f"(index {placement.index}, pools {', '.join(pools)})"
            )
            self.writer.record(
                Event(deployment, EventType.NORMAL, EventReason.SCHEDULED, message), now, result
            )
        return created, is_applied
