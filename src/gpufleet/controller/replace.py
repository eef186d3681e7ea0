"""Replicas that cannot run are re-placed: which replica is stuck, and the backoff memory.

A replica is *stuck* (docs/controller.md, "Re-placement"):

- when its cluster's agent refused it by policy (`ModelPodsScheduled=False`, reason
  `PolicyDenied`): at once, cause `PolicyDenied`, and its whole cluster is avoided;
- when, with its status counted for its current generation and not every pod scheduled, some
  claiming pods on a pool have been Unschedulable (the agent's `unschedulableSince`) for
  `stuck_after_s`: cause `PodsUnschedulable`, that pool is avoided. While the cluster's
  autoscaler says it is adding a node for them (`scaleUp: Triggered`), the replica waits
  `scale_up_timeout_s` from that verdict as well; `NotTriggered` waits for nothing more.

A replica whose pods are all scheduled is never stuck (a running replica is never moved),
neither is one that serves (a pod of any generation Running and Ready: its old pod serves while
a new one waits), and neither is one whose unschedulable pods give no time (errs toward not
moving). Unschedulable pods are counted over every generation of the replica.

`Replacer` is the controller's memory of re-placements: per (deployment, cluster, pool) how
many times the deployment was stuck there and until when the pool is avoided (a backoff of
`replace_backoff_s`, doubled on each repeat, at most `replace_backoff_max_s`; a repeat counts
the deployment's episodes on every pool and cluster, so its budget is per deployment: stuck on
pool after pool, it backs off 2, 4, 8 ... minutes, not 2 on each). One *episode*
is every replica of the deployment found stuck there while its backoff stands: they share it
(four replicas stuck in one step back off 2 minutes, not 16), and a repeat is a replica stuck
there again after the backoff ended (the
count is forgotten once the pool has been free of repeats for `replace_backoff_max_s` after its
backoff ended), and the stuck replicas already counted. From it, every step, the core's
`Snapshot.avoid`: what the pure `schedule` reads, so a decision stays a function of its inputs.
The memory is not persisted: a restarted controller counts repeats from one again (a stuck
replica still is re-placed, as its status says so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.controller.conditions import Obj, ReadObj, condition, find_condition
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.index import Key
from gpufleet.controller.status import MODEL_PODS_SCHEDULED, PodsReason
from gpufleet.core.decision import ReasonCode
from gpufleet.core.durations import format_duration
from gpufleet.core.model import Avoid, ClusterName, PoolName, Replica, ScaleUp
from gpufleet.store import format_time

#: The deployment condition that tells placed from running.
REPLICAS_RUNNING: Final = "ReplicasRunning"
#: Listed replicas in a `ReplicasRunning` message, at most.
_MAX_LISTED: Final = 5

_Stuck = tuple[str | None, str, str]  # (pool or None: the whole cluster, cause, message)
_RepeatKey = tuple[str, str, str, str]  # (namespace, deployment, cluster, pool or "")


def is_waiting(replica: Replica, obj: ReadObj) -> bool:
    """Whether the replica may be or become stuck: the controller follows only these."""
    if any(p.unschedulable_pods for p in replica.status.pools):
        return not replica.status.pods_scheduled
    return _policy_denial(obj) is not None


def _policy_denial(obj: ReadObj) -> str | None:
    found = find_condition((obj.get("status") or {}).get("conditions") or [], MODEL_PODS_SCHEDULED)
    if found is None or found.get("status") != "False":
        return None
    if found.get("reason") != PodsReason.POLICY_DENIED.value:
        return None
    return str(found.get("message", ""))


def _seconds(value: float) -> str:
    return format_duration(value)


def stuck_pools(
    replica: Replica, obj: ReadObj, now: datetime, config: ControllerConfig
) -> tuple[list[_Stuck], datetime | None]:
    """Where the replica is stuck at `now` (see the module docstring), and when it next may
    become stuck with time alone (None: not with time alone)."""
    denial = _policy_denial(obj)
    if denial is not None:
        return [(None, ReasonCode.POLICY_DENIED.value, denial)], None
    status = replica.status
    if status.pods_scheduled or status.observed_generation != replica.generation:
        return [], None
    if status.is_serving:
        return [], None  # what serves is never deleted as stuck
    found: list[_Stuck] = []
    due: datetime | None = None
    for pool in status.pools:
        since = pool.unschedulable_since
        if not pool.unschedulable_pods or since is None:
            continue
        deadline = since + timedelta(seconds=config.stuck_after_s)
        note = ""
        if pool.scale_up is ScaleUp.TRIGGERED:
            at = pool.scale_up_at or since
            deadline = max(deadline, at + timedelta(seconds=config.scale_up_timeout_s))
            note = (
                f"; the node the autoscaler is adding (TriggeredScaleUp at {format_time(at)}) "
                f"is not there after scaleUpTimeout {_seconds(config.scale_up_timeout_s)}"
            )
        elif pool.scale_up is ScaleUp.NOT_TRIGGERED:
            at_text = f" at {format_time(pool.scale_up_at)}" if pool.scale_up_at else ""
            note = f"; the autoscaler adds no node (NotTriggerScaleUp{at_text})"
        if now < deadline:
            due = deadline if due is None else min(due, deadline)
            continue
        waited = (now - since).total_seconds()
        message = (
            f"{pool.unschedulable_pods} claiming pod(s) on pool {pool.pool} Unschedulable for "
            f"{format_duration(waited)} since {format_time(since)} "
            f"(stuckAfter {_seconds(config.stuck_after_s)}){note}"
        )
        found.append((str(pool.pool), ReasonCode.PODS_UNSCHEDULABLE.value, message))
    return found, due


class Replacer:
    """The controller's memory of re-placements (see the module docstring)."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        #: Per (deployment, cluster, pool): repeats, and the backoff entry (replica "").
        self._repeats: dict[_RepeatKey, tuple[int, Avoid]] = {}
        #: Per deployment (namespace, name): its episodes over every pool and cluster, and
        #: when the last one's backoff ends (the churn budget: the backoff grows across pools).
        self._episodes: dict[tuple[str, str], tuple[int, datetime]] = {}
        #: Per stuck replica counted: its entries (which name it, to be dropped).
        self._handled: dict[Key, tuple[Avoid, ...]] = {}
        #: The core's input, as of the last `update`, and when it next may change by time.
        self.avoid: tuple[Avoid, ...] = ()
        self.due: datetime | None = None

    def update(
        self,
        waiting: Mapping[Key, tuple[Replica, ReadObj]],
        existing: Container[Key],
        now: datetime,
    ) -> bool:
        """Count the replicas stuck at `now` among `waiting`, forget what ended, and set
        `avoid` and `due`; whether `avoid` changed."""
        horizon = timedelta(seconds=self.config.replace_backoff_max_s)
        for key in [k for k, v in self._handled.items() if k not in existing or _ended(v, now)]:
            del self._handled[key]
        for rkey in [k for k, v in self._repeats.items() if v[1].until + horizon <= now]:
            del self._repeats[rkey]
        for dkey in [k for k, v in self._episodes.items() if v[1] + horizon <= now]:
            del self._episodes[dkey]
        due: datetime | None = None
        for key, (replica, obj) in sorted(waiting.items()):
            if key in self._handled:
                continue
            found, when = stuck_pools(replica, obj, now, self.config)
            if when is not None:
                due = when if due is None else min(due, when)
            if found:
                self._handled[key] = tuple(self._count(replica, s, now) for s in found)
        entries = [a for v in self._handled.values() for a in v]
        entries.extend(v[1] for v in self._repeats.values())
        standing = tuple(sorted((a for a in entries if a.until > now), key=_order))
        for a in standing:
            due = a.until if due is None else min(due, a.until)
        self.due = due
        is_changed = standing != self.avoid
        self.avoid = standing
        return is_changed

    def _count(self, replica: Replica, stuck: _Stuck, now: datetime) -> Avoid:
        pool, cause, message = stuck
        dep = replica.deployment
        key = (dep.namespace, dep.name, replica.cluster, pool or "")
        known = self._repeats.get(key)
        base, cap = self.config.replace_backoff_s, self.config.replace_backoff_max_s
        named = PoolName(pool) if pool is not None else None
        where = f"{replica.cluster}/{pool}" if pool else f"cluster {replica.cluster}"
        if known is not None and known[1].until > now:
            # The same episode: its backoff stands, and this replica is named under it.
            repeats, until = known[0], known[1].until
            text = (
                f"replica {replica.name}: {message}; {where} avoided until "
                f"{format_time(until)} (repeat {repeats}, the backoff of this episode)"
            )
            return Avoid(dep, replica.cluster, named, until, cause, text, replica.name)
        # A new episode: the repeat counts the deployment's episodes on any pool and cluster,
        # so a deployment stuck everywhere in turn backs off longer each time, not 2 minutes on
        # each pool (issue 30.3).
        episodes = self._episodes.get((dep.namespace, dep.name))
        repeats = max(
            known[0] + 1 if known is not None else 1,
            episodes[0] + 1 if episodes is not None else 1,
        )
        backoff = min(cap, base * 2 ** min(repeats - 1, 32))
        text = (
            f"replica {replica.name}: {message}; {where} avoided for {_seconds(backoff)} "
            f"(repeat {repeats}, backoff {_seconds(base)} doubling to {_seconds(cap)})"
        )
        until = now + timedelta(seconds=backoff)
        avoid = Avoid(dep, replica.cluster, named, until, cause, text, replica.name)
        # Stuck again within the horizon (on any pool): the deployment backs off everywhere,
        # or with many pools one is always not avoided (issue 30.3: 28 an hour on 20 clusters).
        entry = dataclasses.replace(avoid, replica="")
        if episodes is not None:
            entry = dataclasses.replace(entry, cluster=ClusterName(""), pool=None)
        self._repeats[key] = (repeats, entry)
        last = max(until, episodes[1]) if episodes is not None else until
        self._episodes[(dep.namespace, dep.name)] = (repeats, last)
        return avoid

    def replaced(self, namespace: str, deployment: str, now: datetime) -> list[Avoid]:
        """The deployment's standing backoff entries (latest first)."""
        found = [
            a
            for a in self.avoid
            if a.deployment.namespace == namespace
            and a.deployment.name == deployment
            and not a.replica
            and a.until > now
        ]
        return sorted(found, key=lambda a: a.until, reverse=True)


def _ended(entries: Sequence[Avoid], now: datetime) -> bool:
    return all(a.until <= now for a in entries)


def _order(a: Avoid) -> tuple[object, ...]:
    return (a.deployment.namespace, a.deployment.name, a.cluster, a.pool or "", a.replica)


def running_condition(
    total: int,
    running: int,
    pending: Sequence[tuple[str, Any]],
    replaced: Sequence[Avoid],
    desired: int | None = None,
    short_reason: str = "",
) -> Obj:
    """`ReplicasRunning`: True when the deployment has every desired replica placed and each
    has all its pods scheduled; else False until it is whole again, with the reason:

    - `BackingOff`: fewer placed than desired while a re-placement's backoff stands (the stuck
      replica went and its replacement has nowhere to go yet); the message gives the end time;
    - `Replaced`: a replica was re-placed, its backoff stands and its replacement does not run
      yet (the message adds why, with numbers, and until when);
    - `short_reason` (the diagnosis' dominant code, e.g. `InsufficientGPU`, also when a
      rollout's `maxUnavailable` let an old replica go before its replacement fits): fewer
      placed than desired for another reason (a rollout waiting for room with every old
      replica serving is not short: `Progressing=False/NoRoomForSurge` says it);
    - `PodsUnschedulable` (some replica has unschedulable pods) or `PodsPending`.

    `pending` holds (name, its `ModelPodsScheduled` condition or None) of each placed replica
    not running; `desired` None means `total`."""
    want = total if desired is None else desired
    if not pending and total >= want:
        return condition(
            REPLICAS_RUNNING,
            "True",
            "AllReplicasRunning",
            f"{running} of {total} replicas have every pod scheduled",
        )
    listed = []
    for name, found in pending[:_MAX_LISTED]:
        reason = (found or {}).get("reason") or PodsReason.NOT_OBSERVED.value
        listed.append(f"{name} ({reason})")
    if len(pending) > _MAX_LISTED:
        listed.append(f"and {len(pending) - _MAX_LISTED} more")
    unschedulable = any(
        (f or {}).get("reason") == PodsReason.PODS_UNSCHEDULABLE.value for _, f in pending
    )
    message = f"{running} of {want} replicas running"
    if total < want:
        message += f"; {total} of {want} placed"
    if pending:
        message += f"; {len(pending)} placed but not all pods scheduled: {', '.join(listed)}"
    if replaced:
        until = format_time(replaced[0].until)
        message = f"{message}; re-placed: {replaced[0].message}; backing off until {until}"
        reason = "BackingOff" if total < want else "Replaced"
    elif total < want:
        reason = short_reason or "ReplicasUnplaced"
    elif unschedulable:
        reason = ReasonCode.PODS_UNSCHEDULABLE.value
    else:
        reason = PodsReason.PODS_PENDING.value
    return condition(REPLICAS_RUNNING, "False", reason, message)
