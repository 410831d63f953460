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
import re
from typing import Any, Callable, NamedTuple

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


def parse_plain(text: str | bytes, max_depth: int) -> Any | None:
    """msgspec's value of a sender's ``text`` when it is plain — no backslash, no member name
    twice, nested at most ``max_depth`` levels —, else None: then only :func:`parse` may read it.
    Raises ``msgspec.DecodeError`` for text that is no JSON.

    msgspec keeps the last of a repeated name and cannot say it saw one; with no backslash every
    ``"`` delimits a string, so the ``:`` outside strings count the members the text names, and a
    value holding fewer lost some. Text with at most ``max_depth`` brackets cannot nest deeper
    (the common message: its depth is never walked)."""
    plain = _PLAIN_BYTES if isinstance(text, bytes) else _PLAIN_TEXT
    if plain.backslash in text:
        return None
    value = _DECODER.decode(text)
    outside = plain.empty.join(text.split(plain.quote)[0::2])  # no backslash: every quote delimits a string
    if _member_count(value) != outside.count(plain.colon):
        return None
    if outside.count(plain.brace) + outside.count(plain.bracket) > max_depth and not _within(outside, max_depth):
        return None
    return value


class _Plain(NamedTuple):
    """The characters :func:`parse_plain` looks for, as text or as bytes."""

    backslash: Any
    quote: Any
    empty: Any
    colon: Any
    brace: Any
    bracket: Any


_PLAIN_TEXT = _Plain("\\", '"', "", ":", "{", "[")
_PLAIN_BYTES = _Plain(b"\\", b'"', b"", b":", b"{", b"[")


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


def nests_within(text: str | bytes, max_depth: int) -> bool:
    """Whether the JSON ``text`` nests at most ``max_depth`` levels: its brackets outside strings,
    a level removed a pass — a few scans in C, no value walked. Of text that is no JSON (quotes or
    brackets that do not pair) the answer means nothing: its reader refuses it anyway."""
    if bracket_bound(text) <= max_depth:
        return True
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    if b"\\" in text:  # escapes read left to right: an escaped backslash, then an escaped quote, go
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = text.translate(None, _NOT_MARKS)  # the brackets and the quotes: strings found in these
    # A character is inside a string when an odd number of quotes precede it: an adjacent pair of
    # quotes (most strings hold no bracket) goes without changing that for any other.
    marks = marks.replace(b'""', b"")
    return _within(b"".join(marks.split(b'"')[0::2]) if b'"' in marks else marks, max_depth)


def _within(outside: str | bytes, max_depth: int) -> bool:
    """Whether the brackets of JSON text without its strings nest at most ``max_depth`` levels:
    each pass removes the innermost pairs, so a pass per level."""
    if isinstance(outside, str):
        outside = outside.encode("utf-8", "surrogatepass")
    nest = outside.translate(_TO_SQUARE, _NOT_BRACKETS)
    for _ in range(max_depth):
        if not nest:
            return True
        nest = nest.replace(b"[]", b"")
    return not nest


_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_NOT_MARKS = bytes(byte for byte in range(256) if byte not in b'[]{}"')


def bracket_bound(text: str | bytes) -> int:
    """How many ``{`` and ``[`` ``text`` holds: no JSON it spells nests deeper (two scans in C)."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[")
    return text.count("{") + text.count("[")


def _children(item: Any) -> Any:
    """The members of a JSON container as Python holds it (a dict, a list or tuple), else None."""
    if isinstance(item, dict):
        return item.values()
    if isinstance(item, (list, tuple)):
        return item
    return None


def depth(value: Any) -> int:
    """Levels of objects and arrays in ``value`` (``{}`` is 1, a scalar 0), a level at a time:
    no recursion, whatever the depth."""
    levels, level = 0, [value]
    while True:
        below: list[Any] = []
        containers = False
        for item in level:
            children = _children(item)
            if children is not None:
                containers = True
                below.extend(children)
        if not containers:
            return levels
        levels += 1
        level = below


def too_deep(value: Any, max_depth: int) -> str | None:
    """The JSON pointer of the first container (depth first) nested past ``max_depth`` levels in
    ``value``, or None when there is none. No recursion, whatever the depth."""
    if depth(value) <= max_depth:
        return None
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, pointer, level = stack.pop()
        if level > max_depth:
            return pointer or "/"
        members = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in reversed(list(members)):
            if _children(child) is not None:
                name = str(key).replace("~", "~0").replace("/", "~1")
                stack.append((child, f"{pointer}/{name}", level + 1))
    raise AssertionError("a value deeper than max_depth has a container past it")


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


def too_deep_in_text(text: str | bytes, max_depth: int) -> str | None:
    """:func:`too_deep` of JSON text, found by a scan of its tokens rather than by reading it: the
    pointer of the first container nested past ``max_depth`` levels, or None. Text that is no JSON
    is scanned as far as it goes: its brackets still nest."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    open_: list[list[Any]] = []  # per open container: its bracket, and the key or index it is at
    last_string = ""
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            if len(open_) == max_depth:
                return "/" + "/".join(_segment(at) for _, at in open_) if open_ else "/"
            open_.append([token, 0 if token == "[" else ""])
        elif token in "]}":
            if open_:
                open_.pop()
        elif token == ",":
            if open_ and open_[-1][0] == "[":
                open_[-1][1] += 1
        elif token == ":":
            if open_:
                open_[-1][1] = last_string
        else:
            last_string = token
    return None


def loads_within(text: str, max_depth: int, read: Callable[[str], Any] = json.loads) -> Any:
    """JSON text read back from the ledger by ``read`` (the standard library's reader, which psycopg2
    reads jsonb with, unless told), each container nested past ``max_depth`` levels kept as its JSON
    text, a string: the text is read however deep, and no reader's stack, nor the stack of what shows
    the value, decides whether it can be (only a ledger from before the depth limits holds one)."""
    if nests_within(text, max_depth):
        return read(text)
    return read(_deep_containers_as_text(text, max_depth))


def _deep_containers_as_text(text: str, max_depth: int) -> str:
    """``text`` with each container that opens at level ``max_depth + 1`` written as a JSON string
    holding its text, found by a scan of its tokens."""
    pieces: list[str] = []
    level = written = start = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            level += 1
            if level == max_depth + 1:
                start = match.start()
        elif token in "]}":
            if level == max_depth + 1:
                pieces += [text[written:start], json.dumps(text[start:match.end()], ensure_ascii=False)]
                written = match.end()
            level -= 1
    pieces.append(text[written:])
    return "".join(pieces)


def _segment(at: Any) -> str:
    """A member name (its JSON string token) or an index as a JSON pointer segment."""
    if isinstance(at, int):
        return str(at)
    try:
        name = json.loads(at) if at else ""
    except ValueError:
        name = at
    return str(name).replace("~", "~0").replace("/", "~1")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_STRING_BYTES = re.compile(_STRING.pattern.encode())
_STRUCTURE = re.compile(r"[\[\]{},]")


def array_length(text: str) -> int:
    """How many elements the JSON array ``text`` holds, found without reading them: its commas
    outside strings and nested containers, whatever it nests (for text too deep to decode)."""
    bare = _STRING.sub('""', text)  # no string left to hold a bracket or a comma
    if "".join(bare.split()) == "[]":
        return 0
    level = commas = 0
    for match in _STRUCTURE.finditer(bare):
        char = match.group()
        if char in "[{":
            level += 1
        elif char in "]}":
            level -= 1
        elif level == 1:
            commas += 1
    return commas + 1
