"""JSON text in one place: msgspec's codec for the jobs' hot loops (an order of magnitude faster
than the standard library's, with arbitrary-precision integers), and the one reader of JSON text
a sender chose (:func:`parse`, and its fast path :func:`parse_plain`).

A sender's text may name a member twice in one object. Both parsers would keep the last one
silently (so would jsonb), while another reader of the same text may take the first: a message
whose second ``topic`` says ``delete`` would be stored as that delete. Sender text that repeats
a name is refused, at any depth (decisions #105).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ackstore.rules import numbers

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


class DuplicateName(ValueError):
    """A member name given twice in one object of a sender's JSON text."""

    def __init__(self, name: str) -> None:
        shown = json.dumps(name, ensure_ascii=False)
        super().__init__(f"the member name {shown if len(shown) <= 80 else shown[:80] + '…'} appears twice in one object")


def dumps(value: Any) -> str:
    """Compact JSON in the value's own member order (jsonb does not keep order anyway)."""
    return _ENCODER.encode(value).decode("utf-8")


def loads(text: str | bytes) -> Any:
    """JSON text ackstore wrote itself (jsonb read back, rows it staged): never a sender's."""
    return _DECODER.decode(text)


def canonical(value: Any) -> str:
    """Compact JSON with sorted members: equal values give equal text (for entity tags)."""
    return msgspec.json.encode(value, order="sorted").decode("utf-8")


def parse(text: str) -> Any:
    """A sender's JSON text: integers within range (``numbers.parse_int``), a repeated member
    name refused at any depth. Raises ``ValueError`` (``DuplicateName``, ``JSONDecodeError``,
    ``NumberOutOfRange``) or ``RecursionError``."""
    return json.loads(text, parse_int=numbers.parse_int, object_pairs_hook=_members)


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateName(name)
            seen.add(name)
    return members


def parse_plain(text: str | bytes) -> Any | None:
    """msgspec's value of a sender's ``text`` when it is plain — no backslash, no member name
    twice —, else None: then only :func:`parse` may read it. Raises ``msgspec.DecodeError`` for
    text that is no JSON.

    msgspec keeps the last of a repeated name and cannot say it saw one; with no backslash every
    ``"`` delimits a string, so the ``:`` outside strings count the members the text names, and a
    value holding fewer lost some."""
    if ("\\" if isinstance(text, str) else b"\\") in text:
        return None
    value = _DECODER.decode(text)
    return value if _member_count(value) == _named_members(text) else None


def _named_members(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return b"".join(text.split(b'"')[0::2]).count(b":")
    return "".join(text.split('"')[0::2]).count(":")


def _member_count(value: Any) -> int:
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            count += len(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return count
