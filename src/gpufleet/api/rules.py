"""Rules that span fields, run on every well-formed part of an object, whatever else is broken.

pydantic runs a model's `after` validators only when every field of the model passed, so a rule
that spans fields (`maxNodeCount` against `minNodeCount`, unique names, an engine's shape) used
to stay silent until the user fixed an unrelated type error. `ApiModel` replaces those
validators with one `wrap` validator:

- the object validates: its `check(rules)` runs on it, as an `after` validator would;
- it fails: a *partial* object is built from the same input, in which each field holds its
  validated value when it alone passes its schema, a partial object (or a list or map of them)
  when it is a model that failed, and `BROKEN` otherwise. `check(rules)` runs on that, and its
  errors join the schema errors in one `ValidationError`.

`BROKEN` refuses every use (comparison, hashing, truth, iteration, attribute access, formatting)
by raising `Unreadable`; each rule runs inside `with rules.reading():`, which skips the rule when
it reads a broken part. So a rule reports only what it can judge from well-formed fields, and an
error is never a consequence of another: `nodeCount: -1` and `maxNodeCount: 3` report the bound,
not also `nodeCount must be at most maxNodeCount`. Rules compare with `==`, never `is`, so a
broken enum field cannot silently take a branch. Rules that read a single field are field
validators instead (a DNS-label name, CEL that compiles, a quantity): they run whenever that
field has the right type.

Each error is a pydantic error of type `RULE_ERROR_TYPE` located relative to the model; pydantic
prefixes it with the model's location as it goes up, so one validation reports every error of
an object with its full path.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager, suppress
from types import NoneType, UnionType
from typing import Annotated, Any, Final, NoReturn, Self, TypeVar, Union, cast, get_args, get_origin

from annotated_types import MaxLen, MinLen
from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError, SchemaValidator

#: The pydantic error type of a broken rule; its context holds the message verbatim.
RULE_ERROR_TYPE: Final = "gpufleet_rule"

Loc = tuple[str | int, ...]


class Unreadable(Exception):
    """A rule read a part of a partial object that failed its schema."""


class _Broken:
    """A field that failed its schema, in a partial object: every use raises `Unreadable`."""

    __slots__ = ()

    def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise Unreadable

    __getattr__ = _refuse
    __getitem__ = _refuse
    __eq__ = _refuse
    __ne__ = _refuse
    __lt__ = _refuse
    __le__ = _refuse
    __gt__ = _refuse
    __ge__ = _refuse
    __hash__ = _refuse
    __bool__ = _refuse
    __len__ = _refuse
    __iter__ = _refuse
    __contains__ = _refuse
    __format__ = _refuse
    __str__ = _refuse

    def __repr__(self) -> str:
        return "BROKEN"


BROKEN: Final[Any] = _Broken()


def rule_error(loc: Loc, message: str) -> InitErrorDetails:
    error = PydanticCustomError(RULE_ERROR_TYPE, "{message}", {"message": message})
    return InitErrorDetails(type=error, loc=loc, input=None)


def raise_rule(message: str, loc: Loc = ()) -> NoReturn:
    """Fail a field validator with one rule error (located inside the field when `loc`)."""
    raise ValidationError.from_exception_data("rule", [rule_error(loc, message)])


#: `suppress` keeps no state between uses, so one instance serves every rule.
_READING: Final = suppress(Unreadable)


class Rules:
    """The rule violations of one model; `context` is the validation context."""

    def __init__(self, context: Mapping[str, Any]) -> None:
        self.context = context
        self.errors: list[InitErrorDetails] = []

    def reading(self) -> AbstractContextManager[None]:
        """Wrap each rule: it is skipped when it reads a broken part of the object."""
        return _READING

    def add(self, loc: Loc, message: str) -> None:
        self.errors.append(rule_error(loc, message))

    def unique(
        self,
        field: str,
        items: Iterable[Any],
        key: Callable[[Any], Hashable],
        describe: str = "name",
    ) -> None:
        """Each readable key of the list `field` appears once (a Kubernetes list-map).

        An item whose key is not readable is left out, and the others are still compared.
        """
        first_index: dict[Hashable, int] = {}
        with self.reading():
            for index, item in enumerate(items):
                try:
                    value = key(item)
                    seen_at = first_index.get(value)
                except Unreadable:
                    continue
                if seen_at is not None:
                    self.add(
                        (field, index), f'duplicate {describe} "{value}" (also at index {seen_at})'
                    )
                else:
                    first_index[value] = index


def _reinit(error: ErrorDetails) -> InitErrorDetails:
    """A reported error as input for a new ValidationError, type, message and context kept."""
    custom = PydanticCustomError(error["type"], error["msg"], error.get("ctx"))
    return InitErrorDetails(type=custom, loc=error["loc"], input=error["input"])


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors.

    Field docstrings are the fields' descriptions (the CRDs carry them to `kubectl explain`).
    Subclasses put rules that span fields in `check`, each inside `with rules.reading():`.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    def check(self, rules: Rules) -> None:
        """Add the model's cross-field rule violations to `rules` (override; call super)."""

    @model_validator(mode="wrap")
    @classmethod
    def _validate_with_rules(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        if cls.check is ApiModel.check:
            # No rule of its own: what follows would add nothing to the schema's errors.
            return handler(data)
        rules = Rules(info.context or {})
        try:
            obj = handler(data)
        except ValidationError as error:
            if not isinstance(data, Mapping):
                raise
            failed = [e["loc"] for e in error.errors()]
            partial(cls, data, rules.context, failed).check(rules)
            if not rules.errors:
                raise
            combined = [_reinit(e) for e in error.errors()] + rules.errors
            raise ValidationError.from_exception_data(cls.__name__, combined) from None
        obj.check(rules)
        if rules.errors:
            raise ValidationError.from_exception_data(cls.__name__, rules.errors)
        return obj


_RULES_VALIDATOR: Final = ApiModel.__dict__["_validate_with_rules"].__func__


_ADAPTERS: dict[object, TypeAdapter[Any]] = {}


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    try:
        adapter = _ADAPTERS.get(annotation)
    except TypeError:  # unhashable metadata: not cached
        return TypeAdapter(annotation)
    if adapter is None:
        adapter = _ADAPTERS[annotation] = TypeAdapter(annotation)
    return adapter


M = TypeVar("M", bound=ApiModel)


def partial(
    cls: type[M], data: Mapping[str, Any], context: Mapping[str, Any], failed: list[Loc]
) -> M:
    """`cls` built from `data` field by field: each field valid, partial, or `BROKEN`.

    `failed` holds the locations (relative to `data`) of the errors validation reported: a
    field with none is validated again (it passes), one with some is salvaged without being
    validated again, so the work stays linear in the size of the input.
    """
    values: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        key = field.alias if field.alias is not None and field.alias in data else name
        if key in data:
            annotation: Any = field.annotation
            if field.metadata:
                annotation = Annotated[(annotation, *field.metadata)]
            inside = [loc[1:] for loc in failed if loc[:1] == (key,)]
            values[name] = _readable(annotation, data[key], context, inside)
        elif field.is_required():
            values[name] = BROKEN
        else:
            values[name] = field.get_default(call_default_factory=True, validated_data={})
    return cast(M, cls.model_construct(**values))


def _readable(
    annotation: object, raw: object, context: Mapping[str, Any], failed: list[Loc]
) -> Any:
    """`raw` as `annotation` when no error lies inside it; else as much of it as is well-formed."""
    if not failed:
        try:
            return _adapter(annotation).validate_python(raw, context=dict(context))
        except ValidationError as error:
            failed = [e["loc"] for e in error.errors()]
    return _salvage(annotation, raw, context, failed)


def _salvage(annotation: object, raw: object, context: Mapping[str, Any], failed: list[Loc]) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        if _breaks_length_bound(metadata, raw):  # its length error is the one to report
            return BROKEN
        return _salvage(inner, raw, context, failed)
    if origin is Union or origin is UnionType:
        options = [o for o in get_args(annotation) if o is not NoneType]
        return _salvage(options[0], raw, context, failed) if len(options) == 1 else BROKEN
    if isinstance(annotation, type) and issubclass(annotation, ApiModel):
        return partial(annotation, raw, context, failed) if isinstance(raw, Mapping) else BROKEN
    if origin is list and isinstance(raw, list):
        (item,) = get_args(annotation)
        return [
            _readable(item, value, context, [loc[1:] for loc in failed if loc[:1] == (index,)])
            for index, value in enumerate(raw)
        ]
    if origin is dict and isinstance(raw, Mapping):
        _, item = get_args(annotation)
        return {
            key: _readable(item, value, context, [loc[1:] for loc in failed if loc[:1] == (key,)])
            for key, value in raw.items()
            if isinstance(key, str) and (key, "[key]") not in failed
        }
    return BROKEN


def _breaks_length_bound(metadata: list[Any], raw: object) -> bool:
    if not isinstance(raw, list | Mapping):
        return False
    low = min((m.min_length for m in metadata if isinstance(m, MinLen)), default=0)
    high = min((m.max_length for m in metadata if isinstance(m, MaxLen)), default=len(raw))
    return not low <= len(raw) <= high


# --- The fast path: one plain validation, then one walk of the rules ---------------------------
#
# On well-formed input the wrap validator above only calls its handler and then `check`, once per
# nested model: a Python round trip per model that costs more than pydantic's own work. So
# `validate_model` validates with the same schema stripped of those wrap validators (pydantic
# builds the same objects), then runs every model's `check` in one walk of the result. When the
# schema or any rule fails, it validates again with the full schema, so the errors (their paths,
# order and messages) are exactly those of `cls.model_validate`; on success the object is the one
# `cls.model_validate` builds, as every `check` passed (tests/api/test_fast_validation.py).

_PLAIN: dict[type[ApiModel], SchemaValidator] = {}
_WALKED: dict[type[ApiModel], tuple[bool, tuple[str, ...]]] = {}


def validate_model(cls: type[M], data: object, context: Mapping[str, Any]) -> M:
    """`cls.model_validate(data, context=context)`, cheaper when `data` is valid."""
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = SchemaValidator(_strip_rules(cls.__pydantic_core_schema__))
    try:
        obj = plain.validate_python(data, context=context)
    except ValidationError:
        obj = None
    if isinstance(obj, cls):
        rules = Rules(context)
        _check_all(obj, rules)
        if not rules.errors:
            return obj
    return cls.model_validate(data, context=context)


def _strip_rules(schema: Any) -> Any:
    """A copy of a core schema without `ApiModel`'s wrap validators (a model keeps its ref)."""
    if isinstance(schema, dict):
        function = schema.get("function")
        if (
            schema.get("type") == "function-wrap"
            and isinstance(function, dict)
            and getattr(function.get("function"), "__func__", None) is _RULES_VALIDATOR
        ):
            inner = dict(_strip_rules(schema["schema"]))
            if "ref" in schema:
                inner["ref"] = schema["ref"]
            return inner
        return {key: _strip_rules(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_strip_rules(value) for value in schema]
    return schema


def _check_all(obj: ApiModel, rules: Rules) -> None:
    """Run `check` of `obj` and of every model inside it (they are all well-formed)."""
    cls = type(obj)
    walk = _WALKED.get(cls)
    if walk is None:
        walk = _WALKED[cls] = _walk_of(cls)
    has_check, fields = walk
    if has_check:
        obj.check(rules)
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, ApiModel):
            _check_all(value, rules)
        elif isinstance(value, _SEQUENCES):
            for item in value:
                if isinstance(item, ApiModel):
                    _check_all(item, rules)
        elif isinstance(value, dict):
            for item in value.values():
                if isinstance(item, ApiModel):
                    _check_all(item, rules)


_SEQUENCES: Final = (list, tuple)


def _walk_of(cls: type[ApiModel]) -> tuple[bool, tuple[str, ...]]:
    """Whether `cls` has rules of its own, and its fields that may hold a model with some."""
    fields = tuple(
        name
        for name, field in cls.model_fields.items()
        if _may_hold_checked(field.annotation, frozenset())
    )
    return cls.check is not ApiModel.check, fields


def _may_hold_checked(annotation: object, seen: frozenset[object]) -> bool:
    """Whether a value of `annotation` may hold a model with rules (`check`) of its own."""
    if annotation in seen:
        return False
    seen = seen | {annotation}
    if isinstance(annotation, type) and issubclass(annotation, ApiModel):
        if annotation.check is not ApiModel.check:
            return True
        fields = annotation.model_fields.values()
        return any(_may_hold_checked(field.annotation, seen) for field in fields)
    return any(_may_hold_checked(arg, seen) for arg in get_args(annotation))
