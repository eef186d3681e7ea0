"""`ClusterStatuses`: what the controller knows of each cluster's status between steps.

Two kinds of state, kept apart so that what correctness needs is visible as such:

- Correctness state, kept when the controller forgets the hub (`forget`): the fence (Lease
  incarnation, highest epoch accepted) per cluster and when it was last heard (`epochs`), and
  when each observation version was first seen (`receipts`: reports age from it). A
  controller without them could accept a fenced-out report again, or age a report from a
  later receipt.
- Derived state, rebuilt from the hub after `forget`: each cluster's `Trust`, the clusters
  whose trust rejects reports or moves with the clock, and when each status falls due.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.controller.fence import Fence, remember
from gpufleet.controller.index import Receipts
from gpufleet.controller.status import Trust, VerdictMemo


@dataclass(slots=True)
class ClusterState:
    """What a cluster's status was last computed from, and when it falls due again."""

    #: (resourceVersion, classes, `cluster_inputs`, freshness states) of the last status
    #: found in place, or of the object just written (its status is the one desired of it):
    #: the same again needs no computing.
    settled: tuple[object, ...] | None = None
    #: When a time of the cluster's crosses into another freshness state, or its status
    #: refresh falls due (None: never).
    due: datetime | None = None
    #: The verdicts on its pool reports, kept while what they read stays.
    verdicts: VerdictMemo = field(default_factory=VerdictMemo)
    #: (resourceVersion, `published_fence`) of the object last judged.
    fence_read: tuple[str, tuple[Fence, datetime | None] | None] | None = None


class ClusterStatuses:
    """Per cluster: its fence and receipts (correctness state), its trust and its status's
    dues (derived). See the module docstring."""

    __slots__ = ("clusters", "dues", "epochs", "moving", "receipts", "rejecting", "trusts")

    def __init__(self, expire_after_s: float) -> None:
        #: Correctness state. The fence (Lease incarnation, highest epoch accepted) per
        #: cluster, and when it was last heard (also persisted in its status).
        self.epochs: dict[str, tuple[Fence, datetime | None]] = {}
        #: Correctness state. When each observation version was first seen (index.py):
        #: reports age from it.
        self.receipts = Receipts(expire_after_s)
        self.forget()

    def forget(self) -> None:
        """Forget what is derived from the hub (the next step judges every cluster again);
        the epochs and receipts stay."""
        self.trusts: dict[str, Trust] = {}
        #: Clusters whose Trust rejects reports (their events are repeated every step), and
        #: those whose Trust moves with the clock (reports in the future, a contested fence).
        self.rejecting: set[str] = set()
        self.moving: set[str] = set()
        #: When clusters' statuses fall due: (due, name), the stale ones skipped when popped.
        self.dues: list[tuple[datetime, str]] = []
        #: What each cluster's status was last computed from (`ClusterState`).
        self.clusters: dict[str, ClusterState] = {}

    def forget_cluster(self, name: str) -> None:
        """Forget the trust of a cluster that is gone."""
        self.trusts.pop(name, None)
        self.rejecting.discard(name)
        self.moving.discard(name)

    def heard(self) -> dict[str, datetime | None]:
        """When each cluster's fence was last heard (`dues.trust_due`)."""
        return {name: fence[1] for name, fence in self.epochs.items()}

    def status_dues(self) -> dict[str, datetime | None]:
        """When each cluster's status falls due by time alone (`dues.status_due`)."""
        return {name: state.due for name, state in self.clusters.items()}

    def judged(self, name: str, trust: Trust, known: Fence | None, heard: datetime | None) -> None:
        """Keep the cluster's new `trust`, judged with the fence `known` (last heard at
        `heard`): the fence it accepted is remembered (`fence.remember`)."""
        self.trusts[name] = trust
        if trust.fence is not None:
            self.epochs[name] = remember(known, heard, trust.fence, trust.heard_at)
        for table, is_in in (
            (self.rejecting, trust.rejected),
            (self.moving, trust.future or trust.is_contested),
        ):
            if is_in:
                table.add(name)
            else:
                table.discard(name)

    def fall_due(self, name: str, state: ClusterState, due: datetime | None) -> None:
        """Set when the cluster's status next falls due by time alone (None: never)."""
        state.due = due
        if due is not None:
            heapq.heappush(self.dues, (due, name))

    def take_due(self, now: datetime) -> set[str]:
        """The clusters whose status fell due by `now` (an entry whose cluster's due moved
        since is stale, and skipped)."""
        names: set[str] = set()
        while self.dues and self.dues[0][0] <= now:
            due, name = heapq.heappop(self.dues)
            state = self.clusters.get(name)
            if state is not None and state.due == due:
                names.add(name)
        return names
