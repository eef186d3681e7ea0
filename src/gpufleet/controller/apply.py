"""The controller's writes of a scheduling decision: per deployment, delete the dropped
replicas (an event each: `Dropped`, or `Replaced` for a replica re-placed because it could not
run), re-stamp the retained ones, create the new ones (`Scheduled`), then, when all of that was
applied, the deployment's status: `replicas` (total, ready, pending), `ReplicasScheduled` (the
decision's condition) and `ReplicasRunning` (placed versus running, replace.py). A deployment
that does not validate gets only its status and an `InvalidSpec` event. The half of
`Controller` between the step (loop.py) and the report events and writes below it.
"""

from __future__ import annotations

import functools
from collections import Counter
from datetime import datetime
from typing import Protocol

from gpufleet.api import FieldError
from gpufleet.controller import replicas as replica_docs
from gpufleet.controller.conditions import Obj, ReadObj, find_condition
from gpufleet.controller.events import Event, EventReason, EventType
from gpufleet.controller.index import key_of
from gpufleet.controller.replace import Replacer, running_condition
from gpufleet.controller.report_events import ReportedSteps, ReportEvents
from gpufleet.controller.rollouts import DEFAULT_PROGRESS_DEADLINE_S, RolloutClock, is_rolling
from gpufleet.controller.status import MODEL_PODS_SCHEDULED, is_pods_scheduled
from gpufleet.core.decision import DeploymentDecision, ReasonCode
from gpufleet.store.port import MODEL_DEPLOYMENT, MODEL_REPLICA


class AppliedSteps(ReportedSteps, Protocol):
    """A step's result, with its numbers of replicas and refusals (`StepResult`)."""

    refusals: Counter[str]
    placements: int
    drops: int

    @property
    def write_count(self) -> int: ...


class DecisionWriter(ReportEvents):
    """Applies deployment decisions (see the module docstring); a mixin of `Controller`."""

    replacer: Replacer
    rollouts: RolloutClock

    def _invalid_deployment(
        self, obj: ReadObj, errors: list[FieldError], now: datetime, result: AppliedSteps
    ) -> None:
        """Say why the deployment is not scheduled; its replicas are left as they are."""
        scheduled = replica_docs.invalid_condition(errors)
        result.refusals[scheduled["reason"]] += 1
        namespace, name = key_of(obj)
        mine = [
            r
            for r in self.inputs.replica_objs.values()
            if replica_docs.deployment_of(r) == (namespace, name)
        ]
        ready = sum(1 for r in mine if is_pods_scheduled(r.get("status") or {}))

        def desire(current: ReadObj) -> Obj:
            return replica_docs.deployment_status(current, scheduled, len(mine), ready, now)

        self._write_status(
            MODEL_DEPLOYMENT, obj, desire, replica_docs.DEPLOYMENT_OWNED, now, result
        )
        event = Event(obj, EventType.WARNING, EventReason.INVALID_SPEC, scheduled["message"])
        self._record_once(("invalid", namespace, name), event, now, result)

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
        known = self.inputs.deployments.get((namespace, decided.key.name))
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
            update = functools.partial(self._update, MODEL_REPLICA, current, restamp, now, result)
            if not self._guard(result, f"update ModelReplica {namespace}/{placement.name}", update):
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
            self._record_once(("refusal", namespace, decided.key.name), event, now, result)
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

        self._write_status(
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
            delete = functools.partial(self._delete, MODEL_REPLICA, current, now, result)
            if not self._guard(result, f"delete ModelReplica {namespace}/{dropped.name}", delete):
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
            self._record(Event(deployment, kind, what, message), now, result)
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
                self._create_replica, placement, deployment, restamp, now, result, revision
            )
            if not self._guard(result, f"create ModelReplica {namespace}/{placement.name}", create):
                is_applied = False
                continue
            created += 1
            result.placements += 1
            pools = sorted({m.pool for e in placement.engines for m in e.members})
            message = (
                f"created replica {placement.name} on cluster {placement.cluster} "
                f"(index {placement.index}, pools {', '.join(pools)})"
            )
            self._record(
                Event(deployment, EventType.NORMAL, EventReason.SCHEDULED, message), now, result
            )
        return created, is_applied
