"""Every `Derive` plans as `FRESH` does, over sequences of snapshots.

`FRESH` (core/derive.py) derives everything plainly and is the specification; `ScheduleMemo`
(kept across calls, keyed by declared signatures) and `SHARED` (shared within one call) are
the reuse above it (core/reuse/). Histories as in test_schedule_memo.py (deployments added,
removed, scaled, redefined; replicas created, re-stamped, deleted, re-observed; clusters
relabelled, tainted, re-classed; time passing; gangs, P/D and growth through the deployment
strategy), plus re-placement: `Snapshot.avoid` entries that name a replica found stuck
(dropped and placed elsewhere unless its pods are scheduled) or a pool to back off from, and
that end as time passes. Each call's `Plan` (with `record` and `explain`) must be equal.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_schedule_memo import CHANGES, SETTINGS, SETTLES, Signer, a_start, change, settle

from builders import NOW
from gpufleet.core.derive import FRESH, Derive
from gpufleet.core.model import Avoid, PoolName, ReplicaStatus, Snapshot
from gpufleet.core.reuse import SHARED, ScheduleMemo
from gpufleet.core.schedule import plan


def _avoid(draw: st.DrawFn, snap: Snapshot, now: object) -> Snapshot:
    """`snap` with one more `Snapshot.avoid` entry: for a replica (made unscheduled, so it is
    re-placed) or, when there is none, for a deployment on a cluster's pool or whole cluster."""
    if not snap.deployments or not snap.clusters:
        return snap
    assert isinstance(now, type(NOW))
    until = now + timedelta(seconds=draw(st.sampled_from([-10, 60, 300])))
    if snap.replicas and draw(st.booleans()):
        i = draw(st.integers(0, len(snap.replicas) - 1))
        r = snap.replicas[i]
        stuck = replace(r, status=ReplicaStatus(pods_scheduled=False))
        pool = r.engines[0].members[0].pool if r.engines and r.engines[0].members else None
        entry = Avoid(r.deployment, r.cluster, pool, until, "PodsUnschedulable", "stuck", r.name)
        replicas = (*snap.replicas[:i], stuck, *snap.replicas[i + 1 :])
        return replace(snap, replicas=replicas, avoid=(*snap.avoid, entry))
    d = snap.deployments[draw(st.integers(0, len(snap.deployments) - 1))]
    c = snap.clusters[draw(st.integers(0, len(snap.clusters) - 1))]
    pool = (
        PoolName(c.pools[draw(st.integers(0, len(c.pools) - 1))].name)
        if c.pools and draw(st.booleans())
        else None
    )
    entry = Avoid(d.key, c.name, pool, until, "PolicyDenied", "denied")
    return replace(snap, avoid=(*snap.avoid, entry))


def _derives() -> dict[str, Derive]:
    return {"kept": ScheduleMemo(), "shared": SHARED}


@settings(SETTINGS, max_examples=3 * SETTINGS.max_examples)
@given(st.data())
def test_every_derive_plans_as_fresh_over_a_history_with_re_placement(
    data: st.DataObject,
) -> None:
    snap = a_start(data, deployments=3)
    derives = _derives()
    now = NOW
    steps = st.tuples(st.sampled_from(SETTLES), st.sampled_from((*CHANGES, "avoid", "avoid")))
    history = data.draw(st.lists(steps, min_size=1, max_size=10))
    sign = Signer()
    for step, (how, kind) in enumerate([("none", "nothing"), *history]):
        keys = frozenset(d.key for d in snap.deployments)
        fresh = plan(snap, now, record=True, explain=keys, derive=FRESH)
        signed = sign(snap)
        for name, derive in derives.items():
            got = plan(signed, now, record=True, explain=keys, derive=derive)
            assert got == fresh, f"{name}, step {step}: after {how}, {kind}"
        dropped = {g.reason.code for d in fresh.decision.deployments for g in d.dropped}
        event(f"re-placed: {bool(dropped & {'PodsUnschedulable', 'PolicyDenied'})}")
        if how != "none":
            snap = settle(snap, fresh.decision, report=how == "reported")
        if kind == "later":
            now += timedelta(seconds=data.draw(st.sampled_from([30, 120, 600])))
        if kind == "avoid":
            snap = _avoid(data.draw, snap, now)
        else:
            snap = change(data.draw, kind, snap, step)
