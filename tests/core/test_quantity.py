"""Quantity parsing, rounding, saturation, canonical form and ordering.

Golden cases come from Kubernetes' own tests unless marked otherwise:
k8s.io/apimachinery/pkg/api/resource/quantity_test.go (TestQuantityParse, TestQuantityString,
TestQuantityParseEmit, TestQuantityCmp) and the examples documented in
k8s.io/apiserver/pkg/cel/library/quantity.go.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpufleet.core.quantity import (
    MAX_INT64,
    NANOS_PER_UNIT,
    Quantity,
    QuantityError,
    parse_quantity,
)

SATURATED = Quantity(MAX_INT64 * NANOS_PER_UNIT)


def units(value: Fraction | int) -> Quantity:
    nanos = Fraction(value) * NANOS_PER_UNIT
    assert nanos.denominator == 1
    return Quantity(int(nanos))


@dataclass(frozen=True)
class ParseCase:
    text: str
    expected: Quantity


PARSE_CASES = [
    # TestQuantityParse: zeros, plain numbers, binary and decimal suffixes.
    ParseCase("0", units(0)),
    ParseCase("0n", units(0)),
    ParseCase("0Ki", units(0)),
    ParseCase("0T", units(0)),
    ParseCase("1", units(1)),
    ParseCase("1Ki", units(1024)),
    ParseCase("8Ki", units(8 * 1024)),
    ParseCase("7Mi", units(7 * 1024**2)),
    ParseCase("6Gi", units(6 * 1024**3)),
    ParseCase("5Ti", units(5 * 1024**4)),
    ParseCase("4Pi", units(4 * 1024**5)),
    ParseCase("3Ei", units(3 * 1024**6)),
    ParseCase("100Ti", units(100 * 1024**4)),
    ParseCase("5n", Quantity(5)),
    ParseCase("4u", units(Fraction(4, 10**6))),
    ParseCase("3m", units(Fraction(3, 1000))),
    ParseCase("8k", units(8000)),
    ParseCase("50k", units(50000)),
    ParseCase("7M", units(7 * 10**6)),
    ParseCase("6G", units(6 * 10**9)),
    ParseCase("40T", units(4 * 10**13)),
    ParseCase("2P", units(2 * 10**15)),
    ParseCase("1E", units(10**18)),
    # TestQuantityParse: decimal exponents, including "nonstandard but still parsable".
    ParseCase("1E-3", units(Fraction(1, 1000))),
    ParseCase("1e3", units(1000)),
    ParseCase("1E18", units(10**18)),
    ParseCase("1e14", units(10**14)),
    ParseCase("1.3E+6", units(1_300_000)),
    ParseCase("1.7E18", units(17 * 10**17)),
    ParseCase("0.5e-2", units(Fraction(5, 1000))),
    ParseCase("100.035k", units(100035)),
    # TestQuantityParse: "things that look like floating point".
    ParseCase("0.001", units(Fraction(1, 1000))),
    ParseCase("0.0005k", units(Fraction(1, 2))),
    ParseCase("0.05000", units(Fraction(5, 100))),
    ParseCase("10.035M", units(10_035_000)),
    ParseCase("7.123456M", units(7_123_456)),
    ParseCase("6.987654321G", units(6_987_654_321)),
    ParseCase("1.01E", units(101 * 10**16)),
    # TestQuantityParse: "things that saturate/round" (away from zero, to nano).
    ParseCase("3.001n", Quantity(4)),
    ParseCase("1.1E-9", Quantity(2)),
    ParseCase("0.0000000001", Quantity(1)),
    ParseCase("0.0000000005", Quantity(1)),
    ParseCase("0.5e-9", Quantity(1)),
    ParseCase("0.9n", Quantity(1)),
    ParseCase("0.00000012345", Quantity(124)),
    ParseCase("0.00000012354", Quantity(124)),
    ParseCase("9Ei", SATURATED),
    ParseCase("9223372036854775807Ki", SATURATED),
    ParseCase("12E", units(12 * 10**18)),
    # TestQuantityParse: fractional binary.
    ParseCase("100.035Ki", units(Fraction(10243584, 100))),
    ParseCase("0.5Mi", units(512 * 1024)),
    ParseCase("0.05Gi", units(Fraction(536870912, 10))),
    ParseCase("0.025Ti", units(Fraction(274877906944, 10))),
    # TestQuantityParse: "things written by trolls".
    ParseCase("0.000000000001Ki", Quantity(2)),
    ParseCase(".001", units(Fraction(1, 1000))),
    ParseCase(".0001k", units(Fraction(1, 10))),
    ParseCase("1.", units(1)),
    ParseCase("1.G", units(10**9)),
    # Negative and explicit-plus forms (TestQuantityParse re-parses the table with "-"/"+").
    ParseCase("-3.001n", Quantity(-4)),
    ParseCase("-9Ei", Quantity(-MAX_INT64 * NANOS_PER_UNIT)),
    ParseCase("+1Ki", units(1024)),
    ParseCase("-0", units(0)),
    # Saturation is for binary suffixes only: decimal values keep their value (quantity.go doc).
    ParseCase("8Ei", SATURATED),
    ParseCase("10Ei", SATURATED),
    ParseCase("18446744073709551616", units(2**64)),
    ParseCase("10E", units(10**19)),
    # Ours: tiny exponents still round up to one nano-unit.
    ParseCase("1e-5000", Quantity(1)),
]


@pytest.mark.parametrize("case", PARSE_CASES, ids=[c.text for c in PARSE_CASES])
def test_parse(case: ParseCase) -> None:
    assert parse_quantity(case.text) == case.expected


@dataclass(frozen=True)
class ErrorCase:
    text: str
    message_part: str


ERROR_CASES = [
    ErrorCase("", "cannot be empty"),
    # TestQuantityParse's invalid list.
    ErrorCase("1.1.M", "unknown suffix '.M'"),
    ErrorCase("1+1.0M", "unknown suffix"),
    ErrorCase("0.1mi", "unknown suffix 'mi'"),
    ErrorCase("0.1am", "unknown suffix 'am'"),
    ErrorCase("aoeu", "needs digits"),
    ErrorCase(".5i", "unknown suffix 'i'"),
    ErrorCase("1i", "unknown suffix 'i'"),
    ErrorCase("-3.01i", "unknown suffix 'i'"),
    ErrorCase("-3.01e-", "unknown suffix 'e-'"),
    ErrorCase(" 1", "whitespace"),
    ErrorCase("1 ", "whitespace"),
    # apiserver/pkg/cel/library/quantity.go documented errors.
    ErrorCase("200K", "unknown suffix 'K'"),
    ErrorCase("Three", "needs digits"),
    ErrorCase("Mi", "needs digits"),
    ErrorCase("1,3G", "unknown suffix ',3G'"),
    # Ours: bare signs and dots, exponent forms, limits.
    ErrorCase("K", "needs digits"),
    ErrorCase(".", "needs digits"),
    ErrorCase("-", "needs digits"),
    ErrorCase("1e", "unknown suffix 'e'"),
    ErrorCase("1e3.5", "unknown suffix"),
    ErrorCase("1e_3", "unknown suffix"),
    ErrorCase("1Ki3", "unknown suffix"),
    ErrorCase("\u0661", "needs digits"),
    ErrorCase("1e99999999999", "outside int32"),
    ErrorCase("1e1001", "10^1000 or larger"),
    ErrorCase("1" * 1001, "significant digits"),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[repr(c.text) for c in ERROR_CASES])
def test_parse_error(case: ErrorCase) -> None:
    with pytest.raises(QuantityError, match=re.escape(case.message_part)):
        parse_quantity(case.text)


@dataclass(frozen=True)
class CanonicalCase:
    text: str
    canonical: str


CANONICAL_CASES = [
    # TestQuantityString, DecimalSI rows (the value's rendering; the canonical form is DecimalSI).
    CanonicalCase("1G", "1G"),
    CanonicalCase("1000M", "1G"),
    CanonicalCase("0.001T", "1G"),
    CanonicalCase("1m", "1m"),
    CanonicalCase("1000u", "1m"),
    CanonicalCase("80m", "80m"),
    CanonicalCase("1.08", "1080m"),
    CanonicalCase("1080000000n", "1080m"),
    CanonicalCase("300M", "300M"),
    CanonicalCase("1E", "1E"),
    CanonicalCase("1000E", "1e21"),
    CanonicalCase("5000E", "5e21"),
    CanonicalCase("1000000E", "1e24"),
    CanonicalCase("1234567M", "1234567M"),
    CanonicalCase("3k", "3k"),
    CanonicalCase("0", "0"),
    CanonicalCase("1080n", "1080n"),
    CanonicalCase("80u", "80u"),
    # TestQuantityParseEmit rows whose value is not a power-of-two rendering.
    CanonicalCase("1000M", "1G"),
    CanonicalCase(".001Ki", "1024m"),
    CanonicalCase(".000001Ki", "1024u"),
    CanonicalCase(".000000001Ki", "1024n"),
    CanonicalCase(".000000000001Ki", "2n"),
    # TestQuantityNeg.
    CanonicalCase("-9.01", "-9010m"),
    # Ours: binary values render in decimal; the canonical form depends on the value only.
    CanonicalCase("1Ki", "1024"),
    CanonicalCase("1Gi", "1073741824"),
    CanonicalCase("8Ei", "9223372036854775807"),
    CanonicalCase("1.5e21", "1500E"),
]


@pytest.mark.parametrize("case", CANONICAL_CASES, ids=[c.text for c in CANONICAL_CASES])
def test_canonical(case: CanonicalCase) -> None:
    quantity = parse_quantity(case.text)
    assert (quantity.canonical(), str(quantity)) == (case.canonical, case.canonical)
    assert parse_quantity(case.canonical) == quantity


@dataclass(frozen=True)
class CompareCase:
    left: str
    right: str
    expected: int


COMPARE_CASES = [
    # TestQuantityCmp.
    CompareCase("0", "0", 0),
    CompareCase("100m", "50m", 1),
    CompareCase("50m", "100m", -1),
    CompareCase("10000T", "100Gi", 1),
    # apiserver/pkg/cel/library/quantity.go examples.
    CompareCase("200M", "0.2G", 0),
    CompareCase("50M", "50Mi", -1),
    CompareCase("50Mi", "50M", 1),
    # Scenario 50 of the reference: binary saturation makes these equal.
    CompareCase("10Ei", "8Ei", 0),
    CompareCase("10E", "8Ei", 1),
    CompareCase("-1", "1n", -1),
]


@pytest.mark.parametrize(
    "case", COMPARE_CASES, ids=[f"{c.left}-vs-{c.right}" for c in COMPARE_CASES]
)
def test_compare(case: CompareCase) -> None:
    left, right = parse_quantity(case.left), parse_quantity(case.right)
    assert ((left > right) - (left < right), left == right) == (case.expected, case.expected == 0)


@dataclass(frozen=True)
class ScalarCase:
    text: str
    sign: int
    is_integer: bool
    approximate_float: float


SCALAR_CASES = [
    # apiserver/pkg/cel/library/quantity.go examples.
    ScalarCase("50000000G", 1, True, 5e16),
    ScalarCase("50k", 1, True, 50000.0),
    ScalarCase("9999999999999999999999999999999999999G", 1, False, 1e46),
    # Ours: by value, not by internal representation (Kubernetes says false for these three).
    ScalarCase("1000m", 1, True, 1.0),
    ScalarCase("1.0", 1, True, 1.0),
    ScalarCase("1Pi", 1, True, float(2**50)),
    ScalarCase("-1.5", -1, False, -1.5),
    ScalarCase("0", 0, True, 0.0),
    ScalarCase("8Ei", 1, True, float(MAX_INT64)),
    ScalarCase("9223372036854775808", 1, False, 2.0**63),
    ScalarCase("-9223372036854775808", -1, True, -(2.0**63)),
    ScalarCase("1e400", 1, False, math.inf),
    ScalarCase("-1e400", -1, False, -math.inf),
]


@pytest.mark.parametrize("case", SCALAR_CASES, ids=[c.text for c in SCALAR_CASES])
def test_scalars(case: ScalarCase) -> None:
    quantity = parse_quantity(case.text)
    got = ScalarCase(case.text, quantity.sign, quantity.is_integer, quantity.as_approximate_float())
    assert got == case


def test_as_integer() -> None:
    assert parse_quantity("50k").as_integer() == 50000
    assert parse_quantity("-9223372036854775808").as_integer() == -(2**63)


@pytest.mark.parametrize("text", ["50.5", "9999999999999999999999999999999999999G", "1n"])
def test_as_integer_error(text: str) -> None:
    with pytest.raises(QuantityError, match="cannot convert value to integer"):
        parse_quantity(text).as_integer()


@dataclass(frozen=True)
class ArithmeticCase:
    name: str
    result: Quantity
    expected: str


ARITHMETIC_CASES = [
    # apiserver/pkg/cel/library/quantity.go examples.
    ArithmeticCase("add-quantity", parse_quantity("50k").add(parse_quantity("20k")), "70k"),
    ArithmeticCase("add-int", parse_quantity("50k").add(20), "50020"),
    ArithmeticCase("sub-quantity", parse_quantity("50k").sub(parse_quantity("20k")), "30k"),
    ArithmeticCase("sub-int", parse_quantity("50k").sub(20000), "30k"),
    ArithmeticCase(
        "chain",
        parse_quantity("50k").add(20).sub(parse_quantity("100k")).sub(-50000),
        "20",
    ),
    # Ours: arithmetic never saturates.
    ArithmeticCase(
        "past-int64", parse_quantity("8Ei").add(parse_quantity("8Ei")), "18446744073709551614"
    ),
]


@pytest.mark.parametrize("case", ARITHMETIC_CASES, ids=[c.name for c in ARITHMETIC_CASES])
def test_arithmetic(case: ArithmeticCase) -> None:
    assert case.result == parse_quantity(case.expected)


def test_add_rejects_bool() -> None:
    with pytest.raises(QuantityError, match="quantity or an int"):
        parse_quantity("1").add(True)


# --- properties ---------------------------------------------------------------------------

DECIMAL_SUFFIXES = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]
BINARY_SUFFIXES = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
SUFFIX_VALUES = {
    **{s: Fraction(10) ** e for s, e in zip(DECIMAL_SUFFIXES, range(-9, 19, 3), strict=True)},
    **{s: Fraction(2) ** (10 * (i + 1)) for i, s in enumerate(BINARY_SUFFIXES)},
}


@dataclass(frozen=True)
class Generated:
    """A quantity string, its exact rational value before rounding, and its suffix kind."""

    text: str
    value: Fraction
    is_binary: bool


@st.composite
def quantity_texts(draw: st.DrawFn) -> Generated:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text("0123456789", min_size=0, max_size=12))
    fraction = draw(st.text("0123456789", min_size=0 if whole else 1, max_size=12))
    has_point = bool(fraction) or draw(st.booleans())
    if draw(st.booleans()):
        exponent = draw(st.integers(-30, 30))
        suffix, scale = f"e{exponent}", Fraction(10) ** exponent
    else:
        suffix = draw(st.sampled_from(DECIMAL_SUFFIXES + BINARY_SUFFIXES))
        scale = SUFFIX_VALUES[suffix]
    number = whole + ("." + fraction if has_point else "")
    value = Fraction(int(whole + fraction or "0"), 10 ** len(fraction)) * scale
    return Generated(
        sign + number + suffix, -value if sign == "-" else value, suffix in BINARY_SUFFIXES
    )


def expected_quantity(generated: Generated) -> Quantity:
    """Round |value| up to nano, then saturate binary quantities at 2^63-1 (ParseQuantity)."""
    nanos = abs(generated.value) * NANOS_PER_UNIT
    magnitude = -(-nanos.numerator // nanos.denominator)
    if generated.is_binary:
        magnitude = min(magnitude, SATURATED.nanos)
    return Quantity(magnitude if generated.value >= 0 else -magnitude)


@given(quantity_texts())
def test_parse_is_the_exact_value_rounded_away_from_zero(generated: Generated) -> None:
    assert parse_quantity(generated.text) == expected_quantity(generated)


@given(quantity_texts())
def test_canonical_round_trips(generated: Generated) -> None:
    quantity = parse_quantity(generated.text)
    assert parse_quantity(quantity.canonical()) == quantity


def is_saturated(generated: Generated) -> bool:
    return generated.is_binary and abs(generated.value) > MAX_INT64


@given(quantity_texts(), quantity_texts())
@example(  # found by hypothesis: a clamped binary value against an exact decimal one
    Generated("-10000000.0Ti", Fraction(-10995116277760000000), is_binary=True),
    Generated("-10000000000.0e9", Fraction(-(10**19)), is_binary=False),
)
def test_orders_like_the_exact_value(left: Generated, right: Generated) -> None:
    if any(is_saturated(g) for g in (left, right)):
        # Kubernetes clamps an overflowing binary quantity at +-(2^63-1) but keeps a decimal
        # one exact, so -10000000Ti (clamped) orders above -1e19: order follows the clamped
        # value, as it does in Kubernetes.
        left_quantity, right_quantity = parse_quantity(left.text), parse_quantity(right.text)
        left_expected, right_expected = expected_quantity(left), expected_quantity(right)
        assert (left_quantity < right_quantity, left_quantity == right_quantity) == (
            left_expected < right_expected,
            left_expected == right_expected,
        )
        return
    if not all(
        abs(g.value) <= MAX_INT64 and (g.value * NANOS_PER_UNIT).denominator == 1
        for g in (left, right)
    ):
        # Nano rounding may merge values; it never reorders them.
        assert not (
            left.value < right.value and parse_quantity(left.text) > parse_quantity(right.text)
        )
        return
    left_quantity, right_quantity = parse_quantity(left.text), parse_quantity(right.text)
    assert (left_quantity < right_quantity, left_quantity == right_quantity) == (
        left.value < right.value,
        left.value == right.value,
    )


@given(quantity_texts(), quantity_texts())
def test_canonical_strings_equal_exactly_when_values_equal(
    left: Generated, right: Generated
) -> None:
    left_quantity, right_quantity = parse_quantity(left.text), parse_quantity(right.text)
    assert (left_quantity.canonical() == right_quantity.canonical()) == (
        left_quantity == right_quantity
    )
