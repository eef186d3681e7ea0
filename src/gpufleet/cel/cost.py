"""The worst-case cost of a DRA device selector, estimated as the Kubernetes API server does.

Kubernetes compiles each `CELDeviceSelector.expression` with a cost estimate (cel-go's
`checker.Cost` with the DRA size estimator of k8s.io/dynamic-resource-allocation/cel) and
refuses one whose estimate exceeds `CELSelectorExpressionMaxCost` (1,000,000): "too complex,
exceeds cost limit". A cost unit is about one basic operation (cel-go measured ~50 ns each).
This module ports that estimate over `gpufleet.cel.syntax`'s tree:

- literals cost 0, an identifier or a field of a map (or of `device`) 1, a call 1 plus its
  arguments, a list literal 10 and a map literal 30 plus their elements;
- `&&`, `||` and `?:` cost their operands (the dearer branch); `in` a list costs its size;
- string work is priced by length (0.1 per character): `==` and ordering of strings by the
  shorter operand, `+` by the result, `startsWith`/`endsWith` by the argument, `contains` by
  the product of both, `matches` by (length + 1) x 0.1 x (pattern length x 0.25);
- a comprehension (every macro expands into one) costs its range, its initial value, its
  result, and its range's size times (condition + step): nesting multiplies.

Sizes come from literals (characters, elements) and from the device schema's bounds, as the
API server's: a driver name at most 63 characters, at most 32 attributes and capacities per
device (so at most 32 domains and 32 names per domain), domains of at most 63 and names of at
most 32 characters, string and version attribute values of at most 64 characters, a quantity
8. A size that cannot be bounded (a value of unknown origin compared with another) is
unbounded, and so is the cost: such an expression exceeds the limit, as it does in Kubernetes.
The Kubernetes library functions (quantity, semver) cost 1 plus their arguments.

What is not ported: cel-go's minimum estimates (only the maximum is checked) and the type
checker beyond what the prices need (a value's type is inferred where the price depends on it:
strings, lists, maps, `device`; elsewhere it is unknown, as `dyn` is in cel-go).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Final

from gpufleet.cel.functions import LIBRARY_FUNCTIONS
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

#: `resourceapi.CELSelectorExpressionMaxCost` (k8s.io/api/resource/v1).
SELECTOR_COST_LIMIT: Final = 1_000_000
#: cel-go's saturated maximum (`math.MaxUint64`): "unbounded".
UNBOUNDED: Final = 2**64 - 1

# Bounds of the device schema (k8s.io/api/resource/v1 constants).
DRIVER_NAME_MAX_LENGTH: Final = 63
MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: Final = 32
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
QUANTITY_SIZE: Final = 8

# cel-go's common/cost.go.
_STRING_TRAVERSAL: Final = 0.1
_REGEX_STRING_LENGTH: Final = 0.25
_LIST_CREATE: Final = 10
_MAP_CREATE: Final = 30
_SELECT_AND_IDENT: Final = 1

# Types, as far as prices need them: a name, or ("list", elem) / ("map", key, value).
_Type = tuple[str, ...] | str
_DYN: Final = "dyn"
_SCALARS: Final = frozenset({"bool", "int", "uint", "double"})
_ATTRIBUTE_MAP: Final = ("map", "string", "attribute")
_CAPACITY_MAP: Final = ("map", "string", "quantity")
_DEVICE_FIELDS: Final[Mapping[str, _Type]] = {
    "driver": "string",
    "allowMultipleAllocations": "bool",
    "attributes": ("map", "string", "attribute-map"),
    "capacity": ("map", "string", "capacity-map"),
}
_NAMED_MAPS: Final[Mapping[str, _Type]] = {
    "attribute-map": _ATTRIBUTE_MAP,
    "capacity-map": _CAPACITY_MAP,
}
_BOOLEAN_FUNCTIONS: Final = frozenset(
    {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in", "!_", "@not_strictly_false"}
    | {"startsWith", "endsWith", "contains", "matches", "isQuantity", "isSemver"}
)
_ORDERINGS: Final = frozenset({"_<_", "_<=_", "_>_", "_>=_"})


def _saturated(value: float) -> int:
    return UNBOUNDED if value >= UNBOUNDED else int(value)


def _factor(size: int, factor: float) -> int:
    """cel-go's `MultiplyByCostFactor`: rounded up, saturating."""
    return UNBOUNDED if size >= UNBOUNDED else _saturated(math.ceil(size * factor))


def _add(*costs: int) -> int:
    return _saturated(sum(costs))


def _mul(a: int, b: int) -> int:
    return _saturated(a * b)


# --- the device schema's sizes (the DRA `sizeEstimator`) --------------------------------------

#: Walks of a path from `device`: the node reached by a field, an element (`@items`/`@values`)
#: or a key (`@keys`), and each node's largest size.
_SCHEMA: Final[Mapping[str, Mapping[str, str]]] = {
    "device": {
        "driver": "driver",
        "allowMultipleAllocations": "bool",
        "attributes": "outer-attributes",
        "capacity": "outer-capacity",
    },
    "outer-attributes": {"@values": "inner-attributes", "@keys": "domain"},
    "outer-capacity": {"@values": "inner-capacity", "@keys": "domain"},
    "inner-attributes": {"@values": "attribute", "@keys": "id", "*": "attribute"},
    "inner-capacity": {"@values": "quantity", "@keys": "id"},
}
_SCHEMA_SIZES: Final[Mapping[str, int]] = {
    "device": 4,
    "driver": DRIVER_NAME_MAX_LENGTH,
    "bool": 1,
    "outer-attributes": MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    "outer-capacity": MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    "inner-attributes": MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    "inner-capacity": MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    "domain": DEVICE_MAX_DOMAIN_LENGTH,
    "id": DEVICE_MAX_ID_LENGTH,
    "attribute": DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH,
    "quantity": QUANTITY_SIZE,
}


def _schema_size(path: tuple[str, ...] | None) -> int | None:
    if not path or path[0] != "device":
        return None
    node = "device"
    for step in path[1:]:
        moves = _SCHEMA.get(node, {})
        found = moves.get(step) or (moves.get("*") if not step.startswith("@") else None)
        if found is None:
            return None
        node = found
    return _SCHEMA_SIZES[node]


# --- the estimate -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    """The sizes of a list's elements or a map's keys and values (cel-go's entry estimate)."""

    is_list: bool
    key: int
    value: int


@dataclass(frozen=True, slots=True)
class _Info:
    cost: int
    type: _Type = _DYN
    #: The largest size (characters, elements, entries); None when unknown.
    size: int | None = None
    entry: _Entry | None = None
    #: Where the value sits in the device schema (`device`, field names, `@values`...).
    path: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class _Local:
    type: _Type
    size: int | None
    entry: _Entry | None
    path: tuple[str, ...] | None


_Scope = dict[str, list[_Local]]
#: A node's visit (see `gpufleet.cel.syntax.walk`): yields sub-expressions, sent their estimates.
_Walk = Generator[Expr, _Info, _Info]


#: What this engine (`common-expression-language`) pays on top of cel-go's prices, measured:
#: reading a field or an entry of one of the device's maps copies the map (its entries and
#: their strings, at most 32 of 64 characters: 32 + 205); a Kubernetes library function is a
#: call back into Python; `matches` compiles its pattern on every call (priced by its length);
#: and a list grows by copying (`map`, `filter`: quadratic in the list they build).
DEVICE_MAP_COPY: Final = 237
LIBRARY_CALL: Final = 50
REGEX_COMPILE: Final = 6  # per character of the pattern


def estimate_cost(expr: Expr, *, is_this_engine: bool = False) -> int:
    """The worst-case cost of evaluating `expr` against one device (saturates at UNBOUNDED):
    cel-go's estimate, or with `is_this_engine` this engine's (see `DEVICE_MAP_COPY`)."""
    return _Coster(is_this_engine).info(expr).cost


class _Coster:
    def __init__(self, is_this_engine: bool = False) -> None:
        self.scope: _Scope = {}
        self.is_this_engine = is_this_engine

    def info(self, expr: Expr) -> _Info:
        """The estimate of the tree under `expr`, walked on an explicit stack (any depth)."""
        return walk(expr, self._visit)

    def size(self, info: _Info) -> int:
        return UNBOUNDED if info.size is None else info.size

    def map_copy(self, container: _Info) -> int:
        """This engine's price of reading from `container`: one of the device's maps is copied."""
        is_device_map = (
            container.path is not None
            and container.path[0] == "device"
            and isinstance(container.type, tuple)
            and container.type[0] == "map"
        )
        return DEVICE_MAP_COPY if self.is_this_engine and is_device_map else 0

    def _visit(self, expr: Expr) -> _Walk:
        """One node's estimate: yields each sub-expression and is sent its estimate."""
        if isinstance(expr, Literal):
            found = _Info(0, expr.kind, expr.size)
        elif isinstance(expr, Ident):
            found = self._ident(expr)
        elif isinstance(expr, Select):
            found = yield from self._select(expr)
        elif isinstance(expr, Call):
            found = yield from self._call(expr)
        elif isinstance(expr, ListLit):
            found = yield from self._list(expr)
        elif isinstance(expr, MapLit):
            found = yield from self._map(expr)
        else:
            found = yield from self._comprehension(expr)
        if found.size is None:
            found = replace(found, size=_size_of(expr, found))
        return found

    def _ident(self, expr: Ident) -> _Info:
        local = self.scope.get(expr.name)
        if local:
            held = local[-1]
            return _Info(_SELECT_AND_IDENT, held.type, held.size, held.entry, held.path)
        if expr.name == "device":
            return _Info(_SELECT_AND_IDENT, "device", None, None, ("device",))
        return _Info(_SELECT_AND_IDENT, _DYN, None, None, (expr.name,))

    def _select(self, expr: Select) -> _Walk:
        operand = yield expr.operand
        if expr.is_test:
            return _Info(_add(operand.cost, _SELECT_AND_IDENT), "bool")
        operand_type = operand.type
        is_map = operand_type == "device" or (
            isinstance(operand_type, tuple) and operand_type[0] == "map"
        )
        cost = _add(operand.cost, _SELECT_AND_IDENT if is_map else 0, self.map_copy(operand))
        path = (*operand.path, expr.field) if operand.path else None
        if operand_type == "device":
            field_type = _DEVICE_FIELDS.get(expr.field, _DYN)
        else:
            field_type = _element_type(operand_type)
        return _Info(cost, field_type, None, None, path)

    def _list(self, expr: ListLit) -> _Walk:
        elements = []
        for element in expr.elements:
            elements.append((yield element))
        value = max((self.size(e) for e in elements), default=0)
        types = {e.type for e in elements}
        element_type = types.pop() if len(types) == 1 else _DYN
        cost = _add(_LIST_CREATE, *(e.cost for e in elements))
        entry = _Entry(True, 1, value)
        return _Info(cost, ("list", *_flat(element_type)), len(expr.elements), entry)

    def _map(self, expr: MapLit) -> _Walk:
        keys, values = [], []
        for key, value in expr.entries:
            keys.append((yield key))
            values.append((yield value))
        entry = _Entry(
            False,
            max((self.size(k) for k in keys), default=0),
            max((self.size(v) for v in values), default=0),
        )
        cost = _add(_MAP_CREATE, *(i.cost for i in keys + values))
        return _Info(cost, ("map", _DYN, _DYN), len(expr.entries), entry)

    # comprehensions

    def _push(self, name: str, local: _Local) -> None:
        self.scope.setdefault(name, []).append(local)

    def _pop(self, name: str) -> None:
        self.scope[name].pop()

    def _comprehension(self, expr: Comprehension) -> _Walk:
        iter_range = yield expr.iter_range
        accu_init = yield expr.accu_init
        accu_type: _Type = accu_init.type
        accu_size = accu_init.size
        if isinstance(accu_type, tuple) and accu_type[0] == "list":
            accu_type = ("list", _DYN)
            if self.is_this_engine:  # the list grows to one element per iteration
                accu_size = _add(self.size(accu_init), self.size(iter_range))
        self._push(expr.accu_var, _Local(accu_type, accu_size, accu_init.entry, accu_init.path))
        self._push(expr.iter_var, _iteration_variable(iter_range))
        condition = yield expr.loop_condition
        step = yield expr.loop_step
        self._pop(expr.iter_var)
        result = yield expr.result
        self._pop(expr.accu_var)
        count = self.size(iter_range)
        cost = _add(
            iter_range.cost,
            accu_init.cost,
            result.cost,
            _mul(count, _add(condition.cost, step.cost)),
        )
        if isinstance(expr.accu_init, Literal):
            return _Info(cost, result.type, accu_init.size)
        if isinstance(expr.accu_init, ListLit | MapLit):
            return _Info(cost, result.type, count, step.entry)
        return _Info(cost, result.type)

    # calls

    def _call(self, expr: Call) -> _Walk:
        target = (yield expr.target) if expr.target is not None else None
        args = []
        for arg in expr.args:
            args.append((yield arg))
        arguments = _add(*(a.cost for a in args))
        price = _PRICES.get(expr.function)
        found = price(self, expr, target, args) if price is not None else None
        if found is None:
            found = _Info(_add(1, arguments), _result_type(expr.function, target, args))
        if self.is_this_engine and expr.function in LIBRARY_FUNCTIONS:
            found = replace(found, cost=_add(found.cost, LIBRARY_CALL))
        if target is not None:
            found = replace(found, cost=_add(found.cost, target.cost))
        return found


def _flat(element_type: _Type) -> tuple[str, ...]:
    return (element_type,) if isinstance(element_type, str) else ("nested",)


def _element_type(container: _Type) -> _Type:
    if isinstance(container, tuple) and container[0] == "map":
        value = container[2]
        return _NAMED_MAPS.get(value, value)
    if isinstance(container, tuple) and container[0] == "list":
        return _DYN if container[1] == "nested" else container[1]
    return _DYN


def _size_of(expr: Expr, info: _Info) -> int | None:
    """cel-go's `computeSize` for what the visit left unknown: the schema, then scalars."""
    schema = _schema_size(info.path)
    if schema is not None:
        return schema
    if isinstance(info.type, str) and info.type in _SCALARS:
        return 1
    return None


def _iteration_variable(iter_range: _Info) -> _Local:
    range_type = iter_range.type
    entry = iter_range.entry
    is_list = entry.is_list if entry is not None else _is_list(range_type)
    step = "@items" if is_list else "@keys"
    path = (*iter_range.path, step) if iter_range.path else None
    if entry is not None:
        size: int | None = entry.value if is_list else entry.key
    else:
        size = None
    if isinstance(range_type, tuple) and range_type[0] == "map":
        element: _Type = range_type[1]
    else:
        element = _element_type(range_type)
    return _Local(element, size, None, path)


def _is_list(value_type: _Type) -> bool:
    return isinstance(value_type, tuple) and value_type[0] == "list"


#: Types whose values may be anything: an overload for any type may apply (cel-go then prices
#: the call as the dearest overload that may).
_UNKNOWN_TYPES: Final = frozenset({_DYN, "attribute"})


def _may_be_text(value_type: _Type) -> bool:
    return value_type in ("string", "bytes") or value_type in _UNKNOWN_TYPES


def _may_be_list(value_type: _Type) -> bool:
    return _is_list(value_type) or value_type in _UNKNOWN_TYPES


def _may_be_string(value: _Info | None) -> bool:
    return value is not None and (value.type == "string" or value.type in _UNKNOWN_TYPES)


#: Result types of the named functions that have one (standard and Kubernetes libraries).
_RESULT_TYPES: Final[Mapping[str, _Type]] = {
    "size": "int",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "quantity": "quantity",
    "add": "quantity",
    "sub": "quantity",
    "semver": "semver",
    "compareTo": "int",
    "sign": "int",
    "asInteger": "int",
    "major": "int",
    "minor": "int",
    "patch": "int",
    "asApproximateFloat": "double",
    "isGreaterThan": "bool",
    "isLessThan": "bool",
    "isInteger": "bool",
}


def _result_type(function: str, target: _Info | None, args: list[_Info]) -> _Type:
    if function in _BOOLEAN_FUNCTIONS:
        return "bool"
    if function in _RESULT_TYPES:
        return _RESULT_TYPES[function]
    if function in ("_-_", "_*_", "_/_", "_%_", "-_") and args and args[0].type in _SCALARS:
        return args[0].type
    return _DYN


# --- prices of the calls cel-go prices by size ------------------------------------------------

_Price = Callable[[_Coster, Call, _Info | None, list[_Info]], _Info | None]


def _arguments(args: list[_Info]) -> int:
    return _add(*(a.cost for a in args))


def _index(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if len(args) != 2:
        return None
    container, _key = args
    step = "@items" if _is_list(container.type) else "@values"
    path = (*container.path, step) if container.path else None
    size = container.entry.value if container.entry is not None else None
    element = _element_type(container.type)
    cost = _add(1, _arguments(args), coster.map_copy(container))
    return _Info(cost, element, size, None, path)


def _logical(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    return _Info(_arguments(args), "bool") if len(args) == 2 else None


def _conditional(
    coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]
) -> _Info | None:
    if len(args) != 3:
        return None
    condition, yes, no = args
    size = max(coster.size(yes), coster.size(no))
    entry = None
    if yes.entry is not None and no.entry is not None:
        entry = _Entry(
            yes.entry.is_list,
            max(yes.entry.key, no.entry.key),
            max(yes.entry.value, no.entry.value),
        )
    result_type = yes.type if yes.type == no.type else _DYN
    return _Info(_add(condition.cost, max(yes.cost, no.cost)), result_type, size, entry)


def _plus(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if len(args) != 2:
        return None
    left, right = args
    is_text = _may_be_text(left.type) and _may_be_text(right.type)
    is_list = _may_be_list(left.type) and _may_be_list(right.type)
    if not (is_text or is_list):
        return None
    size = _add(coster.size(left), coster.size(right))
    cost = _add(1, size if coster.is_this_engine else 0, _arguments(args)) if is_list else 0
    if is_text:
        cost = max(cost, _add(_factor(size, _STRING_TRAVERSAL), _arguments(args)))
    entry = None
    if left.entry is not None and right.entry is not None:
        entry = _Entry(True, 1, max(left.entry.value, right.entry.value))
    result_type = left.type if left.type == right.type or _is_list(left.type) else _DYN
    return _Info(cost, result_type, size, entry)


#: Types whose `==` the Kubernetes CEL library prices at 1 whatever their size.
_CONSTANT_EQUALITY: Final = frozenset({"quantity", "semver"})


def _compare(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if len(args) != 2:
        return None
    if expr.function in _ORDERINGS and not (
        _may_be_text(args[0].type) and _may_be_text(args[1].type)
    ):
        return None
    if expr.function == "_==_" and args[0].type == args[1].type in _CONSTANT_EQUALITY:
        # The Kubernetes library prices `==` of two quantities or two versions at 1 (its
        # `EstimateCallCost`, "O(1) cost equality checks"); only `==`: `!=` stays cel-go's.
        return _Info(_add(1, _arguments(args)), "bool")
    smallest = min(coster.size(args[0]), coster.size(args[1]))
    return _Info(_add(_factor(smallest, _STRING_TRAVERSAL), _arguments(args)), "bool")


def _in(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if len(args) != 2 or not _may_be_list(args[1].type):
        return None
    return _Info(_add(coster.size(args[1]), _arguments(args)), "bool")


def _affix(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if not _may_be_string(target) or target is None or len(args) != 1:
        return None
    return _Info(_add(_factor(coster.size(args[0]), _STRING_TRAVERSAL), _arguments(args)), "bool")


def _contains(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if not _may_be_string(target) or target is None or len(args) != 1:
        return None
    text = _factor(coster.size(target), _STRING_TRAVERSAL)
    sub = _factor(coster.size(args[0]), _STRING_TRAVERSAL)
    return _Info(_add(_mul(text, sub), _arguments(args)), "bool")


def _matches(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if not _may_be_string(target) or target is None or len(args) != 1:
        return None
    text = _factor(_add(coster.size(target), 1), _STRING_TRAVERSAL)
    pattern = _factor(coster.size(args[0]), _REGEX_STRING_LENGTH)
    compiling = _mul(REGEX_COMPILE, coster.size(args[0])) if coster.is_this_engine else 0
    return _Info(_add(_mul(text, pattern), compiling, _arguments(args)), "bool")


def _dyn(coster: _Coster, expr: Call, target: _Info | None, args: list[_Info]) -> _Info | None:
    if len(args) != 1 or target is not None:
        return None
    return replace(args[0], cost=_add(1, args[0].cost))


_PRICES: Final[Mapping[str, _Price]] = {
    "_[_]": _index,
    "_&&_": _logical,
    "_||_": _logical,
    "_?_:_": _conditional,
    "_+_": _plus,
    "_==_": _compare,
    "_!=_": _compare,
    "_<_": _compare,
    "_<=_": _compare,
    "_>_": _compare,
    "_>=_": _compare,
    "@in": _in,
    "startsWith": _affix,
    "endsWith": _affix,
    "contains": _contains,
    "matches": _matches,
    "dyn": _dyn,
}
