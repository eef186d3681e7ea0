"""The agent's hub token, renewed before it expires (docs/operations.md, "Join a workload
cluster: pull-style").

The token `gpufleet join` writes into the agent's hub kubeconfig comes from the TokenRequest
API: it is bound to the agent's ServiceAccount on the hub and expires. The agent renews it the
way the kubelet renews a projected ServiceAccount token: at `RENEW_FRACTION` (80 %) of its
lifetime it asks the TokenRequest API, as itself, for a new token of the same lifetime for its
own ServiceAccount (the one grant it has outside its observations: `create
serviceaccounts/token` on that name only, `gpufleet.kube.install.agent_hub_access`), uses it
for every request from then on, and writes it into its hub kubeconfig Secret on the workload
cluster (`patch`, on that Secret only), so that a restarted pod starts with a valid token.

- `token_times(token)`: when a token was issued and expires, from its JWT claims (`iat`,
  `exp`), read without verifying (the hub verifies it; the agent only needs the times). A
  token that is not a JWT with both claims has no known lifetime and is never renewed.
- `next_attempt(issued_at, expires_at, failures, now)`: pure, when to try next.
- `BearerToken`: the current token, swapped under a lock; `transports(config, bearer)` gives
  lightkube clients (sync and async) a transport that sends it on every request, so a swap
  takes effect on the next request, watches included, with no new client.
- `TokenRenewer`: the thread at the edge that waits, requests, swaps and writes.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import httpx2
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

log = logging.getLogger(__name__)

#: Renew at this fraction of the token's lifetime (the kubelet renews projected tokens at 80 %).
RENEW_FRACTION: Final = 0.8
#: After a failed attempt, wait this long, doubling per failure up to `RETRY_MAX_S`.
RETRY_MIN_S: Final = 1.0
RETRY_MAX_S: Final = 60.0


def token_times(token: str) -> tuple[datetime, datetime] | None:
    """(issued at, expires at) of a JWT's `iat` and `exp` claims, or None if it has none."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > 8192:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(claims, dict):
        return None
    iat, exp = claims.get("iat"), claims.get("exp")
    if type(iat) is not int or type(exp) is not int:
        return None
    try:
        issued, expires = datetime.fromtimestamp(iat, UTC), datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return (issued, expires) if expires > issued else None


def next_attempt(
    issued_at: datetime, expires_at: datetime, failures: int, now: datetime
) -> datetime:
    """When to request the next token: at `RENEW_FRACTION` of the lifetime of the current one;
    after `failures` failed attempts, a backoff from `now` (1 s doubling up to a minute), but
    never later than the current token's expiry."""
    if failures <= 0:
        return issued_at + (expires_at - issued_at) * RENEW_FRACTION
    backoff = timedelta(seconds=min(RETRY_MAX_S, RETRY_MIN_S * 2 ** min(failures - 1, 16)))
    return min(now + backoff, max(now, expires_at))


class BearerToken:
    """The token a client sends, replaceable at any time from any thread."""

    def __init__(self, token: str) -> None:
        self._lock = threading.Lock()
        self._token = token

    @property
    def value(self) -> str:
        with self._lock:
            return self._token

    def set(self, token: str) -> None:
        with self._lock:
            self._token = token


class _SyncTransport(httpx2.BaseTransport):
    def __init__(self, inner: httpx2.BaseTransport, bearer: BearerToken) -> None:
        self.inner, self.bearer = inner, bearer

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Authorization"] = f"Bearer {self.bearer.value}"
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class _AsyncTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, bearer: BearerToken) -> None:
        self.inner, self.bearer = inner, bearer

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Authorization"] = f"Bearer {self.bearer.value}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def transports(
    config: SingleConfig, bearer: BearerToken
) -> tuple[httpx2.BaseTransport, Callable[[], httpx2.AsyncBaseTransport]]:
    """A sync transport, and a maker of an async one (made on the loop that uses it), that
    verify the server as `config` says and send `bearer`'s current token."""
    user = config.user
    assert user is not None, "Missing user"
    verify = verify_cluster(config.cluster, user, config.abs_file)
    sync = _SyncTransport(httpx2.HTTPTransport(verify=verify), bearer)
    return sync, lambda: _AsyncTransport(httpx2.AsyncHTTPTransport(verify=verify), bearer)


def kubeconfig_token(config: SingleConfig) -> str | None:
    """The bearer token of `config`'s user, if it has one with a known lifetime."""
    token = config.user.token if config.user is not None else None
    return token if token and token_times(token) else None


class TokenRenewer:
    """Renew `bearer` before it expires: `request(ttl_s)` returns a new token (a TokenRequest
    on the agent's own ServiceAccount), `persist(token)` writes it where a restart reads it.
    Runs in a daemon thread until `stop()`."""

    def __init__(
        self,
        bearer: BearerToken,
        request: Callable[[int], str],
        persist: Callable[[str], None],
        clock: Callable[[], datetime],
        wait: Callable[[float], bool] | None = None,
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.bearer, self.request, self.persist, self.clock = bearer, request, persist, clock
        self._on_stop = on_stop
        self._stopped = threading.Event()
        self._wait = wait or self._stopped.wait
        self.renewals = 0
        self._thread = threading.Thread(target=self._run, name="gpufleet-token", daemon=True)

    def start(self) -> TokenRenewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing, then `on_stop` (close the clients it requests and persists with)."""
        self._stopped.set()
        self._thread.join(5)
        self._on_stop()

    def renew_once(self) -> None:
        """Request a token of the current one's lifetime, send it from now on, then persist it."""
        times = token_times(self.bearer.value)
        if times is None:
            raise ValueError("the current token has no lifetime to renew")
        ttl_s = max(1, round((times[1] - times[0]).total_seconds()))
        token = self.request(ttl_s)
        if token_times(token) is None:
            raise ValueError("the new token has no expiry claim")
        self.bearer.set(token)
        self.renewals += 1
        self.persist(token)

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            times = token_times(self.bearer.value)
            if times is None:
                log.warning("the hub token has no expiry: it is not renewed")
                return
            now = self.clock()
            due = next_attempt(times[0], times[1], failures, now)
            if self._wait(max(0.0, (due - now).total_seconds())):
                return
            try:
                self.renew_once()
                failures = 0
                log.info("renewed the hub token", extra={"component": "agent"})
            except Exception as e:  # logged, retried with backoff
                failures += 1
                log.warning("renewing the hub token failed (attempt %d): %s", failures, _line(e))


def _line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]
