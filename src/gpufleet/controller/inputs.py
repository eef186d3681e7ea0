"""`SchedulingInputs`: the core's view of the hub, kept across steps. It emits the core's
`Snapshot` (`snapshot`) and says whether it moved since the last decision (`moved`, and the
clusters' freshness as the decision reads it, `freshness`).

All of it is derived state: a controller that forgets it (a fresh `SchedulingInputs`) lists
the hub again and builds the same view.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from gpufleet.api import FieldError
from gpufleet.controller.conditions import ReadObj
from gpufleet.controller.dues import last_report as _last_report
from gpufleet.controller.index import Key
from gpufleet.core.capacity import cluster_freshness
from gpufleet.core.decision import ObservationState
from gpufleet.core.model import Avoid, Cluster, Deployment, Replica, SchedulingConfig, Snapshot

#: The core's Deployment of a `SchedulingInputs.deployments` entry (mapped at C speed).
_CORE: Final = operator.itemgetter(1)

#: A due time that never comes.
_NEVER: Final = datetime.max.replace(tzinfo=UTC)


class SchedulingInputs:
    """The clusters, deployments and replicas as the core reads them, the ones that cannot be
    read, and each cluster's freshness (see the module docstring)."""

    def __init__(self) -> None:
        #: Whether a scheduling input changed since the last decision.
        self.moved = False
        #: Per cluster, as the core reads it (reported), and the unreadable ones' errors.
        self.reported: dict[str, Cluster] = {}
        self.cluster_errors: dict[str, str] = {}
        #: Per cluster: (resourceVersion, classes) converted with, the core Cluster, and the
        #: same untimed (None: not needed yet, `Controller._update_cores`).
        self.core: dict[str, tuple[tuple[object, ...], Cluster, Cluster | None]] = {}
        #: Each cluster's freshness as the decision reads it, and when one may move.
        self.fresh: dict[str, tuple[object, ...]] = {}
        self.fresh_due: datetime | None = None
        self.fresh_next: datetime | None = None  # (the earliest crossing, aging or not)
        #: Per cluster: when its Fresh state crosses into Stale (None: never by time alone),
        #: and whether it ages (a quoted age moves every step); the clusters to compute again.
        self.fresh_times: dict[str, tuple[datetime | None, bool]] = {}
        self.fresh_moved: set[str] = set()
        #: The deployments not being deleted, valid (with the core's Deployment) or not.
        self.deployments: dict[Key, tuple[ReadObj, Deployment]] = {}
        self.invalid: dict[Key, tuple[ReadObj, list[FieldError]]] = {}
        #: The deployments whose read raised (quarantined): their replicas are kept.
        self.unread: dict[Key, ReadObj] = {}
        #: The replicas not being deleted: objects, as the core reads them, and errors.
        self.replica_objs: dict[Key, ReadObj] = {}
        self.replica_cores: dict[Key, Replica] = {}
        self.replica_errors: dict[Key, str] = {}
        #: The replicas that may be or become stuck (`replace.is_waiting`).
        self.waiting: dict[Key, tuple[Replica, ReadObj]] = {}

    def unreadable(self) -> list[str]:
        """The inputs that cannot be read (scheduling fails closed), clusters first."""
        lines = [e for _, e in sorted(self.cluster_errors.items())]
        lines.extend(error for _, error in sorted(self.replica_errors.items()))
        return lines

    def snapshot(
        self,
        config: SchedulingConfig,
        avoid: tuple[Avoid, ...],
        deployments: Mapping[Key, tuple[ReadObj, Deployment]] | None = None,
    ) -> Snapshot:
        """The core's `Snapshot` of these inputs (of `deployments` only, when given)."""
        chosen = self.deployments if deployments is None else deployments
        return Snapshot(
            deployments=tuple(map(_CORE, chosen.values())),
            clusters=tuple(self.reported[name] for name in sorted(self.reported)),
            replicas=tuple(self.replica_cores.values()),
            config=config,
            avoid=avoid,
        )

    def freshness(self, now: datetime, config: SchedulingConfig) -> dict[str, tuple[object, ...]]:
        """What the decision reads of `now`: each cluster's freshness state, and its age
        where a reason quotes it (Stale, Expired). Computed again for the clusters whose
        reports moved (`fresh_moved`), and for all when a state may have crossed
        (`fresh_due`) or an age is quoted."""
        due, moved = self.fresh_due, self.fresh_moved
        if due is not None and now < due and not moved:
            return self.fresh
        if due is not None and now < due:
            names: Iterable[str] = moved
            fresh: dict[str, tuple[object, ...]] = {}  # the moved ones (None: gone)
        else:
            names, fresh, self.fresh_times = list(self.reported), {}, {}
        for name in names:
            cluster = self.reported.get(name)
            if cluster is None:
                fresh[name] = ()
                self.fresh_times.pop(name, None)
                continue
            state = cluster_freshness(cluster, now, config)
            quoted = state.state in (ObservationState.STALE, ObservationState.EXPIRED)
            fresh[name] = (state.state, state.age_s if quoted else None)
            last = _last_report(cluster)
            crossing = None
            if state.state is ObservationState.FRESH and last is not None:
                crossing = last + timedelta(seconds=config.stale_after_s)
            elif state.state is ObservationState.STALE and last is not None:
                crossing = last + timedelta(seconds=config.expire_after_s)  # (it ages: quoted)
            self.fresh_times[name] = (crossing, quoted and state.age_s is not None)
        if names is moved:
            # A new dict only when a state moved: the last decision keeps the one it read,
            # and the same dict again tells the step nothing moved without comparing.
            was = self.fresh
            if any(was.get(name, ()) != value for name, value in fresh.items()):
                changed = {**was, **fresh}
                fresh = {name: value for name, value in changed.items() if value != ()}
            else:
                fresh = was
        self.fresh, self.fresh_moved = fresh, set()
        times = self.fresh_times.values()
        is_aging = any(aging for _, aging in times)
        crossings = [at for at, _ in times if at is not None]
        self.fresh_due = None if is_aging else min(crossings, default=_NEVER)
        self.fresh_next = min(crossings, default=None)
        return fresh
