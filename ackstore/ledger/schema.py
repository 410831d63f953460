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

from ackstore.rules.acks import Disposition

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
BATCH_STEPS = ("apply_twin", "index_search", "sweep", "migrated")
ACK_DISPOSITIONS = tuple(disposition.value for disposition in Disposition)
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
    # The last event of the log this subscriber has been handed or passed over (pull, A.3).
    Column("event_position", BigInteger, nullable=False, server_default=text("0")),
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

# The hot append-only children of signals (acks, responses, results, the event log, the queues)
# have no foreign key: each inserted row would take a row lock on its signal for the check. The
# merges' own joins keep them whole, and the validation gate looks for orphans in its slice.

acks = Table(
    "acks",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("signal_id", BigInteger, nullable=False),
    Column("label", Text, nullable=False),
    _status(),
    Column("payload", JSONB, nullable=True),  # SQL NULL: no payload
    Column("headers", JSONB, nullable=False),
    Column("issuer", Text, nullable=False),  # subscriber id, or "ackstore" for built-in acks
    Column("weak", Boolean, nullable=False, server_default=text("false")),
    _timestamp("received_at"),  # the fact's time (A.2.1)
    Column("disposition", Text, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),  # the request's attempt it was stored for
    Column("reason", Text, nullable=True),  # why an invalid live response did not answer its command
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
    CheckConstraint(_in("disposition", ACK_DISPOSITIONS), name="disposition"),
    CheckConstraint("attempt > 0", name="attempt"),
    CheckConstraint("(disposition = 'invalid') = (reason IS NOT NULL)", name="reason"),
)
# A signal's acks, by its key: show and its timeline read them (migration 0009).
Index("ix_acks_signal_id", acks.c.signal_id, acks.c.attempt)
# The sweep reads a request's refused live responses (a 408 names why): few rows, their own index.
Index("ix_acks_invalid", acks.c.signal_id, acks.c.attempt, postgresql_where=text("disposition = 'invalid'"))
# The first ack per (signal, attempt, label) is the one that counts (A.2.8, A.2.10).
Index(
    "uq_acks_counted_signal_attempt_label",
    acks.c.signal_id,
    acks.c.attempt,
    acks.c.label,
    unique=True,
    postgresql_where=text("disposition = 'counted'"),
)

# One row per merge that wrote facts: its commit time is when they became visible, the fact time
# of the built-in acks derived from them (A.2.1). Rows from before the lean ledger are 'migrated'.
ledger_batches = Table(
    "ledger_batches",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("step", Text, nullable=False),
    Column("run_id", Text, nullable=True),
    Column("committed_at", TIMESTAMP(timezone=True), nullable=False),
    CheckConstraint(_in("step", BATCH_STEPS), name="step"),
)

# A command's own response: for a twin command, the persisted fact apply_twin learned — and, if
# it changed the thing, the event (its position in the log, the thing's revision, the action).
# twin-persisted is derived from it; the event log is a view over it and its command.
command_responses = Table(
    "command_responses",
    metadata,
    Column("signal_id", BigInteger, primary_key=True),
    _status(),
    Column("payload", JSONB, nullable=True),
    Column("is_error", Boolean, nullable=False),  # a failed twin command short-circuits (A.2.7)
    Column("batch_id", BigInteger, nullable=True),  # the apply batch; NULL for a live response
    Column("event_id", BigInteger, nullable=True),  # the event's position in the log (A.3)
    Column("revision", BigInteger, nullable=True),  # the thing's revision after the change
    Column("event_action", Text, nullable=True),
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
    CheckConstraint("(event_id IS NULL) = (revision IS NULL) AND (event_id IS NULL) = (event_action IS NULL)",
                    name="event"),
    CheckConstraint(_in("event_action", EVENT_ACTIONS), name="action"),
)
Index("uq_command_responses_event_id", command_responses.c.event_id, unique=True,
      postgresql_where=text("event_id IS NOT NULL"))
Index("ix_command_responses_batch_id", command_responses.c.batch_id, postgresql_using="brin")

# Every attempt of every request (A.2.10), the one home of what the ledger waits for: the labels
# requested and the deadline. Attempt 1 is written with its signal at ingestion; a redelivered
# message whose last decision was "redeliver" opens the next, requesting again the labels that
# did not succeed, with a new deadline. A table, not a view over signals: the planner knows how
# many attempts a join finds (a constant attempt 1 in a UNION ALL has no statistics). A hot
# append-only child of signals, so no foreign key (see above).
attempts = Table(
    "attempts",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("requested_acks", ARRAY(Text), nullable=False),
    _timestamp("opened_at"),
    Column("deadline_at", TIMESTAMP(timezone=True), nullable=False),
    PrimaryKeyConstraint("signal_id", "attempt"),
    CheckConstraint("attempt > 0", name="attempt"),
    CheckConstraint("deadline_at >= opened_at", name="deadline"),
)

# What the requester of an attempt is told, once decided: its status and body as decided (A.2.4),
# and its headers — or NULL for the headers of an aggregated answer, which are the command's own
# (without requested-acks, with response-required false: Request.aggregated_headers) and follow
# from the signal, so the view request_answers derives them; the sweep's SQL writes them so.
request_results = Table(
    "request_results",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    _status(),
    Column("body", JSONB, nullable=True),  # SQL NULL: no body
    Column("headers", JSONB, nullable=True),  # SQL NULL: the command's own, as aggregated (request_answers)
    Column("cause", Text, nullable=False),
    # label -> status of every entry an aggregated decision counted (408 placeholders too);
    # {} for a plain response, an error or command.timeout. Settlement reads it (B.9).
    Column("ack_statuses", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _timestamp("decided_at"),
    # The sweep batch that decided it: the validation gate's slice is the batches past its
    # watermark, read through this BRIN index (batches only grow).
    Column("batch_id", BigInteger, nullable=False),
    PrimaryKeyConstraint("signal_id", "attempt"),
    CheckConstraint("status BETWEEN 100 AND 599", name="status"),
    CheckConstraint(_in("cause", RESULT_CAUSES), name="cause"),
    CheckConstraint("attempt > 0", name="attempt"),
)
Index("ix_request_results_batch_id", request_results.c.batch_id, postgresql_using="brin")

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

# One row per thing per index batch: the revisions (from_revision, to_revision] the index reached.
# search-persisted of a command is derived from the mark that covers its revision.
search_marks = Table(
    "search_marks",
    metadata,
    Column("thing_id", Text, nullable=False),
    Column("from_revision", BigInteger, nullable=False),  # the index's watermark before (0: never indexed)
    Column("to_revision", BigInteger, nullable=False),
    Column("batch_id", BigInteger, nullable=False),
    Column("changed", Boolean, nullable=False),  # false: the index already held this state (a weak 200)
    PrimaryKeyConstraint("thing_id", "to_revision"),
    CheckConstraint("to_revision > from_revision AND from_revision >= 0", name="revisions"),
)

# One transport decision per attempt of a signal from a connection (B.9); the connector that
# holds the delivery carries it out and records when. Only a decided attempt can be settled.
settlements = Table(
    "settlements",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),  # write order: validation reads new ones
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("decision", Text, nullable=False),
    _timestamp("decided_at"),
    Column("carried_out_at", TIMESTAMP(timezone=True), nullable=True),
    PrimaryKeyConstraint("signal_id", "attempt"),
    UniqueConstraint("id"),
    CheckConstraint(_in("decision", SETTLEMENT_DECISIONS), name="decision"),
    CheckConstraint("attempt > 0", name="attempt"),
)
Index("ix_settlements_not_carried_out", settlements.c.signal_id, postgresql_where=text("carried_out_at IS NULL"))

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

# One row per signal handed (or, for live signals, to be handed) to a subscriber (A.3). The
# pending ones (done_at IS NULL) are what a pull reads; each hand-out increments handouts, and
# the lease token of hand-out n is a MAC of n under the row's secret key, so a superseded token
# is recognised as such and a foreign one as invalid.
deliveries = Table(
    "deliveries",
    metadata,
    Column("subscriber_id", Text, ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
    Column("signal_id", BigInteger, ForeignKey("signals.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),  # the request's attempt handed out
    Column("event_id", BigInteger, nullable=True),  # the twin event handed out; NULL for a live signal
    Column("token_key", Text, nullable=False),
    Column("handouts", Integer, nullable=False, server_default=text("0")),  # the delivery count
    Column("available_at", TIMESTAMP(timezone=True), nullable=False),  # ready from, or the lease's end
    Column("leased_at", TIMESTAMP(timezone=True), nullable=True),
    Column("done_at", TIMESTAMP(timezone=True), nullable=True),  # answered, or nothing to answer
    Column("answered_handout", Integer, nullable=True),  # the hand-out whose token answered it
    Column("answered_labels", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),  # by that token
    PrimaryKeyConstraint("subscriber_id", "signal_id"),
    CheckConstraint("handouts >= 0 AND attempt > 0", name="counts"),
    CheckConstraint("answered_handout IS NULL OR answered_handout BETWEEN 1 AND handouts", name="answered"),
)
Index("ix_deliveries_pending", deliveries.c.subscriber_id, deliveries.c.signal_id,
      postgresql_where=text("done_at IS NULL"))
Index(None, deliveries.c.signal_id)

# --- work queues: each holds only pending work, so a run's cost follows the new work -----------
# (architecture.md, "Growth"). A step reads its queue and, in its merge transaction, deletes
# what it finished and fills the next step's queue.

queue_apply = Table(  # twin commands not yet applied
    "queue_apply",
    metadata,
    Column("signal_id", BigInteger, primary_key=True),
)

queue_index = Table(  # things changed since they were indexed, up to this revision
    "queue_index",
    metadata,
    Column("thing_id", Text, primary_key=True),
    Column("revision", BigInteger, nullable=False),
)

queue_decide = Table(  # requests whose current attempt is not decided yet
    "queue_decide",
    metadata,
    Column("signal_id", BigInteger, primary_key=True),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
)


queue_settle = Table(  # validated, from a connection: needs a transport decision
    "queue_settle",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    PrimaryKeyConstraint("signal_id", "attempt"),
)

# One row per pass of the validation gate that passed results: the last sweep batch it passed and
# when — the "validated" checkpoint of a signal's timeline (A.3). A row per run, none per signal.
validation_passes = Table(
    "validation_passes",
    metadata,
    Column("results_upto", BigInteger, primary_key=True),
    Column("run_id", Text, nullable=True),  # NULL: recorded by migration 0009 for what had passed before
    _timestamp("passed_at"),
)

# Positions of steps that read an append-only table in order: validate's, the last result batch
# and settlement id it passed (what is decided but not validated is past them: awaiting_validation()).
pipeline_watermarks = Table(
    "pipeline_watermarks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", BigInteger, nullable=False),
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
    Column("attempt", Integer, nullable=False),
    _status(),
    Column("body", JSONB, nullable=True),
    Column("headers", JSONB, nullable=False),
    Column("cause", Text, nullable=False),
    Column("ack_statuses", JSONB, nullable=False),
    Column("acks_seen", Integer, nullable=False),  # in-time counted acks the decision was made on
)
Index(None, stage_results.c.run_id)

stage_weak_acks = _staging(
    "stage_weak_acks",
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("label", Text, nullable=False),
    Column("headers", JSONB, nullable=False),
    Column("reason", Text, nullable=False),  # the weak ack's payload: why nobody receives it
)
Index(None, stage_weak_acks.c.run_id)

stage_settlements = _staging(
    "stage_settlements",
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("decision", Text, nullable=True),  # NULL: no transport settlement (not from a connection)
)
Index(None, stage_settlements.c.run_id)

STAGING_TABLES = (
    stage_twin_outcomes,
    stage_search_things,
    stage_search_rows,
    stage_weak_acks,
    stage_results,
    stage_settlements,
)


LEDGER_TABLES = (
    signals,
    subscribers,
    declared_labels,
    deliveries,
    acks,
    ledger_batches,
    command_responses,
    attempts,
    request_results,
    things,
    search_index,
    search_things,
    search_marks,
    settlements,
    pipeline_runs,
    queue_apply,
    queue_index,
    queue_decide,
    queue_settle,
    pipeline_watermarks,
    validation_passes,
)


# --- views every statement shares: one place for each rule ------------------------------------

LEDGER_VIEWS: dict[str, str] = {
    # A signal's current attempt: its newest. (Any attempt, by its number: the table attempts; one
    # signal's, by its key: the function current_attempt_of.)
    "current_attempts": """
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
WHERE NOT EXISTS (SELECT 1 FROM attempts later WHERE later.signal_id = a.signal_id AND later.attempt > a.attempt)
""",
    # The event log subscribers read (A.3, B.1): a persisted change of a twin command, in the
    # command's words. Its headers are the command's with only its custom requested-acks; the
    # built-in labels are spelled out (a view takes no parameters: ackstore.rules.labels).
    "thing_events": """
SELECT r.event_id AS id, s.thing_id, r.revision, r.signal_id, r.event_action AS action, s.path,
       CASE WHEN r.event_action = 'deleted' THEN NULL ELSE s.value END AS value,
       s.headers || jsonb_build_object('requested-acks', to_jsonb(ARRAY(
           SELECT u.label FROM unnest(s.requested_acks) WITH ORDINALITY AS u(label, n)
           WHERE u.label <> ALL (ARRAY['twin-persisted', 'search-persisted', 'live-response']) ORDER BY u.n))) AS headers,
       b.committed_at AS created_at
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches b ON b.id = r.batch_id
WHERE r.event_id IS NOT NULL
""",
    # What makes each built-in ack of a twin command true, and when it became visible (its batch's
    # commit, A.2.1), one row per command whose change persisted: twin-persisted is the change
    # apply_twin persisted; search-persisted the index reaching the command's revision — a weak 200
    # when it already held that state (B.8, B.11). Responses from before the lean ledger (batch
    # 'migrated') kept their twin-persisted acks as rows: no fact time here. Joins only (no UNION),
    # so a statement joining it from a few requests reads their rows alone.
    "command_facts": """
SELECT r.signal_id, s.correlation_id,
       CASE WHEN rb.step = 'apply_twin' THEN rb.committed_at END AS persisted_at, r.status AS persisted_status,
       r.payload AS persisted_payload,
       mb.committed_at AS indexed_at, CASE WHEN m.changed THEN 204 ELSE 200 END AS indexed_status,
       CASE WHEN NOT m.changed
            THEN to_jsonb('The search index already held this state of the thing: nothing needed writing.'::text)
       END AS indexed_payload,
       NOT m.changed AS indexed_weak
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches rb ON rb.id = r.batch_id
LEFT JOIN search_marks m ON m.thing_id = s.thing_id AND m.from_revision < r.revision AND r.revision <= m.to_revision
LEFT JOIN ledger_batches mb ON mb.id = m.batch_id
WHERE r.event_id IS NOT NULL
""",
    # The same facts, one row per (command, built-in label) that is true.
    "builtin_facts": """
SELECT c.signal_id, c.correlation_id, f.label, f.status, f.payload, f.weak, f.fact_at
FROM command_facts c
CROSS JOIN LATERAL (VALUES
    ('twin-persisted'::text, c.persisted_status, c.persisted_payload, false, c.persisted_at),
    ('search-persisted'::text, c.indexed_status, c.indexed_payload, c.indexed_weak, c.indexed_at)
) AS f(label, status, payload, weak, fact_at)
WHERE f.fact_at IS NOT NULL
""",
    # The built-in acks of every attempt that requested them, as if stored (A.2.10), each with its
    # disposition (the function builtin_disposition: counted, late, or not this attempt's).
    "builtin_acks": """
SELECT f.signal_id, a.attempt, f.label, f.status, f.payload,
       jsonb_build_object('correlation-id', f.correlation_id)
           || CASE WHEN f.weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END AS headers,
       'ackstore'::text AS issuer, f.weak, f.fact_at AS received_at, d.disposition
FROM builtin_facts f
JOIN attempts a ON a.signal_id = f.signal_id AND f.label = ANY (a.requested_acks)
LEFT JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
LEFT JOIN attempts later ON later.signal_id = a.signal_id AND later.attempt = a.attempt + 1
CROSS JOIN LATERAL (SELECT builtin_disposition(f.fact_at, a.opened_at, a.deadline_at, r.decided_at, r.cause,
                                               later.opened_at) AS disposition) d
WHERE d.disposition IS NOT NULL
""",
    # What the requester of each decided attempt is told (A.2.4): the stored answer, its headers
    # derived when they are an aggregated answer's (request_results.headers NULL) — the command's
    # own without requested-acks, with its correlation id and response-required false, as
    # aggregation.Request.aggregated_headers gives them (tests/test_sweep_decisions.py). Every
    # reader of an answer reads it here.
    "request_answers": """
SELECT r.signal_id, r.attempt, r.status, r.body,
       COALESCE(r.headers, (s.headers - 'requested-acks')
                           || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false))
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s ON s.id = r.signal_id AND r.headers IS NULL
""",
    # Every ack of every request: the stored ones (custom, weak, live responses, and built-in acks
    # from before the lean ledger) and the derived built-in ones (no id: they are not rows).
    "request_acks": """
SELECT k.id, k.signal_id, k.attempt, k.label, k.status, k.payload, k.headers, k.issuer, k.weak, k.received_at,
       k.disposition, k.reason
FROM acks k
UNION ALL
SELECT NULL::bigint, b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak,
       b.received_at, b.disposition, NULL::text
FROM builtin_acks b
""",
}

# Tables whose statistics a merge refreshes when it grew them (refresh_statistics below).
MERGED_TABLES = (command_responses, things, queue_apply, queue_index, search_index, search_things, search_marks, acks,
                 request_results, queue_decide, settlements, queue_settle, *STAGING_TABLES)


# Functions every statement shares (the SQL ones PostgreSQL inlines: no call per row).
LEDGER_FUNCTIONS: dict[str, str] = {
    # Statistics for what a merge just wrote, so that the next statement or step plans a backlog
    # as one (hash joins) and a minute's work as one (index look-ups): ANALYZE a table the merge
    # grew by a tenth or more (10 000 rows at least; per-minute runs never pay for it). ANALYZE
    # reads a fixed sample, whatever the table's size. SECURITY DEFINER: only a table's owner may
    # analyze it, and the pipeline's role owns none; the tables it may name are listed here.
    "refresh_statistics": f"""
CREATE FUNCTION refresh_statistics(target text, written bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  known real := (SELECT c.reltuples FROM pg_class c WHERE c.oid = to_regclass(target));
BEGIN
  IF target <> ALL (ARRAY[{", ".join(repr(table.name) for table in MERGED_TABLES)}]) THEN
    RAISE EXCEPTION 'refresh_statistics: % is not a table a merge writes', target;
  END IF;
  IF written < 10000 OR (known > 0 AND written * 10 < known) THEN
    RETURN false;
  END IF;
  EXECUTE format('ANALYZE %I', target);
  RETURN true;
END
$$""",

    # How a built-in fact counts for an attempt that requested its label (A.2.5, A.2.10): counted
    # if it came before the attempt opened or while it waited in time; late if the attempt was
    # decided before it, or timed out (or failed) before it; NULL if there is no fact, or the next
    # attempt had opened by then (that attempt counts it). ackstore.rules.acks's
    # disposition_on_arrival, for facts. PARALLEL SAFE, as ack_entry and ack_entry_headers are:
    # the planner judges a query's parallel safety before it inlines them, and one function left
    # unsafe kept the gate's query over a backlog on one core.
    "builtin_disposition": """
CREATE FUNCTION builtin_disposition(fact_at timestamptz, opened_at timestamptz, deadline_at timestamptz,
                                    decided_at timestamptz, cause text, next_opened_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN fact_at IS NULL OR next_opened_at <= fact_at THEN NULL
            WHEN fact_at < opened_at THEN 'counted'
            WHEN decided_at < fact_at OR (cause IN ('deadline', 'error') AND fact_at > deadline_at) THEN 'late'
            ELSE 'counted' END
$$""",
    # Decided requests the validation gate has not passed yet: their sweep batch is past its
    # watermark (jobs/validate.py names it). A function, not a view: it reads the watermark first
    # and plans the slice with its value, and callers plan with its ROWS (the few requests of a
    # run) — a view's sub-select would be guessed a third of all results, and joined by scans.
    "awaiting_validation": """
CREATE FUNCTION awaiting_validation() RETURNS TABLE (signal_id bigint, attempt integer)
LANGUAGE plpgsql STABLE ROWS 1000 AS $$
DECLARE
  passed bigint := COALESCE((SELECT w.position FROM pipeline_watermarks w WHERE w.name = 'validated_results'), 0);
BEGIN
  RETURN QUERY EXECUTE 'SELECT r.signal_id, r.attempt FROM request_results r WHERE r.batch_id > $1' USING passed;
END
$$""",
    # The headers of such an entry: the ack's own without requested-acks (and without the default
    # content-type), its request's correlation id, and ditto-weak-ack for a weak ack.
    "ack_entry_headers": """
CREATE FUNCTION ack_entry_headers(headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN headers = '{}' AND weak THEN jsonb_build_object('correlation-id', correlation_id, 'ditto-weak-ack', true)
            WHEN headers = '{}' THEN jsonb_build_object('correlation-id', correlation_id)
            ELSE CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                      THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
                 || jsonb_build_object('correlation-id', correlation_id)
                 || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END END
$$""",
    # An ack as an aggregated answer's entry shows it (B.4.2, B.4.3): wire.ack_entry and
    # wire.external_headers in SQL, for the sweep's decisions. One jsonb_build_object per level and
    # no || when the ack carries no headers of its own (every built-in ack but a created thing's
    # twin-persisted): each || decodes and re-encodes both sides, and the sweep writes this twice per
    # request. STABLE, as jsonb_build_object is: an IMMUTABLE function over it would not be inlined
    # (5× slower).
    "ack_entry": """
CREATE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN payload IS NULL
            THEN jsonb_build_object('status', status, 'headers', ack_entry_headers(headers, weak, correlation_id))
            ELSE jsonb_build_object('status', status, 'payload', payload,
                                    'headers', ack_entry_headers(headers, weak, correlation_id)) END
$$""",
}


# --- report views (README, "Reports"): one per question an auditor asks -------------------------
# The audit reads the work queues, which hold only pending work, and the settlements not carried
# out (a partial index), so it stays cheap however long the history grows; the status view's
# decided / carried-out counts tally all of settlements, by design. Which signals need a
# transport settlement is the SQL function needs_transport_settlement (REPORT_FUNCTIONS below:
# ackstore.rules.settlement's rule, in SQL), which PostgreSQL inlines.

REPORT_VIEWS: dict[str, str] = {
    # Per source: requests waiting for a settlement decision, decisions not carried out yet,
    # decisions carried out — by decision.
    "report_settlement_status": """
SELECT s.source, 'pending decision'::text AS status, NULL::text AS decision,
       count(*) AS requests, min(s.received_at) AS oldest
FROM (SELECT signal_id FROM queue_decide
      UNION SELECT signal_id FROM awaiting_validation()
      UNION SELECT signal_id FROM queue_settle) p
JOIN signals s ON s.id = p.signal_id
WHERE needs_transport_settlement(s.api, s.source)
GROUP BY s.source
UNION ALL
SELECT s.source, CASE WHEN st.carried_out_at IS NULL THEN 'decided' ELSE 'carried out' END,
       st.decision, count(*), min(st.decided_at)
FROM settlements st
JOIN signals s ON s.id = st.signal_id
GROUP BY s.source, 2, st.decision
""",
    # The QoS-1 audit: every signal received but not yet answered (API, CLI) or not yet settled
    # (connections), oldest first, with its age and the checkpoint it is stuck before.
    "report_qos1_audit": """
SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail,
       received_at, now() - received_at AS age
FROM (
    SELECT DISTINCT ON (w.signal_id) w.signal_id, s.correlation_id, s.source, s.source_message_id,
           w.attempt, w.stuck_at, w.detail, s.received_at
    FROM (
        SELECT q.signal_id, 1 AS attempt, 1 AS stage, 'apply: the twin change is not persisted yet'::text AS stuck_at,
               NULL::text AS detail
        FROM queue_apply q
        UNION ALL
        SELECT q.signal_id, q.attempt, 2, 'decide: waiting for acks or the deadline',
               'missing: ' || COALESCE((
                   SELECT string_agg(l.label, ', ' ORDER BY l.n)
                   FROM unnest(a.requested_acks) WITH ORDINALITY AS l(label, n)
                   WHERE NOT EXISTS (SELECT 1 FROM request_acks k
                                     WHERE k.signal_id = q.signal_id AND k.attempt = q.attempt
                                       AND k.label = l.label AND k.disposition = 'counted')), 'nothing')
               || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
        FROM queue_decide q
        JOIN attempts a ON a.signal_id = q.signal_id AND a.attempt = q.attempt
        UNION ALL
        SELECT q.signal_id, q.attempt, 3, 'validate: decided, waiting for the validation gate', NULL
        FROM awaiting_validation() q
        JOIN signals s ON s.id = q.signal_id
        WHERE needs_transport_settlement(s.api, s.source)
        UNION ALL
        SELECT q.signal_id, q.attempt, 4, 'settle: validated, waiting for a settlement decision', NULL
        FROM queue_settle q
        UNION ALL
        SELECT st.signal_id, st.attempt, 5, 'connector: decided, not carried out yet', st.decision
        FROM settlements st
        WHERE st.carried_out_at IS NULL
    ) w
    JOIN signals s ON s.id = w.signal_id
    ORDER BY w.signal_id, w.stage
) stuck
ORDER BY received_at, signal_id
""",
    # Every checkpoint of every signal, each with its time (A.3): received (stored: one
    # transaction), each attempt opened, applied (its apply batch's commit), indexed, each ack with
    # its disposition, decided, validated (the gate's pass), settlement decided, carried out.
    # ``stage`` orders checkpoints of the same time as a signal lives them. Read per signal: every
    # branch is reached through the signal's keys (tests/test_bounded.py).
    "signal_timeline": """
SELECT t.signal_id, t.attempt, t.at, t.stage, t.checkpoint, t.label, t.status, t.detail
FROM (
    SELECT s.id AS signal_id, 1 AS attempt, s.received_at AS at, 1 AS stage, 'received'::text AS checkpoint,
           NULL::text AS label, NULL::integer AS status,
           'from ' || s.source || ', message ' || s.source_message_id AS detail
    FROM signals s
    UNION ALL
    SELECT a.signal_id, a.attempt, a.opened_at, 2, 'attempt opened', NULL, NULL,
           'requested ' || COALESCE(NULLIF(array_to_string(a.requested_acks, ', '), ''), 'nothing')
           || '; deadline ' || to_char(a.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
    FROM attempts a
    UNION ALL
    SELECT r.signal_id, NULL, b.committed_at, 3, 'applied', NULL, r.status,
           CASE WHEN r.event_action IS NOT NULL THEN r.event_action || ', revision ' || r.revision
                WHEN r.is_error THEN 'failed' ELSE 'nothing changed' END
    FROM command_responses r
    JOIN ledger_batches b ON b.id = r.batch_id
    UNION ALL
    SELECT f.signal_id, NULL, f.indexed_at, 4, 'indexed', NULL, f.indexed_status,
           CASE WHEN f.indexed_weak THEN 'the index already held this state' END
    FROM command_facts f
    WHERE f.indexed_at IS NOT NULL
    UNION ALL
    SELECT k.signal_id, k.attempt, k.received_at, 5, 'ack', k.label, k.status,
           k.disposition || CASE WHEN k.weak THEN ', weak' ELSE '' END || ', from ' || k.issuer
    FROM request_acks k
    UNION ALL
    SELECT r.signal_id, r.attempt, r.decided_at, 6, 'decided', NULL, r.status, 'by ' || r.cause
    FROM request_results r
    UNION ALL
    SELECT r.signal_id, r.attempt, p.passed_at, 7, 'validated', NULL, NULL,
           CASE WHEN p.run_id IS NULL THEN 'at the latest: passes before migration 0009 were not timed' END
    FROM request_results r
    CROSS JOIN LATERAL (SELECT v.passed_at, v.run_id FROM validation_passes v WHERE v.results_upto >= r.batch_id
                        ORDER BY v.results_upto LIMIT 1) p
    UNION ALL
    SELECT st.signal_id, st.attempt, st.decided_at, 8, 'settlement decided', NULL, NULL, st.decision
    FROM settlements st
    UNION ALL
    SELECT st.signal_id, st.attempt, st.carried_out_at, 9, 'carried out', NULL, NULL, st.decision
    FROM settlements st
    WHERE st.carried_out_at IS NOT NULL
) t
""",
}


# --- windowed reports (README, "Reports"): a signal's path, read for the signals of a window -----
# Every windowed report reads the signals received in [since, until) — by received_at's BRIN
# index — and reaches each one's facts by its keys, so its cost follows the window, never the
# history (tests/test_bounded.py): by LATERAL sub-selects (a LIMIT or OFFSET keeps PostgreSQL from
# turning one into a join, which it plans over a window of thousands as a hash join over a whole
# table). Functions, not views: a view cannot take the window, and a
# filter on a grouped view is applied after the grouping. LANGUAGE sql and STABLE, so PostgreSQL
# inlines each into the statement calling it and plans it with the window's values.

# Index on signals.received_at for the window (migration 0010): signals arrive in time order.
Index("ix_signals_received_at", signals.c.received_at, postgresql_using="brin")

REPORT_FUNCTIONS: dict[str, str] = {
    # Whether a signal's source needs a transport settlement (B.9): a connection's, not the API's or
    # the CLI's. ackstore.rules.settlement.needs_transport_settlement, in SQL (a test compares them).
    "needs_transport_settlement": """
CREATE FUNCTION needs_transport_settlement(api text, source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT api = 'connectivity' AND source NOT IN ('api', 'cli')
$$""",
    # Where a signal's current attempt stands on its way to settlement: 'settled' (answered, for
    # the API and the CLI; for a connection, acked or rejected on the broker), else why not —
    # 'undecided', 'settlement undecided', 'redeliver', 'dead-letter', 'not carried out'.
    "settlement_state": """
CREATE FUNCTION settlement_state(needs_transport boolean, decided boolean, decision text,
                                 carried_out_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN NOT decided THEN 'undecided'
            WHEN NOT needs_transport THEN 'settled'
            WHEN decision IS NULL THEN 'settlement undecided'
            WHEN decision IN ('redeliver', 'dead-letter') THEN decision
            WHEN carried_out_at IS NULL THEN 'not carried out'
            ELSE 'settled' END
$$""",
    # A signal's current attempt (the view current_attempts), reached by the signal's key: a join
    # with the view over a window of thousands is planned as a hash join over every attempt.
    "current_attempt_of": """
CREATE FUNCTION current_attempt_of(signal bigint)
RETURNS SETOF attempts LANGUAGE sql STABLE AS $$
SELECT a.* FROM attempts a WHERE a.signal_id = signal ORDER BY a.attempt DESC LIMIT 1
$$""",
    # The window every windowed report reads: signals received in [since, until), of one source or all.
    # MATERIALIZED: found by the received_at index on its own — left to the whole statement, a
    # report's ORDER BY and LIMIT make an index in that order look cheaper, read from the start.
    "signals_received": """
CREATE FUNCTION signals_received(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (id bigint, source text, source_message_id text, correlation_id text, api text,
               received_at timestamptz, response_required boolean, timeout_ms bigint)
LANGUAGE sql STABLE AS $$
WITH window_signals AS MATERIALIZED (
    SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.api, s.received_at, s.response_required,
           s.timeout_ms
    FROM signals s
    WHERE s.received_at >= since AND s.received_at < until AND (only_source IS NULL OR s.source = only_source)
)
SELECT w.id, w.source, w.source_message_id, w.correlation_id, w.api, w.received_at, w.response_required,
       w.timeout_ms
FROM window_signals w
$$""",
    # Each signal of the window on its path: its current attempt's decision and settlement.
    "signal_paths": """
CREATE FUNCTION signal_paths(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, source text, source_message_id text, correlation_id text,
               received_at timestamptz, attempt integer, decided_at timestamptz, settlement_decided_at timestamptz,
               carried_out_at timestamptz, settled text)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.received_at, a.attempt, r.decided_at,
       st.decided_at, st.carried_out_at,
       settlement_state(needs_transport_settlement(s.api, s.source), r.decided_at IS NOT NULL, st.decision,
                        st.carried_out_at)
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN LATERAL (SELECT x.decided_at FROM request_results x
                   WHERE x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT x.decision, x.decided_at, x.carried_out_at FROM settlements x
                   WHERE needs_transport_settlement(s.api, s.source)  -- else there is none: no look-up
                     AND x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) st ON true
$$""",
    # Per source and time bucket (by received_at, from midnight UTC): how long the signals took
    # from one checkpoint to the next — p50, p95 and p99 in seconds over those that reached both;
    # ``signals`` counts the bucket's signals, ``measured`` those that reached both checkpoints.
    # A measure no signal reached is left out, except received_to_decided. Grouped once per bucket
    # (one sort per measure), then one row per measure.
    "report_latency": """
CREATE FUNCTION report_latency(since timestamptz, until timestamptz, bucket interval, only_source text)
RETURNS TABLE (source text, bucket_start timestamptz, measure text, signals bigint, measured bigint,
               p50 double precision, p95 double precision, p99 double precision)
LANGUAGE sql STABLE AS $$
WITH spans AS (
    SELECT p.source, date_bin(bucket, p.received_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket_start,
           extract(epoch FROM p.decided_at - p.received_at)::float8 AS received_to_decided,
           extract(epoch FROM p.settlement_decided_at - p.decided_at)::float8 AS decided_to_settlement_decided,
           extract(epoch FROM p.carried_out_at - p.decided_at)::float8 AS decided_to_carried_out,
           extract(epoch FROM p.carried_out_at - p.received_at)::float8 AS received_to_carried_out
    FROM signal_paths(since, until, only_source) p
), per_bucket AS (
    SELECT x.source, x.bucket_start, count(*) AS signals,
           count(x.received_to_decided) AS n1,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_decided) AS q1,
           count(x.decided_to_settlement_decided) AS n2,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_settlement_decided) AS q2,
           count(x.decided_to_carried_out) AS n3,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.decided_to_carried_out) AS q3,
           count(x.received_to_carried_out) AS n4,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY x.received_to_carried_out) AS q4
    FROM spans x
    GROUP BY x.source, x.bucket_start
)
SELECT b.source, b.bucket_start, m.measure, b.signals, m.measured, m.q[1], m.q[2], m.q[3]
FROM per_bucket b
CROSS JOIN LATERAL (VALUES (1, 'received_to_decided', b.n1, b.q1), (2, 'decided_to_settlement_decided', b.n2, b.q2),
                           (3, 'decided_to_carried_out', b.n3, b.q3), (4, 'received_to_carried_out', b.n4, b.q4)
) AS m(n, measure, measured, q)
WHERE m.n = 1 OR m.measured > 0
ORDER BY b.source, b.bucket_start, m.n
$$""",
    # Cumulative acknowledgement per source (as AMPS and Solace report it), within the window: the
    # last signal (in received order) up to which every signal of the source is settled, and how
    # many are not — all of them after it. report_unsettled lists those.
    "report_watermarks": """
CREATE FUNCTION report_watermarks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signals bigint, settled bigint, unsettled bigint, watermark_signal_id bigint,
               watermark_message_id text, watermark_received_at timestamptz)
LANGUAGE sql STABLE AS $$
WITH paths AS MATERIALIZED (
    SELECT p.signal_id, p.source, p.settled = 'settled' AS settled FROM signal_paths(since, until, only_source) p
), per_source AS (
    SELECT p.source, count(*) AS signals, count(*) FILTER (WHERE p.settled) AS settled,
           min(p.signal_id) FILTER (WHERE NOT p.settled) AS first_unsettled
    FROM paths p
    GROUP BY p.source
), marks AS (  -- a second pass, whatever the number of sources
    SELECT f.source, max(p.signal_id) AS signal_id
    FROM per_source f
    JOIN paths p ON p.source = f.source AND (f.first_unsettled IS NULL OR p.signal_id < f.first_unsettled)
    GROUP BY f.source
)
SELECT f.source, f.signals, f.settled, f.signals - f.settled, m.signal_id, s.source_message_id, s.received_at
FROM per_source f
LEFT JOIN marks m ON m.source = f.source
LEFT JOIN signals s ON s.id = m.signal_id
ORDER BY f.source
$$""",
    # The signals of the window not settled, by source in received order, with why.
    "report_unsettled": """
CREATE FUNCTION report_unsettled(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signal_id bigint, correlation_id text, source_message_id text, received_at timestamptz,
               attempt integer, why text)
LANGUAGE sql STABLE AS $$
SELECT p.source, p.signal_id, p.correlation_id, p.source_message_id, p.received_at, p.attempt, p.settled
FROM signal_paths(since, until, only_source) p
WHERE p.settled <> 'settled'
ORDER BY p.source, p.signal_id
$$""",
    # Acks of the window's signals that came after their attempt was decided — or after its deadline,
    # when the deadline decided it (builtin_disposition's two clauses): how late, what was answered,
    # and what the attempt had counted, for ackstore.rules.aggregation to say what the ack would
    # have changed (ackstore/ledger/reports.py).
    "report_late_acks": """
CREATE FUNCTION report_late_acks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, correlation_id text, source text, attempt integer, label text, status smallint,
               issuer text, weak boolean, received_at timestamptz, late_by interval, answered smallint, cause text,
               api text, requested_acks text[], response_required boolean, timeout_ms bigint, counted jsonb)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.correlation_id, s.source, k.attempt, k.label, k.status, k.issuer, k.weak, k.received_at,
       k.received_at - LEAST(r.decided_at, CASE WHEN r.cause IN ('deadline', 'error') THEN a.deadline_at END),
       r.status, r.cause, s.api, a.requested_acks, s.response_required, s.timeout_ms, c.counted
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL (SELECT x.* FROM request_acks x WHERE x.signal_id = s.id AND x.disposition = 'late' OFFSET 0) k
CROSS JOIN LATERAL (SELECT x.deadline_at, x.requested_acks FROM attempts x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) a
CROSS JOIN LATERAL (SELECT x.decided_at, x.status, x.cause FROM request_results x
                    WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt LIMIT 1) r
CROSS JOIN LATERAL (
    SELECT COALESCE(jsonb_agg(jsonb_build_object('label', x.label, 'status', x.status, 'weak', x.weak)
                              ORDER BY x.received_at), '[]'::jsonb) AS counted
    FROM request_acks x WHERE x.signal_id = k.signal_id AND x.attempt = k.attempt AND x.disposition = 'counted'
) c
ORDER BY k.received_at, s.id, k.label
$$""",
    # Per label and issuer, over the decided attempts of the window that requested the label (not
    # those a failed command decided: it discards every ack, A.2.7): how each was answered — the
    # status the decision counted, or the ack counted, else 408 (none arrived: issuer '(none
    # arrived)') — and the p95 of the time from the attempt's opening to its counted ack (0 for a
    # fact that came before the attempt opened).
    "report_labels": """
CREATE FUNCTION report_labels(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (label text, issuer text, answered bigint, ok bigint, weak bigint, client_errors bigint,
               timeouts bigint, server_errors bigint, p95_seconds double precision)
LANGUAGE sql STABLE AS $$
SELECT e.label, COALESCE(k.issuer, '(none arrived)'), count(*),
       count(*) FILTER (WHERE e.status BETWEEN 200 AND 299 AND NOT COALESCE(k.weak, false)),
       count(*) FILTER (WHERE k.weak),
       count(*) FILTER (WHERE e.status BETWEEN 400 AND 499 AND e.status <> 408),
       count(*) FILTER (WHERE e.status = 408),
       count(*) FILTER (WHERE e.status >= 500),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM k.received_at
                                                                         - LEAST(a.opened_at, k.received_at))::float8)
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL (SELECT x.signal_id, x.attempt, x.ack_statuses FROM request_results x
                    WHERE x.signal_id = s.id AND x.cause <> 'error' OFFSET 0) r
CROSS JOIN LATERAL (SELECT x.opened_at, x.requested_acks FROM attempts x
                    WHERE x.signal_id = r.signal_id AND x.attempt = r.attempt LIMIT 1) a
CROSS JOIN LATERAL unnest(a.requested_acks) AS l(label)
LEFT JOIN LATERAL (SELECT x.issuer, x.weak, x.received_at, x.status FROM request_acks x
                   WHERE x.signal_id = r.signal_id AND x.attempt = r.attempt AND x.label = l.label
                     AND x.disposition = 'counted'
                   LIMIT 1) k ON true
CROSS JOIN LATERAL (SELECT l.label, COALESCE((r.ack_statuses ->> l.label)::integer, k.status, 408) AS status) e
GROUP BY 1, 2
ORDER BY 1, 2
$$""",
}
