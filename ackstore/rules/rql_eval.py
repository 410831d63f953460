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
    a scan per piece, never an exponential search (a translation to ``.*`` regexes would)."""
    if ignore_case:
        pattern, text = pattern.lower(), text.lower()
    first, *rest = pattern.split("*")
    if not rest:
        return len(text) == len(first) and _piece_at(first, text, 0)
    *middle, last = rest
    if not _piece_at(first, text, 0):
        return False
    position = len(first)
    for piece in middle:
        found = _piece(piece).search(text, position)
        if found is None:
            return False
        position = found.end()
    start = len(text) - len(last)
    return start >= position and _piece_at(last, text, start)


def _piece(piece: str) -> re.Pattern[str]:
    """One piece between ``*``: literal characters and ``?`` (any one character)."""
    return re.compile("".join("." if char == "?" else re.escape(char) for char in piece), re.DOTALL)


def _piece_at(piece: str, text: str, start: int) -> bool:
    return _piece(piece).match(text, start, start + len(piece)) is not None if start + len(piece) <= len(text) else False
