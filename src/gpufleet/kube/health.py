"""The daemons' HTTP endpoints: `/healthz`, `/readyz` and `/metrics`, on stdlib `http.server`.

`EndpointServer(address, routes)` serves GET on the given paths from a daemon thread; a route
returns `(status code, content type, body)`. Addresses are written as controller-runtime's
flags write them: `:8080` (every interface), `127.0.0.1:0` (an ephemeral port; `port` tells
which), and `0` turns the endpoint off (`parse_address` returns None).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Route = Callable[[], Response]

TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Check:
    """One line of a `/readyz` answer."""

    name: str
    is_ok: bool
    detail: str = ""


def checks_response(checks: list[Check]) -> Response:
    """`/readyz` in the API server's verbose style: `[+]name ok` / `[-]name failed: detail`."""
    lines = []
    for check in checks:
        mark, verdict = ("+", "ok") if check.is_ok else ("-", "failed")
        detail = f" ({check.detail})" if check.detail else ""
        lines.append(f"[{mark}]{check.name} {verdict}{detail}")
    is_ok = all(c.is_ok for c in checks)
    lines.append("readyz check passed" if is_ok else "readyz check failed")
    return (200 if is_ok else 503), TEXT, ("\n".join(lines) + "\n").encode()


def parse_address(address: str) -> tuple[str, int] | None:
    """`host:port` (host may be empty: every interface) as (host, port); `0` or `` -> None."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address!r} must be HOST:PORT, :PORT or 0 (off)")
    return host.strip("[]"), int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            code, ctype, body = 404, TEXT, b"not found\n"
        else:
            try:
                code, ctype, body = route()
            except Exception:  # an endpoint must answer, not kill the server thread
                log.exception("endpoint %s failed", self.path)
                code, ctype, body = 500, TEXT, b"internal error\n"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: Mapping[str, Route]


class EndpointServer:
    """Serves `routes` on `address` from a daemon thread until `close()`."""

    def __init__(self, address: tuple[str, int], routes: Mapping[str, Route]) -> None:
        self._server = _Server(address, _Handler)
        self._server.routes = dict(routes)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"gpufleet-http-{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
