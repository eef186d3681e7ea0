"""Semver parsing and precedence.

Golden cases: semver.org 2.0.0 §11 (precedence example chain), blang/semver/v4's Parse rules
and the examples documented in k8s.io/apiserver/pkg/cel/library/semverlib.go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from gpufleet.core.semver import Semver, SemverError, parse_semver


@dataclass(frozen=True)
class ParseCase:
    text: str
    normalize: bool
    expected: Semver


PARSE_CASES = [
    ParseCase("1.0.0", False, Semver(1, 0, 0)),
    ParseCase("0.1.0-alpha.1", False, Semver(0, 1, 0, ("alpha", "1"))),
    ParseCase("1.0.0-alpha+001", False, Semver(1, 0, 0, ("alpha",), ("001",))),
    ParseCase("1.0.0+20130313144700", False, Semver(1, 0, 0, (), ("20130313144700",))),
    ParseCase("1.0.0-x-y-z.--", False, Semver(1, 0, 0, ("x-y-z", "--"))),
    ParseCase("18446744073709551615.0.0", False, Semver(2**64 - 1, 0, 0)),
    # semverlib.go: normalization examples.
    ParseCase("v1.0.0", True, Semver(1, 0, 0)),
    ParseCase("1.0", True, Semver(1, 0, 0)),
    ParseCase("01.01.01", True, Semver(1, 1, 1)),
    ParseCase("v1.0", True, Semver(1, 0, 0)),
    # normalizeAndParse: leading zeros stripped from the patch part including its prerelease.
    ParseCase("1.2.003-alpha", True, Semver(1, 2, 3, ("alpha",))),
    ParseCase("1.2.0-rc", True, Semver(1, 2, 0, ("rc",))),
    ParseCase("2", True, Semver(2, 0, 0)),
]


@pytest.mark.parametrize(
    "case", PARSE_CASES, ids=[f"{c.text}-normalize={c.normalize}" for c in PARSE_CASES]
)
def test_parse(case: ParseCase) -> None:
    parsed = parse_semver(case.text, case.normalize)
    assert (parsed.major, parsed.minor, parsed.patch, parsed.prerelease, parsed.build) == (
        case.expected.major,
        case.expected.minor,
        case.expected.patch,
        case.expected.prerelease,
        case.expected.build,
    )


@dataclass(frozen=True)
class ErrorCase:
    text: str
    normalize: bool
    message_part: str


ERROR_CASES = [
    ErrorCase("", False, "cannot be empty"),
    # semverlib.go: documented errors.
    ErrorCase("200K", False, "expected MAJOR.MINOR.PATCH"),
    ErrorCase("Three", False, "expected MAJOR.MINOR.PATCH"),
    ErrorCase("v1.0", False, "expected MAJOR.MINOR.PATCH"),
    # Scenario 46 of the reference: a two-part version is not strict semver.
    ErrorCase("1.0", False, "expected MAJOR.MINOR.PATCH"),
    ErrorCase("v1.0.0", False, "major number 'v1' must be ASCII digits"),
    ErrorCase("01.0.0", False, "leading zeros"),
    ErrorCase("1.00.0", False, "minor number '00' must not have leading zeros"),
    ErrorCase("1.0.01", False, "patch number '01' must not have leading zeros"),
    ErrorCase("1.0.0-01", False, "numeric prerelease identifier '01' has a leading zero"),
    ErrorCase("1.0.0-", False, "empty prerelease identifier"),
    ErrorCase("1.0.0-a..b", False, "empty prerelease identifier"),
    ErrorCase("1.0.0-a_b", False, "invalid character(s) in prerelease"),
    ErrorCase("1.0.0+", False, "empty build metadata"),
    ErrorCase("1.0.0+a_b", False, "invalid character(s) in build metadata"),
    ErrorCase(" 1.0.0", False, "must be ASCII digits"),
    ErrorCase("1.0.0 ", False, "must be ASCII digits"),
    ErrorCase("1.0.\u0661", False, "must be ASCII digits"),
    ErrorCase("18446744073709551616.0.0", False, "exceeds 2^64-1"),
    ErrorCase("1.2-rc", True, "short version cannot contain prerelease"),
    ErrorCase("1+b", True, "short version cannot contain prerelease or build"),
    ErrorCase("v", True, "major number ''"),
    # normalizeAndParse prefixes "0" to a part that does not start with a digit.
    ErrorCase("vv1.0.0", True, "major number '0v1'"),
]


@pytest.mark.parametrize(
    "case", ERROR_CASES, ids=[f"{c.text!r}-normalize={c.normalize}" for c in ERROR_CASES]
)
def test_parse_error(case: ErrorCase) -> None:
    with pytest.raises(SemverError, match=re.escape(case.message_part)):
        parse_semver(case.text, case.normalize)


# semver.org §11: 1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-alpha.beta < 1.0.0-beta < 1.0.0-beta.2
# < 1.0.0-beta.11 < 1.0.0-rc.1 < 1.0.0, and 1.0.0 < 2.0.0 < 2.1.0 < 2.1.1.
PRECEDENCE_CHAIN = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "2.0.0",
    "2.1.0",
    "2.1.1",
]


@pytest.mark.parametrize("index", range(len(PRECEDENCE_CHAIN) - 1), ids=PRECEDENCE_CHAIN[:-1])
def test_precedence_chain(index: int) -> None:
    lower = parse_semver(PRECEDENCE_CHAIN[index])
    higher = parse_semver(PRECEDENCE_CHAIN[index + 1])
    assert (lower < higher, higher > lower, lower.compare(higher), higher.compare(lower)) == (
        True,
        True,
        -1,
        1,
    )


def test_sorting_is_total_and_matches_the_chain() -> None:
    versions = [parse_semver(text) for text in reversed(PRECEDENCE_CHAIN)]
    assert [str(v) for v in sorted(versions)] == PRECEDENCE_CHAIN


@dataclass(frozen=True)
class EqualityCase:
    left: str
    right: str
    is_equal: bool


EQUALITY_CASES = [
    # Build metadata is ignored for precedence (semver.org §10) and by Kubernetes' Compare.
    EqualityCase("1.0.0+a", "1.0.0+b", True),
    EqualityCase("1.0.0+a", "1.0.0", True),
    EqualityCase("1.0.0-rc.1+x", "1.0.0-rc.1", True),
    EqualityCase("1.0.0-1", "1.0.0-a", False),
    EqualityCase("1.0.0-2", "1.0.0-10", False),
]


@pytest.mark.parametrize(
    "case", EQUALITY_CASES, ids=[f"{c.left}-vs-{c.right}" for c in EQUALITY_CASES]
)
def test_equality_ignores_build(case: EqualityCase) -> None:
    left, right = parse_semver(case.left), parse_semver(case.right)
    assert (left == right, hash(left) == hash(right) if case.is_equal else True) == (
        case.is_equal,
        True,
    )
    assert (left.canonical() == right.canonical()) == case.is_equal


def test_numeric_prerelease_identifiers_compare_numerically() -> None:
    assert parse_semver("1.0.0-2") < parse_semver("1.0.0-10")
    assert parse_semver("1.0.0-999") < parse_semver("1.0.0-a")


def test_string_forms() -> None:
    version = parse_semver("1.2.3-rc.1+build.5")
    assert (str(version), version.canonical()) == ("1.2.3-rc.1+build.5", "1.2.3-rc.1")
