"""Ditto's RQL dialect (B.12): one parser producing one AST.

The AST is compiled to SQL for the search index and to predicates for subscriber filters;
this module only parses, so it stays pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Union

from ackstore.rules import errors, limits, numbers

COMPARISONS = ("eq", "ne", "gt", "ge", "lt", "le", "like", "ilike")
PLACEHOLDERS = ("time:now", "time:now_epoch_millis")
MAX_DEPTH = 64


@dataclass(frozen=True)
class Placeholder:
    name: str  # time:now or time:now_epoch_millis


Value = Union[str, int, float, bool, None, Placeholder]


@dataclass(frozen=True)
class Comparison:
    op: str  # one of COMPARISONS
    property: str  # JSON pointer without the leading '/'
    value: Value


@dataclass(frozen=True)
class In:
    property: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Exists:
    property: str


@dataclass(frozen=True)
class Empty:
    property: str


@dataclass(frozen=True)
class Logical:
    op: str  # and / or
    operands: tuple["Node", ...]


@dataclass(frozen=True)
class Not:
    operand: "Node"


Node = Union[Comparison, In, Exists, Empty, Logical, Not]

_NAME = re.compile(r"[a-z]+")
_PROPERTY = re.compile(r"[^\s,()\"'\\]+")
_NUMBER = re.compile(r"[+-]?[0-9]+(?P<fraction>\.[0-9]+)?(?P<exponent>[eE][+-]?[0-9]+)?")
LITERALS = {"true": True, "false": False, "null": None}
# Longest first, so that time:now_epoch_millis is not read as time:now.
_KEYWORD = re.compile("|".join(re.escape(word) for word in sorted([*PLACEHOLDERS, *LITERALS], key=len, reverse=True)))


def resolve(value: Value, now: datetime) -> str | int | float | bool | None:
    """A value with its placeholder replaced: ``time:now`` as ISO-8601 UTC with milliseconds,
    ``time:now_epoch_millis`` as an integer."""
    if isinstance(value, Placeholder):
        if value.name == "time:now_epoch_millis":
            return int(now.timestamp() * 1000)
        return timestamp(now)
    return value


def timestamp(moment: datetime) -> str:
    """A moment as Ditto writes one: ISO-8601 in UTC with milliseconds (``time:now``, ``_modified``)."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def quoted(value: str) -> str:
    """``value`` as an RQL string literal, whatever it holds (a backslash escapes the next character)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse(expression: str) -> Node:
    """Parse a filter such as ``and(eq(attributes/on,true),gt(attributes/floor,2))``."""
    return _parse(expression, max_wildcards=None)


def parse_sent(expression: str) -> Node:
    """Parse an expression a sender gives — a twin command's ``condition``, a subscriber's filter —
    within the bounds that keep its evaluation cheap (decisions #117): at most
    ``limits.MAX_RQL_BYTES`` of UTF-8 (Ditto's bound on all headers together), each ``like`` or
    ``ilike`` pattern at most ``limits.MAX_LIKE_WILDCARDS`` wildcards. 400 past them."""
    if isinstance(expression, str) and len(expression) > limits.MAX_RQL_BYTES // 4:  # chars ≤ bytes ≤ 4 × chars
        size = limits.utf8_size(expression)
        if size > limits.MAX_RQL_BYTES:
            raise errors.rql_invalid(expression, f"it is {errors.java_number(size)} bytes long, more than the maximum "
                                                 f"of {errors.java_number(limits.MAX_RQL_BYTES)}",
                                     _position_past(expression, limits.MAX_RQL_BYTES))
    return _parse(expression, max_wildcards=limits.MAX_LIKE_WILDCARDS)


def _position_past(text: str, max_bytes: int) -> int:
    """The 1-based position of the first character past ``max_bytes`` of UTF-8."""
    return len(text.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")) + 1


def _parse(expression: str, max_wildcards: int | None) -> Node:
    if not isinstance(expression, str):
        raise errors.rql_invalid(errors.shown(expression), "the filter must be a string", 1)
    if "\x00" in expression:  # no text PostgreSQL could compare holds it
        raise errors.rql_invalid(expression.replace("\x00", "\\u0000"), "the character U+0000 is not allowed",
                                 expression.index("\x00") + 1)
    try:
        expression.encode("utf-8")
    except UnicodeEncodeError as bad:
        raise errors.rql_invalid(expression.encode("utf-8", "replace").decode(), "a lone surrogate is not text",
                                 bad.start + 1) from None
    parser = _Parser(expression, max_wildcards)
    node = parser.query(depth=0)
    parser.skip_spaces()
    if parser.pos != len(expression):
        parser.fail("unexpected input after the end of the query")
    return node


class _Parser:
    def __init__(self, text: str, max_wildcards: int | None = None) -> None:
        self.text = text
        self.pos = 0
        self.max_wildcards = max_wildcards

    def fail(self, problem: str) -> None:
        raise errors.rql_invalid(self.text, problem, self.pos + 1)

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def expect(self, char: str) -> None:
        self.skip_spaces()
        if not self.text.startswith(char, self.pos):
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end"
            self.fail(f"expected '{char}' but found {found}")
        self.pos += 1

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        self.skip_spaces()
        found = pattern.match(self.text, self.pos)
        if found is not None:
            self.pos = found.end()
        return found

    def query(self, depth: int) -> Node:
        if depth > MAX_DEPTH:
            self.fail(f"the query nests deeper than {MAX_DEPTH} levels")
        start = self.pos
        name = self.match(_NAME)
        if name is None:
            self.fail("expected an operator such as eq, and, exists")
        op = name.group()
        self.expect("(")
        if op in ("and", "or"):
            operands = [self.query(depth + 1)]
            while self._comma():
                operands.append(self.query(depth + 1))
            node: Node = Logical(op, tuple(operands))
        elif op == "not":
            node = Not(self.query(depth + 1))
        elif op in COMPARISONS:
            prop = self.property()
            self.expect(",")
            at = self.pos
            node = Comparison(op, prop, self.value())
            if op in ("like", "ilike"):
                self._check_wildcards(node.value, at)
        elif op == "in":
            prop = self.property()
            self.expect(",")
            values = [self.value()]
            while self._comma():
                values.append(self.value())
            node = In(prop, tuple(values))
        elif op in ("exists", "empty"):
            prop = self.property()
            node = Exists(prop) if op == "exists" else Empty(prop)
        else:
            self.pos = start
            self.fail(f"unknown operator '{op}'")
        self.expect(")")
        return node

    def _check_wildcards(self, pattern: Value, at: int) -> None:
        """A like pattern's wildcards within the bound, when there is one."""
        if self.max_wildcards is None or not isinstance(pattern, str):
            return
        wildcards = pattern.count("*") + pattern.count("?")
        if wildcards > self.max_wildcards:
            self.pos = at
            self.skip_spaces()
            self.fail(f"the pattern holds {errors.java_number(wildcards)} wildcards (* and ?), more than the "
                      f"maximum of {self.max_wildcards}")

    def _comma(self) -> bool:
        self.skip_spaces()
        if self.text.startswith(",", self.pos):
            self.pos += 1
            return True
        return False

    def property(self) -> str:
        found = self.match(_PROPERTY)
        if found is None:
            self.fail("expected a property (a JSON pointer such as attributes/location)")
        prop = found.group().lstrip("/")
        if not prop:
            self.pos = found.start()
            self.fail("expected a property (a JSON pointer such as attributes/location)")
        return prop

    def value(self) -> Value:
        self.skip_spaces()
        if self.pos < len(self.text) and self.text[self.pos] in "\"'":
            return self.string()
        number = self.match(_NUMBER)
        if number is not None and not self._followed_by_word():
            text = number.group()
            try:
                if number.group("fraction") or number.group("exponent"):
                    return numbers.parse_float(text)
                return numbers.parse_int(text)
            except numbers.NumberOutOfRange as out:
                self.pos = number.start()
                self.fail(str(out))
        if number is not None:
            self.pos = number.start()
        keyword = self.match(_KEYWORD)
        if keyword is not None and not self._followed_by_word():
            word = keyword.group()
            return LITERALS[word] if word in LITERALS else Placeholder(word)
        if keyword is not None:
            self.pos = keyword.start()
        self.fail("expected a value: a number, a quoted string, true, false, null or a time placeholder")
        raise AssertionError("unreachable")

    def _followed_by_word(self) -> bool:
        return self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "_:.")

    def string(self) -> str:
        quote = self.text[self.pos]
        self.pos += 1
        chars: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\" and self.pos + 1 < len(self.text):
                chars.append(self.text[self.pos + 1])
                self.pos += 2
            elif char == quote:
                self.pos += 1
                return "".join(chars)
            else:
                chars.append(char)
                self.pos += 1
        self.fail(f"the string is not closed with {quote}")
        raise AssertionError("unreachable")
