"""`KubeStore`: the `Store` port over a real Kubernetes API server, through lightkube.

Reads and writes are synchronous HTTP calls (lightkube's sync `Client`), mapped onto the port's
errors: 404 -> `NotFound`, 409 on create -> `AlreadyExists`, any other 409 -> `Conflict` (a
stale `resourceVersion`: re-read and retry), 400/422 -> `Invalid`, 410 -> `Expired`; anything
else, transport errors included, is a plain `StoreError`. `update` is a PUT carrying the
object's `resourceVersion`, `patch_status` a JSON merge patch of the status subresource
(guarded when given a `resourceVersion`).

The change feed is built from one informer per watched kind, all running as tasks on one
asyncio loop in a background thread (lightkube's `AsyncClient`). An informer lists, then
watches from the list's `resourceVersion`; a watch that ends is resumed from the last version
it delivered; `410 Gone` means that version was compacted and the informer lists again; other
errors back off exponentially (`backoff_initial_s` doubling to `backoff_max_s`). Every
`resync_period_s` the informer abandons its watch and lists again, so a watch that died
silently (an open connection that delivers nothing) leaves the feed stale for at most that
long.

Every event is checked against the informer's cache before it enters the feed: an object whose
`resourceVersion` is already cached is a duplicate and dropped, a DELETED for an object not
cached is dropped, and a relist emits only what differs from the cache (ADDED for new objects,
MODIFIED for changed versions, DELETED for vanished ones). So a reader sees each change once, in
the order the informer learned of it, under a cursor of our own that only grows. Changes that
happen and are undone between two lists (while no watch was up) are not seen; the feed
converges to the server's state, as an informer does.

**Reading the feed.** `changes(cursor, kinds)` returns the changes after `cursor` of the given
kinds, in cursor order, and the cursor to pass next time; its cost grows with the changes it
returns, not with the feed's length (the feed is kept per kind and read from its newest end). The
feed keeps the last `feed_capacity` changes of each kind: a reader whose cursor is older than a
dropped change of a kind it asks for gets `Expired` and lists again (a burst of Events cannot
expire a reader of ModelReplicas); so does a cursor this store never handed out (beyond its
newest). The objects in the changes are the informer's own, shared with `view`: read-only.
`wake_on_change(event)` sets a `threading.Event` on every change, so one waiter can block on
several stores at once (the daemon loop does).

`changes(cursor, kinds)` starts an informer (cluster-wide) for each requested kind that has
none and waits up to `initial_sync_timeout_s` for its first list; `watch()` starts one scoped
to a namespace and label selector instead (an agent on the hub may read only its namespace).
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, Client, operators
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.generic_client import ALL_NS
from lightkube.types import PatchType

from gpufleet.kube.renewal import BearerToken, transports
from gpufleet.kube.resources import resource_class, to_obj
from gpufleet.store.labels import Op, matches, parse_selector
from gpufleet.store.port import (
    LATEST,
    AlreadyExists,
    Change,
    ChangeType,
    Conflict,
    Expired,
    Invalid,
    Kind,
    NotFound,
    Obj,
    StoreError,
    kind_of,
)

log = logging.getLogger(__name__)

_ObjKey = tuple[str, str]  # namespace ("" if cluster-scoped), name


@dataclass(frozen=True, slots=True)
class KubeStoreConfig:
    """Timeouts and periods of a `KubeStore`; every duration is in seconds."""

    request_timeout_s: float = 10.0
    #: Server-side `timeoutSeconds` of one watch request; the informer then resumes the watch.
    watch_timeout_s: int = 290
    #: How often an informer lists again: the bound on staleness if a watch dies silently.
    resync_period_s: float = 300.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    #: How long `changes()` waits for a newly started informer's first list.
    initial_sync_timeout_s: float = 30.0
    #: How many changes of each kind the feed keeps for readers.
    feed_capacity: int = 100_000
    field_manager: str = "gpufleet"

    def __post_init__(self) -> None:
        for name in ("request_timeout_s", "resync_period_s", "backoff_initial_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be at least backoff_initial_s")
        if self.watch_timeout_s < 1 or self.feed_capacity < 1:
            raise ValueError("watch_timeout_s and feed_capacity must be at least 1")


@dataclass(frozen=True, slots=True)
class _WatchKey:
    kind: Kind
    namespace: str | None
    label_selector: str | None


class _Backoff:
    def __init__(self, config: KubeStoreConfig) -> None:
        self._config = config
        self._next_s = config.backoff_initial_s

    def next_s(self) -> float:
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self._config.backoff_max_s)
        return delay

    def reset(self) -> None:
        self._next_s = self._config.backoff_initial_s


def _labels(selector: str | Mapping[str, str] | None) -> Any:
    """A label selector in lightkube's form: a list of (key, operator) pairs.

    lightkube accepts a list as well as the dict its annotation names; a list keeps repeated
    keys (`a!=x,a!=y`). Typed `Any` for that reason.
    """
    requirements = parse_selector(selector)
    if not requirements:
        return None
    pairs: list[tuple[str, Any]] = []
    for r in requirements:
        values = sorted(r.values)
        match r.op:
            case Op.EQUALS:
                pairs.append((r.key, operators.equal(values[0])))
            case Op.NOT_EQUALS:
                pairs.append((r.key, operators.not_equal(values[0])))
            case Op.EXISTS:
                pairs.append((r.key, operators.exists()))
            case Op.NOT_EXISTS:
                pairs.append((r.key, operators.not_exists()))
            case Op.IN:
                pairs.append((r.key, operators.in_(values)))
            case Op.NOT_IN:
                pairs.append((r.key, operators.not_in(values)))
    return pairs


def _store_error(e: Exception, what: str, *, creating: bool = False) -> StoreError:
    code: int | None = None
    if isinstance(e, ApiError):
        code, message = e.status.code, f"{what}: {e.status.message}"
    elif isinstance(e, httpx2.HTTPStatusError):  # an error body that is not a Status
        code, message = e.response.status_code, f"{what}: HTTP {e.response.status_code}"
    if code is not None:
        if code == 404:
            return NotFound(message)
        if code == 409:
            return AlreadyExists(message) if creating else Conflict(message)
        if code == 410:
            return Expired(message)
        if code in (400, 422):
            return Invalid(message)
        return StoreError(f"{message} (HTTP {code})")
    return StoreError(f"{what}: {type(e).__name__}: {e}")


#: What a cluster needs to serve an API group version gpufleet reads (docs/operations.md,
#: "Requirements"): said instead of the API server's bare 404 when a list finds no such resource.
API_REQUIREMENTS: Mapping[str, str] = {
    "resource.k8s.io/v1": "Dynamic Resource Allocation (DRA) resource.k8s.io/v1: "
    "Kubernetes 1.34 or later, with DRA enabled",
    "leaderworkerset.x-k8s.io/v1": "the LeaderWorkerSet CRD and controller",
}


def not_served(kind: Kind) -> str:
    """The clear error for a list of `kind` that the API server answered 404: the group
    version is not served, and what the cluster needs to serve it."""
    need = API_REQUIREMENTS.get(kind.api_version)
    message = f"this API server does not serve {kind.api_version} ({kind.kind})"
    return f"{message}; gpufleet needs {need}" if need else message


def _key_of(obj: Obj) -> _ObjKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _version_of(obj: Obj) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


class KubeStore:
    """A `Store` over a Kubernetes API server. Thread-safe; `close()` it when done."""

    def __init__(
        self,
        kube_config: KubeConfig | SingleConfig | None = None,
        config: KubeStoreConfig | None = None,
        bearer: BearerToken | None = None,
    ) -> None:
        """`bearer`: send its current token instead of the kubeconfig's (a renewed one,
        `gpufleet.kube.renewal`)."""
        self.config = config or KubeStoreConfig()
        if kube_config is None:
            kube_config = KubeConfig.from_env()
        self._kube_config = kube_config
        self._async_transport: Callable[[], Any] | None = None
        sync_transport = None
        if bearer is not None:
            single = kube_config.get() if isinstance(kube_config, KubeConfig) else kube_config
            assert single is not None, "a kubeconfig without a current context"
            sync_transport, self._async_transport = transports(single, bearer)
        timeout = httpx2.Timeout(self.config.request_timeout_s)
        self._client = Client(
            kube_config,
            timeout=timeout,
            field_manager=self.config.field_manager,
            transport=sync_transport,
        )
        self._lock = threading.Condition()
        self._feed = ChangeFeed(self.config.feed_capacity)
        self._wakes: builtins.list[threading.Event] = []
        self._informers: dict[_WatchKey, _Informer] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="gpufleet-kube-informers", daemon=True
        )
        self._thread.start()
        self._async_client = self._run(self._make_async_client()).result()
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, config: KubeStoreConfig | None = None, token: str | None = None
    ) -> KubeStore:
        """A store talking to the API server at `url`, with a bearer token if given."""
        kube_config = KubeConfig.from_one(cluster=Cluster(server=url), user=User(token=token))
        return cls(kube_config, config)

    async def _make_async_client(self) -> AsyncClient:
        timeout = httpx2.Timeout(self.config.request_timeout_s)
        transport = self._async_transport() if self._async_transport is not None else None
        return AsyncClient(
            self._kube_config,
            timeout=timeout,
            field_manager=self.config.field_manager,
            transport=transport,
        )

    # --- reads --------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        self._check_scope(kind, name, namespace)
        try:
            found = self._client.get(resource_class(kind), name, namespace=namespace)
        except (ApiError, httpx2.HTTPError) as e:
            error = _store_error(e, f"get {kind.kind} {name}")
            if isinstance(error, NotFound):
                return None
            raise error from e
        return to_obj(found)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        if not kind.namespaced and namespace:
            raise Invalid(f"{kind.kind} is cluster-scoped: no namespace allowed")
        scope = (namespace or ALL_NS) if kind.namespaced else None
        try:
            found = [
                to_obj(o)
                for o in self._client.list(
                    resource_class(kind), namespace=scope, labels=_labels(label_selector)
                )
            ]
        except (ApiError, httpx2.HTTPError) as e:
            raise _store_error(e, f"list {kind.kind}") from e
        found.sort(key=_key_of)
        return found

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        """From the watch cache when a watch of `kind` covering the request (unfiltered, or of
        exactly this namespace and selector) has synced, so no request reaches the API server
        (the agent views its whole cluster every step); else a `list`. The
        cache is as fresh as the watch: it may lag this store's own writes by the watch's
        latency, which readers of observations tolerate by design."""
        informer = self._informers.get(_WatchKey(kind, None, None))
        if isinstance(label_selector, str) or label_selector is None:
            # A watch of exactly this scope (the agent's own workloads) serves it too.
            informer = self._informers.get(_WatchKey(kind, namespace, label_selector), informer)
        if informer is None or not informer.synced.is_set():
            return self.list(kind, namespace, label_selector)
        selector = parse_selector(label_selector)
        with self._lock:
            return [
                obj
                for key, obj in sorted(informer.cached().items())
                if (namespace is None or key[0] == namespace)
                and matches(selector, obj["metadata"].get("labels"))
            ]

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        """The changes after `cursor` of `kinds` (None: every kind watched), oldest first, and
        the cursor to pass next time. Starts a cluster-wide informer for a requested kind that
        has none (waiting for its first list). Raises `Expired` when a change of a requested
        kind after `cursor` was dropped from the feed, or `cursor` is not one of this store's:
        list again and read on from `cursor`. See the module docstring."""
        if kinds is not None:
            with self._lock:  # `watch` adds informers under it, from any thread
                watched = {key.kind for key in self._informers}
            for kind in kinds:
                if kind not in watched:
                    self.watch(kind)
        with self._lock:
            return self._feed.read(cursor, kinds), self._feed.cursor

    def wake_on_change(self, event: threading.Event) -> None:
        """Set `event` on every change the feed takes in from now on (until `stop_waking`)."""
        with self._lock:
            if all(e is not event for e in self._wakes):
                self._wakes.append(event)

    def stop_waking(self, event: threading.Event) -> None:
        with self._lock:
            self._wakes = [e for e in self._wakes if e is not event]

    def wait_for_changes(self, cursor: int, timeout_s: float) -> bool:
        """Block until the feed has a change after `cursor` (True) or `timeout_s` passes."""
        with self._lock:
            return self._lock.wait_for(lambda: self._feed.cursor > cursor, timeout=timeout_s)

    @property
    def cursor(self) -> int:
        """The cursor of the newest change in the feed."""
        with self._lock:
            return self._feed.cursor

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        wait: bool = True,
    ) -> None:
        """Feed changes of `kind` (in `namespace`, matching `label_selector`) into `changes()`.

        Idempotent. With `wait`, returns once the first list is in the feed, or raises
        `StoreError` after `initial_sync_timeout_s`.
        """
        if self._closed:
            raise StoreError("the store is closed")
        if not kind.namespaced and namespace:
            raise Invalid(f"{kind.kind} is cluster-scoped: no namespace allowed")
        key = _WatchKey(kind, namespace, label_selector)
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = _Informer(self, key)
                self._informers[key] = informer
                informer.future = self._run(informer.run())
        if wait and not informer.synced.wait(self.config.initial_sync_timeout_s):
            if informer.is_not_served:  # one clear error: what is missing and what serves it
                raise StoreError(f"watch {kind.kind}: {informer.last_error}")
            raise StoreError(
                f"watch {kind.kind}: no successful list within "
                f"{self.config.initial_sync_timeout_s}s ({informer.last_error or 'no error'})"
            )

    # --- writes -------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if not name:
            raise Invalid(f"{kind.kind}: metadata.name is required")
        self._check_scope(kind, name, namespace)
        cls = resource_class(kind)
        try:
            created = self._client.create(cls(obj), namespace=namespace)
        except (ApiError, httpx2.HTTPError) as e:
            raise _store_error(e, f"create {kind.kind} {name}", creating=True) from e
        return to_obj(created)

    def update(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace")
        self._check_scope(kind, name, namespace)
        cls = resource_class(kind)
        try:
            updated = self._client.replace(cls(obj))
        except (ApiError, httpx2.HTTPError) as e:
            raise _store_error(e, f"update {kind.kind} {name}") from e
        return to_obj(updated)

    def patch_status(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Obj:
        self._check_scope(kind, name, namespace)
        patch: Obj = {"status": dict(status)}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        try:
            patched = self._client.patch(
                resource_class(kind).Status,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except (ApiError, httpx2.HTTPError) as e:
            raise _store_error(e, f"patch status of {kind.kind} {name}") from e
        return to_obj(patched)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self._check_scope(kind, name, namespace)
        try:
            self._client.delete(resource_class(kind), name, namespace=namespace)
        except (ApiError, httpx2.HTTPError) as e:
            raise _store_error(e, f"delete {kind.kind} {name}") from e

    # --- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop every informer and close the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._run(self._shutdown()).result(timeout=self.config.request_timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.config.request_timeout_s)
        if not self._thread.is_alive():
            self._loop.close()
        self._client.close()

    def __enter__(self) -> KubeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._async_client.close()

    # --- internals ----------------------------------------------------------------------

    def _run(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @staticmethod
    def _check_scope(kind: Kind, name: str, namespace: str | None) -> None:
        if kind.namespaced and not namespace:
            raise Invalid(f"{kind.kind} {name!r}: metadata.namespace is required")
        if not kind.namespaced and namespace:
            raise Invalid(f"{kind.kind} {name!r} is cluster-scoped: no namespace allowed")

    def _emit(self, type_: ChangeType, kind: Kind, obj: Obj) -> None:
        """Append a change to the feed; the caller holds `self._lock`."""
        self._feed.append(type_, kind, obj)
        self._lock.notify_all()
        for event in self._wakes:
            event.set()


class ChangeFeed:
    """The changes a store's informers delivered, under cursors that only grow, kept per kind
    (the last `capacity` of each). Not thread-safe: `KubeStore` guards it with its lock.

    `read(cursor, kinds)` costs what it returns: each kind's changes are read from the newest
    end back to `cursor`, and runs of several kinds are merged by cursor.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.cursor = 0
        self._by_kind: dict[Kind, collections.deque[Change]] = {}
        #: Per kind, the cursor of the newest change dropped (absent: none dropped).
        self._dropped: dict[Kind, int] = {}

    def append(self, type_: ChangeType, kind: Kind, obj: Obj) -> Change:
        self.cursor += 1
        change = Change(self.cursor, type_, kind, obj)
        feed = self._by_kind.get(kind)
        if feed is None:
            feed = self._by_kind[kind] = collections.deque()
        feed.append(change)
        if len(feed) > self.capacity:
            self._dropped[kind] = feed.popleft().cursor
        return change

    def read(self, cursor: int, kinds: Iterable[Kind] | None = None) -> builtins.list[Change]:
        """The changes after `cursor` of `kinds` (None: all), oldest first. Raises `Expired`
        when one of them was dropped, or `cursor` is beyond the newest change (but for the
        port's `LATEST`, which asks for no change and the newest cursor)."""
        if cursor == LATEST:
            return []
        if cursor > self.cursor:
            raise Expired(f"cursor {cursor} is beyond this feed's newest ({self.cursor})")
        wanted = set(self._by_kind if kinds is None else kinds)
        for kind in sorted(wanted):
            dropped = self._dropped.get(kind, 0)
            if cursor < dropped:
                raise Expired(
                    f"changes of {kind.kind} up to {dropped} were dropped from the feed "
                    f"(cursor {cursor}): list again"
                )
        picked: builtins.list[Change] = []
        runs = 0
        for kind in wanted:
            run = _changes_after(self._by_kind.get(kind), cursor)
            runs += bool(run)
            picked.extend(run)
        if runs > 1:
            picked.sort(key=_cursor_of)  # merges the sorted runs
        return picked


def _cursor_of(change: Change) -> int:
    return change.cursor


def _changes_after(feed: collections.deque[Change] | None, cursor: int) -> builtins.list[Change]:
    """The changes of one kind's feed after `cursor`, read from the newest end: a reader that
    keeps up pays for what it gets, not for the feed's length."""
    if not feed or feed[-1].cursor <= cursor:
        return []
    if feed[0].cursor > cursor:
        return builtins.list(feed)
    picked = []
    for change in reversed(feed):
        if change.cursor <= cursor:
            break
        picked.append(change)
    picked.reverse()
    return picked


class _Informer:
    """List, then watch; relist on 410 and every resync period; dedupe against a cache."""

    def __init__(self, store: KubeStore, key: _WatchKey) -> None:
        self._store = store
        self._key = key
        self._cache: dict[_ObjKey, Obj] = {}
        self.synced = threading.Event()
        self.future: Future[Any] | None = None
        self.last_error: str | None = None
        self.is_not_served = False  # the last list failed 404: the resource is not served
        self.lists = 0  # how many lists succeeded: observable in tests and metrics
        self._version = ""  # the last resourceVersion delivered (list or watch)

    def cached(self) -> dict[_ObjKey, Obj]:
        """The objects as last listed or watched; the caller holds the store's lock."""
        return self._cache

    @property
    def _scope(self) -> str | None:
        if not self._key.kind.namespaced:
            return None
        return self._key.namespace or ALL_NS

    async def run(self) -> None:
        config = self._store.config
        backoff = _Backoff(config)
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._version = await self._relist()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._failed("list", e)
                await asyncio.sleep(backoff.next_s())
                continue
            backoff.reset()
            resync_at = loop.time() + config.resync_period_s
            while (remaining_s := resync_at - loop.time()) > 0:
                try:
                    async with asyncio.timeout(remaining_s):
                        await self._watch()
                    backoff.reset()
                except TimeoutError:
                    break  # resync: list again
                except ApiError as e:
                    if e.status.code == 410:
                        log.info("watch %s: %s; listing again", self._key.kind, e.status.message)
                        break
                    self._failed("watch", e)
                    await asyncio.sleep(min(backoff.next_s(), max(remaining_s, 0)))
                except (httpx2.HTTPError, OSError, ValueError) as e:
                    # A broken stream: resume from the last version delivered.
                    self._failed("watch", e)
                    await asyncio.sleep(min(backoff.next_s(), max(remaining_s, 0)))

    async def _watch(self) -> None:
        """Watch from `self._version` until the stream ends, advancing it with each event."""
        client = self._store._async_client
        stream = client.watch(
            resource_class(self._key.kind),
            namespace=self._scope,
            labels=_labels(self._key.label_selector),
            resource_version=self._version,
            server_timeout=self._store.config.watch_timeout_s,
        )
        # lightkube resumes a watch the server ended cleanly by itself, from the last version
        # it saw; errors (410 included) are raised to us.
        async with contextlib.aclosing(stream) as events:
            async for type_, item in events:
                obj = to_obj(item)
                self._version = _version_of(obj) or self._version
                self._apply(type_, obj)

    async def _relist(self) -> str:
        client = self._store._async_client
        listing = client.list(
            resource_class(self._key.kind),
            namespace=self._scope,
            labels=_labels(self._key.label_selector),
        )
        items = [to_obj(item) async for item in listing]
        version = str(listing.resourceVersion)
        listed = {_key_of(obj): obj for obj in items}
        kind = self._key.kind
        with self._store._lock:
            for key in sorted(set(self._cache) - set(listed)):
                self._store._emit(ChangeType.DELETED, kind, self._cache.pop(key))
            for key in sorted(listed):
                obj, cached = listed[key], self._cache.get(key)
                if cached is not None and _version_of(cached) == _version_of(obj):
                    continue
                self._cache[key] = obj
                change = ChangeType.ADDED if cached is None else ChangeType.MODIFIED
                self._store._emit(change, kind, obj)
        self.lists += 1
        self.last_error, self.is_not_served = None, False
        self.synced.set()
        return version

    def _apply(self, type_: str, obj: Obj) -> None:
        key, kind = _key_of(obj), self._key.kind
        with self._store._lock:
            cached = self._cache.get(key)
            if type_ in ("ADDED", "MODIFIED"):
                if cached is not None and _version_of(cached) == _version_of(obj):
                    return  # already in the feed (a replay after a resumed watch or a relist)
                self._cache[key] = obj
                change = ChangeType.ADDED if cached is None else ChangeType.MODIFIED
                self._store._emit(change, kind, obj)
            elif type_ == "DELETED" and cached is not None:
                del self._cache[key]
                self._store._emit(ChangeType.DELETED, kind, obj)

    def _failed(self, what: str, e: Exception) -> None:
        self.is_not_served = isinstance(e, ApiError) and e.status.code == 404 and what == "list"
        if self.is_not_served:
            self.last_error = not_served(self._key.kind)
        else:
            self.last_error = f"{what}: {type(e).__name__}: {e}"
        log.warning("%s %s failed: %s", what, self._key.kind, self.last_error)
