"""JSON nested as deep as a test needs, made without recursion: neither the test's own stack nor
an encoder's decides what it can build (issue 50, decisions #115)."""

from __future__ import annotations

import json
import sys
from typing import Any


def nested(levels: int, leaf: Any = 1, key: str = "a") -> Any:
    """``levels`` objects one in another, ``leaf`` innermost."""
    value = leaf
    for _ in range(levels):
        value = {key: value}
    return value


def nested_text(levels: int, opener: str = '{"a":', closer: str = "}", leaf: str = "1") -> str:
    """The JSON text of :func:`nested` (or of arrays: ``"["``, ``"]"``), written as text."""
    return opener * levels + leaf + closer * levels


def dumps(value: Any) -> str:
    """``json.dumps`` of a value however deep (its encoder nests on Python's stack)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return json.dumps(value)
    finally:
        sys.setrecursionlimit(limit)
