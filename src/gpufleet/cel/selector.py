"""Compiling DRA device selectors and evaluating them against core `Device`s.

The dialect is Kubernetes' DRA selector CEL (k8s.io/dynamic-resource-allocation/cel) run on
`common-expression-language` (cel-rust): one variable, `device`, with

- `device.driver`: string;
- `device.attributes[domain][id]`: string, bool, int, or a semver for `version` attributes;
- `device.capacity[domain][id]`: a quantity.

A bare key (`memory`) lives under the device's driver as its domain; a qualified key
(`domain/id`) splits at the first `/`. Quantities and semvers are tagged maps handled by the
functions in `gpufleet.cel.functions`.

Which way each rule errs (always toward a non-match; `matches` never raises):

- Unknown domain: Kubernetes returns an empty map for any missing domain while
  `"x.com" in device.attributes` stays false. This engine has no default-valued maps, so
  indexing a missing domain is an evaluation error: results agree with Kubernetes or are a
  non-match (e.g. `!has(device.attributes["x.com"].a)` is true there, a non-match here).
- Unknown id, wrong operand types, overflow, division by zero: evaluation error, non-match.
- A result that is not exactly `true` (a non-bool, or `false`) is a non-match: no truthiness.
- A device with an unparsable version attribute, malformed capacity, mistyped attribute value
  or two keys naming the same `domain/id` matches no selector at all. Kubernetes fails the
  evaluation of every selector on a device with an unparsable version (`DeviceMatches`), and
  this engine cannot make only the selectors that touch the bad value fail (`has()` would see
  through any placeholder), so the whole device is refused.

Compile-time checks are the API server's, in order: the length (`SELECTOR_MAX_BYTES`, 10 KiB,
before the engine parses anything), the syntax (cel-go style message with a caret), variables
other than `device` (and macro-bound names) and functions outside the standard library and the
Kubernetes quantity and semver libraries, the syntax tree's bounds (`gpufleet.cel.syntax`:
250 levels, cel-go's `maxRecursionDepth`), the type check against the DRA device environment
(`gpufleet.cel.check`: a bool result, overloads, `device`'s fields, constant literals), and the
cost below. An attribute's value is `dyn` there, as in Kubernetes, so a mistyped use of one
surfaces only at evaluation, as a non-match.

**Cost.** Every selector carries a worst-case cost estimate (`gpufleet.cel.cost`: the API
server's, cel-go's checker estimate with the DRA device schema's bounds); one that costs more
than `SELECTOR_COST_LIMIT` (Kubernetes' `CELSelectorExpressionMaxCost`, 1,000,000) does not
compile, the message giving the estimate, the limit and the factor, as the API server refuses
it. The runtime is bounded too: the estimate holds for a device within the schema's
bounds, so a device beyond them (more than 32 attributes and capacities, a string or version
value over 64 characters, a driver or domain over 63, an attribute name over 32) matches no
selector, as the API server would not have admitted it; and a selector must also fit the limit
as this engine pays for it (`gpufleet.cel.cost.DEVICE_MAP_COPY`: device map reads, library
callbacks, pattern compiles and quadratic list building cost more here than in cel-go), which
refuses only selectors no device needs. A selector whose syntax the estimator cannot
read is refused (fails closed).

Programs are compiled once per expression and results cached per (expression, device), keyed
by the only device fields CEL can see: driver, attributes and capacity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

import cel

from gpufleet.cel.check import TypeCheckError, check
from gpufleet.cel.cost import (
    DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH,
    DEVICE_MAX_DOMAIN_LENGTH,
    DEVICE_MAX_ID_LENGTH,
    DRIVER_NAME_MAX_LENGTH,
    MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    SELECTOR_COST_LIMIT,
    UNBOUNDED,
    estimate_cost,
)
from gpufleet.cel.functions import LIBRARY_FUNCTIONS, encode_quantity, encode_semver
from gpufleet.cel.syntax import Expr, SyntaxLimit, SyntaxUnsupported, parse
from gpufleet.core.model import Attribute, AttributeKind, Device
from gpufleet.core.quantity import MAX_INT64, MIN_INT64, QuantityError, parse_quantity
from gpufleet.core.semver import SemverError, parse_semver

DEVICE_VARIABLE: Final = "device"
#: `resourceapi.CELSelectorExpressionMaxLength`: bytes (Go's `len`), checked before compiling.
SELECTOR_MAX_BYTES: Final = 10 * 1024

#: Named functions the engine provides that belong to standard CEL.
_STANDARD_FUNCTIONS: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "type",
        "dyn",
        "timestamp",
        "duration",
        "getFullYear",
        "getMonth",
        "getDayOfYear",
        "getDayOfMonth",
        "getDate",
        "getDayOfWeek",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    }
)
_KNOWN_FUNCTIONS: Final = _STANDARD_FUNCTIONS | frozenset(LIBRARY_FUNCTIONS)
_MACRO_BINDING: Final = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,"
)
_PARSE_ERROR_PREFIX: Final = re.compile(r"^Failed to parse expression .*?: (?=ERROR: )", re.DOTALL)
_ENGINE_NESTING_LIMIT: Final = re.compile(r'msg: "Recursion limit of (\d+) exceeded"')
_COMPILED_SELECTORS_MAX: Final = 4096
_EVALUATIONS_MAX: Final = 65536
_DEVICE_CONTEXTS_MAX: Final = 1024


class CelError(Exception):
    """Base class of errors raised by the CEL layer."""


class CelCompileError(CelError):
    """An expression that does not compile; `message` is human readable (cel-go style)."""

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(message)
        self.expression = expression
        self.message = message


@dataclass(frozen=True, slots=True)
class CelSelector:
    """A compiled selector; satisfies `gpufleet.core.model.Selector`."""

    expression: str
    _program: cel.Program = field(compare=False, repr=False)
    #: The API server's worst-case cost estimate (cost units) of one evaluation.
    estimated_cost: int = field(default=0, compare=False)

    def matches(self, device: Device) -> bool:
        """True only when the expression evaluates to `true`; errors are non-matches."""
        return _evaluate(self, _device_key(device))


def compile_selector(expression: str, cost_limit: int | None = SELECTOR_COST_LIMIT) -> CelSelector:
    """Compile `expression` (cached); `CelCompileError` when it cannot compile, or when its
    estimated cost exceeds `cost_limit` (None: no limit, for tests of evaluation only)."""
    return _compile(expression, cost_limit)


@lru_cache(maxsize=_COMPILED_SELECTORS_MAX)
def _compile(expression: str, cost_limit: int | None) -> CelSelector:
    # The length first: the engine's parser recurses in native code and crashes the process on
    # a tree some ten thousand levels deep, which 10 KiB cannot spell (at most ~5,000 levels,
    # measured safe). Deeper than `MAX_DEPTH` is refused below, before anything evaluates it.
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > SELECTOR_MAX_BYTES:
        raise CelCompileError(
            expression,
            f"ERROR: <input>: expression too long: {size} bytes, limit {SELECTOR_MAX_BYTES} "
            "(Kubernetes' CELSelectorExpressionMaxLength)",
        )
    try:
        program = cel.compile(expression)
    except ValueError as error:
        raise CelCompileError(expression, _parse_error(str(error))) from None
    references = program.references()
    bound = set(_MACRO_BINDING.findall(expression))
    variables = [v for v in references["variables"] if v != DEVICE_VARIABLE and v not in bound]
    if "cel" in variables and "bind" in references["functions"]:
        raise CelCompileError(
            expression,
            _located(expression, "cel", "cel.bind (cel-go's bindings extension) is not supported"),
        )
    functions = [f for f in references["functions"] if f[0].isalpha() and f not in _KNOWN_FUNCTIONS]
    if undeclared := variables + functions:
        name = undeclared[0]
        raise CelCompileError(
            expression, _located(expression, name, f"undeclared reference to '{name}'")
        )
    tree = _tree(expression)
    try:
        check(tree)
    except TypeCheckError as error:
        offset = error.offset if error.offset >= 0 else max(tree.offset, 0)
        raise CelCompileError(expression, _at(expression, offset, error.message)) from None
    cost = _estimated_cost(expression, tree, cost_limit)
    return CelSelector(expression, program, cost)


def _parse_error(engine_message: str) -> str:
    """The engine's parse error in cel-go's format; its nesting limit said plainly."""
    message = _PARSE_ERROR_PREFIX.sub("", engine_message)
    if limit := _ENGINE_NESTING_LIMIT.search(message):
        return (
            "ERROR: <input>: expression recursion limit exceeded: brackets, calls, lists, maps "
            f"and conditionals nest at most {int(limit.group(1)) - 1} levels deep in this "
            "engine's parser"
        )
    return message


def _tree(expression: str) -> Expr:
    """The syntax tree the checker and the estimator walk; `CelCompileError` past its bounds
    (`gpufleet.cel.syntax.MAX_DEPTH`) or where it cannot read the syntax (fails closed)."""
    try:
        return parse(expression)
    except RecursionError:
        # Only brackets recurse (at most 95 deep, ~6 frames each, past the engine's parser):
        # reached only when the caller's own stack is already ~400 frames deep. Fail closed.
        raise CelCompileError(
            expression, "ERROR: <input>: brackets nest deeper than this process's stack allows"
        ) from None
    except SyntaxLimit as error:
        raise CelCompileError(expression, f"ERROR: <input>: {error}") from None
    except SyntaxUnsupported as error:
        raise CelCompileError(
            expression, f"cannot estimate the cost of this expression: {error}"
        ) from None


def _estimated_cost(expression: str, tree: Expr, cost_limit: int | None) -> int:
    """The API server's estimate; `CelCompileError` when it or this engine's exceeds the limit."""
    cost = estimate_cost(tree)
    if cost_limit is None:
        return cost
    if cost > cost_limit:
        raise CelCompileError(expression, _over_budget(cost, cost_limit, ""))
    on_engine = estimate_cost(tree, is_this_engine=True)
    if on_engine > cost_limit:
        raise CelCompileError(
            expression,
            _over_budget(on_engine, cost_limit, " on this engine"),
        )
    return cost


def _over_budget(cost: int, limit: int, where: str) -> str:
    if cost >= UNBOUNDED:
        return (
            f"too complex, exceeds cost limit: estimated cost{where} is unbounded (a size the "
            f"device schema does not bound), limit {limit}"
        )
    return (
        f"too complex, exceeds cost limit: estimated cost{where} {cost} exceeds budget {limit} "
        f"by factor of {cost / limit:.1f}x"
    )


def _located(expression: str, name: str, message: str) -> str:
    """`message` in cel-go's format, pointing at the first occurrence of `name`."""
    found = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", expression)
    if found is None:
        return f"ERROR: <input>: {message}"
    return _at(expression, found.start(), message)


def _at(expression: str, offset: int, message: str) -> str:
    """`message` in cel-go's format, with a caret under the character at `offset`."""
    line_number = expression.count("\n", 0, offset) + 1
    line_start = expression.rfind("\n", 0, offset) + 1
    column = offset - line_start
    line = expression[line_start:].split("\n", 1)[0]
    return f"ERROR: <input>:{line_number}:{column + 1}: {message}\n| {line}\n| {'.' * column}^"


# --- the device binding -------------------------------------------------------------------

#: What CEL can see of a device, hashable: driver, sorted attributes, sorted capacity.
_DeviceKey = tuple[
    str,
    tuple[tuple[str, str, str, str | bool | int], ...],
    tuple[tuple[str, str], ...],
]


def _device_key(device: Device) -> _DeviceKey:
    attributes = tuple(
        sorted(
            (name, str(a.kind), type(a.value).__name__, a.value)
            for name, a in device.attributes.items()
        )
    )
    return (str(device.driver), attributes, tuple(sorted(device.capacity.items())))


class _InvalidDevice(Exception):
    """A device value that Kubernetes would refuse; the device matches nothing."""


@lru_cache(maxsize=_DEVICE_CONTEXTS_MAX)
def _device_context(key: _DeviceKey) -> cel.Context | None:
    """The evaluation context for one device, or None for an invalid device."""
    driver, attribute_items, capacity_items = key
    attributes: dict[str, dict[str, object]] = {}
    capacity: dict[str, dict[str, object]] = {}
    # Beyond the schema's bounds the cost estimate does not hold: the device matches nothing.
    if len(driver) > DRIVER_NAME_MAX_LENGTH or (
        len(attribute_items) + len(capacity_items) > MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE
    ):
        return None
    try:
        for name, kind, _, value in attribute_items:
            _insert(
                attributes, driver, name, _attribute_value(Attribute(AttributeKind(kind), value))
            )
        for name, text in capacity_items:
            _insert(capacity, driver, name, encode_quantity(parse_quantity(text)))
    except (_InvalidDevice, QuantityError, SemverError):
        return None
    context = cel.Context()
    for function_name, function in LIBRARY_FUNCTIONS.items():
        context.add_function(function_name, function)
    context.add_variable(
        DEVICE_VARIABLE, {"driver": driver, "attributes": attributes, "capacity": capacity}
    )
    return context


def _insert(domains: dict[str, dict[str, object]], driver: str, name: str, value: object) -> None:
    domain, separator, identifier = name.partition("/")
    if not separator:
        domain, identifier = driver, name
    if len(domain) > DEVICE_MAX_DOMAIN_LENGTH or len(identifier) > DEVICE_MAX_ID_LENGTH:
        raise _InvalidDevice(f"{name!r} is longer than the device schema allows")
    entries = domains.setdefault(domain, {})
    if identifier in entries:
        raise _InvalidDevice(f"{name!r} names {domain}/{identifier} twice")
    entries[identifier] = value


def _attribute_value(attribute: Attribute) -> object:
    value = attribute.value
    if isinstance(value, str) and len(value) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
        raise _InvalidDevice(f"a value of {len(value)} characters")
    match attribute.kind:
        case AttributeKind.STRING if isinstance(value, str):
            return value
        case AttributeKind.BOOL if isinstance(value, bool):
            return value
        case AttributeKind.INT if isinstance(value, int) and not isinstance(value, bool):
            if MIN_INT64 <= value <= MAX_INT64:
                return value
        case AttributeKind.VERSION if isinstance(value, str):
            return encode_semver(parse_semver(value))
    raise _InvalidDevice(f"attribute of kind {attribute.kind} has value {value!r}")


@lru_cache(maxsize=_EVALUATIONS_MAX)
def _evaluate(selector: CelSelector, key: _DeviceKey) -> bool:
    context = _device_context(key)
    if context is None:
        return False
    try:
        result = selector._program.execute(context)
    except Exception:
        # The engine raises many types (KeyError, TypeError, RuntimeError, OverflowError...)
        # for evaluation errors; every one of them is a non-match by contract.
        return False
    return result is True
