"""Ditto's duration syntax for the ``timeout`` header (B.6), parsed as Ditto's DittoDuration does."""

from __future__ import annotations

import re

from ackstore.rules import errors

JAVA_LONG_MAX = 2**63 - 1

# Unit suffix → milliseconds, in Ditto's parse order (seconds first; a bare number is seconds).
# Months and years use Java's estimated ChronoUnit durations.
UNIT_MS: dict[str, int] = {
    "s": 1_000,
    "": 1_000,
    "ms": 1,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "mo": 2_629_746_000,
    "y": 31_556_952_000,
}
# [0-9], not \d: Python's \d accepts non-ASCII digits, Java's does not.
_DURATION = re.compile(r"(?P<amount>[+-]?[0-9]+)(?P<unit>ms|mo|s|m|h|d|w|y|)")


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a duration such as ``5``, ``500ms``, ``2m``; 400 ``timeout.invalid`` otherwise.

    Messages are the ones Ditto's parser produces (Java's ``NumberFormatException`` and
    DittoDuration's negative-value check), so a client sees what Ditto would say.
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise errors.timeout_unparsable(f'For input string: "{text}"')
    amount_text, unit = match.group("amount"), match.group("unit")
    if len(amount_text.lstrip("+-")) > 19:  # past a Java long, and before int() meets Python's digit limit
        raise errors.timeout_unparsable(f'For input string: "{errors.shown(amount_text)}"')
    amount = int(amount_text)
    if amount > JAVA_LONG_MAX or amount < -JAVA_LONG_MAX - 1:
        raise errors.timeout_unparsable(f'For input string: "{amount_text}"')
    if amount < 0:
        raise errors.timeout_unparsable(f"The duration must not be negative but was <{amount_text}{unit}>!")
    return amount * UNIT_MS[unit]
