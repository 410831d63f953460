"""RQL (B.12) evaluated in Python, over the same typed rows the search index holds.

Subscriber filters are tested against one signal at a time, so they are not compiled to SQL;
they are evaluated here over :func:`ackstore.rules.index_rows.flatten` of the signal's view,
with exactly the rules :mod:`ackstore.ledger.search` compiles: an array's elements share the
array's path (any element may match), comparisons never convert between types, strings compare
by code point (the search's ``COLLATE "C"``), ``ne`` and ``not`` match an absent property.
``tests/ledger/test_rql_python_and_sql.py`` checks the two against each other on generated documents.
"""

from __future__ import annotations

import operator
import re
from datetime import datetime, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from ackstore.rules import rql
from ackstore.rules.index_rows import IndexRow, flatten

Rows = Mapping[str, Sequence[IndexRow]]
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


def rows_by_path(document: Mapping[str, Any], placeholders: Mapping[str, Any] | None = None) -> dict[str, list[IndexRow]]:
    """The typed rows of ``document``, plus one property per placeholder (``topic:action`` …)."""
    grouped: dict[str, list[IndexRow]] = {}
    for row in flatten({**document, **(placeholders or {})}):
        grouped.setdefault(row.path, []).append(row)
    return grouped


def matches(node: rql.Node, rows: Rows, *, now: datetime | None = None) -> bool:
    """Whether the filter ``node`` holds for the value whose rows are ``rows``."""
    return _Evaluator(rows, now or datetime.now(timezone.utc)).test(node)


class _Evaluator:
    def __init__(self, rows: Rows, now: datetime) -> None:
        self.rows = rows
        self.now = now

    def test(self, node: rql.Node) -> bool:
        if isinstance(node, rql.Logical):
            results = (self.test(operand) for operand in node.operands)
            return all(results) if node.op == "and" else any(results)
        if isinstance(node, rql.Not):
            return not self.test(node.operand)
        if isinstance(node, rql.Exists):
            return bool(self._at(node.property))
        if isinstance(node, rql.Empty):
            return not any(not row.empty for row in self._at(node.property))
        if isinstance(node, rql.In):
            return any(self._any("eq", node.property, value) for value in node.values)
        if node.op == "ne":
            return not self._any("eq", node.property, node.value)
        return self._any(node.op, node.property, node.value)

    def _at(self, prop: str) -> Sequence[IndexRow]:
        return self.rows.get(prop.lstrip("/"), ())

    def _any(self, op: str, prop: str, value: rql.Value) -> bool:
        resolved = rql.resolve(value, self.now)
        return any(_value_test(op, row, resolved) for row in self._at(prop))


def _value_test(op: str, row: IndexRow, value: Any) -> bool:
    """One row against one value: the search compiler's ``_value_test``, row by row."""
    if value is None:
        return op == "eq" and row.value_type == "null"
    if isinstance(value, bool):
        return op == "eq" and row.value_type == "boolean" and row.value_bool is value
    if isinstance(value, (int, float)):
        if op in ("like", "ilike") or row.value_type != "number":
            return False
        return _ORDER[op](Decimal(row.value_number or "0"), Decimal(repr(value)))
    if row.value_type != "string":
        return False
    text = row.value_text or ""
    if op in ("like", "ilike"):
        return like_matches(value, text, ignore_case=op == "ilike")
    return _ORDER[op](text, value)


def like_matches(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether ``text`` matches an RQL wildcard pattern (``*`` any sequence, ``?`` one character).

    Without backtracking: the pieces between ``*`` are found leftmost, in order — the first
    anchored at the start, the last at the end — so a hostile filter such as ``*a*a*a*…b`` costs
    a scan per piece, never an exponential search (a translation to ``.*`` regexes would). A
    piece holding ``?`` is searched for by its longest literal run, the rest checked around each
    place it occurs, all inside the regex engine: text the run does not occur in costs one scan,
    however many ``?`` the piece holds (decisions #117)."""
    if ignore_case:
        pattern, text = pattern.lower(), text.lower()
    first, middle, last = _pieces(pattern)
    if last is None:
        return len(text) == first.length and first.at(text, 0)
    end = len(text) - last.length  # where the last piece starts
    if end < first.length or not first.at(text, 0):
        return False
    position = first.length
    for piece in middle:
        found = piece.find(text, position, end)
        if found < 0:
            return False
        position = found + piece.length
    return last.at(text, end)


class _Piece:
    """One piece of a like pattern between ``*``: literal characters and ``?`` (any one)."""

    def __init__(self, piece: str) -> None:
        self.length = len(piece)
        self.literal = piece if "?" not in piece else None
        self.whole = re.compile(_regex(piece), re.DOTALL)  # matched where it must start
        # each literal run (its offset, its text) with the regex that finds the piece by it: the
        # run first, so the engine scans for it; what comes before it looked behind at
        self.anchors: list[tuple[int, str, re.Pattern[str]]] = []
        if self.literal is None:
            for match in re.finditer(r"[^?]+", piece):
                offset, run = match.start(), match.group()
                before, after = piece[:offset], piece[offset + len(run):]
                lookbehind = f"(?<={_regex(before + run)})" if before else ""
                lookahead = f"(?={_regex(after)})" if after else ""
                self.anchors.append((offset, run, re.compile(re.escape(run) + lookbehind + lookahead, re.DOTALL)))

    def at(self, text: str, start: int) -> bool:
        """Whether the piece matches ``text`` at ``start``."""
        if self.literal is not None:
            return text.startswith(self.literal, start)
        return start + self.length <= len(text) and self.whole.match(text, start, start + self.length) is not None

    def find(self, text: str, start: int, end: int) -> int:
        """Where the piece matches first in ``text[start:end]`` (it ends by ``end``), else -1:
        found by the run that occurs least there (a run that does not occur: no scan at all)."""
        if self.literal is not None:
            return text.find(self.literal, start, end)
        if not self.anchors:  # only ?: it matches wherever it fits
            return start if start + self.length <= end else -1
        offset, _, search = min(self.anchors, key=lambda anchor: text.count(anchor[1], start + anchor[0], end))
        found = search.search(text, start + offset, end)
        return -1 if found is None else found.start() - offset


def _regex(piece: str) -> str:
    """A piece as a regular expression: its literal runs escaped, a run of ``?`` as ``.{n}``."""
    return "".join(re.escape(run) if run[0] != "?" else f".{{{len(run)}}}"
                   for run in re.findall(r"\?+|[^?]+", piece))


_MAX_REMEMBERED_PATTERN = 1024  # characters: a longer pattern is compiled each time, never held


def _pieces(pattern: str) -> tuple[_Piece, tuple[_Piece, ...], _Piece | None]:
    """The first piece, the middle ones and the last (None without a ``*``) of a pattern."""
    if len(pattern) <= _MAX_REMEMBERED_PATTERN:
        return _remembered_pieces(pattern)
    return _split_pieces(pattern)


def _split_pieces(pattern: str) -> tuple[_Piece, tuple[_Piece, ...], _Piece | None]:
    first, *rest = pattern.split("*")
    if not rest:
        return _Piece(first), (), None
    *middle, last = rest
    return _Piece(first), tuple(_Piece(piece) for piece in middle if piece), _Piece(last)


_remembered_pieces = lru_cache(maxsize=1024)(_split_pieces)  # patterns repeat: a filter's, a condition's
