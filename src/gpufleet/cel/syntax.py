"""A CEL parser for cost estimation: the expression's abstract syntax, macros expanded.

The engine (`common-expression-language`) parses and runs an expression but exposes no syntax
tree, and the cost estimate (`gpufleet.cel.cost`) needs one. This module parses the CEL grammar
(cel-spec's `CEL.g4`) into the shapes cel-go's checker works on: literals, identifiers, field
selections (`has()` is a presence test), calls (operators are calls named as in cel-go:
`_+_`, `_[_]`, `_?_:_`, `!_`...), list and map literals, and comprehensions, into which the
macros `all`, `exists`, `exists_one`, `map` and `filter` expand exactly as cel-go expands them
(`parser/macro.go`), since the estimate prices the expansion.

It is only ever run on an expression the engine has parsed already; anything it cannot parse
(message construction `T{...}`, optional syntax `.?`) raises `SyntaxUnsupported`, and the
caller refuses the expression (fails closed: no selector runs without an estimate). Bounds:
`MAX_DEPTH` nested sub-expressions (cel-go's parser stops at 250 recursion levels too).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

MAX_DEPTH: Final = 250


class SyntaxUnsupported(Exception):
    """The expression uses syntax this parser does not read; `str()` says what and where."""


# --- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    #: "bool", "int", "uint", "double", "string", "bytes" or "null".
    kind: str
    #: Characters of a string, bytes of a bytes literal; 1 otherwise.
    size: int


@dataclass(frozen=True, slots=True)
class Ident:
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    operand: Expr
    field: str
    #: A presence test: `has(operand.field)`.
    is_test: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    args: tuple[Expr, ...]
    target: Expr | None = None


@dataclass(frozen=True, slots=True)
class ListLit:
    elements: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class MapLit:
    entries: tuple[tuple[Expr, Expr], ...]


@dataclass(frozen=True, slots=True)
class Comprehension:
    iter_var: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr


Expr = Literal | Ident | Select | Call | ListLit | MapLit | Comprehension
_Rule = Callable[[], Expr]

#: The accumulator of an expanded macro (cel-go's `AccumulatorName`).
ACCUMULATOR: Final = "@result"

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
_RELATIONS: Final = {
    "==": "_==_",
    "!=": "_!=_",
    "<": "_<_",
    "<=": "_<=_",
    ">": "_>_",
    ">=": "_>=_",
    "in": "@in",
}
_SUMS: Final = {"+": "_+_", "-": "_-_"}
_PRODUCTS: Final = {"*": "_*_", "/": "_/_", "%": "_%_"}
_RESERVED: Final = frozenset(
    {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let"}
    | {"loop", "package", "namespace", "return", "var", "void", "while"}
)


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


def _string_literal(text: str) -> Literal:
    prefix = re.match(r"[rRbB]*", text)
    flags = (prefix.group() if prefix else "").lower()
    body = text[len(flags) :]
    quote = 3 if body[:3] in ('"""', "'''") else 1
    inner = body[quote:-quote]
    if "r" not in flags:
        inner = re.sub(
            r"\\(?:[0-7]{3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", "_", inner
        )
    if "b" in flags:
        return Literal("bytes", len(inner.encode()))
    return Literal("string", len(inner))


def _number_literal(text: str) -> Literal:
    if text[-1] in "uU":
        return Literal("uint", 1)
    is_hex = text[:2] in ("0x", "0X")
    if not is_hex and any(c in text for c in ".eE"):
        return Literal("double", 1)
    return Literal("int", 1)


# --- the parser -------------------------------------------------------------------------------


class _Parser:
    def __init__(self, source: str) -> None:
        self._tokens = _tokens(source)
        self._at = 0
        self._depth = 0

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

    def _accept(self, text: str) -> bool:
        token = self._peek()
        if token.kind in ("op", "ident") and token.text == text:
            self._at += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        if not self._accept(text):
            self._fail(f"expected {text!r}")

    def _fail(self, message: str) -> None:
        token = self._peek()
        raise SyntaxUnsupported(f"{message} at offset {token.offset} ({token.text!r})")

    def _deeper(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise SyntaxUnsupported(f"nested more than {MAX_DEPTH} levels deep")

    # grammar, loosest binding first

    def _expr(self) -> Expr:
        self._deeper()
        condition = self._binary_chain(self._and, {"||": "_||_"})
        if self._accept("?"):
            yes = self._binary_chain(self._and, {"||": "_||_"})
            self._expect(":")
            no = self._expr()
            condition = Call("_?_:_", (condition, yes, no))
        self._depth -= 1
        return condition

    def _and(self) -> Expr:
        return self._binary_chain(self._relation, {"&&": "_&&_"})

    def _relation(self) -> Expr:
        return self._binary_chain(self._sum, _RELATIONS)

    def _sum(self) -> Expr:
        return self._binary_chain(self._product, _SUMS)

    def _product(self) -> Expr:
        return self._binary_chain(self._unary, _PRODUCTS)

    def _binary_chain(self, operand: _Rule, operators: dict[str, str]) -> Expr:
        left = operand()
        while (token := self._peek()).kind in ("op", "ident") and token.text in operators:
            self._at += 1
            right = operand()
            left = Call(operators[token.text], (left, right))
        return left

    def _unary(self) -> Expr:
        token = self._peek()
        if token.kind == "op" and token.text in ("!", "-"):
            count = 0
            while self._accept(token.text):
                count += 1
            operand = self._member()
            if token.text == "-" and isinstance(operand, Literal) and count % 2:
                return operand  # a negative literal is a literal (and costs nothing)
            for _ in range(count):
                operand = Call("!_" if token.text == "!" else "-_", (operand,))
            return operand
        return self._member()

    def _member(self) -> Expr:
        expr = self._primary()
        while True:
            if self._accept("."):
                name = self._identifier()
                if self._accept("("):
                    expr = _member_call(expr, name, self._arguments(")"))
                else:
                    expr = Select(expr, name)
            elif self._accept("["):
                index = self._expr()
                self._expect("]")
                expr = Call("_[_]", (expr, index))
            elif self._peek().text in (".?", "[?", "{"):
                self._fail("unsupported syntax")
            else:
                return expr

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
            return _string_literal(token.text)
        if token.kind == "number":
            return _number_literal(token.text)
        if token.kind == "ident":
            return self._named(token.text)
        if token.text == "(":
            expr = self._expr()
            self._expect(")")
            return expr
        if token.text == "[":
            return ListLit(self._arguments("]"))
        if token.text == "{":
            return self._map()
        if token.text == ".":  # a leading-dot (root) identifier
            return self._named(self._identifier())
        self._at -= 1
        self._fail("expected an expression")
        raise AssertionError("unreachable")

    def _named(self, name: str) -> Expr:
        literal = {"true": "bool", "false": "bool", "null": "null"}.get(name)
        if literal is not None:
            return Literal(literal, 1)
        if name in _RESERVED or name == "in":
            self._at -= 1
            self._fail("reserved word")
        if self._accept("("):
            args = self._arguments(")")
            if name == "has":
                return _has(args)
            return Call(name, args)
        return Ident(name)

    def _map(self) -> Expr:
        entries: list[tuple[Expr, Expr]] = []
        while not self._accept("}"):
            if entries:
                self._expect(",")
                if self._accept("}"):
                    break
            key = self._expr()
            self._expect(":")
            entries.append((key, self._expr()))
        return MapLit(tuple(entries))


def parse(source: str) -> Expr:
    """The expression's tree with macros expanded; `SyntaxUnsupported` when it cannot."""
    return _Parser(source).parse()


# --- macros (cel-go's parser/macro.go) --------------------------------------------------------


def _has(args: tuple[Expr, ...]) -> Expr:
    if len(args) != 1 or not isinstance(args[0], Select):
        raise SyntaxUnsupported("has() takes one field selection")
    return Select(args[0].operand, args[0].field, is_test=True)


def _member_call(target: Expr, name: str, args: tuple[Expr, ...]) -> Expr:
    expand = _MACROS.get((name, len(args)))
    if expand is None or not isinstance(args[0], Ident):
        return Call(name, args, target)
    return expand(target, args[0].name, args[1:])


def _accu() -> Ident:
    return Ident(ACCUMULATOR)


def _not_strictly_false(condition: Expr) -> Expr:
    return Call("@not_strictly_false", (condition,))


def _all(target: Expr, var: str, args: tuple[Expr, ...]) -> Expr:
    step = Call("_&&_", (_accu(), args[0]))
    condition = _not_strictly_false(_accu())
    return Comprehension(var, target, ACCUMULATOR, Literal("bool", 1), condition, step, _accu())


def _exists(target: Expr, var: str, args: tuple[Expr, ...]) -> Expr:
    step = Call("_||_", (_accu(), args[0]))
    condition = _not_strictly_false(Call("!_", (_accu(),)))
    return Comprehension(var, target, ACCUMULATOR, Literal("bool", 1), condition, step, _accu())


def _exists_one(target: Expr, var: str, args: tuple[Expr, ...]) -> Expr:
    step = Call("_?_:_", (args[0], Call("_+_", (_accu(), Literal("int", 1))), _accu()))
    result = Call("_==_", (_accu(), Literal("int", 1)))
    return Comprehension(
        var, target, ACCUMULATOR, Literal("int", 1), Literal("bool", 1), step, result
    )


def _map(target: Expr, var: str, args: tuple[Expr, ...]) -> Expr:
    append = Call("_+_", (_accu(), ListLit((args[-1],))))
    step: Expr = append if len(args) == 1 else Call("_?_:_", (args[0], append, _accu()))
    return Comprehension(var, target, ACCUMULATOR, ListLit(()), Literal("bool", 1), step, _accu())


def _filter(target: Expr, var: str, args: tuple[Expr, ...]) -> Expr:
    append = Call("_+_", (_accu(), ListLit((Ident(var),))))
    step = Call("_?_:_", (args[0], append, _accu()))
    return Comprehension(var, target, ACCUMULATOR, ListLit(()), Literal("bool", 1), step, _accu())


_MACROS: Final = {
    ("all", 2): _all,
    ("exists", 2): _exists,
    ("exists_one", 2): _exists_one,
    ("existsOne", 2): _exists_one,
    ("map", 2): _map,
    ("map", 3): _map,
    ("filter", 2): _filter,
}
