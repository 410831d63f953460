"""JSON nested as deep as a test needs, made without recursion: neither the test's own stack nor
an encoder's decides what it can build (issue 50, decisions #115)."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Iterator


def nested(levels: int, leaf: Any = 1, key: str = "a") -> Any:
    """``levels`` objects one in another, ``leaf`` innermost."""
    value = leaf
    for _ in range(levels):
        value = {key: value}
    return value


def nested_array(levels: int, leaf: Any = 1) -> Any:
    """``levels`` arrays one in another, ``leaf`` innermost."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def nested_text(levels: int, opener: str = '{"a":', closer: str = "}", leaf: str = "1") -> str:
    """The JSON text of :func:`nested` (or of arrays: ``"["``, ``"]"``), written as text."""
    return opener * levels + leaf + closer * levels


@contextlib.contextmanager
def roomy_stack() -> Iterator[None]:
    """Python's stack raised for the test's own encoders (json's, pika's, proton's nest on it), so
    that a test can send what a sender of another language would."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def dumps(value: Any) -> str:
    """``json.dumps`` of a value however deep (its encoder nests on Python's stack)."""
    with roomy_stack():
        return json.dumps(value)
