"""`DaemonLoop`: run a reconcile step when watched objects change or a resync timer fires, on
the replica that holds a Lease. The generic half of `gpufleet controller` and `gpufleet agent`
(`gpufleet.cli` plugs in the hub `Controller` or an `Agent`; this package imports neither).

**Watching.** Each `Watch` starts an informer on a `KubeStore` (`KubeStore.watch`, optionally
namespace- and label-scoped). Changes of a watch with `triggers=True` mark the loop dirty;
others only feed readiness (for example the agent watches its own observations on the hub, which
proves its hub credentials can read them, without waking up on its own writes). A feed that
expired (`Expired`) counts as a change. Every store the loop watches sets one shared
`threading.Event` on each change (`KubeStore.wake_on_change`), so `run()` wakes at once on a
change in ANY of its stores (the agent watches its cluster and the hub), never by polling; the
election thread sets it too when leadership changes. The loop reads only the changes of its
triggering kinds from each store's feed (`changes(cursor, kinds)`), after its own cursor.

**Leadership.** With a `LeaderElector`, the loop campaigns once every required watch has synced,
and only the leader reconciles. A term starts when the elector leads under an epoch
(`leaseTransitions`) the loop has not started: `start(epoch)` builds a fresh reconcile function
for it (a new `Controller` with an empty assume ledger, a new `Agent` stamping the epoch), and it
runs at once. A term ends when the elector stops leading (no renewal within the renew deadline,
or another holder): nothing runs until the next term. Without an elector the loop always leads,
with epoch None.

**When a step runs** (one at a time), by `Trigger`:

- `start`: at the start of a term;
- `change`: at once on a change after a quiet spell, else `debounce_s` after the previous
  step started: steps run at most once per `debounce_s` (a burst, such as a rollout or a node
  pool scaling, costs at most two steps: one for its first change, one for the rest), and a
  change waits at most `debounce_s`. (A step that starts on a change also sees every change
  that arrived before it reads the store.)
- `requested`: at the time the previous step asked for (the agent's minimum push interval);
- `resync`: `resync_period_s` after the last step, changes or not (heartbeats, time-based
  state such as observation expiry, and a bound on staleness if a watch died silently);
- `retry`: `error_backoff_s` after a step that raised; nothing else runs before that.

`tick()` does one round (an election attempt when due, then a step when due) on the injected
clock: tests drive it deterministically. `run(stop)` is the process: it syncs the watches, runs
the election on a thread of its own (a long step must not starve the renewals), runs steps as
they fall due, and on `stop` releases the Lease so a standby takes over at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.kube.health import TEXT, Check, EndpointServer, Route, checks_response, parse_address
from gpufleet.kube.leader import LeaderElector
from gpufleet.kube.metrics import LoopMetrics
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import Expired, Kind, StoreError

log = logging.getLogger(__name__)


class Trigger(StrEnum):
    START = "start"
    CHANGE = "change"
    REQUESTED = "requested"
    RESYNC = "resync"
    RETRY = "retry"


#: One step: given the time and what triggered it, reconcile; returns when it wants to run
#: again regardless of changes (None: on the next change or resync).
Reconcile = Callable[[datetime, Trigger], datetime | None]


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Periods of a `DaemonLoop`, in seconds."""

    debounce_s: float = 0.5
    resync_period_s: float = 30.0
    error_backoff_s: float = 5.0
    #: Longest `run()` blocks without a change or a deadline: how soon it notices its stop flag
    #: (changes and leadership changes wake it at once).
    max_wait_s: float = 0.25

    def __post_init__(self) -> None:
        for name in ("resync_period_s", "error_backoff_s", "max_wait_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.debounce_s < 0:
            raise ValueError("debounce_s must not be negative")


@dataclass(frozen=True, slots=True)
class Watch:
    """An informer the loop keeps: `kind` in `namespace` (None: all) matching `label_selector`.

    `required` watches must list successfully before the loop is ready and campaigns; an
    optional one (a CRD that may not be installed) is started without waiting for it.
    """

    store: KubeStore
    kind: Kind
    namespace: str | None = None
    label_selector: str | None = None
    triggers: bool = True
    required: bool = True

    @property
    def name(self) -> str:
        scope = self.namespace or "*"
        selector = f"[{self.label_selector}]" if self.label_selector else ""
        return f"{self.kind.kind}/{scope}{selector}"


@dataclass
class _Feed:
    """One store's change feed as the loop reads it: the kinds that trigger a step, and the
    cursor up to which the loop has read."""

    store: KubeStore
    triggering: tuple[Kind, ...]
    cursor: int = 0


@dataclass
class _Term:
    epoch: int | None
    reconcile: Reconcile
    last_run_at: datetime | None = None
    requested_at: datetime | None = None
    retry_at: datetime | None = None


@dataclass
class DaemonLoop:
    """See the module docstring. Not thread-safe except `run`'s own election thread."""

    component: str
    watches: Sequence[Watch]
    start: Callable[[int | None], Reconcile]
    clock: Callable[[], datetime]
    config: LoopConfig = field(default_factory=LoopConfig)
    elector: LeaderElector | None = None
    metrics: LoopMetrics | None = None

    is_synced: bool = field(default=False, init=False)
    #: Steps run, steps that raised, and the last one's trigger (for tests and logs).
    steps: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    last_trigger: Trigger | None = field(default=None, init=False)
    last_error: str | None = field(default=None, init=False)
    _term: _Term | None = field(default=None, init=False)
    _dirty_since: datetime | None = field(default=None, init=False)
    _feeds: list[_Feed] = field(default_factory=list, init=False)
    #: Set by every watched store on a change and by the election thread on a leadership
    #: change; cleared when the loop looks at the feeds.
    _wake: threading.Event = field(default_factory=threading.Event, init=False)
    _next_election_at: datetime | None = field(default=None, init=False)
    _has_campaigned: bool = field(default=False, init=False)
    _has_crashed: bool = field(default=False, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        for watch in self.watches:
            feed = next((f for f in self._feeds if f.store is watch.store), None)
            if feed is None:
                feed = _Feed(watch.store, ())
                self._feeds.append(feed)
            if watch.triggers and watch.kind not in feed.triggering:
                feed.triggering += (watch.kind,)

    # --- watches --------------------------------------------------------------------------

    def sync(self) -> bool:
        """Start every watch; True once all required ones have listed. Safe to call again."""
        if self.is_synced:
            return True
        try:
            for watch in self.watches:
                watch.store.watch(
                    watch.kind, watch.namespace, watch.label_selector, wait=watch.required
                )
        except StoreError as e:
            self.last_error = f"sync: {e}"
            log.warning("%s: watches not synced: %s", self.component, e, extra=self._extra())
            return False
        for feed in self._feeds:
            feed.store.wake_on_change(self._wake)
            feed.cursor = feed.store.cursor
        self.is_synced = True
        log.info("%s: watches synced", self.component, extra=self._extra())
        return True

    def _poll_feed(self, now: datetime) -> None:
        self._wake.clear()  # a change from here on wakes the loop again
        for feed in self._feeds:
            if feed.store.cursor <= feed.cursor:
                continue
            try:
                changes, feed.cursor = feed.store.changes(feed.cursor, feed.triggering)
                is_changed = bool(changes)
            except Expired:
                feed.cursor = feed.store.cursor
                is_changed = True
            if is_changed and self._dirty_since is None:
                self._dirty_since = now

    # --- leadership -----------------------------------------------------------------------

    def elect(self) -> None:
        """One election attempt if one is due (every `retry_period_s`) and the loop synced."""
        if self.elector is None or not self.is_synced:
            return
        now = self.clock()
        if self._next_election_at is not None and now < self._next_election_at:
            return
        self.elector.step()
        self._has_campaigned = True
        self._next_election_at = now + timedelta(seconds=self.elector.config.retry_period_s)

    def _leadership(self) -> tuple[bool, int | None]:
        if self.elector is None:
            return self.is_synced, None
        epoch = self.elector.epoch
        return (self.elector.is_leading() and epoch is not None), epoch

    def is_leading(self) -> bool:
        return self._term is not None

    @property
    def epoch(self) -> int | None:
        return self._term.epoch if self._term is not None else None

    def _follow_leadership(self) -> None:
        is_leading, epoch = self._leadership()
        term = self._term
        if term is not None and (not is_leading or epoch != term.epoch):
            log.info(
                "%s: stopped leading (epoch %s)",
                self.component,
                term.epoch,
                extra=self._extra(epoch=term.epoch),
            )
            self._term = None
        has_started = is_leading and self._term is None
        if has_started:
            self._term = _Term(epoch, self.start(epoch))
            self._dirty_since = None
        if self.metrics is not None:
            self.metrics.set_leader(self._term is not None, epoch)
        if has_started:
            # Logged once the term and the gauge exist: whoever reads this line and then asks
            # /readyz or /metrics sees "leading".
            log.info(
                "%s: started leading (epoch %s)", self.component, epoch, extra=self._extra(epoch)
            )

    # --- steps ----------------------------------------------------------------------------

    def _due(self, now: datetime) -> Trigger | None:
        term = self._term
        if term is None:
            return None
        if term.retry_at is not None:
            return Trigger.RETRY if now >= term.retry_at else None
        if term.last_run_at is None:
            return Trigger.START
        if self._dirty_since is not None and now >= self._change_due(term.last_run_at):
            return Trigger.CHANGE
        if term.requested_at is not None and now >= term.requested_at:
            return Trigger.REQUESTED
        if now >= term.last_run_at + timedelta(seconds=self.config.resync_period_s):
            return Trigger.RESYNC
        return None

    def _change_due(self, last_run_at: datetime) -> datetime:
        """When an unhandled change runs a step: at once, but not within `debounce_s` of the
        previous step's start."""
        assert self._dirty_since is not None
        return max(self._dirty_since, last_run_at + timedelta(seconds=self.config.debounce_s))

    def reconcile_if_due(self) -> Trigger | None:
        """Look at the feed and leadership; run one step if one is due. Returns its trigger."""
        now = self.clock()
        self._poll_feed(now)
        self._follow_leadership()
        trigger = self._due(now)
        term = self._term
        if trigger is None or term is None:
            return None
        self._dirty_since = None  # changes during the step mark it dirty again
        term.requested_at = term.retry_at = None
        self.steps += 1
        self.last_trigger = trigger
        try:
            term.requested_at = term.reconcile(now, trigger)
        except Exception as e:
            term.retry_at = now + timedelta(seconds=self.config.error_backoff_s)
            self.failures += 1
            self.last_error = f"{type(e).__name__}: {e}"
            log.exception(
                "%s: step failed; retrying in %ss",
                self.component,
                self.config.error_backoff_s,
                extra=self._extra(trigger=trigger.value),
            )
            if self.metrics is not None:
                self.metrics.failed()
        else:
            self.last_error = None
        term.last_run_at = now
        if self.metrics is not None:
            self.metrics.reconciled(trigger.value)
        return trigger

    def tick(self) -> Trigger | None:
        """An election attempt when due, then a step when due (deterministic on the clock)."""
        if not self.is_synced:
            self.sync()
        self.elect()
        return self.reconcile_if_due()

    def seconds_to_next(self) -> float:
        """How long until something is due on the clock (the feed may wake the loop sooner)."""
        now = self.clock()
        deadlines: list[datetime] = []
        term = self._term
        if term is not None:
            if term.retry_at is not None:
                deadlines.append(term.retry_at)
            elif term.last_run_at is None:
                return 0.0
            else:
                if self._dirty_since is not None:
                    deadlines.append(self._change_due(term.last_run_at))
                if term.requested_at is not None:
                    deadlines.append(term.requested_at)
                deadlines.append(term.last_run_at + timedelta(seconds=self.config.resync_period_s))
        wait_s = self.config.max_wait_s
        for deadline in deadlines:
            wait_s = min(wait_s, (deadline - now).total_seconds())
        return max(0.0, wait_s)

    # --- the process ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sync, campaign and reconcile until `stop` is set; then release the Lease."""
        election: threading.Thread | None = None
        try:
            while not stop.is_set() and not self.sync():
                stop.wait(self.config.error_backoff_s)
            if self.elector is not None:
                election = threading.Thread(
                    target=self._run_election, name=f"{self.component}-election", daemon=True
                )
                election.start()
            while not stop.is_set():
                self.reconcile_if_due()
                self._wait(self.seconds_to_next())
        except BaseException:
            self._has_crashed = True
            raise
        finally:
            self._stopping.set()
            if election is not None:
                election.join(10)
            self.shutdown()

    def _run_election(self) -> None:
        assert self.elector is not None
        period_s = self.elector.config.retry_period_s
        while not self._stopping.is_set():
            before = self._leadership()
            try:
                self.elect()
            except Exception:  # the elector logs store errors itself; this is a bug
                log.exception("%s: election failed", self.component, extra=self._extra())
            if self._leadership() != before:
                self._wake.set()  # start or end the term now, not at the next timeout
            self._stopping.wait(min(period_s, self.config.max_wait_s * 4))

    def _wait(self, timeout_s: float) -> None:
        """Block until a watched store changes, leadership changes, or `timeout_s` passes."""
        if timeout_s > 0:
            self._wake.wait(timeout_s)

    def shutdown(self) -> None:
        """Stop leading and release the Lease (a standby takes over at once). Idempotent."""
        self._stopping.set()
        for feed in self._feeds:
            feed.store.stop_waking(self._wake)
        if self._term is not None:
            log.info("%s: releasing the lease", self.component, extra=self._extra())
        self._term = None
        if self.elector is not None and self.elector.epoch is not None:
            self.elector.release()
        if self.metrics is not None:
            self.metrics.set_leader(False, None)

    # --- health ---------------------------------------------------------------------------

    def is_alive(self) -> bool:
        """False only when the loop died of an unexpected error (the process should restart)."""
        return not self._has_crashed

    def readiness(self) -> list[Check]:
        """`/readyz`: the watches synced, and the loop leads or stands by."""
        checks = [
            Check("informers", self.is_synced, "" if self.is_synced else (self.last_error or ""))
        ]
        if self.elector is None:
            checks.append(Check("leader-election", True, "disabled"))
        elif self._term is not None:
            checks.append(Check("leader-election", True, f"leading, epoch {self._term.epoch}"))
        elif self._has_campaigned:
            holder = (
                self.elector.state.observed.holder_identity if self.elector.state.observed else ""
            )
            checks.append(Check("leader-election", True, f"standing by, leader {holder or '?'}"))
        else:
            checks.append(Check("leader-election", False, "not campaigned yet"))
        return checks

    def _extra(self, epoch: int | None = None, **more: object) -> dict[str, object]:
        extra: dict[str, object] = {"component": self.component, **more}
        if self.elector is not None:
            extra["identity"] = self.elector.identity
        if epoch is not None:
            extra["epoch"] = epoch
        return extra


# --- running a daemon as a process ------------------------------------------------------------


def endpoints(
    loop: DaemonLoop,
    metrics: Callable[[], tuple[int, str, bytes]],
    metrics_address: str,
    health_address: str,
) -> list[EndpointServer]:
    """Serve `/metrics` on `metrics_address` and `/healthz`, `/readyz` on `health_address`
    (one server when the addresses are equal; an address of `0` turns its endpoints off)."""

    def healthz() -> tuple[int, str, bytes]:
        if loop.is_alive():
            return 200, TEXT, b"ok\n"
        return 500, TEXT, f"the loop stopped: {loop.last_error}\n".encode()

    def readyz() -> tuple[int, str, bytes]:
        return checks_response(loop.readiness())

    health_routes: dict[str, Route] = {"/healthz": healthz, "/readyz": readyz}
    metrics_routes: dict[str, Route] = {"/metrics": metrics}
    by_address: dict[tuple[str, int], dict[str, Route]] = {}
    for address, routes in ((health_address, health_routes), (metrics_address, metrics_routes)):
        parsed = parse_address(address)
        if parsed is not None:
            by_address.setdefault(parsed, {}).update(routes)
    servers = []
    try:
        for parsed, routes in by_address.items():
            servers.append(EndpointServer(parsed, routes))
            log.info(
                "%s: serving %s on %s:%d",
                loop.component,
                " ".join(sorted(routes)),
                parsed[0] or "*",
                servers[-1].port,
                extra={
                    "component": loop.component,
                    "paths": sorted(routes),
                    "port": servers[-1].port,
                },
            )
    except OSError:
        for server in servers:
            server.close()
        raise
    return servers


def run_until_signalled(
    loop: DaemonLoop, servers: Sequence[EndpointServer], stores: Sequence[KubeStore]
) -> None:
    """Run `loop` until SIGTERM or SIGINT; then release the Lease and close everything."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info(
            "%s: %s received, shutting down",
            loop.component,
            signal.Signals(signum).name,
            extra={"component": loop.component},
        )
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        loop.run(stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for server in servers:
            server.close()
        for store in stores:
            store.close()
        log.info("%s: stopped", loop.component, extra={"component": loop.component})
