"""Kubernetes label selectors in their string form (`a=b,c!=d,e,!f,g in (x,y),h notin (z)`).

`parse_selector` raises `SelectorError` naming the offending term; `matches` applies a parsed
selector to a label map. A mapping selector (`{"a": "b"}`) means equality on every key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class SelectorError(ValueError):
    pass


class Op(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    NOT_EXISTS = "!"
    IN = "in"
    NOT_IN = "notin"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: Op
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.op:
            case Op.EQUALS:
                return present and value in self.values
            case Op.NOT_EQUALS:
                return not present or value not in self.values
            case Op.EXISTS:
                return present
            case Op.NOT_EXISTS:
                return not present
            case Op.IN:
                return present and value in self.values
            case Op.NOT_IN:
                return not present or value not in self.values


Selector = tuple[Requirement, ...]

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")
_EQ_TERM = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def parse_selector(selector: str | Mapping[str, str] | None) -> Selector:
    """Parse a selector; a mapping means equality on every key, None or "" selects all."""
    if selector is None:
        return ()
    if isinstance(selector, Mapping):
        return tuple(Requirement(k, Op.EQUALS, frozenset({v})) for k, v in sorted(selector.items()))
    if not selector.strip():
        return ()
    requirements: list[Requirement] = []
    for term in _split_terms(selector):
        if m := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            op = Op.IN if m["op"] == "in" else Op.NOT_IN
            requirements.append(Requirement(m["key"], op, values))
        elif m := _EQ_TERM.match(term):
            op = Op.NOT_EQUALS if m["op"] == "!=" else Op.EQUALS
            requirements.append(Requirement(m["key"], op, frozenset({m["value"]})))
        elif m := _EXISTS_TERM.match(term):
            op = Op.NOT_EXISTS if m["neg"] else Op.EXISTS
            requirements.append(Requirement(m["key"], op))
        else:
            raise SelectorError(f"invalid label selector term {term.strip()!r}")
    return tuple(requirements)


def matches(selector: Selector, labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in selector)
