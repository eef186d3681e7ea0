"""When the controller's next time-driven change falls due (`Controller.next_due`).

A step is a function of the hub and of `now`; between changes on the hub, `now` moves what a
step does only at these times, each kept by the part of the step that owns it:

- a cluster's status falls due: a time of its crosses into another freshness state, or its
  status refresh (`status_refresh_s`) comes (the step's heap of dues, loop.py);
- a cluster's freshness as the decision reads it crosses (Fresh to Stale, Stale to Expired);
- a report stamped in the future comes within `max_clock_skew_s`, or a contested fence's
  fenced incarnation has been silent for `expire_after_s` (the clusters whose Trust moves);
- a replica's stuck deadline passes, or a re-placement backoff ends (`Replacer.due`);
- a quarantined object's backoff ends (`Quarantine.next_due`);
- an assumed write outlives `assume_ttl_s` (`AssumeLedger.next_expiry`).

Errs early, never late: a time may be one at which nothing turns out to change (a status due
whose state was set since, a ledger entry forgotten already); stepping then writes nothing.
Not woken for: the age a Stale or Expired cluster's reason quotes, which moves with every
step (the daemon's resync refreshes it).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from gpufleet.controller.status import Trust
from gpufleet.core.model import Cluster

#: The least step of time: ages are compared with `>` (`cluster_freshness`, the ledger's
#: `ttl_s`), so a state crosses just after the time it is computed from.
TICK = timedelta(microseconds=1)


def status_due(
    dues: list[tuple[datetime, str]], current: Mapping[str, datetime | None]
) -> datetime | None:
    """The earliest standing entry of the step's heap of status dues (`current` holds each
    cluster's due now); entries set aside since are dropped on the way."""
    while dues and current.get(dues[0][1]) != dues[0][0]:
        heapq.heappop(dues)
    return dues[0][0] if dues else None


def trust_due(
    moving: Iterable[str],
    trusts: Mapping[str, Trust],
    heard: Mapping[str, datetime | None],
    skew_s: float,
    silence_s: float,
) -> datetime | None:
    """When the earliest Trust among `moving` may change with the clock: a future report
    comes within the skew tolerance, or a contested fence's incarnation falls silent."""
    times: list[datetime] = []
    for name in moving:
        trust = trusts[name]
        times.extend(r.observed_at - timedelta(seconds=skew_s) for r in trust.future)
        at = heard.get(name)
        if trust.is_contested and at is not None:
            times.append(at + timedelta(seconds=silence_s) + TICK)
    return min(times, default=None)


def after(at: datetime | None) -> datetime | None:
    """Just after `at`: a state moves once an age is *over* its limit (`next_state_change`)."""
    return at + TICK if at is not None else None


def earliest_after(now: datetime, times: Iterable[datetime | None]) -> datetime | None:
    """The earliest of `times` after `now` (None: none is)."""
    return min((t for t in times if t is not None and t > now), default=None)


def untimed(cluster: Cluster) -> Cluster:
    """`cluster` without its report times: the core reads those only through the cluster's
    freshness (`cluster_freshness`), which the step compares on its own
    (`SchedulingInputs.freshness`)."""
    pools = tuple(
        dataclasses.replace(p, observation=dataclasses.replace(p.observation, observed_at=None))
        if p.observation is not None and p.observation.observed_at is not None
        else p
        for p in cluster.pools
    )
    return dataclasses.replace(cluster, pools=pools, agent_observed_at=None)


def last_report(cluster: Cluster) -> datetime | None:
    """The time `cluster_freshness` ages the cluster from."""
    if cluster.agent_observed_at is not None:
        return cluster.agent_observed_at
    times = [p.observation.observed_at for p in cluster.pools if p.observation is not None]
    present = [t for t in times if t is not None]
    return max(present) if present else None
