"""Kubernetes resource quantities ("5Gi", "5120Mi", "10737418240", "500m") as exact numbers. Pure.

The suffixes of k8s.io/apimachinery resource.Quantity: binary Ki..Ei, decimal k..E and m, or an
exponent (e/E). Exact (Fraction), so "5Gi" and "5120Mi" compare equal and one byte short is short.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"m": Fraction(1, 1000), "": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12,
            "P": 10 ** 15, "E": 10 ** 18}
_FORM = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$")


def parse(value: str | int) -> Fraction:
    """The quantity's value; ValueError for anything resource.Quantity would not parse."""
    m = _FORM.match(str(value).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = m.groups()
    base = Fraction(number)
    if exponent:
        return base * Fraction(10) ** int(exponent[1:])
    return base * (_BINARY.get(suffix) or _DECIMAL[suffix or ""])
