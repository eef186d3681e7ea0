"""Reading the kubeconfigs `gpufleet join` is given, as hostile input (docs/operations.md,
"Join a workload cluster").

A kubeconfig names the hub the agent's credentials will point at, so every way it can go
wrong is one usage error (exit 2) that names the file, the field and the rule, never a
traceback and never a hang:

- the file (and every file a context refers to: CA, client certificate and key, token file)
  must be a regular file of at most `MAX_KUBECONFIG_BYTES` (1 MiB); it is opened without
  waiting, so a FIFO, `/dev/zero` or a 60 MB file is refused at once;
- the YAML is read with the manifest loader's bounds (nesting depth, alias expansion, no
  duplicate keys; `gpufleet.api.loader`), one document, a mapping;
- `clusters`, `contexts` and `users` are lists of `{name, cluster|context|user}` mappings, and
  every field lightkube reads has its type (the error names `clusters[0].cluster.server`);
- every server is an `http://` or `https://` URL with a host.

`check_hub` applies the rules for the hub the agent is given: `https://` only and TLS verified
(no `insecure-skip-tls-verify`), unless `--allow-insecure-hub`, which warns.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, Context, User

from gpufleet.api.errors import LimitExceeded, ValidationFailed
from gpufleet.api.loader import load_yaml_documents

MAX_KUBECONFIG_BYTES: Final = 1024 * 1024

_SECTIONS: Final[tuple[tuple[str, str, type[Any]], ...]] = (
    ("clusters", "cluster", Cluster),
    ("contexts", "context", Context),
    ("users", "user", User),
)


class KubeconfigInvalid(ValueError):
    """A kubeconfig breaks a rule; the message names the file and the field."""


def read_regular(path: os.PathLike[str] | str, limit: int = MAX_KUBECONFIG_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `KubeconfigInvalid` otherwise.
    Opening does not wait for a writer (a FIFO is refused, not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise KubeconfigInvalid(f"{path}: not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        raise KubeconfigInvalid(f"{path}: {e.strerror or type(e).__name__}") from None
    if len(data) > limit:
        raise KubeconfigInvalid(f"{path}: larger than {limit:,} bytes (the limit)")
    return data


def _document(path: Path) -> dict[str, Any]:
    try:
        text = read_regular(path).decode("utf-8")
    except UnicodeDecodeError:
        raise KubeconfigInvalid(f"{path}: not UTF-8 text") from None
    try:
        documents = [d for d in load_yaml_documents(text, str(path)) if d is not None]
    except LimitExceeded as e:
        raise KubeconfigInvalid(f"{path}: {e.errors[0].message} ({e.limit})") from None
    except ValidationFailed as e:
        raise KubeconfigInvalid(f"{path}: {e.errors[0].message}") from None
    if len(documents) != 1:
        raise KubeconfigInvalid(f"{path}: one YAML document expected, got {len(documents)}")
    if not isinstance(documents[0], dict):
        raise KubeconfigInvalid(f"{path}: a kubeconfig is a mapping, got {_type(documents[0])}")
    return documents[0]


def _type(value: object) -> str:
    names: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _section(
    path: Path, doc: dict[str, Any], section: str, key: str, model: type[Any]
) -> dict[str, Any]:
    items = doc.get(section)
    if items is None:
        if section == "users":
            return {}
        raise KubeconfigInvalid(f"{path}: {section}: required, a list of {key}s")
    if not isinstance(items, list):
        raise KubeconfigInvalid(f"{path}: {section}: a list expected, got {_type(items)}")
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        where = f"{section}[{i}]"
        if not isinstance(item, dict):
            raise KubeconfigInvalid(f"{path}: {where}: a mapping expected, got {_type(item)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise KubeconfigInvalid(f"{path}: {where}.name: a non-empty string expected")
        body = item.get(key)
        if not isinstance(body, dict):
            raise KubeconfigInvalid(f"{path}: {where}.{key}: a mapping expected, got {_type(body)}")
        if key == "cluster" and "server" not in body:  # lightkube would use http://localhost
            raise KubeconfigInvalid(f"{path}: {where}.cluster.server: required, the API's URL")
        try:
            out[name] = msgspec.convert(body, model)
        except msgspec.ValidationError as e:
            message, _, field = str(e).partition(" - at `$")
            field = field.rstrip("`")
            raise KubeconfigInvalid(f"{path}: {where}.{key}{field}: {message}") from None
    return out


def check_url(server: str, field: str) -> str:
    """`server` if it is an http(s) URL with a host; `KubeconfigInvalid` naming `field`."""
    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        raise KubeconfigInvalid(f"{field}: {server!r} is not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigInvalid(f"{field}: {server!r} is not an http:// or https:// URL")
    if any(c.isspace() or not c.isprintable() for c in server):
        raise KubeconfigInvalid(f"{field}: {server!r} has spaces or control characters")
    return server


def load_context(path: Path, context: str | None) -> SingleConfig:
    """The context `context` (None: the current one) of the kubeconfig at `path`, checked
    against every rule above; `KubeconfigInvalid` naming the field otherwise."""
    doc = _document(path)
    clusters, contexts, users = (_section(path, doc, *s) for s in _SECTIONS)
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise KubeconfigInvalid(f"{path}: current-context: a string expected, got {_type(current)}")
    name = context if context is not None else current or None
    if name is None:
        raise KubeconfigInvalid(f"{path} has no current context")
    if name not in contexts:
        raise KubeconfigInvalid(f"{path}: Context '{name}' not found")
    ctx = contexts[name]
    if ctx.cluster not in clusters:
        raise KubeconfigInvalid(f"{path}: context {name}: cluster {ctx.cluster!r} not found")
    if ctx.user and ctx.user not in users:
        raise KubeconfigInvalid(f"{path}: context {name}: user {ctx.user!r} not found")
    config = KubeConfig(clusters=clusters, contexts=contexts, users=users, fname=path).get(name)
    assert config is not None  # a name was given
    check_url(config.cluster.server, f"{path}: cluster {ctx.cluster}: server")
    _check_files(config)
    return config


def _check_files(config: SingleConfig) -> None:
    """Every file the context refers to is a bounded regular file (lightkube reads them)."""
    user = config.user
    names = [("certificate-authority", config.cluster.certificate_auth)]
    if user is not None:
        names += [
            ("client-certificate", user.client_cert),
            ("client-key", user.client_key),
            ("tokenFile", user.token_file),
        ]
    for field, name in names:
        if name:
            try:
                read_regular(config.abs_file(name))
            except KubeconfigInvalid as e:
                raise KubeconfigInvalid(f"{config.fname}: {field}: {e}") from None


def check_hub(
    server: str, field: str, *, is_insecure: bool, allow: bool, warn: Callable[[str], None]
) -> None:
    """The hub the agent is given is `https://` with TLS verified; with `allow`, `warn` says
    what is insecure instead of refusing it."""
    check_url(server, field)
    problems = []
    if urlsplit(server).scheme != "https":
        problems.append(
            f"{field}: {server!r} is plain http://, the agent's token would travel in clear"
        )
    if is_insecure:
        problems.append(
            "insecure-skip-tls-verify: the hub's certificate would not be checked, "
            "anyone on the path could pose as the hub"
        )
    for problem in problems:
        if not allow:
            raise KubeconfigInvalid(f"{problem} (refused; --allow-insecure-hub to accept it)")
        warn(f"warning: {problem} (accepted: --allow-insecure-hub)")
