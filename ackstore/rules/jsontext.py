"""JSON text for the jobs' hot loops: msgspec's codec (an order of magnitude faster than the
standard library's, with arbitrary-precision integers), in one place."""

from __future__ import annotations

from typing import Any

import msgspec

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


def dumps(value: Any) -> str:
    """Compact JSON in the value's own member order (jsonb does not keep order anyway)."""
    return _ENCODER.encode(value).decode("utf-8")


def loads(text: str | bytes) -> Any:
    return _DECODER.decode(text)


def canonical(value: Any) -> str:
    """Compact JSON with sorted members: equal values give equal text (for entity tags)."""
    return msgspec.json.encode(value, order="sorted").decode("utf-8")
