"""Numbers read from user text, bounded before Python converts them.

Ditto holds a JSON number as an int, a long or a double, so no number it accepts is larger in
magnitude than the largest finite double. ackstore keeps integers exact, but within that
bound: a longer digit run is a client error (400), not Python's integer-string limit
(``ValueError`` past 4 300 digits) surfacing as a traceback, and not a value the jobs or the
search would have to carry. The bound is checked on the text, before any conversion.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

MAX_MAGNITUDE = sys.float_info.max
MAX_INTEGER_DIGITS = len(str(int(MAX_MAGNITUDE)))  # 309
# A run of digits too long for any number in range (text inside strings may match too: the
# caller then walks the value to be sure).
LONG_DIGIT_RUN = re.compile(rf"[0-9]{{{MAX_INTEGER_DIGITS + 1},}}")


class NumberOutOfRange(ValueError):
    """A number beyond what Ditto's JSON could hold."""

    def __init__(self, text: str) -> None:
        shown = text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"
        super().__init__(f"the number {shown} is out of range (at most ±{MAX_MAGNITUDE:.7g})")


def parse_int(text: str) -> int:
    """``int(text)`` for a decimal integer literal within range, else :class:`NumberOutOfRange`."""
    digits = len(text) - (text[:1] in "+-")
    if digits > MAX_INTEGER_DIGITS:
        raise NumberOutOfRange(text)
    value = int(text)
    if abs(value) > MAX_MAGNITUDE:
        raise NumberOutOfRange(text)
    return value


def parse_float(text: str) -> float:
    """``float(text)`` when finite (``1e999`` is out of range), else :class:`NumberOutOfRange`."""
    value = float(text)
    if not math.isfinite(value):
        raise NumberOutOfRange(text)
    return value


def out_of_range(value: Any) -> bool:
    """Whether a parsed JSON value holds an integer beyond :data:`MAX_MAGNITUDE` (a Python
    caller may pass any int)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if item.bit_length() > 1024:  # 2**1024 > MAX_MAGNITUDE > 2**1023
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
