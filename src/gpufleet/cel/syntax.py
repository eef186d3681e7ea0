"""A CEL parser for the checker and the cost estimate: the expression's tree, macros expanded.

The engine (`common-expression-language`) parses and runs an expression but exposes no syntax
tree, and the type check (`gpufleet.cel.check`) and the cost estimate (`gpufleet.cel.cost`)
need one. This module parses the CEL grammar (cel-spec's `CEL.g4`) into the shapes cel-go's
checker works on: literals, identifiers, field selections (`has()` is a presence test), calls
(operators are calls named as in cel-go: `_+_`, `_[_]`, `_?_:_`, `!_`...), list and map
literals, and comprehensions, into which the macros `all`, `exists`, `exists_one`, `map` and
`filter` expand exactly as cel-go expands them (`parser/macro.go`), since the estimate prices
the expansion. Every node carries the offset of the token that made it (an operator, a `.`, a
`(`), where cel-go's errors point.

It is only ever run on an expression the engine has parsed already; anything it cannot parse
(message construction `T{...}`, optional syntax `.?`) raises `SyntaxUnsupported`, and the
caller refuses the expression (fails closed: no selector runs without an estimate).

**Bounds** (cel-go's parser defaults, `parser/parser.go`): at most `MAX_CODE_POINTS` (100,000)
code points, and a tree at most `MAX_DEPTH` (250, cel-go's `maxRecursionDepth`) levels deep;
past either, `SyntaxLimit` names the limit. The depth counts as cel-go builds the tree: a chain
of `&&` or `||` becomes a balanced tree (cel-go's `balancer`, so 1,024 alternatives are 11
levels), and a run of `!` or `-` collapses by parity (`!!x` is `x`, cel-go's `VisitLogicalNot`);
every other operator, field selection, index, call and bracket is a level. cel-go counts per
grammar rule, so its boundary can differ from ours by a level or two; either way no walker of
the tree recurses past `MAX_DEPTH`: this parser recurses only into brackets (4 to 6 frames
a level, and the engine's own parser refuses more than 95 nested brackets before this one
runs), the tree's depth is measured without recursion (`depth`), and the walkers run on an
explicit stack (`walk`). The engine (cel-rust) recurses in native code and overflows its stack
on trees some ten thousand levels deep (a crash, not an error), so the bound protects it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Final, TypeVar

MAX_DEPTH: Final = 250
MAX_CODE_POINTS: Final = 100_000


class SyntaxUnsupported(Exception):
    """The expression uses syntax this parser does not read; `str()` says what and where."""


class SyntaxLimit(SyntaxUnsupported):
    """The expression is longer or deeper than the parser's bounds; `str()` names the limit."""


# --- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    #: "bool", "int", "uint", "double", "string", "bytes" or "null".
    kind: str
    #: Characters of a string, bytes of a bytes literal; 1 otherwise.
    size: int
    offset: int = _field(default=-1, compare=False)
    #: A string literal's text (escapes decoded), `true` or `false` for a bool; else None.
    text: str | None = _field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Ident:
    name: str
    offset: int = _field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class Select:
    operand: Expr
    field: str
    #: A presence test: `has(operand.field)`.
    is_test: bool = False
    offset: int = _field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    args: tuple[Expr, ...]
    target: Expr | None = None
    offset: int = _field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class ListLit:
    elements: tuple[Expr, ...]
    offset: int = _field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class MapLit:
    entries: tuple[tuple[Expr, Expr], ...]
    offset: int = _field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class Comprehension:
    iter_var: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr
    offset: int = _field(default=-1, compare=False)


Expr = Literal | Ident | Select | Call | ListLit | MapLit | Comprehension

#: The accumulator of an expanded macro (cel-go's `AccumulatorName`).
ACCUMULATOR: Final = "@result"


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `expr`, in evaluation order."""
    if isinstance(expr, Select):
        return (expr.operand,)
    if isinstance(expr, Call):
        return expr.args if expr.target is None else (expr.target, *expr.args)
    if isinstance(expr, ListLit):
        return expr.elements
    if isinstance(expr, MapLit):
        return tuple(part for entry in expr.entries for part in entry)
    if isinstance(expr, Comprehension):
        return (
            expr.iter_range,
            expr.accu_init,
            expr.loop_condition,
            expr.loop_step,
            expr.result,
        )
    return ()


def depth(expr: Expr) -> int:
    """Levels of the tree (a leaf is 1), measured on an explicit stack: any depth is safe."""
    deepest = 0
    pending = [(expr, 1)]
    while pending:
        node, level = pending.pop()
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children(node))
    return deepest


_Result = TypeVar("_Result")
#: A walker's visit of one node: a generator that yields each sub-expression it needs the
#: result of, is sent that result, and returns the node's own result.
Visit = Callable[[Expr], Generator[Expr, _Result, _Result]]


def walk(root: Expr, visit: Visit[_Result]) -> _Result:
    """Run `visit` over the tree on an explicit stack instead of Python's: a post-order walk
    whose depth is bounded by memory, not by the recursion limit."""
    stack = [visit(root)]
    sent: _Result | None = None
    while True:
        try:
            child = stack[-1].send(sent)  # type: ignore[arg-type]
        except StopIteration as finished:
            stack.pop()
            if not stack:
                result: _Result = finished.value
                return result
            sent = finished.value
            continue
        stack.append(visit(child))
        sent = None


# --- tokens -----------------------------------------------------------------------------------

_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
        |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?)
        |0[xX][0-9a-fA-F]+[uU]?|\d+[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|\[\?|[-+*/%!<>?:.,\[\](){}])
    """,
    re.VERBOSE | re.DOTALL,
)
#: Binary operators: precedence (tighter binds higher) and cel-go's function name.
_BINARY: Final = {
    "||": (1, "_||_"),
    "&&": (2, "_&&_"),
    "==": (3, "_==_"),
    "!=": (3, "_!=_"),
    "<": (3, "_<_"),
    "<=": (3, "_<=_"),
    ">": (3, "_>_"),
    ">=": (3, "_>=_"),
    "in": (3, "@in"),
    "+": (4, "_+_"),
    "-": (4, "_-_"),
    "*": (5, "_*_"),
    "/": (5, "_/_"),
    "%": (5, "_%_"),
}
#: Chains of these are balanced, as cel-go's parser balances them.
_BALANCED: Final = frozenset({"_||_", "_&&_"})
_RESERVED: Final = frozenset(
    {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let"}
    | {"loop", "package", "namespace", "return", "var", "void", "while"}
)
_ESCAPE: Final = re.compile(r"\\(?:[0-7]{3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "string", "number", "ident", "op", "end"
    text: str
    offset: int


def _tokens(source: str) -> list[_Token]:
    found: list[_Token] = []
    position = 0
    while position < len(source):
        match = _TOKEN.match(source, position)
        if match is None:
            raise SyntaxUnsupported(f"unexpected character at offset {position}")
        kind = match.lastgroup or ""
        if kind != "space":
            found.append(_Token(kind, match.group(), position))
        position = match.end()
    found.append(_Token("end", "", len(source)))
    return found


def _unescape(match: re.Match[str]) -> str:
    escape = match.group()[1:]
    if escape[0] in "xuU":
        return chr(int(escape[1:], 16))
    if escape[0].isdigit():
        return chr(int(escape, 8))
    return _SIMPLE_ESCAPES.get(escape, escape)


def _string_literal(token: _Token) -> Literal:
    text = token.text
    prefix = re.match(r"[rRbB]*", text)
    flags = (prefix.group() if prefix else "").lower()
    body = text[len(flags) :]
    quote = 3 if body[:3] in ('"""', "'''") else 1
    inner = body[quote:-quote]
    if "r" not in flags:
        inner = _ESCAPE.sub(_unescape, inner)
    if "b" in flags:
        return Literal("bytes", len(inner.encode(errors="surrogatepass")), token.offset)
    return Literal("string", len(inner), token.offset, inner)


def _number_literal(token: _Token) -> Literal:
    text = token.text
    offset = token.offset
    if text[-1] in "uU":
        return Literal("uint", 1, offset)
    is_hex = text[:2] in ("0x", "0X")
    if not is_hex and any(c in text for c in ".eE"):
        return Literal("double", 1, offset)
    return Literal("int", 1, offset)


def _balanced(function: str, terms: list[Expr], offsets: list[int], lo: int, hi: int) -> Expr:
    """cel-go's `balancer.balancedTree`: operators lo..hi joining terms lo..hi+1 (depth log n)."""
    middle = (lo + hi + 1) // 2
    left = terms[middle] if middle == lo else _balanced(function, terms, offsets, lo, middle - 1)
    right = (
        terms[middle + 1] if middle == hi else _balanced(function, terms, offsets, middle + 1, hi)
    )
    return Call(function, (left, right), offset=offsets[middle])


# --- the parser -------------------------------------------------------------------------------


class _Parser:
    """Recursive descent into brackets only: `_expr` -> `_binary` -> `_operand` -> `_primary`
    -> `_expr`, 4 frames a nesting (5 or 6 through a list's or a call's elements); operator chains
    and member chains are loops."""

    def __init__(self, source: str) -> None:
        self._tokens = _tokens(source)
        self._at = 0
        self._nesting = 0

    def parse(self) -> Expr:
        expr = self._expr()
        if self._peek().kind != "end":
            self._fail("unexpected input")
        return expr

    # helpers

    def _peek(self) -> _Token:
        return self._tokens[self._at]

    def _next(self) -> _Token:
        token = self._tokens[self._at]
        self._at += 1
        return token

    def _accept(self, text: str) -> _Token | None:
        token = self._peek()
        if token.kind in ("op", "ident") and token.text == text:
            self._at += 1
            return token
        return None

    def _expect(self, text: str) -> None:
        if not self._accept(text):
            self._fail(f"expected {text!r}")

    def _fail(self, message: str) -> None:
        token = self._peek()
        raise SyntaxUnsupported(f"{message} at offset {token.offset} ({token.text!r})")

    # grammar, loosest binding first

    def _expr(self) -> Expr:
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            raise SyntaxLimit(f"expression recursion limit exceeded: {MAX_DEPTH}")
        condition = self._binary()
        if question := self._accept("?"):
            yes = self._binary()
            self._expect(":")
            no = self._expr()
            condition = Call("_?_:_", (condition, yes, no), offset=question.offset)
        self._nesting -= 1
        return condition

    def _binary(self) -> Expr:
        """Every binary operator by precedence climbing on explicit stacks; a chain of `&&` or
        `||` is kept whole on the stack and balanced when it is reduced."""
        operands = [self._operand()]
        operators: list[tuple[int, str, int]] = []  # precedence, function, offset
        while (token := self._peek()).kind in ("op", "ident") and token.text in _BINARY:
            if token.kind == "ident" and token.text != "in":
                break
            self._at += 1
            precedence, function = _BINARY[token.text]
            while operators and (
                operators[-1][0] > precedence
                or (operators[-1][0] == precedence and function not in _BALANCED)
            ):
                _reduce(operands, operators)
            operators.append((precedence, function, token.offset))
            operands.append(self._operand())
        while operators:
            _reduce(operands, operators)
        return operands[0]

    def _operand(self) -> Expr:
        """A unary run (collapsed by parity, as cel-go does) and a member chain: one frame."""
        token = self._peek()
        count = 0
        if token.kind == "op" and token.text in ("!", "-"):
            while self._accept(token.text):
                count += 1
        operand = self._primary()
        while True:
            if dot := self._accept("."):
                name = self._identifier()
                if opening := self._accept("("):
                    arguments = self._arguments(")")
                    operand = _member_call(operand, name, arguments, opening.offset)
                else:
                    operand = Select(operand, name, offset=dot.offset)
            elif bracket := self._accept("["):
                index = self._expr()
                self._expect("]")
                operand = Call("_[_]", (operand, index), offset=bracket.offset)
            elif self._peek().text in (".?", "[?", "{"):
                self._fail("unsupported syntax")
            else:
                break
        if count % 2 == 0:
            return operand
        if token.text == "-" and isinstance(operand, Literal) and operand.kind in ("int", "double"):
            return operand  # a negative literal is a literal (and costs nothing)
        return Call("!_" if token.text == "!" else "-_", (operand,), offset=token.offset)

    def _identifier(self) -> str:
        token = self._next()
        if token.kind != "ident" or token.text in _RESERVED:
            self._at -= 1
            self._fail("expected an identifier")
        return token.text

    def _arguments(self, closing: str) -> tuple[Expr, ...]:
        args: list[Expr] = []
        while not self._accept(closing):
            if args:
                self._expect(",")
                if self._accept(closing):  # a trailing comma
                    break
            args.append(self._expr())
        return tuple(args)

    def _primary(self) -> Expr:
        token = self._next()
        if token.kind == "string":
            return _string_literal(token)
        if token.kind == "number":
            return _number_literal(token)
        if token.kind == "ident":
            return self._named(token)
        if token.text == "(":
            expr = self._expr()
            self._expect(")")
            return expr
        if token.text == "[":
            return ListLit(self._arguments("]"), offset=token.offset)
        if token.text == "{":
            return self._map(token.offset)
        if token.text == ".":  # a leading-dot (root) identifier
            return self._named(self._next_identifier())
        self._at -= 1
        self._fail("expected an expression")
        raise AssertionError("unreachable")

    def _next_identifier(self) -> _Token:
        self._identifier()
        return self._tokens[self._at - 1]

    def _named(self, token: _Token) -> Expr:
        name = token.text
        literal = {"true": "bool", "false": "bool", "null": "null"}.get(name)
        if literal is not None:
            return Literal(literal, 1, token.offset, name if literal == "bool" else None)
        if name in _RESERVED or name == "in":
            self._at -= 1
            self._fail("reserved word")
        if opening := self._accept("("):
            args = self._arguments(")")
            if name == "has":
                return _has(args)
            return Call(name, args, offset=opening.offset)
        return Ident(name, token.offset)

    def _map(self, offset: int) -> Expr:
        entries: list[tuple[Expr, Expr]] = []
        while not self._accept("}"):
            if entries:
                self._expect(",")
                if self._accept("}"):
                    break
            key = self._expr()
            self._expect(":")
            entries.append((key, self._expr()))
        return MapLit(tuple(entries), offset=offset)


def _reduce(operands: list[Expr], operators: list[tuple[int, str, int]]) -> None:
    """Join the operands of the top operator (of a whole chain, for `&&` and `||`)."""
    _, function, offset = operators.pop()
    if function not in _BALANCED:
        right = operands.pop()
        operands.append(Call(function, (operands.pop(), right), offset=offset))
        return
    offsets = [offset]
    while operators and operators[-1][1] == function:
        offsets.insert(0, operators.pop()[2])
    terms = operands[-len(offsets) - 1 :]
    del operands[-len(offsets) - 1 :]
    operands.append(_balanced(function, terms, offsets, 0, len(offsets) - 1))


def parse(source: str) -> Expr:
    """The expression's tree with macros expanded; `SyntaxLimit` past the bounds (see the module
    docstring), `SyntaxUnsupported` when it cannot be read."""
    if len(source) > MAX_CODE_POINTS:
        raise SyntaxLimit(
            f"expression code point size exceeds limit: size: {len(source)}, "
            f"limit {MAX_CODE_POINTS}"
        )
    tree = _Parser(source).parse()
    levels = depth(tree)
    if levels > MAX_DEPTH:
        raise SyntaxLimit(
            f"expression nested {levels} levels deep, limit {MAX_DEPTH} (cel-go's "
            "maxRecursionDepth)"
        )
    return tree


# --- macros (cel-go's parser/macro.go) --------------------------------------------------------


def _has(args: tuple[Expr, ...]) -> Expr:
    if len(args) != 1 or not isinstance(args[0], Select):
        raise SyntaxUnsupported("has() takes one field selection")
    return Select(args[0].operand, args[0].field, is_test=True, offset=args[0].offset)


def _member_call(target: Expr, name: str, args: tuple[Expr, ...], offset: int) -> Expr:
    expand = _MACROS.get((name, len(args)))
    if expand is None or not isinstance(args[0], Ident):
        return Call(name, args, target, offset)
    return expand(target, args[0].name, args[1:], offset)


def _accu() -> Ident:
    return Ident(ACCUMULATOR)


def _not_strictly_false(condition: Expr) -> Expr:
    return Call("@not_strictly_false", (condition,))


_Macro = Callable[[Expr, str, tuple[Expr, ...], int], Expr]


def _all(target: Expr, var: str, args: tuple[Expr, ...], offset: int) -> Expr:
    step = Call("_&&_", (_accu(), args[0]))
    condition = _not_strictly_false(_accu())
    return Comprehension(
        var, target, ACCUMULATOR, Literal("bool", 1), condition, step, _accu(), offset
    )


def _exists(target: Expr, var: str, args: tuple[Expr, ...], offset: int) -> Expr:
    step = Call("_||_", (_accu(), args[0]))
    condition = _not_strictly_false(Call("!_", (_accu(),)))
    return Comprehension(
        var, target, ACCUMULATOR, Literal("bool", 1), condition, step, _accu(), offset
    )


def _exists_one(target: Expr, var: str, args: tuple[Expr, ...], offset: int) -> Expr:
    step = Call("_?_:_", (args[0], Call("_+_", (_accu(), Literal("int", 1))), _accu()))
    result = Call("_==_", (_accu(), Literal("int", 1)))
    return Comprehension(
        var, target, ACCUMULATOR, Literal("int", 1), Literal("bool", 1), step, result, offset
    )


def _map(target: Expr, var: str, args: tuple[Expr, ...], offset: int) -> Expr:
    append = Call("_+_", (_accu(), ListLit((args[-1],))))
    step: Expr = append if len(args) == 1 else Call("_?_:_", (args[0], append, _accu()))
    return Comprehension(
        var, target, ACCUMULATOR, ListLit(()), Literal("bool", 1), step, _accu(), offset
    )


def _filter(target: Expr, var: str, args: tuple[Expr, ...], offset: int) -> Expr:
    append = Call("_+_", (_accu(), ListLit((Ident(var),))))
    step = Call("_?_:_", (args[0], append, _accu()))
    return Comprehension(
        var, target, ACCUMULATOR, ListLit(()), Literal("bool", 1), step, _accu(), offset
    )


_MACROS: Final[dict[tuple[str, int], _Macro]] = {
    ("all", 2): _all,
    ("exists", 2): _exists,
    ("exists_one", 2): _exists_one,
    ("existsOne", 2): _exists_one,
    ("map", 2): _map,
    ("map", 3): _map,
    ("filter", 2): _filter,
}
