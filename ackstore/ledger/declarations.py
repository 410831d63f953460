"""Subscribers and the labels they declare (B.3): who may issue which acks, in which group.

A subscriber belongs to a holder — its own (``subscriber:<id>``) or its connection's
(``connection:<id>``) — and a holder owns its labels: no two holders declare the same label, and
every subscriber of one holder declares the same set. Statements: ``sql/declarations.sql``.
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules import errors, labels, limits, rql
from ackstore.rules.settlement import shared_source

ALL_CHANNELS: tuple[labels.Channel, ...] = ("twin", "live")


def _sql(name: str) -> Any:
    return ledger_statement("declarations", name)


def subscriber_row(
    subscriber: object, filter: object, namespaces: object, connection: object, channels: object
) -> dict[str, Any]:
    """A declaration's subscriber as stored, checked; raises a 400 DittoError for bad input."""
    check_subscriber_id(subscriber)
    if filter is not None:
        rql.parse_sent(filter)  # 400 rql.expression.invalid, with the position of the problem (its bounds too)
    check_namespaces(namespaces)
    if connection is not None:
        check_connection_id(connection)
    chosen = list(ALL_CHANNELS) if channels is None else channels
    if not _is_string_list(chosen) or not chosen or not set(chosen) <= set(ALL_CHANNELS):
        raise errors.json_field_invalid("/channels", "non-empty JSON array of 'twin' and 'live'")
    return {
        "subscriber": subscriber,
        "connection_id": connection,
        "filter": filter,
        "namespaces": list(namespaces) if namespaces is not None else None,
        "channels": sorted(set(chosen)),
    }


def declarable_labels(requested: object, connection: str | None) -> list[str]:
    """The labels to declare, checked (400) and without repeats, in the order given."""
    if isinstance(requested, (str, bytes)) or not isinstance(requested, Sequence):
        raise errors.json_field_invalid("/labels", "JSON array of acknowledgement labels")
    resolved: list[str] = []
    for label in requested:
        declarable = labels.validate_declarable(label, connection)
        if declarable not in resolved:
            resolved.append(declarable)
    return resolved


def declare(conn: Connection, row: dict[str, Any], wanted: list[str]) -> errors.DittoError | None:
    """Store the subscriber and its group's labels; the 409 when they clash, the 403 when the
    subscriber is another login's (decisions #97), and nothing written."""
    declared = conn.execute(_sql("declare"), row | {"labels": wanted}).scalar_one()
    if declared is None:
        connection = row["connection_id"]
        if connection is not None and not may_act_for_connection(conn, connection):
            return errors.connection_not_yours(connection)
        return errors.subscriber_not_yours(row["subscriber"])
    return None if declared else errors.label_not_unique()


def may_act_for_connection(conn: Connection, connection: str) -> bool:
    """Whether this connection's database login is the connection's (issue 37): it claimed it."""
    return conn.execute(_sql("may_act_for_connection"), {"connection": connection}).scalar_one()


def claim_connection(conn: Connection, connection: str) -> None:
    """The 403 unless the connection is this login's: reserved for it, or claimed now by a login
    that may reserve (issue 50)."""
    if not conn.execute(_sql("claim_connection"), {"connection": connection}).scalar_one():
        raise errors.connection_not_yours(connection)


def check_connection_id(connection: object) -> str:
    """A connection's id as stored, or the 400: non-empty text, at most 256 bytes, not the API's or
    the CLI's source."""
    if not isinstance(connection, str) or not connection:
        raise errors.json_field_invalid("/connection", "non-empty String")
    limits.check_id("connection id", connection, limits.MAX_CONNECTION_ID_BYTES)
    if shared_source(connection):
        raise errors.connection_config_invalid(f"'{connection}' is the source of the API or the CLI, no connection's id.")
    return connection


def reserve_connection(conn: Connection, connection: str, login: str) -> str:
    """An operator's grant of ``connection`` to the database ``login`` (issue 50): the owner the
    connection has afterwards — ``login``, or the other login it was already. The database refuses
    a caller that may not write ``connections`` (42501) and a name that is no ingest login (22023)."""
    return conn.execute(_sql("reserve_connection"), {"connection": connection, "login": login}).scalar_one()


def may_act_for(conn: Connection, subscriber: str) -> bool:
    """Whether this connection's database login may act as ``subscriber`` (decisions #97): it
    declared it first, or nobody owns it yet."""
    return conn.execute(_sql("may_act_for"), {"subscriber": subscriber}).scalar_one()


def check_acting_for(conn: Connection, subscriber: str) -> None:
    """Raises the 403 unless this connection's login may act as ``subscriber``."""
    if not may_act_for(conn, subscriber):
        raise errors.subscriber_not_yours(subscriber)


def labels_declared_by(conn: Connection, subscriber: str) -> set[str]:
    return set(conn.execute(_sql("labels_declared_by"), {"subscriber": subscriber}).scalars())


def channels_of(conn: Connection, subscriber: str) -> list[str] | None:
    """The channels ``subscriber`` receives; None for an unknown subscriber."""
    return conn.execute(_sql("channels_of"), {"subscriber": subscriber}).scalar()


def check_namespaces(namespaces: object) -> None:
    if namespaces is not None and not _is_string_list(namespaces):
        raise errors.json_field_invalid("/namespaces", "JSON array of Strings")
    for namespace in namespaces or ():
        limits.check_text("namespace", namespace)


def check_subscriber_id(subscriber: object) -> str:
    if not isinstance(subscriber, str) or not subscriber.strip():
        raise errors.json_field_invalid("/subscriber", "non-empty String")
    if subscriber != subscriber.strip():  # " app" and "app" would be two subscribers no one can tell apart
        raise errors.json_field_invalid("/subscriber", "String without leading or trailing whitespace")
    return limits.check_id("subscriber id", subscriber, limits.MAX_SUBSCRIBER_ID_BYTES)


def _is_string_list(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) and item for item in value)
