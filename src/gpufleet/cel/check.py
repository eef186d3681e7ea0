"""The type check of a DRA device selector, as the Kubernetes API server compiles one.

Kubernetes compiles every `CELDeviceSelector.expression` against the DRA environment
(k8s.io/dynamic-resource-allocation/cel/compile.go, `newCompiler`) and refuses it when cel-go's
checker finds an issue or when the result is neither `bool` nor the unknown type (`must
evaluate to bool or the unknown type, not int`). This module ports that check over
`gpufleet.cel.syntax`'s tree, with the same environment:

- `device` is the object `kubernetes.DRADevice` with the fields `driver` (string),
  `attributes` (map(string, map(string, dyn))), `capacity` (map(string, map(string,
  kubernetes.Quantity))) and `allowMultipleAllocations` (bool, from 1.34); any other field is
  `undefined field`. An attribute's value is `dyn`, as in Kubernetes (`attributeType` is
  `AnyType`): whether `name` is a bool, an int, a string or a version is known only to the
  device, so every use of an attribute value type-checks and a wrong one is an evaluation
  error (a non-match), as in Kubernetes. A map lookup whose key is not a literal is dynamic in
  the same way.
- Operators and functions have cel-go's overloads (`checker/decls`, the standard library;
  cross-type numeric ordering is on, as in Kubernetes' base environment) and the Kubernetes
  quantity and semver libraries' (k8s.io/apiserver/pkg/cel/library quantity.go, semverlib.go:
  their functions other than `quantity`, `isQuantity`, `semver` and `isSemver` are methods
  only). An argument of type `dyn` matches every overload; a call no overload accepts is
  `found no matching overload for 'f' applied to '(types)'`.
- Literals: list and map literals are homogeneous (`ValidateHomogeneousAggregateLiterals`), and
  a constant regex, `duration` or `timestamp` must parse (`ValidateRegexLiterals` etc.: the
  base environment's validators from 1.29), checked by this engine's own parser of each. A
  constant `quantity()` or `semver()` argument must parse too; this is stricter than
  Kubernetes, whose compile admits `quantity("1Gx")` and fails every evaluation of it (the
  selector could match only where it never evaluates the call).

Errors point at the token cel-go points at (the operator, the `.`, the `(`) and only the first
is reported. The walk runs on an explicit stack (`gpufleet.cel.syntax.walk`): any depth the
parser admits is safe. What is not ported: message types, `type()` values beyond `type`,
optional types, and cel-go's type parameters beyond what the overloads below need (a generic
result is `dyn` where cel-go would infer a type; this errs toward admitting).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Final

import cel

from gpufleet.cel.syntax import (
    Call,
    Comprehension,
    Expr,
    Ident,
    ListLit,
    Literal,
    MapLit,
    Select,
    walk,
)
from gpufleet.core.quantity import QuantityError, parse_quantity
from gpufleet.core.semver import SemverError, parse_semver

#: A type: a name ("int", "kubernetes.Quantity"...), or ("list", elem) / ("map", key, value).
Type = str | tuple["Type", ...]

DYN: Final = "dyn"
BOOL: Final = "bool"
INT: Final = "int"
UINT: Final = "uint"
DOUBLE: Final = "double"
STRING: Final = "string"
BYTES: Final = "bytes"
NULL: Final = "null_type"
TYPE: Final = "type"
TIMESTAMP: Final = "google.protobuf.Timestamp"
DURATION: Final = "google.protobuf.Duration"
QUANTITY: Final = "kubernetes.Quantity"
SEMVER: Final = "kubernetes.Semver"
DEVICE: Final = "kubernetes.DRADevice"

DEVICE_FIELDS: Final[Mapping[str, Type]] = {
    "driver": STRING,
    "attributes": ("map", STRING, ("map", STRING, DYN)),
    "capacity": ("map", STRING, ("map", STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
_LITERAL_TYPES: Final = {
    "bool": BOOL,
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "string": STRING,
    "bytes": BYTES,
    "null": NULL,
}
_NUMBERS: Final = frozenset({INT, UINT, DOUBLE})
_ORDERED: Final = _NUMBERS | {STRING, BYTES, BOOL, TIMESTAMP, DURATION}


class TypeCheckError(Exception):
    """The expression does not type-check; `message` is cel-go's, `offset` where it points."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def type_name(value: Type) -> str:
    """cel-go's spelling: `int`, `list(string)`, `map(string, dyn)`."""
    if isinstance(value, str):
        return value
    if value[0] == "list":
        return f"list({type_name(value[1])})"
    return f"map({type_name(value[1])}, {type_name(value[2])})"


def _is_list(value: Type) -> bool:
    return isinstance(value, tuple) and value[0] == "list"


def _is_map(value: Type) -> bool:
    return isinstance(value, tuple) and value[0] == "map"


def join(a: Type, b: Type) -> Type | None:
    """The type both `a` and `b` have, `dyn` standing for any type; None when they differ."""
    if a == b:
        return a
    if a == DYN or b == DYN:
        return DYN
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] and len(a) == len(b):
        parts = [join(x, y) for x, y in zip(a[1:], b[1:], strict=True)]
        if any(p is None for p in parts):
            return None
        return (a[0], *(p for p in parts if p is not None))
    return None


# --- named functions: (is_member, parameter types, result) --------------------------------

#: A parameter: a type, "any", "list" (any list) or "map" (any map).
_Overload = tuple[bool, tuple[str, ...], Type]


def _global(*params: str, result: Type) -> _Overload:
    return (False, params, result)


def _method(*params: str, result: Type) -> _Overload:
    return (True, params, result)


def _both(*params: str, result: Type) -> list[_Overload]:
    return [_global(*params, result=result), _method(*params, result=result)]


_TIME_GETTERS: Final = ("getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate")
_OVERLOADS: Final[Mapping[str, list[_Overload]]] = {
    "size": [o for p in (STRING, BYTES, "list", "map") for o in _both(p, result=INT)],
    "contains": [_method(STRING, STRING, result=BOOL)],
    "startsWith": [_method(STRING, STRING, result=BOOL)],
    "endsWith": [_method(STRING, STRING, result=BOOL)],
    "matches": _both(STRING, STRING, result=BOOL),
    "int": [_global(p, result=INT) for p in (INT, UINT, DOUBLE, STRING, TIMESTAMP)],
    "uint": [_global(p, result=UINT) for p in (INT, UINT, DOUBLE, STRING)],
    "double": [_global(p, result=DOUBLE) for p in (INT, UINT, DOUBLE, STRING)],
    "string": [
        _global(p, result=STRING)
        for p in (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION)
    ],
    "bytes": [_global(p, result=BYTES) for p in (STRING, BYTES)],
    "dyn": [_global("any", result=DYN)],
    "type": [_global("any", result=TYPE)],
    "timestamp": [_global(p, result=TIMESTAMP) for p in (STRING, INT, TIMESTAMP)],
    "duration": [_global(p, result=DURATION) for p in (STRING, DURATION)],
    **{
        name: [_method(TIMESTAMP, result=INT), _method(TIMESTAMP, STRING, result=INT)]
        for name in (*_TIME_GETTERS, "getDayOfWeek")
    },
    **{
        name: [
            _method(TIMESTAMP, result=INT),
            _method(TIMESTAMP, STRING, result=INT),
            _method(DURATION, result=INT),
        ]
        for name in ("getHours", "getMinutes", "getSeconds", "getMilliseconds")
    },
    # k8s.io/apiserver/pkg/cel/library/quantity.go
    "quantity": [_global(STRING, result=QUANTITY)],
    "isQuantity": [_global(STRING, result=BOOL)],
    "sign": [_method(QUANTITY, result=INT)],
    "isInteger": [_method(QUANTITY, result=BOOL)],
    "asInteger": [_method(QUANTITY, result=INT)],
    "asApproximateFloat": [_method(QUANTITY, result=DOUBLE)],
    "add": [_method(QUANTITY, QUANTITY, result=QUANTITY), _method(QUANTITY, INT, result=QUANTITY)],
    "sub": [_method(QUANTITY, QUANTITY, result=QUANTITY), _method(QUANTITY, INT, result=QUANTITY)],
    # both libraries (semverlib.go)
    "isGreaterThan": [_method(t, t, result=BOOL) for t in (QUANTITY, SEMVER)],
    "isLessThan": [_method(t, t, result=BOOL) for t in (QUANTITY, SEMVER)],
    "compareTo": [_method(t, t, result=INT) for t in (QUANTITY, SEMVER)],
    "semver": [_global(STRING, result=SEMVER), _global(STRING, BOOL, result=SEMVER)],
    "isSemver": [_global(STRING, result=BOOL), _global(STRING, BOOL, result=BOOL)],
    "major": [_method(SEMVER, result=INT)],
    "minor": [_method(SEMVER, result=INT)],
    "patch": [_method(SEMVER, result=INT)],
}

#: Operators with fixed overloads: parameter types -> result.
_ARITHMETIC: Final[Mapping[str, Mapping[tuple[str, str], Type]]] = {
    "_+_": {
        **{(t, t): t for t in (INT, UINT, DOUBLE, STRING, BYTES)},
        (TIMESTAMP, DURATION): TIMESTAMP,
        (DURATION, TIMESTAMP): TIMESTAMP,
        (DURATION, DURATION): DURATION,
    },
    "_-_": {
        **{(t, t): t for t in (INT, UINT, DOUBLE)},
        (TIMESTAMP, TIMESTAMP): DURATION,
        (TIMESTAMP, DURATION): TIMESTAMP,
        (DURATION, DURATION): DURATION,
    },
    "_*_": {(t, t): t for t in (INT, UINT, DOUBLE)},
    "_/_": {(t, t): t for t in (INT, UINT, DOUBLE)},
    "_%_": {(t, t): t for t in (INT, UINT)},
}


def _matches_parameter(argument: Type, parameter: str) -> bool:
    if argument in (DYN, parameter) or parameter == "any":
        return True
    return (parameter == "list" and _is_list(argument)) or (
        parameter == "map" and _is_map(argument)
    )


def _signature(function: str, target: Type | None, args: list[Type]) -> str:
    listed = ", ".join(type_name(a) for a in args)
    receiver = f"{type_name(target)}." if target is not None else ""
    return f"found no matching overload for '{function}' applied to '{receiver}({listed})'"


# --- constant literals (cel-go's ASTValidators, checked by this engine) -------------------


def _engine_accepts(expression: str, value: str) -> bool:
    """Whether this engine evaluates `expression` with `value` bound to `v` without error."""
    context = cel.Context()
    context.add_variable("v", value)
    try:
        cel.compile(expression).execute(context)
    except Exception:  # the engine raises many types for an evaluation error
        return False
    return True


def _literal_problem(function: str, is_member: bool, args: tuple[Expr, ...]) -> str | None:
    """Why a constant argument of `function` does not parse (None: it does, or is not constant)."""
    position = 1 if function == "matches" and not is_member else 0
    if len(args) <= position:
        return None
    literal = args[position]
    if not isinstance(literal, Literal) or literal.kind != "string" or literal.text is None:
        return None
    text = literal.text
    if function == "matches" and not _engine_accepts('"".matches(v)', text):
        return f"invalid regular expression {text!r}"
    if function in ("duration", "timestamp") and not _engine_accepts(f"{function}(v)", text):
        return f"invalid {function} argument {text!r}"
    if function == "quantity":
        try:
            parse_quantity(text)
        except QuantityError as error:
            return f"quantity({text!r}) does not parse: {error}"
    if function == "semver":
        return _semver_problem(text, args[1:])
    return None


def _semver_problem(text: str, rest: tuple[Expr, ...]) -> str | None:
    normalize = False
    if rest:
        flag = rest[0]
        if not (isinstance(flag, Literal) and flag.kind == "bool"):
            return None  # a normalize flag that is not a literal: the argument is not constant
        normalize = flag.text == "true"
    try:
        parse_semver(text, normalize)
    except SemverError as error:
        return f"semver({text!r}) does not parse: {error}"
    return None


# --- the check ----------------------------------------------------------------------------

_Walk = Generator[Expr, Type, Type]


@dataclass(slots=True)
class _Checker:
    scope: dict[str, list[Type]]
    #: The offsets of the nodes being visited (an expanded macro's parts have none of their own).
    offsets: list[int]

    def fail(self, message: str) -> TypeCheckError:
        return TypeCheckError(message, self.offsets[-1] if self.offsets else 0)

    def visit(self, expr: Expr) -> _Walk:
        self.offsets.append(expr.offset if expr.offset >= 0 else self.offsets[-1])
        if isinstance(expr, Literal):
            found: Type = _LITERAL_TYPES[expr.kind]
        elif isinstance(expr, Ident):
            found = self._ident(expr)
        elif isinstance(expr, Select):
            found = self._select(expr, (yield expr.operand))
        elif isinstance(expr, Call):
            found = yield from self._call(expr)
        elif isinstance(expr, ListLit):
            found = yield from self._list(expr)
        elif isinstance(expr, MapLit):
            found = yield from self._map(expr)
        else:
            found = yield from self._comprehension(expr)
        self.offsets.pop()
        return found

    def _ident(self, expr: Ident) -> Type:
        local = self.scope.get(expr.name)
        if local:
            return local[-1]
        if expr.name == "device":
            return DEVICE
        raise self.fail(f"undeclared reference to '{expr.name}'")

    def _select(self, expr: Select, operand: Type) -> Type:
        if operand == DEVICE:
            if expr.field not in DEVICE_FIELDS:
                raise self.fail(f"undefined field '{expr.field}'")
            found = DEVICE_FIELDS[expr.field]
        elif operand == DYN:
            found = DYN
        elif isinstance(operand, tuple) and operand[0] == "map" and operand[1] in (STRING, DYN):
            found = operand[2]
        else:
            raise self.fail(f"type '{type_name(operand)}' does not support field selection")
        return BOOL if expr.is_test else found

    def _list(self, expr: ListLit) -> _Walk:
        element: Type | None = None
        for item in expr.elements:
            found = yield item
            joined = found if element is None else join(element, found)
            if joined is None:
                raise self.fail(
                    f"expected type '{type_name(element or DYN)}' but found '{type_name(found)}'"
                )
            element = joined
        return ("list", element or DYN)

    def _map(self, expr: MapLit) -> _Walk:
        key: Type | None = None
        value: Type | None = None
        for key_expr, value_expr in expr.entries:
            found_key = yield key_expr
            found_value = yield value_expr
            for seen, found in ((key, found_key), (value, found_value)):
                if seen is not None and join(seen, found) is None:
                    raise self.fail(
                        f"expected type '{type_name(seen)}' but found '{type_name(found)}'"
                    )
            key = found_key if key is None else join(key, found_key)
            value = found_value if value is None else join(value, found_value)
        return ("map", key or DYN, value or DYN)

    def _comprehension(self, expr: Comprehension) -> _Walk:
        iter_range = yield expr.iter_range
        if _is_list(iter_range) or _is_map(iter_range):
            element: Type = iter_range[1]
        elif iter_range == DYN:
            element = DYN
        else:
            raise self.fail(
                f"expression of type '{type_name(iter_range)}' cannot be the range of a "
                "comprehension (must be list, map, or dynamic)"
            )
        accu_init = yield expr.accu_init
        self.scope.setdefault(expr.accu_var, []).append(
            ("list", DYN) if _is_list(accu_init) else accu_init
        )
        self.scope.setdefault(expr.iter_var, []).append(element)
        yield expr.loop_condition
        yield expr.loop_step
        self.scope[expr.iter_var].pop()
        result = yield expr.result
        self.scope[expr.accu_var].pop()
        return result

    def _call(self, expr: Call) -> _Walk:
        target = (yield expr.target) if expr.target is not None else None
        args: list[Type] = []
        for arg in expr.args:
            args.append((yield arg))
        operator = _OPERATORS.get(expr.function)
        found = operator(args) if operator is not None and target is None else None
        if operator is None:
            found = self._function(expr, target, args)
        if found is None:
            raise self.fail(_signature(expr.function, target, args))
        return found

    def _function(self, expr: Call, target: Type | None, args: list[Type]) -> Type | None:
        overloads = _OVERLOADS.get(expr.function)
        if overloads is None:
            raise self.fail(f"undeclared reference to '{expr.function}'")
        arguments = args if target is None else [target, *args]
        results = {
            result
            for is_member, params, result in overloads
            if is_member == (target is not None)
            and len(params) == len(arguments)
            and all(_matches_parameter(a, p) for a, p in zip(arguments, params, strict=True))
        }
        if not results:
            return None
        problem = _literal_problem(expr.function, target is not None, expr.args)
        if problem is not None:
            raise self.fail(problem)
        return results.pop() if len(results) == 1 else DYN


# --- operators ----------------------------------------------------------------------------


def _logical(args: list[Type]) -> Type | None:
    return BOOL if all(a in (BOOL, DYN) for a in args) else None


def _negate(args: list[Type]) -> Type | None:
    (operand,) = args
    return operand if operand in (INT, DOUBLE, DURATION, DYN) else None


def _conditional(args: list[Type]) -> Type | None:
    condition, yes, no = args
    if condition not in (BOOL, DYN):
        return None
    return join(yes, no)


def _equality(args: list[Type]) -> Type | None:
    return BOOL if join(args[0], args[1]) is not None else None


def _ordering(args: list[Type]) -> Type | None:
    left, right = args
    if left == DYN or right == DYN:
        return BOOL if {left, right} <= _ORDERED | {DYN} else None
    if left == right and left in _ORDERED:
        return BOOL
    return BOOL if left in _NUMBERS and right in _NUMBERS else None


def _arithmetic(function: str) -> Callable[[list[Type]], Type | None]:
    table = _ARITHMETIC[function]

    def result(args: list[Type]) -> Type | None:
        left, right = args
        if function == "_+_" and _is_list(left) and _is_list(right):
            return join(left, right)
        if left == DYN or right == DYN:
            other = right if left == DYN else left
            if other == DYN or (function == "_+_" and _is_list(other)):
                return other
            candidates = {r for (a, b), r in table.items() if other in (a, b)}
            if not candidates:
                return None
            return candidates.pop() if len(candidates) == 1 else DYN
        return table.get((left, right))  # type: ignore[arg-type]

    return result


def _index(args: list[Type]) -> Type | None:
    container, key = args
    if container == DYN:
        return DYN
    if _is_list(container) and key in (INT, UINT, DYN):
        return container[1]
    if _is_map(container) and join(container[1], key) is not None:
        return container[2]
    return None


def _in(args: list[Type]) -> Type | None:
    element, container = args
    if container == DYN:
        return BOOL
    if (_is_list(container) or _is_map(container)) and join(
        element,
        container[1],
    ) is not None:
        return BOOL
    return None


_OPERATORS: Final[Mapping[str, Callable[[list[Type]], Type | None]]] = {
    "_&&_": _logical,
    "_||_": _logical,
    "!_": _logical,
    "@not_strictly_false": _logical,
    "-_": _negate,
    "_?_:_": _conditional,
    "_==_": _equality,
    "_!=_": _equality,
    **{f: _ordering for f in ("_<_", "_<=_", "_>_", "_>=_")},
    **{f: _arithmetic(f) for f in _ARITHMETIC},
    "_[_]": _index,
    "@in": _in,
}


def check(tree: Expr) -> Type:
    """The selector's result type; `TypeCheckError` on the first issue, or when the result is
    neither bool nor dyn (Kubernetes' `must evaluate to bool or the unknown type`)."""
    checker = _Checker({}, [max(tree.offset, 0)])
    result = walk(tree, checker.visit)
    if result not in (BOOL, DYN):
        raise TypeCheckError(
            f"must evaluate to bool or the unknown type, not {type_name(result)}", -1
        )
    return result
