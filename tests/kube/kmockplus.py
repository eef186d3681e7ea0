"""`KMockPlus`: kmock 0.8 plus the API-server semantics our contract tests need.

kmock (pinned at `kmock==0.8`: this module uses its private `_handle`, `_render_error` and
`_requests`) gives us the HTTP server, request parsing into Kubernetes terms, discovery and
Status error bodies. Its emulator lacks what a controller's correctness rests on
(shared/reference/tooling.md §1), so for resource requests this layer serves the objects
itself:

- a monotonic `resourceVersion` (one counter, like etcd's revision), `uid`,
  `creationTimestamp`, `generation` (bumped when `spec` changes) and `metadata.namespace`;
- 201 on create, 409 `AlreadyExists` on a duplicate, 409 `Conflict` on a stale
  `resourceVersion` (PUT, and a merge patch that carries one), 404 on a missing object;
- PUT (replace), merge / strategic-merge (treated as merge) / JSON patches;
- the `/status` subresource isolated from the main resource, and status dropped on create,
  for every resource except those in `NO_STATUS_SUBRESOURCE`;
- finalizers: delete sets `deletionTimestamp`; the object goes once they are removed;
- `labelSelector` on list and watch (a watch turns label transitions into ADDED/DELETED);
- watch from a `resourceVersion` (replaying the history after it), `410 Gone` when that
  version was compacted, and `timeoutSeconds`;
- Namespaces (`/api/v1/namespaces[/NAME]`, which kmock does not parse): deleting one deletes
  every object in it; with `strict_namespaces`, creating an object in a namespace that does not
  exist is a 404, as on a real API server;
- the TokenRequest subresource (`POST .../serviceaccounts/NAME/token`): a fresh JWT-shaped
  token (its payload has `sub`, `iat` and `exp`, as the API server's) with
  `expirationTimestamp`; `tokens` maps each token issued to its ServiceAccount. A request with
  an issued token past its expiry, or one `revoke`d, is answered 401 Unauthorized.
  `token_min_s` is the shortest lifetime granted (the API server's 10 minutes; a test may lower
  it to see a renewal happen);
- bootstrap-token authentication (kubeadm's): a bearer token of the form `ID.SECRET`
  (`[a-z0-9]{6}.[a-z0-9]{16}`) is checked against the Secret `bootstrap-token-ID` in
  kube-system, of type `bootstrap.kubernetes.io/token`, with `usage-bootstrap-authentication:
  true`, the same `token-secret` and an `expiration` not passed; any other such token (unknown,
  expired, wrong secret) is 401 Unauthorized, as the API server's authenticator answers. Who it
  stands for (`system:bootstrap:ID`) is RBAC's business (tests/kube/rbac.py, `User`).

Every request is recorded as a `Request` (who by bearer token, verb, group, resource,
subresource, namespace, name) in `requests_seen`, so a test can check what a component sent
against the RBAC it is installed with (tests/kube/rbac.py). With `authorize` set (e.g.
`Rbac.authorizer`), a request it refuses is answered 403 Forbidden, as the API server's
authorizer answers, and nothing is served.

Fault injection, callable from the test thread: `kill_watches()` drops every watch
connection, `expire_watches()` compacts the history and ends every watch with a 410 ERROR
event, `stall_watches()` makes live watches (of one resource, if given) go silent without
closing (a watch that dies silently, or lags behind the others), `compact()` forgets the
history.

`serve()` runs the server on its own event loop in a thread, for sync clients.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock

from gpufleet.store import pod_updates
from gpufleet.store.labels import matches, parse_selector

Obj = dict[str, Any]
ResourceKey = tuple[str, str, str]  # group, version, plural
ObjKey = tuple[ResourceKey, str, str]  # resource, namespace ("" if cluster-scoped), name

#: Resources served without a status subresource (a PUT or PATCH may change their status).
NO_STATUS_SUBRESOURCE = frozenset(
    {
        "leases",
        "events",
        "configmaps",
        "secrets",
        "resourceslices",
        "resourceclaimtemplates",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
    }
)
NAMESPACES: ResourceKey = ("", "v1", "namespaces")
PODS: ResourceKey = ("", "v1", "pods")
SERVICE_ACCOUNTS: ResourceKey = ("", "v1", "serviceaccounts")
#: The API server's bounds on a TokenRequest's `expirationSeconds` (its default: one hour).
TOKEN_MIN_S, TOKEN_DEFAULT_S = 600, 3600
SECRETS: ResourceKey = ("", "v1", "secrets")
BOOTSTRAP_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
BOOTSTRAP_TYPE = "bootstrap.kubernetes.io/token"
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?:/([^/]+)(?:/(status|finalize))?)?/?$")


_CONFLICT = "the object has been modified; please apply your changes to the latest version"


@dataclass(frozen=True, slots=True)
class _Change:
    rv: int
    resource: ResourceKey
    type: str
    old: Obj | None
    new: Obj


@dataclass(eq=False)
class _Watcher:
    resource: str = ""  # the plural it watches
    killed: asyncio.Event = field(default_factory=asyncio.Event)
    expired: bool = False
    stalled: bool = False


@dataclass(frozen=True, slots=True)
class Request:
    """One request as RBAC sees it: who (bearer token, "" without one) did what to which
    resource (`subresource` and `name` are "" when absent; `namespace` "" cluster-wide)."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class _Call:
    """A resource request, parsed by kmock or (namespaces) by us."""

    method: str
    rkey: ResourceKey
    ns: str
    name: str | None
    sub: str | None
    params: dict[str, str]
    headers: dict[str, str]
    data: Any
    raw: aiohttp.web.BaseRequest | None

    @property
    def is_watch(self) -> bool:
        return self.method == "GET" and self.params.get("watch") in ("true", "True", "1")

    @property
    def verb(self) -> str:
        if self.method == "GET":
            return "watch" if self.is_watch else "get" if self.name else "list"
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        verb = verbs.get(self.method, self.method.lower())
        return "deletecollection" if verb == "delete" and not self.name else verb


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@attrs.define(kw_only=True)
class KMockPlus(kmock.KubernetesScaffold):
    """A kmock Kubernetes scaffold whose resource requests have API-server semantics."""

    keep_requests: int = 100  # kmock re-filters its whole request log on every request
    #: Refuse to create a namespaced object in a namespace that does not exist (404).
    strict_namespaces: bool = False
    #: Every request served, with how often it came (read after the fact, from the test).
    requests_seen: dict[Request, int] = attrs.field(factory=dict, init=False)
    #: Every token the TokenRequest subresource issued -> (namespace, ServiceAccount name).
    tokens: dict[str, tuple[str, str]] = attrs.field(factory=dict, init=False)
    #: When each issued token expires; a request with one past it (or revoked) is 401.
    token_expiry: dict[str, datetime] = attrs.field(factory=dict, init=False)
    #: The shortest `expirationSeconds` a TokenRequest is granted (settable from the test).
    token_min_s: int = TOKEN_MIN_S
    #: Whether a request may be served (None: every one); a refused one is 403 Forbidden.
    #: May be set from the test thread while serving.
    authorize: Callable[[Request], bool] | None = attrs.field(default=None)
    #: API groups this server does not serve (a cluster without DRA: `resource.k8s.io`): every
    #: request for them is answered 404 NotFound, as an API server answers an unknown group.
    missing_groups: frozenset[str] = attrs.field(default=frozenset())

    _objects_by_key: dict[ObjKey, Obj] = attrs.field(factory=dict, init=False)
    _history: list[_Change] = attrs.field(factory=list, init=False)
    # Like etcd's revision, never 0: a list's version must be watchable from ("0" means "any").
    _rv: int = attrs.field(default=100, init=False)
    _compacted_rv: int = attrs.field(default=100, init=False)
    _changed: asyncio.Condition | None = attrs.field(default=None, init=False)
    _watchers: set[_Watcher] = attrs.field(factory=set, init=False)
    loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)

    # --- fault injection (thread-safe) ----------------------------------------------------

    def kill_watches(self) -> None:
        """Drop every live watch connection abruptly (the client sees a broken stream)."""
        self._call(self._kill)

    def expire_watches(self) -> None:
        """Compact the history and end every live watch with a 410 Gone ERROR event."""

        def expire() -> None:
            self._compact()
            for watcher in self._watchers:
                watcher.expired = True
            self._kill()

        self._call(expire)

    def stall_watches(self, resource: str | None = None) -> None:
        """Keep live watches (of the plural `resource` only, when given) open but send nothing
        more on them (a silent watch death; or a watch that lags behind the others)."""

        def stall() -> None:
            for watcher in self._watchers:
                if resource is None or watcher.resource == resource:
                    watcher.stalled = True

        self._call(stall)

    def revoke(self, token: str) -> None:
        """Make an issued token invalid now (as its expiry, or its ServiceAccount's deletion)."""
        self.token_expiry[token] = datetime.min.replace(tzinfo=UTC)

    def compact(self) -> None:
        """Forget the history: watching from an older resourceVersion gets 410 Gone."""
        self._call(self._compact)

    @property
    def watch_count(self) -> int:
        return sum(1 for w in self._watchers if not w.stalled and not w.killed.is_set())

    @property
    def resource_version(self) -> int:
        return self._rv

    def stored(self, group: str, version: str, plural: str) -> list[Obj]:
        """The stored objects of a resource (for assertions)."""
        key = (group, version, plural)
        return [copy.deepcopy(o) for (r, _, _), o in self._objects_by_key.items() if r == key]

    def _call(self, fn: Any) -> None:
        assert self.loop is not None, "the server is not running"
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(5)

    def _kill(self) -> None:
        for watcher in self._watchers:
            watcher.killed.set()

    def _compact(self) -> None:
        self._history.clear()
        self._compacted_rv = self._rv

    # --- dispatch ---------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Namespaces here (kmock cannot parse their paths); everything else through kmock."""
        match = _NAMESPACE_PATH.match(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        body = await raw_request.read()
        call = _Call(
            method=raw_request.method,
            rkey=NAMESPACES,
            ns="",
            name=match.group(1),
            sub=match.group(2),
            params=dict(raw_request.query),
            headers=dict(raw_request.headers),
            data=json.loads(body) if body else None,
            raw=raw_request,
        )
        return await self._serve(call)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        del self._requests[: -self.keep_requests]
        resource = request.resource
        if resource is None or resource.plural is None or resource.version is None:
            return await super()._handle(request)  # discovery, /version, unknown paths
        call = _Call(
            method=request.method.value,
            rkey=(resource.group or "", resource.version, resource.plural),
            ns=request.namespace or "",
            name=request.name,
            sub=request.subresource,
            params=dict(request.params),
            headers=dict(request.headers),
            data=request.data,
            raw=request._raw_request,
        )
        return await self._serve(call)

    async def _serve(self, call: _Call) -> aiohttp.web.StreamResponse:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if self._changed is None:
            self._changed = asyncio.Condition()
        rkey, ns, name, sub, method = call.rkey, call.ns, call.name, call.sub, call.method
        seen = self._record(call)
        refused = self._authenticate(seen.user)
        if refused:
            return _json(_status(401, "Unauthorized", refused), 401)
        if rkey[0] in self.missing_groups:
            message = "the server could not find the requested resource"
            return _json(_status(404, "NotFound", message), 404)
        if self.authorize is not None and not self.authorize(seen):
            where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
            message = (
                f'{seen.user or "anonymous"} cannot {seen.verb} resource "{rkey[2]}" in API '
                f'group "{rkey[0]}"{where}'
            )
            return _json(_status(403, "Forbidden", message), 403)
        try:
            if call.is_watch:
                return await self._watch(call)
            if sub == "token" and rkey == SERVICE_ACCOUNTS and method == "POST" and name:
                return _json(self._token_request(ns, name, call.data), 201)
            if sub not in (None, "status"):
                raise _ApiError(404, "NotFound", f"subresource {sub} is not served")
            if method == "GET" and name:
                return _json(self._get(rkey, ns, name))
            if method == "GET":
                return _json(self._list(call))
            async with self._changed:
                if method == "POST" and not name:
                    response = _json(self._create(rkey, ns, call.data), 201)
                elif method == "PUT" and name:
                    response = _json(self._replace(rkey, ns, name, sub, call.data))
                elif method == "PATCH" and name:
                    content_type = call.headers.get("Content-Type", "")
                    response = _json(self._patch(rkey, ns, name, sub, call.data, content_type))
                elif method == "DELETE" and name:
                    response = _json(self._delete(rkey, ns, name))
                else:
                    raise _ApiError(405, "MethodNotAllowed", f"{method} is not served here")
                self._changed.notify_all()
                return response
        except _ApiError as e:
            return _json(_status(e.code, e.reason, e.message), e.code)

    def _record(self, call: _Call) -> Request:
        auth = call.headers.get("Authorization", "")
        user = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        seen = Request(
            user, call.verb, call.rkey[0], call.rkey[2], call.sub or "", call.ns, call.name or ""
        )
        self.requests_seen[seen] = self.requests_seen.get(seen, 0) + 1
        return seen

    def _authenticate(self, token: str) -> str | None:
        """Why a bearer token is refused (401), or None: an expired or revoked issued token, a
        bootstrap token without its valid Secret. Other tokens pass (no authenticator here)."""
        expiry = self.token_expiry.get(token)
        if expiry is not None:
            return "token has expired" if datetime.now(UTC) >= expiry else None
        match = BOOTSTRAP_TOKEN.match(token)
        if match is None:
            return None
        token_id, secret = match.groups()
        stored = self._objects_by_key.get((SECRETS, "kube-system", f"bootstrap-token-{token_id}"))
        if stored is None or stored.get("type") != BOOTSTRAP_TYPE:
            return f"bootstrap token {token_id} is unknown"
        data = {k: base64.b64decode(v).decode() for k, v in (stored.get("data") or {}).items()}
        if data.get("token-id") != token_id or data.get("token-secret") != secret:
            return f"bootstrap token {token_id}: wrong secret"
        if data.get("usage-bootstrap-authentication") != "true":
            return f"bootstrap token {token_id} is not for authentication"
        expiration = data.get("expiration")
        if expiration and datetime.now(UTC) >= datetime.fromisoformat(expiration):
            return f"bootstrap token {token_id} has expired"
        return None

    def _token_request(self, ns: str, name: str, body: Any) -> Obj:
        """A TokenRequest for ServiceAccount `ns/name`: a new random token, valid for
        `spec.expirationSeconds` (at least `token_min_s`, one hour if not given)."""
        self._require((SERVICE_ACCOUNTS, ns, name))
        spec = (body or {}).get("spec") or {} if isinstance(body, dict) else {}
        seconds = spec.get("expirationSeconds") or TOKEN_DEFAULT_S
        if not isinstance(seconds, int) or seconds < self.token_min_s:
            raise _ApiError(
                422,
                "Invalid",
                f"spec.expirationSeconds: Invalid value: {seconds!r}: "
                "may not specify a duration less than 10 minutes",
            )
        issued = datetime.now(UTC)
        expires = issued + timedelta(seconds=seconds)
        claims = {
            "sub": f"system:serviceaccount:{ns}:{name}",
            "iat": int(issued.timestamp()),
            "exp": int(expires.timestamp()),
        }
        token = ".".join(
            base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
            for part in ({"alg": "RS256"}, claims)
        )
        token += "." + secrets.token_urlsafe(24)
        self.tokens[token] = (ns, name)
        self.token_expiry[token] = expires
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": _now()},
            "spec": {"audiences": spec.get("audiences") or [], "expirationSeconds": seconds},
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    # --- reads ------------------------------------------------------------------------------

    def _get(self, rkey: ResourceKey, ns: str, name: str) -> Obj:
        return copy.deepcopy(self._require((rkey, ns, name)))

    def _list(self, call: _Call) -> Obj:
        rkey, ns = call.rkey, call.ns
        selector = parse_selector(call.params.get("labelSelector"))
        items = [
            copy.deepcopy(obj)
            for (r, obj_ns, _), obj in sorted(self._objects_by_key.items())
            if r == rkey
            and (not ns or obj_ns == ns)
            and matches(selector, obj["metadata"].get("labels"))
        ]
        return {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _watch(self, call: _Call) -> aiohttp.web.StreamResponse:
        assert self._changed is not None and call.raw is not None
        rkey, ns, raw = call.rkey, call.ns, call.raw
        selector = parse_selector(call.params.get("labelSelector"))
        timeout_s = float(call.params.get("timeoutSeconds") or 0) or None
        since_text = call.params.get("resourceVersion") or "0"
        since = int(since_text) if since_text.isdigit() else 0

        def visible(obj: Obj | None) -> bool:
            return (
                obj is not None
                and (not ns or obj["metadata"].get("namespace", "") == ns)
                and matches(selector, obj["metadata"].get("labels"))
            )

        def render(change: _Change) -> Obj | None:
            was, now = visible(change.old), visible(change.new)
            if change.type == "DELETED":
                return {"type": "DELETED", "object": change.new} if was or now else None
            if was and now:
                return {"type": "MODIFIED", "object": change.new}
            if now:
                return {"type": "ADDED", "object": change.new}
            if was:
                return {"type": "DELETED", "object": change.new}
            return None

        response = aiohttp.web.StreamResponse(
            status=200, headers={"Content-Type": "application/json"}
        )
        if since and since < self._compacted_rv:
            await response.prepare(raw)
            gone = _status(410, "Expired", f"too old resource version: {since}")
            await response.write(_line({"type": "ERROR", "object": gone}))
            await response.write_eof()
            return response

        watcher = _Watcher(resource=rkey[2])
        self._watchers.add(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s else None
        try:
            await response.prepare(raw)
            if since == 0:  # "start at most recent": the current objects as ADDED
                cursor = self._rv
                for (r, _, _), obj in sorted(self._objects_by_key.items()):
                    if r == rkey and visible(obj):
                        await response.write(_line({"type": "ADDED", "object": obj}))
            else:
                cursor = since
            while True:
                if watcher.killed.is_set():
                    break
                if not watcher.stalled:
                    for change in [c for c in self._history if c.rv > cursor]:
                        cursor = change.rv
                        event = render(change) if change.resource == rkey else None
                        if event is not None:
                            await response.write(_line(event))
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                await self._wait_for_change(watcher, remaining, cursor)
            if watcher.expired:
                gone = _status(410, "Expired", "the watched resource version was compacted")
                await response.write(_line({"type": "ERROR", "object": gone}))
            elif watcher.killed.is_set():
                transport = raw.transport
                if transport is not None:
                    transport.abort()
                return response
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        finally:
            self._watchers.discard(watcher)
        return response

    async def _wait_for_change(
        self, watcher: _Watcher, timeout_s: float | None, cursor: int
    ) -> None:
        """Until a change after `cursor`, a kill, or the timeout (no wakeup can be missed)."""
        assert self._changed is not None
        changed = asyncio.ensure_future(self._wait_changed(cursor))
        killed = asyncio.ensure_future(watcher.killed.wait())
        try:
            await asyncio.wait({changed, killed}, timeout=timeout_s, return_when="FIRST_COMPLETED")
        finally:
            for task in (changed, killed):
                task.cancel()

    async def _wait_changed(self, cursor: int) -> None:
        assert self._changed is not None
        async with self._changed:
            await self._changed.wait_for(lambda: self._rv > cursor)

    # --- writes -----------------------------------------------------------------------------

    def _create(self, rkey: ResourceKey, ns: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise _ApiError(422, "Invalid", "metadata.name: Required value")
        if meta.get("namespace") and ns and meta["namespace"] != ns:
            raise _ApiError(400, "BadRequest", "the namespace of the object does not match")
        key = (rkey, ns, name)
        if key in self._objects_by_key:
            raise _ApiError(409, "AlreadyExists", f'{rkey[2]} "{name}" already exists')
        if ns and self.strict_namespaces and (NAMESPACES, "", ns) not in self._objects_by_key:
            raise _ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        if ns:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        for server_set in ("deletionTimestamp", "resourceVersion"):
            meta.pop(server_set, None)
        if self._has_status(rkey):
            obj.pop("status", None)
        if rkey == NAMESPACES:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj["status"] = {"phase": "Active"}
        return self._commit(key, "ADDED", None, obj)

    def _replace(self, rkey: ResourceKey, ns: str, name: str, sub: str | None, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body must be a JSON object")
        key = (rkey, ns, name)
        current = self._require(key)
        self._check_version(current, (body.get("metadata") or {}).get("resourceVersion"))
        return self._write(key, current, copy.deepcopy(body), sub)

    def _patch(
        self, rkey: ResourceKey, ns: str, name: str, sub: str | None, body: Any, ctype: str
    ) -> Obj:
        key = (rkey, ns, name)
        current = self._require(key)
        if "json-patch" in ctype:
            try:
                new = jsonpatch.apply_patch(copy.deepcopy(current), body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise _ApiError(422, "Invalid", f"the JSON patch does not apply: {e}") from e
        elif "merge-patch" in ctype or "strategic-merge" in ctype:
            if not isinstance(body, dict):
                raise _ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            self._check_version(current, (body.get("metadata") or {}).get("resourceVersion"))
            new = _merge(current, body)
        else:
            raise _ApiError(415, "UnsupportedMediaType", f"patch type {ctype!r} is not served")
        return self._write(key, current, new, sub)

    def _write(self, key: ObjKey, current: Obj, new: Obj, sub: str | None) -> Obj:
        rkey = key[0]
        if sub == "status":  # only the status changes through /status
            status = new.get("status")
            new = copy.deepcopy(current)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif self._has_status(rkey):  # and never through the main resource
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        if rkey == PODS and sub is None:
            # The API server's rules for a Pod's spec (scheduling gates, mutable scheduling
            # directives while gated): the same rules the simulator's store applies.
            broken = pod_updates.violation(current.get("spec") or {}, new.get("spec") or {})
            if broken is not None:
                raise _ApiError(422, "Invalid", f"Pod {key[2]!r} is invalid: {broken}")
        meta = new.setdefault("metadata", {})
        for server_set in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
            if server_set in current["metadata"]:
                meta[server_set] = current["metadata"][server_set]
            else:
                meta.pop(server_set, None)
        generation = int(current["metadata"].get("generation", 1))
        meta["generation"] = (
            generation + 1 if new.get("spec") != current.get("spec") else generation
        )
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(key, new)
        return self._commit(key, "MODIFIED", current, new)

    def _delete(self, rkey: ResourceKey, ns: str, name: str) -> Obj:
        key = (rkey, ns, name)
        current = self._require(key)
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = _now()
            return self._commit(key, "MODIFIED", current, new)
        if rkey == NAMESPACES:  # its objects go with it (at once, not after Terminating)
            for inside in [k for k in self._objects_by_key if k[1] == name and k[0] != NAMESPACES]:
                self._remove(inside, copy.deepcopy(self._objects_by_key[inside]))
        return self._remove(key, copy.deepcopy(current))

    def _remove(self, key: ObjKey, last: Obj) -> Obj:
        old = self._objects_by_key.pop(key)
        self._rv += 1
        last["metadata"]["resourceVersion"] = str(self._rv)
        self._history.append(_Change(self._rv, key[0], "DELETED", old, copy.deepcopy(last)))
        return last

    def _commit(self, key: ObjKey, type_: str, old: Obj | None, new: Obj) -> Obj:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        self._objects_by_key[key] = new
        self._history.append(_Change(self._rv, key[0], type_, old, copy.deepcopy(new)))
        return copy.deepcopy(new)

    def _require(self, key: ObjKey) -> Obj:
        current = self._objects_by_key.get(key)
        if current is None:
            raise _ApiError(404, "NotFound", f'{key[0][2]} "{key[2]}" not found')
        return current

    @staticmethod
    def _check_version(current: Obj, expected: Any) -> None:
        if expected and str(expected) != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise _ApiError(
                409, "Conflict", f'Operation cannot be fulfilled on "{name}": {_CONFLICT}'
            )

    @staticmethod
    def _has_status(rkey: ResourceKey) -> bool:
        return rkey[2] not in NO_STATUS_SUBRESOURCE


def _json(body: Obj, status: int = 200) -> aiohttp.web.Response:
    # Exactly `application/json`, as the API server sends it (lightkube compares verbatim).
    return aiohttp.web.Response(
        body=json.dumps(body).encode(), status=status, headers={"Content-Type": "application/json"}
    )


def _line(event: Obj) -> bytes:
    return json.dumps(event).encode() + b"\n"


@dataclass
class Served:
    """A running `KMockPlus` and its URL."""

    api: KMockPlus
    url: str


@contextlib.contextmanager
def serve(strict_namespaces: bool = False) -> Iterator[Served]:
    """Run a `KMockPlus` on 127.0.0.1 (a random port) on its own loop in a daemon thread."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        api = KMockPlus(strict_namespaces=strict_namespaces)
        if strict_namespaces:  # a real cluster always has them (events of cluster-scoped
            # objects; bootstrap tokens)
            for name in ("default", "kube-system"):
                api._create(NAMESPACES, "", {"metadata": {"name": name}})
        async with api, kmock.Server(api) as server:
            api.loop = asyncio.get_running_loop()
            box["served"] = Served(api, str(server.url).rstrip("/"))
            ready.set()
            await stop.wait()
            api._kill()
            await asyncio.sleep(0)

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # surfaced to the test below
            box["error"] = e
            ready.set()

    thread = threading.Thread(target=run, name="kmockplus", daemon=True)
    thread.start()
    ready.wait(10)
    if "error" in box:
        raise box["error"]
    try:
        yield box["served"]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
