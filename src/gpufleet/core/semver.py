"""Semantic versions (semver.org 2.0.0) as Kubernetes' CEL `semver()` parses and orders them.

Model: `Semver` is three unsigned 64-bit numbers, optional prerelease identifiers and optional
build metadata. Ordering and equality follow the spec's precedence and ignore build metadata
(`1.0.0+a == 1.0.0+b`), as `blang/semver/v4`'s `Compare`, which Kubernetes uses.

Strict parsing (`parse_semver(text)`, blang's `Parse`) requires exactly `MAJOR.MINOR.PATCH`,
ASCII digits without leading zeros, no `v` prefix, no whitespace; prerelease identifiers are
non-empty `[0-9A-Za-z-]+` and numeric ones have no leading zeros; build identifiers are
non-empty `[0-9A-Za-z-]+`. Normalizing parsing (`normalize=True`) is Kubernetes'
`normalizeAndParse`: drop one leading `v`, strip leading zeros from each dot-separated part,
fill a missing minor/patch with 0 (refusing a short version with prerelease/build), then parse
strictly. Everything else is an error: parsing errs toward refusal.

The canonical string omits build metadata, so two versions have equal canonical strings
exactly when they are equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import total_ordering
from typing import Final

_DIGITS: Final = frozenset("0123456789")
_IDENTIFIER_CHARACTERS: Final = frozenset(
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-"
)
MAX_COMPONENT: Final = 2**64 - 1


class SemverError(ValueError):
    """A string that is not a semantic version under the requested rules."""


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    def _precedence(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release outranks its prereleases; numeric identifiers rank below alphanumeric
        # ones and compare numerically; a longer identifier list wins when all shared ones tie.
        identifiers = tuple(
            (0, int(part), "") if set(part) <= _DIGITS else (1, 0, part) for part in self.prerelease
        )
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, identifiers)

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence."""
        mine, theirs = self._precedence(), other._precedence()
        return (mine > theirs) - (mine < theirs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._precedence() == other._precedence()

    def __lt__(self, other: Semver) -> bool:
        return self._precedence() < other._precedence()

    def __hash__(self) -> int:
        return hash(self._precedence())

    def canonical(self) -> str:
        """`MAJOR.MINOR.PATCH[-PRERELEASE]`: the version without build metadata."""
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{'.'.join(self.prerelease)}" if self.prerelease else core

    def __str__(self) -> str:
        return f"{self.canonical()}+{'.'.join(self.build)}" if self.build else self.canonical()


def parse_semver(text: str, normalize: bool = False) -> Semver:
    """Parse `text` as Kubernetes' CEL `semver(text, normalize)`; `SemverError` if invalid."""
    return _parse_strict(_normalized(text) if normalize else text, text)


def _normalized(text: str) -> str:
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[index] = stripped if stripped and stripped[0] in _DIGITS else "0" + stripped
    if len(parts) < 3:
        if any(marker in parts[-1] for marker in "+-"):
            raise SemverError(
                f"invalid version {text!r}: a short version cannot contain prerelease or build"
                " metadata"
            )
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _parse_strict(text: str, original: str) -> Semver:
    def fail(rule: str) -> SemverError:
        return SemverError(f"invalid version {original!r}: {rule}")

    if text == "":
        raise fail("a version cannot be empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise fail("expected MAJOR.MINOR.PATCH (pass normalize=true to accept '1.2' or 'v1.2.3')")
    major_text, minor_text, rest = parts
    build: tuple[str, ...] = ()
    prerelease: tuple[str, ...] = ()
    if "+" in rest:
        rest, build_text = rest.split("+", 1)
        build = tuple(build_text.split("."))
    if "-" in rest:
        rest, prerelease_text = rest.split("-", 1)
        prerelease = tuple(prerelease_text.split("."))
    major = _parse_component("major", major_text, fail)
    minor = _parse_component("minor", minor_text, fail)
    patch = _parse_component("patch", rest, fail)
    for identifier in prerelease:
        if identifier == "":
            raise fail("empty prerelease identifier")
        if not set(identifier) <= _IDENTIFIER_CHARACTERS:
            raise fail(f"invalid character(s) in prerelease identifier {identifier!r}")
        if set(identifier) <= _DIGITS and len(identifier) > 1 and identifier[0] == "0":
            raise fail(f"numeric prerelease identifier {identifier!r} has a leading zero")
    for identifier in build:
        if identifier == "":
            raise fail("empty build metadata identifier")
        if not set(identifier) <= _IDENTIFIER_CHARACTERS:
            raise fail(f"invalid character(s) in build metadata {identifier!r}")
    return Semver(major, minor, patch, prerelease, build)


def _parse_component(name: str, text: str, fail: Callable[[str], SemverError]) -> int:
    if text == "" or not set(text) <= _DIGITS:
        raise fail(f"{name} number {text!r} must be ASCII digits")
    if len(text) > 1 and text[0] == "0":
        raise fail(f"{name} number {text!r} must not have leading zeros")
    value = int(text)
    if value > MAX_COMPONENT:
        raise fail(f"{name} number {text!r} exceeds 2^64-1")
    return value
