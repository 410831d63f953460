"""Searching the index (B.12): RQL compiled to SQL over ``search_index``.

The rows themselves come from :func:`ackstore.rules.index_rows.flatten`. Queries are
SQLAlchemy expressions: every value is a bind parameter.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Sequence

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    true,
)

from ackstore.ledger.schema import search_index, search_things
from ackstore.rules import rql

# --- queries ---------------------------------------------------------------------------------


def search(
    connection: Connection, expression: str, namespaces: Sequence[str] | None = None, *, now: datetime | None = None,
    after: str | None = None, limit: int | None = None,
) -> list[str]:
    """Ids of indexed things matching the RQL filter, sorted; 400 ``rql.expression.invalid`` if
    malformed. A page: the first ``limit`` after the id ``after`` (the HTTP API's cursor)."""
    query = _matching(select(search_things.c.thing_id), expression, namespaces, now)
    if after is not None:
        query = query.where(search_things.c.thing_id > after)
    return list(connection.execute(query.order_by(search_things.c.thing_id).limit(limit)).scalars())


def count(connection: Connection, expression: str, namespaces: Sequence[str] | None = None, *,
          now: datetime | None = None) -> int:
    """How many indexed things match the RQL filter (Ditto's ``/search/things/count``): a scan of
    the matching things, as Ditto's count is — no page bounds it."""
    return connection.execute(_matching(select(func.count()), expression, namespaces, now)).scalar_one()


def _matching(query: Select[Any], expression: str, namespaces: Sequence[str] | None,
              now: datetime | None) -> Select[Any]:
    """``query`` over the present things matching the filter, in ``namespaces`` when given."""
    condition = compile_filter(rql.parse(expression), now=now)
    query = query.select_from(search_things).where(search_things.c.present, condition)
    if namespaces:
        query = query.where(search_things.c.namespace.in_(list(namespaces)))
    return query


def compile_filter(node: rql.Node, *, now: datetime | None = None) -> ColumnElement[bool]:
    """The RQL AST as a condition on ``search_things`` (one EXISTS per property test)."""
    return _Compiler(now or datetime.now(timezone.utc)).compile(node)


class _Compiler:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def compile(self, node: rql.Node) -> ColumnElement[bool]:
        if isinstance(node, rql.Logical):
            parts = [self.compile(operand) for operand in node.operands]
            return and_(*parts) if node.op == "and" else or_(*parts)
        if isinstance(node, rql.Not):
            return not_(self.compile(node.operand))
        if isinstance(node, rql.Exists):
            return _at(node.property, true())
        if isinstance(node, rql.Empty):
            return not_(_at(node.property, search_index.c.empty.is_(False)))
        if isinstance(node, rql.In):
            return or_(*(self._equal(node.property, value) for value in node.values))
        if node.op == "eq":
            return self._equal(node.property, node.value)
        if node.op == "ne":  # a missing property is "not equal" too, as in Ditto's search
            return not_(self._equal(node.property, node.value))
        return _at(node.property, self._value_test(node.op, self._resolve(node.value)))

    def _equal(self, prop: str, value: rql.Value) -> ColumnElement[bool]:
        return _at(prop, self._value_test("eq", self._resolve(value)))

    def _resolve(self, value: rql.Value) -> Any:
        return rql.resolve(value, self.now)

    @staticmethod
    def _value_test(op: str, value: Any) -> ColumnElement[bool]:
        """Comparisons only between values of the same JSON type, without conversion (B.12)."""
        c = search_index.c
        if value is None:
            return c.value_type == "null" if op == "eq" else false()
        if isinstance(value, bool):
            return and_(c.value_type == "boolean", c.value_bool.is_(value)) if op == "eq" else false()
        if isinstance(value, (int, float)):
            if op in ("like", "ilike"):
                return false()
            return and_(c.value_type == "number", _compare(c.value_number, op, Decimal(repr(value))))
        if op in ("like", "ilike"):
            pattern = like_pattern(value)
            text = c.value_text.like(pattern, escape="\\") if op == "like" else c.value_text.ilike(pattern, escape="\\")
            return and_(c.value_type == "string", text)
        return and_(c.value_type == "string", _compare(c.value_text.collate("C"), op, value))


def _compare(column: Any, op: str, value: Any) -> ColumnElement[bool]:
    return {
        "eq": column == value,
        "gt": column > value,
        "ge": column >= value,
        "lt": column < value,
        "le": column <= value,
    }[op]


def _at(prop: str, condition: ColumnElement[bool]) -> ColumnElement[bool]:
    return exists(
        select(1).where(
            search_index.c.thing_id == search_things.c.thing_id,
            search_index.c.path == prop.lstrip("/"),
            condition,
        )
    )


def like_pattern(pattern: str) -> str:
    """RQL wildcards (``*`` any sequence, ``?`` one character) as a SQL LIKE pattern."""
    out = []
    for char in pattern:
        if char in "\\%_":
            out.append("\\" + char)
        elif char == "*":
            out.append("%")
        elif char == "?":
            out.append("_")
        else:
            out.append(char)
    return "".join(out)
