"""The Kubernetes CEL quantity and semver libraries, for a CEL engine without custom types.

`common-expression-language` cannot carry Python objects through an evaluation, so a quantity
travels as the one-key map `{"__quantity__": <canonical string>}` and a semver as
`{"__semver__": <canonical string, no build metadata>}`. Canonical strings are equal exactly
when the values are (see `gpufleet.core.quantity` and `gpufleet.core.semver`), so CEL's own
map equality gives `quantity("1Gi") == quantity("1024Mi")` and
`semver("1.0.0+a") == semver("1.0.0+b")`, as in Kubernetes.

Each function mirrors k8s.io/apiserver/pkg/cel/library (quantity.go, semverlib.go). The engine
would call each as a function or as a method (`q.compareTo(r)` is `compareTo(q, r)`), but the
type check (`gpufleet.cel.check`) admits only Kubernetes' forms (methods, except `quantity`,
`isQuantity`, `semver` and `isSemver`) and refuses a wrong argument type or an unparsable
constant string. What remains for evaluation are values known only to the device (an
attribute is `dyn`) or computed: a wrong type or an unparsable string there is an evaluation
error, and every error ends in a non-match.

Errors are signalled by returning an `EvaluationFailure`, which the engine cannot convert and
so reports as an evaluation error; raising instead would make the engine print the exception
to stderr on every non-matching device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from gpufleet.core.quantity import MAX_INT64, MIN_INT64, Quantity, QuantityError, parse_quantity
from gpufleet.core.semver import Semver, SemverError, parse_semver

QUANTITY_TAG: Final = "__quantity__"
SEMVER_TAG: Final = "__semver__"

#: The CEL value of a quantity or semver: a one-key tagged map.
TaggedValue = dict[str, str]


class EvaluationFailure:
    """Returned by a library function to fail the evaluation; `reason` says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _ArgumentError(Exception):
    """An argument of the wrong CEL type or an unparsable value; becomes a failure."""


def encode_quantity(quantity: Quantity) -> TaggedValue:
    return {QUANTITY_TAG: quantity.canonical()}


def encode_semver(version: Semver) -> TaggedValue:
    return {SEMVER_TAG: version.canonical()}


def _decode(value: object) -> Quantity | Semver:
    if isinstance(value, Mapping) and len(value) == 1:
        ((tag, text),) = value.items()
        if tag == QUANTITY_TAG and isinstance(text, str):
            return parse_quantity(text)
        if tag == SEMVER_TAG and isinstance(text, str):
            return parse_semver(text)
    raise _ArgumentError(f"expected a quantity or a semver, got {value!r}")


def _quantity(value: object) -> Quantity:
    decoded = _decode(value)
    if not isinstance(decoded, Quantity):
        raise _ArgumentError(f"expected a quantity, got {value!r}")
    return decoded


def _semver(value: object) -> Semver:
    decoded = _decode(value)
    if not isinstance(decoded, Semver):
        raise _ArgumentError(f"expected a semver, got {value!r}")
    return decoded


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _ArgumentError(f"expected a string, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _ArgumentError(f"expected a bool, got {value!r}")
    return value


def _int64(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _ArgumentError(f"expected an int, got {value!r}")
    if not MIN_INT64 <= value <= MAX_INT64:
        raise _ArgumentError(f"{value} does not fit a CEL int (int64)")
    return value


def _compare(left: object, right: object) -> int:
    """Both quantities or both semvers, as the Kubernetes overloads require."""
    mine, theirs = _decode(left), _decode(right)
    if isinstance(mine, Quantity) and isinstance(theirs, Quantity):
        return (mine > theirs) - (mine < theirs)
    if isinstance(mine, Semver) and isinstance(theirs, Semver):
        return mine.compare(theirs)
    raise _ArgumentError(f"cannot compare {left!r} with {right!r}")


def _quantity_operand(value: object) -> Quantity | int:
    return _int64(value) if isinstance(value, int) else _quantity(value)


def _is_quantity(text: object) -> bool:
    try:
        parse_quantity(_string(text))
    except QuantityError:
        return False
    return True


def _is_semver(text: object, normalize: object = False) -> bool:
    try:
        parse_semver(_string(text), _bool(normalize))
    except SemverError:
        return False
    return True


_IMPLEMENTATIONS: Final[Mapping[str, Callable[..., object]]] = {
    "quantity": lambda text: encode_quantity(parse_quantity(_string(text))),
    "isQuantity": _is_quantity,
    "semver": lambda text, normalize=False: encode_semver(
        parse_semver(_string(text), _bool(normalize))
    ),
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda left, right: _compare(left, right) == 1,
    "isLessThan": lambda left, right: _compare(left, right) == -1,
    "sign": lambda value: _quantity(value).sign,
    "isInteger": lambda value: _quantity(value).is_integer,
    "asInteger": lambda value: _quantity(value).as_integer(),
    "asApproximateFloat": lambda value: _quantity(value).as_approximate_float(),
    "add": lambda value, other: encode_quantity(_quantity(value).add(_quantity_operand(other))),
    "sub": lambda value, other: encode_quantity(_quantity(value).sub(_quantity_operand(other))),
    "major": lambda value: _int64(_semver(value).major),
    "minor": lambda value: _int64(_semver(value).minor),
    "patch": lambda value: _int64(_semver(value).patch),
}


def _failing_softly(name: str, implementation: Callable[..., object]) -> Callable[..., object]:
    def function(*arguments: object) -> object:
        try:
            return implementation(*arguments)
        except (_ArgumentError, QuantityError, SemverError, TypeError) as error:
            # TypeError: called with the wrong number of arguments.
            return EvaluationFailure(f"{name}: {error}")

    return function


#: The functions to register on every evaluation context, by CEL name.
LIBRARY_FUNCTIONS: Final[Mapping[str, Callable[..., object]]] = {
    name: _failing_softly(name, implementation) for name, implementation in _IMPLEMENTATIONS.items()
}
