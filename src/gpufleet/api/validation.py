"""Validation: a manifest body in, a typed object or a `ValidationFailed` with every error out.

`parse_object(body)` checks the envelope (a mapping with a supported `apiVersion` and `kind`),
then validates the body against its kind's model (models.py), which reports schema errors and
rule violations together. pydantic's errors are translated into `FieldError`s whose path uses
the manifest's camelCase names and `[i]` list indices, and whose message states the rule
(`must be at least 1`, `is required`, `unknown field`, `must be an integer`).

`validate(new, old)` is admission for an update: pool names of `old` that `new` keeps are
exempt from the DNS-label rule, so objects created before the rule still update (ratcheting).

`parse_status_change(last_body, last, body)` is `parse_object(body)` for a new version of an
object that parsed (`last`, from `last_body`) and differs from it only in `status` and
`metadata.resourceVersion` (a status write, or the first status after none): it validates the
status alone (`status_change`), checks the new resourceVersion is a string (its only rule), and
keeps the rest of `last`. The kinds with a status have no rule that spans the status and the
rest (their `check` reads the metadata only), so that is the whole object's validation. It
gives None, and the caller parses the whole body, whenever that does not hold or the parts do
not validate, so an error reads exactly as `parse_object`'s.
"""

import re
from collections.abc import Mapping
from types import NoneType
from typing import Any, Final, get_args

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gpufleet.api.errors import FieldError, ValidationFailed
from gpufleet.api.kinds import KINDS, ApiObject, InferenceCluster, ModelReplica, _Object
from gpufleet.api.models import API_VERSION, LEGACY_POOL_NAMES, RULE_ERROR_TYPE, ObjectMeta
from gpufleet.api.rules import ApiModel, validate_model

SUPPORTED_KINDS: Final = ", ".join(sorted(KINDS))

_FIXED_MESSAGES: Final = {
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "datetime_type": "must be an RFC 3339 timestamp",
    "datetime_parsing": "must be an RFC 3339 timestamp",
    "datetime_from_date_parsing": "must be an RFC 3339 timestamp",
    "timezone_aware": "must be an RFC 3339 timestamp with a time zone",
}

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def format_path(loc: tuple[str | int, ...]) -> str:
    """`('spec', 'nodePools', 0, 'name')` → `spec.nodePools[0].name`; odd keys go in brackets."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            path += " (key)"
        elif not part.isprintable():  # never echo control characters to a terminal
            path += f"[{part.encode('unicode_escape').decode('ascii')}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{part}]"
    return path


def _count_noun(ctx: Mapping[str, Any]) -> str:
    return "entries" if ctx.get("field_type") == "Dictionary" else "items"


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if kind == RULE_ERROR_TYPE:
        return str(ctx["message"])
    if kind in _FIXED_MESSAGES:
        return _FIXED_MESSAGES[kind]
    match kind:
        case "greater_than_equal":
            return f"must be at least {ctx['ge']}"
        case "less_than_equal":
            return f"must be at most {ctx['le']}"
        case "too_short":
            return f"must have at least {ctx['min_length']} {_count_noun(ctx)}"
        case "too_long":
            return f"must have at most {ctx['max_length']} {_count_noun(ctx)}"
        case "string_too_short":
            return "must not be empty"
        case "string_too_long":
            return f"must be at most {ctx['max_length']} characters"
        case "enum" | "literal_error":
            return f"must be one of {ctx['expected']}"
    return error["msg"][:1].lower() + error["msg"][1:]


def field_errors(error: ValidationError, body: object = None) -> tuple[FieldError, ...]:
    """pydantic's errors as FieldErrors, in the order of `body`'s fields when it is given."""
    details = error.errors()
    if body is not None:
        details = sorted(details, key=lambda e: _document_position(body, e["loc"]))
    return tuple(FieldError(format_path(e["loc"]), _message(e)) for e in details)


def _document_position(body: object, loc: tuple[str | int, ...]) -> tuple[int, ...]:
    """Where `loc` is in `body`: the index of each key or item on the way (a missing field
    sorts after its siblings)."""
    position: list[int] = []
    node = body
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            position.append(list(node).index(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            position.append(part)
            node = node[part]
        else:
            position.append(1 << 30)
            break
    return tuple(position)


def _identity(body: Mapping[str, Any]) -> tuple[str, str]:
    """The kind and `namespace/name` as far as the body spells them, for error reports."""
    kind = body.get("kind")
    metadata = body.get("metadata")
    name = namespace = None
    if isinstance(metadata, Mapping):
        name, namespace = metadata.get("name"), metadata.get("namespace")
    display = str(name) if isinstance(name, str) else ""
    if display and isinstance(namespace, str) and namespace:
        display = f"{namespace}/{display}"
    return (kind if isinstance(kind, str) else ""), display


def _envelope_errors(body: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version is None:
        errors.append(FieldError("apiVersion", "is required"))
    elif not isinstance(api_version, str):
        errors.append(FieldError("apiVersion", "must be a string"))
    elif api_version != API_VERSION:
        errors.append(
            FieldError(
                "apiVersion",
                f"{api_version} is not supported: must be {API_VERSION} (kinds {SUPPORTED_KINDS})",
            )
        )
    if kind is None:
        errors.append(FieldError("kind", "is required"))
    elif not isinstance(kind, str):
        errors.append(FieldError("kind", "must be a string"))
    elif kind not in KINDS:
        errors.append(
            FieldError("kind", f"unknown kind {kind}: supported kinds are {SUPPORTED_KINDS}")
        )
    return errors


def parse_object(
    body: object, *, source: str = "", legacy_pool_names: frozenset[str] = frozenset()
) -> ApiObject:
    """Validate one manifest body into its typed object; raise ValidationFailed with every error.

    `source` (`path#document`) is carried into the error for reports.
    """
    if not isinstance(body, Mapping):
        message = "must be a mapping with apiVersion, kind, metadata and spec"
        raise ValidationFailed((FieldError("", message),), source=source)
    kind, name = _identity(body)
    envelope_errors = _envelope_errors(body)
    if envelope_errors:
        raise ValidationFailed(
            tuple(envelope_errors),
            kind=kind if isinstance(kind, str) and kind in KINDS else "",
            name=name,
            source=source,
        )
    try:
        return validate_model(KINDS[kind], body, {LEGACY_POOL_NAMES: legacy_pool_names})
    except ValidationError as error:
        errors = field_errors(error, body)
        raise ValidationFailed(errors, kind=kind, name=name, source=source) from None


def parse_status_change(
    last_body: Mapping[str, Any], last: ApiObject, body: Mapping[str, Any]
) -> ApiObject | None:
    """`parse_object(body)` for a status write after `last` (see the module docstring), or
    None when `body` is not one (or a part fails: parse the whole body then)."""
    status = status_change(type(last), last_body, body)
    if status is None:
        return None
    version = body["metadata"].get("resourceVersion")
    meta = last.metadata.model_copy(update={"resource_version": version})
    return last.model_copy(update={"metadata": meta, "status": status})


def status_change(
    model: type[ApiObject], last_body: Mapping[str, Any], body: Mapping[str, Any]
) -> ApiModel | None:
    """The status of `body`, validated alone, when `body` is a status write after
    `last_body`, which parsed as `model`: all of `parse_object(body)` but its status is as it
    was, but for `metadata.resourceVersion` (a string, its only rule, checked here). None
    when `body` is not one, or the status fails (parse the whole body then)."""
    if model not in (InferenceCluster, ModelReplica) or model.check is not _Object.check:
        return None
    # (A first status, after none, is a status write too: the last parsed without one.)
    status, last_status = body.get("status"), last_body.get("status")
    if not isinstance(status, Mapping) or not isinstance(last_status, Mapping | None):
        return None
    if body.keys() - {"status"} != last_body.keys() - {"status"} or any(
        k != "status" and k != "metadata" and body[k] != last_body[k] for k in body
    ):
        return None
    meta, last_meta = body.get("metadata"), last_body.get("metadata")
    if (
        not isinstance(meta, Mapping)
        or not isinstance(last_meta, Mapping)
        or meta.keys() != last_meta.keys()
        or any(k != "resourceVersion" and meta[k] != last_meta[k] for k in meta)
        or not (meta.get("resourceVersion") is None or type(meta["resourceVersion"]) is str)
    ):
        return None
    status_model = model.model_fields["status"].annotation
    context: dict[str, object] = {LEGACY_POOL_NAMES: frozenset()}
    try:
        return validate_model(_model_of(status_model), status, context)
    except ValidationError:
        return None


def metadata_valid(model: type[ApiObject], meta: object) -> bool:
    """Whether `meta` is valid metadata of a `model` object: `parse_object` of a body with it
    reports no error in `metadata` (False too when `model` has rules beyond the metadata's,
    which this cannot tell)."""
    if model.check is not _Object.check or not isinstance(meta, Mapping):
        return False
    try:
        parsed = validate_model(ObjectMeta, meta, {LEGACY_POOL_NAMES: frozenset()})
    except ValidationError:
        return False
    if not model.is_namespaced and parsed.namespace is not None:
        return False
    return model.name_problem(parsed.name) is None


def _model_of(annotation: object) -> type[ApiModel]:
    """The model of an optional status field (`Status | None`), for a status that is a mapping."""
    (model,) = (a for a in get_args(annotation) if a is not NoneType)
    assert isinstance(model, type) and issubclass(model, ApiModel)
    return model


def validate(new: ApiObject | Mapping[str, Any], old: ApiObject | None = None) -> ApiObject:
    """Admission: validate `new`, as an update of `old` when given; raise ValidationFailed.

    A pool of `new` whose name `old` already has keeps validating under the name rule that
    applied when it was created (only the DNS-label rule ratchets; bounds never do).
    """
    body = new.to_manifest() if not isinstance(new, Mapping) else new
    legacy_pool_names: frozenset[str] = frozenset()
    if isinstance(old, InferenceCluster):
        legacy_pool_names = frozenset(p.name for p in old.spec.node_pools)
    return parse_object(body, legacy_pool_names=legacy_pool_names)
