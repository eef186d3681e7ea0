"""Kubernetes resource quantities (`resource.Quantity`), parsed exactly as `ParseQuantity` does.

Model: a quantity is an exact rational number that is always a whole number of nano-units
(1e-9), so it is stored as one Python int, `nanos`. Equality, ordering and hashing are by
value: `1Gi`, `1024Mi` and `1073741824` are the same quantity.

Grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go):

    <quantity> ::= [+-] <number> <suffix>
    <number>   ::= digits | digits "." | digits "." digits | "." digits     (ASCII digits only)
    <suffix>   ::= "" | Ki Mi Gi Ti Pi Ei | n u m k M G T P E | (e|E) [+-] digits

Rules, and which way each errs:

- No trimming: leading or trailing whitespace is an error, as are commas, `K`, `1i`, `e` with
  no exponent digits and anything after the suffix.
- A suffix with no digits (`Ki`, `m`, `.`, `-`) is an error. Kubernetes' scanner actually
  accepts these as zero (kubernetes/apimachinery#165) although its CEL library documents
  `quantity('Mi')` as an error; we follow the documented contract and refuse.
- Values finer than a nano-unit are rounded away from zero to the next nano-unit
  (`0.9n` is `1n`, `-3.001n` is `-4n`): rounding never loses a non-zero request.
- A binary-suffix quantity saturates at ±(2^63-1) (`10Ei` == `8Ei` == 9223372036854775807).
  Decimal quantities are not capped (`10E` keeps its value), exactly as in Kubernetes.
- Values of 10^`MAX_EXPONENT` or more, and exponents outside int32, are refused. Kubernetes
  keeps huge decimal values exactly and silently wraps exponents to int32; we refuse rather
  than allocate unbounded memory or guess. Tiny values (`1e-5000`) still round up to `1n`.
- `is_integer`/`as_integer` answer by value: an integer within int64. Kubernetes answers from
  its internal representation, so it reports false for `1000m`, `1.0` or `1Pi`; we err toward
  the mathematically right answer.
- `add`/`sub` are exact and never saturate (Kubernetes promotes to arbitrary precision).

The canonical string is Kubernetes' DecimalSI rendering of the value (`1500m`, `1G`, `1e21`):
two quantities have the same canonical string exactly when they are equal, and parsing the
canonical string gives the same quantity back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

NANOS_PER_UNIT: Final = 10**9
MAX_INT64: Final = 2**63 - 1
MIN_INT64: Final = -(2**63)
#: The largest decimal exponent (after applying the suffix) we accept; see the module docstring.
MAX_EXPONENT: Final = 1000

_DIGITS: Final = frozenset("0123456789")
_DECIMAL_SUFFIX_EXPONENTS: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIX_EXPONENTS: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_BY_DECIMAL_EXPONENT: Final = {e: s for s, e in _DECIMAL_SUFFIX_EXPONENTS.items()}
_SATURATED_NANOS: Final = MAX_INT64 * NANOS_PER_UNIT
_MAX_INT32: Final = 2**31 - 1
_MIN_INT32: Final = -(2**31)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity, or an operation a quantity does not support."""


@dataclass(frozen=True, slots=True, order=True)
class Quantity:
    """An exact Kubernetes quantity: `nanos` nano-units (value × 10^9)."""

    nanos: int

    @classmethod
    def from_int(cls, value: int) -> Quantity:
        """The quantity equal to the integer `value` (as Kubernetes' `NewQuantity`)."""
        if isinstance(value, bool):
            raise QuantityError(f"expected an int, got bool {value!r}")
        return cls(value * NANOS_PER_UNIT)

    @property
    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.nanos > 0) - (self.nanos < 0)

    @property
    def is_integer(self) -> bool:
        """True when the value is a whole number that fits an int64."""
        whole, rest = divmod(self.nanos, NANOS_PER_UNIT)
        return rest == 0 and MIN_INT64 <= whole <= MAX_INT64

    def as_integer(self) -> int:
        """The value as an int64; `QuantityError` when it is fractional or out of range."""
        if not self.is_integer:
            raise QuantityError(
                f"cannot convert value to integer: {self} is not a whole number within int64"
            )
        return self.nanos // NANOS_PER_UNIT

    def as_approximate_float(self) -> float:
        """The nearest float; ±inf beyond the float range (as Kubernetes)."""
        try:
            return self.nanos / NANOS_PER_UNIT
        except OverflowError:
            return math.inf if self.nanos > 0 else -math.inf

    def add(self, other: Quantity | int) -> Quantity:
        return Quantity(self.nanos + _as_nanos(other))

    def sub(self, other: Quantity | int) -> Quantity:
        return Quantity(self.nanos - _as_nanos(other))

    def canonical(self) -> str:
        """Kubernetes' DecimalSI string for this value: the largest exponent, no fraction."""
        if self.nanos == 0:
            return "0"
        mantissa, exponent = abs(self.nanos), -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        while exponent % 3 != 0:
            mantissa *= 10
            exponent -= 1
        suffix = _SUFFIX_BY_DECIMAL_EXPONENT.get(exponent, f"e{exponent}")
        sign = "-" if self.nanos < 0 else ""
        return f"{sign}{mantissa}{suffix}"

    def __str__(self) -> str:
        return self.canonical()


def _as_nanos(other: Quantity | int) -> int:
    if isinstance(other, Quantity):
        return other.nanos
    if isinstance(other, int) and not isinstance(other, bool):
        return other * NANOS_PER_UNIT
    raise QuantityError(f"can only add or subtract a quantity or an int, not {other!r}")


def parse_quantity(text: str) -> Quantity:
    """Parse `text` exactly as Kubernetes' `resource.ParseQuantity`; `QuantityError` if invalid."""
    if text == "":
        raise QuantityError("a quantity cannot be empty")
    if text != text.strip():
        raise QuantityError(f"invalid quantity {text!r}: leading or trailing whitespace")
    end = len(text)
    pos = 1 if text[0] in "+-" else 0
    is_negative = text[0] == "-"
    whole_start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    whole_digits = text[whole_start:pos]
    fraction_digits = ""
    if pos < end and text[pos] == ".":
        pos += 1
        fraction_start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction_digits = text[fraction_start:pos]
    if not whole_digits and not fraction_digits:
        raise QuantityError(
            f"invalid quantity {text!r}: a quantity needs digits before its suffix"
            " (for example '1Gi', not 'Gi')"
        )
    significant_digits = (whole_digits + fraction_digits).lstrip("0")
    if len(significant_digits) > MAX_EXPONENT:
        raise QuantityError(
            f"invalid quantity {text[:40]!r}...: more than {MAX_EXPONENT} significant digits"
        )
    magnitude_nanos = _magnitude_nanos(
        text, int(significant_digits or "0"), len(fraction_digits), text[pos:]
    )
    return Quantity(-magnitude_nanos if is_negative else magnitude_nanos)


def _magnitude_nanos(text: str, digits: int, fraction_length: int, suffix: str) -> int:
    """|value| in nano-units, rounded up, for `digits` × 10^-fraction_length with `suffix`."""
    if suffix in _BINARY_SUFFIX_EXPONENTS:
        scaled = digits * (1 << _BINARY_SUFFIX_EXPONENTS[suffix]) * NANOS_PER_UNIT
        nanos = -(-scaled // _ten_to(fraction_length))
        return min(nanos, _SATURATED_NANOS)
    exponent = _decimal_exponent(text, suffix)
    if digits == 0:
        return 0
    nano_exponent = exponent - fraction_length + 9
    digit_count = len(str(digits))
    if nano_exponent >= 0:
        if digit_count + nano_exponent - 9 > MAX_EXPONENT:
            raise QuantityError(
                f"invalid quantity {text!r}: 10^{MAX_EXPONENT} or larger is not supported"
            )
        return digits * _ten_to(nano_exponent)
    if -nano_exponent > digit_count:
        # 0 < value < 1n: rounds away from zero to one nano-unit without building 10^huge.
        return 1
    return -(-digits // _ten_to(-nano_exponent))


def _ten_to(exponent: int) -> int:
    """10^exponent for exponent >= 0, typed as int."""
    return int(10**exponent)


def _decimal_exponent(text: str, suffix: str) -> int:
    if suffix in _DECIMAL_SUFFIX_EXPONENTS:
        return _DECIMAL_SUFFIX_EXPONENTS[suffix]
    exponent_text = suffix[1:]
    exponent_digits = exponent_text[1:] if exponent_text[:1] in ("+", "-") else exponent_text
    if suffix[:1] not in ("e", "E") or not exponent_digits or not set(exponent_digits) <= _DIGITS:
        raise QuantityError(
            f"invalid quantity {text!r}: unknown suffix {suffix!r}; expected one of"
            " Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent such as e3 or E-6"
        )
    exponent = int(exponent_text)
    if not _MIN_INT32 <= exponent <= _MAX_INT32:
        raise QuantityError(f"invalid quantity {text!r}: exponent {exponent} is outside int32")
    return exponent
