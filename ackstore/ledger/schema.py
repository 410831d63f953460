"""The ledger's PostgreSQL schema: every table, constraint and index, in one place.

It changes only through an Alembic migration (``migrations/versions``); a test checks that
replaying the migrations gives exactly this schema.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

# A signal row never changes after ingestion; its checkpoints (A.3) are rows in other tables:
# persisted/failed in command_responses, decided in request_results, settled in settlements.
SIGNAL_STATES = ("received", "persisted", "failed", "decided", "settled")
ACK_DISPOSITIONS = ("counted", "duplicate", "late", "unrequested")
RESULT_CAUSES = ("acks", "deadline", "error", "response", "accepted")
SETTLEMENT_DECISIONS = ("ack", "reject", "redeliver", "dead-letter")
EVENT_ACTIONS = ("created", "modified", "merged", "deleted")
INDEX_VALUE_TYPES = ("string", "number", "boolean", "null", "object", "array")


def _in(column: str, values: tuple[str, ...]) -> str:
    """A CHECK clause ``column IN (...)`` over fixed literals (never user input)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _timestamp(name: str, *, nullable: bool = False, default_now: bool = True) -> Column:
    return Column(
        name, TIMESTAMP(timezone=True), nullable=nullable, server_default=func.now() if default_now else None
    )


def _status(name: str = "status") -> Column:
    return Column(name, SmallInteger, nullable=False)


signals = Table(
    "signals",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),  # ingestion order
    Column("source", Text, nullable=False),  # connection id, "api" or "cli"
    Column("source_message_id", Text, nullable=False),
    Column("correlation_id", Text, nullable=False),
    Column("api", Text, nullable=False),  # which outcome table applies (B.7)
    Column("channel", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("action", Text, nullable=False),  # command action or message subject
    Column("thing_id", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("value", JSONB, nullable=True),  # SQL NULL: the envelope had no value
    Column("headers", JSONB, nullable=False),  # normalised headers
    Column("requested_acks", ARRAY(Text), nullable=False),
    Column("response_required", Boolean, nullable=False),
    Column("timeout_ms", BigInteger, nullable=False),
    _timestamp("received_at"),
    Column("deadline_at", TIMESTAMP(timezone=True), nullable=False),
    UniqueConstraint("source", "source_message_id"),
    UniqueConstraint("correlation_id"),
    CheckConstraint(_in("api", ("http", "websocket", "connectivity")), name="api"),
    CheckConstraint(_in("channel", ("twin", "live")), name="channel"),
    CheckConstraint(_in("kind", ("twin-command", "live-command", "live-message")), name="kind"),
    CheckConstraint("timeout_ms >= 0", name="timeout"),
    CheckConstraint("deadline_at >= received_at", name="deadline"),
    CheckConstraint("source <> '' AND source_message_id <> '' AND correlation_id <> ''", name="ids"),
)
Index(None, signals.c.thing_id, signals.c.id)

ack_requests = Table(
    "ack_requests",
    metadata,
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), nullable=False),
    Column("label", Text, nullable=False),
    PrimaryKeyConstraint("signal_id", "label"),
)

subscribers = Table(
    "subscribers",
    metadata,
    Column("id", Text, primary_key=True),
    Column("holder", Text, nullable=False),  # the label group: "connection:<id>" or "subscriber:<id>"
    Column("connection_id", Text, nullable=True),
    Column("filter", Text, nullable=True),  # RQL; used for weak acks
    Column("namespaces", ARRAY(Text), nullable=True),  # NULL: all namespaces
    Column("channels", ARRAY(Text), nullable=False),
    _timestamp("declared_at"),
    CheckConstraint("id <> ''", name="id"),
    CheckConstraint(
        "cardinality(channels) > 0 AND channels <@ ARRAY['twin', 'live']::text[]", name="channels"
    ),
)
Index(None, subscribers.c.holder)

declared_labels = Table(
    "declared_labels",
    metadata,
    Column("label", Text, primary_key=True),  # globally unique (B.3)
    Column("holder", Text, nullable=False),
    _timestamp("declared_at"),
)
Index(None, declared_labels.c.holder)

acks = Table(
    "acks",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), nullable=False),
    Column("label", Text, nullable=False),
    _status(),
    Column("payload", JSONB, nullable=True),  # SQL NULL: no payload
    Column("headers", JSONB, nullable=False),
    Column("issuer", Text, nullable=False),  # subscriber id, or "ackstore" for built-in acks
    Column("weak", Boolean, nullable=False, server_default=text("false")),
    _timestamp("received_at"),  # the fact's time (A.2.1)
    Column("disposition", Text, nullable=False),
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
    CheckConstraint(_in("disposition", ACK_DISPOSITIONS), name="disposition"),
)
# The first ack per (signal, label) is the one that counts (A.2.8).
Index(
    "uq_acks_counted_signal_label",
    acks.c.signal_id,
    acks.c.label,
    unique=True,
    postgresql_where=text("disposition = 'counted'"),
)

command_responses = Table(
    "command_responses",
    metadata,
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), primary_key=True),
    _status(),
    Column("payload", JSONB, nullable=True),
    Column("is_error", Boolean, nullable=False),  # a failed twin command short-circuits (A.2.7)
    _timestamp("responded_at"),
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
)

request_results = Table(
    "request_results",
    metadata,
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), primary_key=True),
    _status(),
    Column("body", JSONB, nullable=True),  # SQL NULL: no body
    Column("headers", JSONB, nullable=False),
    Column("cause", Text, nullable=False),
    _timestamp("decided_at"),
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
    CheckConstraint(_in("cause", RESULT_CAUSES), name="cause"),
)

things = Table(
    "things",
    metadata,
    Column("thing_id", Text, primary_key=True),
    Column("revision", BigInteger, nullable=False),
    Column("document", JSONB, nullable=True),  # NULL once deleted
    Column("deleted", Boolean, nullable=False, server_default=text("false")),
    _timestamp("updated_at"),
    CheckConstraint("revision > 0", name="revision"),
)

thing_events = Table(
    "thing_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("thing_id", Text, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), nullable=False),
    Column("action", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("value", JSONB, nullable=True),
    Column("headers", JSONB, nullable=False),  # incl. the custom requested-acks (B.1)
    _timestamp("created_at"),
    UniqueConstraint("thing_id", "revision"),
    UniqueConstraint("signal_id"),
    CheckConstraint(_in("action", EVENT_ACTIONS), name="action"),
)

search_index = Table(
    "search_index",
    metadata,
    Column("thing_id", Text, nullable=False),
    Column("path", Text, nullable=False),  # JSON pointer without the leading '/'
    Column("ordinal", Integer, nullable=False),  # n-th value at this path (array elements share it)
    Column("value_type", Text, nullable=False),
    Column("value_text", Text, nullable=True),
    Column("value_number", Numeric, nullable=True),
    Column("value_bool", Boolean, nullable=True),
    Column("empty", Boolean, nullable=False),  # null, "", {} or [] (RQL empty)
    Column("revision", BigInteger, nullable=False),
    PrimaryKeyConstraint("thing_id", "path", "ordinal"),
    CheckConstraint(_in("value_type", INDEX_VALUE_TYPES), name="type"),
)
Index(None, search_index.c.path, search_index.c.value_text)
Index(None, search_index.c.path, search_index.c.value_number)

# One row per thing the index has seen: its watermark (indexed revision) and digest.
search_things = Table(
    "search_things",
    metadata,
    Column("thing_id", Text, primary_key=True),
    Column("namespace", Text, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("digest", Text, nullable=False),
    Column("present", Boolean, nullable=False),  # false once the thing is deleted
    _timestamp("indexed_at"),
)
Index(None, search_things.c.namespace)

settlements = Table(
    "settlements",
    metadata,
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), primary_key=True),
    Column("decision", Text, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    _timestamp("decided_at"),
    Column("carried_out_at", TIMESTAMP(timezone=True), nullable=True),
    CheckConstraint(_in("decision", SETTLEMENT_DECISIONS), name="decision"),
    CheckConstraint("attempt > 0", name="attempt"),
)

pipeline_runs = Table(
    "pipeline_runs",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("step", Text, nullable=False),
    _timestamp("started_at"),
    Column("finished_at", TIMESTAMP(timezone=True), nullable=True),
    Column("stats", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    UniqueConstraint("run_id", "step"),
)

# --- staging: what a Spark job wrote, merged into the ledger in one transaction ---------------
# UNLOGGED: staging rows are recomputed after a crash, never trusted across runs.


def _staging(name: str, *columns: Column) -> Table:
    return Table(name, metadata, Column("run_id", Text, nullable=False), *columns, prefixes=["UNLOGGED"])


stage_twin_outcomes = _staging(
    "stage_twin_outcomes",
    Column("signal_id", BigInteger, nullable=False),
    Column("thing_id", Text, nullable=False),
    Column("base_revision", BigInteger, nullable=False),  # the thing's revision the fold started from
    _status(),
    Column("payload", JSONB, nullable=True),
    Column("is_error", Boolean, nullable=False),
    Column("event_action", Text, nullable=True),  # NULL: the command failed, nothing changed
    Column("revision", BigInteger, nullable=True),  # the thing's revision after this command
    Column("is_last", Boolean, nullable=False),  # the thing's final state is on this row
    Column("final_revision", BigInteger, nullable=True),
    Column("final_document", JSONB, nullable=True),
)
Index(None, stage_twin_outcomes.c.run_id)

stage_search_things = _staging(
    "stage_search_things",
    Column("thing_id", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("old_revision", BigInteger, nullable=False),  # 0: never indexed
    Column("revision", BigInteger, nullable=False),
    Column("digest", Text, nullable=False),
    Column("present", Boolean, nullable=False),
    Column("changed", Boolean, nullable=False),  # false: the index already holds this state
)
Index(None, stage_search_things.c.run_id)

stage_search_rows = _staging(
    "stage_search_rows",
    Column("thing_id", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("value_type", Text, nullable=False),
    Column("value_text", Text, nullable=True),
    Column("value_number", Text, nullable=True),  # decimal text, cast on merge
    Column("value_bool", Boolean, nullable=True),
    Column("empty", Boolean, nullable=False),
    Column("revision", BigInteger, nullable=False),
)
Index(None, stage_search_rows.c.run_id)

stage_results = _staging(
    "stage_results",
    Column("signal_id", BigInteger, nullable=False),
    _status(),
    Column("body", JSONB, nullable=True),
    Column("headers", JSONB, nullable=False),
    Column("cause", Text, nullable=False),
    Column("acks_seen", Integer, nullable=False),  # in-time counted acks the decision was made on
)
Index(None, stage_results.c.run_id)

STAGING_TABLES = (stage_twin_outcomes, stage_search_things, stage_search_rows, stage_results)


LEDGER_TABLES = (
    signals,
    ack_requests,
    subscribers,
    declared_labels,
    acks,
    command_responses,
    request_results,
    things,
    thing_events,
    search_index,
    search_things,
    settlements,
    pipeline_runs,
)
