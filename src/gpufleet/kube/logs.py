"""Structured logs for the daemons: one JSON object per line on stderr, via stdlib `logging`.

Each line has `time` (RFC 3339, UTC, milliseconds), `level`, `logger` and `message`, then every
`extra=` field the call passed (`component`, `identity`, `epoch`, `trigger`, `duration_s`...),
and `exception` with the traceback when there is one. `--log-format text` prints the same
records as plain lines for a terminal.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

#: Attributes every `LogRecord` has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """A `LogRecord` as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            # RFC 3339 with a Z, as Kubernetes writes times
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Send every logger's records at `level` or above to `stream` (stderr) as `fmt`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    elif fmt == "text":
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        raise ValueError(f"log format {fmt!r} must be json or text")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO: too much for a controller's log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
