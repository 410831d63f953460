"""The ledger's PostgreSQL tables: every table, constraint and index, in one place.

The views, functions and triggers over them are SQL, in ``sql/objects/`` (``objects.py``). The
schema changes only through an Alembic migration (``migrations/versions``); tests check that
replaying the migrations gives exactly these tables, and exactly the objects of those files.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Numeric,
    LargeBinary,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP

from ackstore.rules.acks import Disposition
from ackstore.rules.envelopes import SIGNAL_KINDS, SIGNAL_SHAPES
from ackstore.rules.labels import CHANNELS

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

BATCH_STEPS = ("apply_twin", "index_search", "sweep", "migrated")
ACK_DISPOSITIONS = tuple(disposition.value for disposition in Disposition)
RESULT_CAUSES = ("acks", "deadline", "error", "response", "accepted")
SETTLEMENT_DECISIONS = ("ack", "reject", "redeliver", "dead-letter")
EVENT_ACTIONS = ("created", "modified", "merged", "deleted")
INDEX_VALUE_TYPES = ("string", "number", "boolean", "null", "object", "array")


def _in(column: str, values: tuple[str, ...]) -> str:
    """A CHECK clause ``column IN (...)`` over fixed literals (never user input)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _signal_shapes() -> str:
    """A CHECK clause: each kind of signal on its channel, with an action ingestion takes for it
    (envelopes.SIGNAL_SHAPES; migration 0024 spells it out as of its revision)."""
    def shape(kind: str, channel: str, actions: tuple[str, ...] | None) -> str:
        action = _in("action", actions) if actions else "action <> ''"
        return f"kind = '{kind}' AND channel = '{channel}' AND {action}"
    return " OR ".join(f"({shape(kind, *allowed)})" for kind, allowed in SIGNAL_SHAPES.items())


def _timestamp(name: str, *, nullable: bool = False, default_now: bool = True) -> Column:
    return Column(
        name, TIMESTAMP(timezone=True), nullable=nullable, server_default=func.now() if default_now else None
    )


def _status(name: str = "status") -> Column:
    return Column(name, SmallInteger, nullable=False)


# Every fact the ledger records has a place in one order across its tables, ``seq``: a seal covers
# the facts of an interval of it (issue 28, decisions #101). A fact is numbered when it is final —
# written, for all but a settlement, which is numbered when carried out.
ledger_seq = Sequence("ledger_seq", metadata=metadata)


def _seq(*, when_written: bool = True) -> Column:
    return Column("seq", BigInteger, nullable=not when_written,
                  server_default=ledger_seq.next_value() if when_written else None)


def _seq_index(table: Table) -> None:
    """Seals read their interval of each table; BRIN, as facts are appended in ``seq`` order."""
    Index(f"ix_{table.name}_seq", table.c.seq, postgresql_using="brin")


# A signal row never changes after ingestion; its checkpoints (A.3) are rows in other tables:
# persisted/failed in command_responses, decided in request_results, settled in settlements
# (where it stands: the SQL function signal_state).
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
    _seq(),
    UniqueConstraint("source", "source_message_id"),
    UniqueConstraint("correlation_id"),
    CheckConstraint(_in("api", ("http", "websocket", "connectivity")), name="api"),
    CheckConstraint(_in("channel", CHANNELS), name="channel"),
    CheckConstraint(_in("kind", SIGNAL_KINDS), name="kind"),
    CheckConstraint(_signal_shapes(), name="shape"),  # what ingestion's Python accepts (issue 50)
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
    # The database login that declared it first: only that login acts as it (decisions #97);
    # NULL for a subscriber declared before migration 0016, until an admin gives it one.
    Column("owner_login", Text, nullable=True),
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
    _seq(),
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
    postgresql_where=text(f"disposition = '{Disposition.COUNTED.value}'"),
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
    _seq(),
    CheckConstraint(_in("step", BATCH_STEPS), name="step"),
)

# A command's own response: for a twin command, the persisted fact apply_twin learned — and, if
# it changed the thing, the event (its position in the log, the thing's revision, the action).
# twin-persisted is derived from it; the event log is a view over it and its command.
command_responses = Table(
    "command_responses",
    metadata,
    Column("signal_id", BigInteger, primary_key=True, autoincrement=False),
    _status(),
    Column("payload", JSONB, nullable=True),
    Column("is_error", Boolean, nullable=False),  # a failed twin command short-circuits (A.2.7)
    Column("batch_id", BigInteger, nullable=True),  # the apply batch; NULL for a live response
    Column("event_id", BigInteger, nullable=True),  # the event's position in the log (A.3)
    Column("revision", BigInteger, nullable=True),  # the thing's revision after the change
    Column("event_action", Text, nullable=True),
    _seq(),
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
# append-only child of signals, so no foreign key (see above). Attempt 1's row only copies its
# signal, and every reader takes attempt 1 from the signal instead (attempt_value, the view
# signal_attempts; decisions #146–#148). Redeliveries are numbered on from 2 with no gap:
# open_next_attempt opens only the attempt after one that exists, and signal_attempts relies on it
# (attempt 1 is enumerated on attempt 2's row).
attempts = Table(
    "attempts",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("requested_acks", ARRAY(Text), nullable=False),
    _timestamp("opened_at"),
    Column("deadline_at", TIMESTAMP(timezone=True), nullable=False),
    _seq(),
    PrimaryKeyConstraint("signal_id", "attempt"),
    CheckConstraint("attempt > 0", name="attempt"),
    CheckConstraint("deadline_at >= opened_at", name="deadline"),
)
# A redelivery's attempts, the few after the first (redelivery_attempt, the same predicate): a
# backlog's reader of the next or a later attempt hashes them alone, not every attempt (0032).
Index("ix_attempts_redelivery", attempts.c.signal_id, attempts.c.attempt, postgresql_where=text("attempt > 1"))

# What the requester of an attempt is told, once decided: its status and body as decided (A.2.4),
# and its headers — or NULL for the headers of an aggregated answer, which are the command's own
# (without requested-acks, with response-required false: Request.aggregated_headers) and follow
# from the signal, so the view request_answers derives them; the sweep's SQL writes them so. A
# plain response the sweep's SQL decides stores NULL headers and no body: both follow from the
# command's response and its signal (holds_derived_response, decisions #143).
request_results = Table(
    "request_results",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    _status(),
    Column("body", JSONB, nullable=True),  # SQL NULL: no body, or a plain response's, derived (request_answers)
    Column("headers", JSONB, nullable=True),  # SQL NULL: derived by request_answers (aggregated, or plain)
    Column("cause", Text, nullable=False),
    # label -> status of every entry an aggregated decision counted (408 placeholders too);
    # {} for a plain response, an error or command.timeout. Settlement reads it (B.9).
    Column("ack_statuses", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _timestamp("decided_at"),
    # The sweep batch that decided it: the validation gate's slice is the batches past its
    # watermark, read through this BRIN index (batches only grow).
    Column("batch_id", BigInteger, nullable=False),
    _seq(),
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
    _seq(),
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
    Column("carried_out_as", Text, nullable=True),  # what the transport did instead (decisions #99); NULL: as decided
    _seq(when_written=False),  # numbered when carried out (settlements_keep_their_decision)
    PrimaryKeyConstraint("signal_id", "attempt"),
    UniqueConstraint("id"),
    CheckConstraint(_in("decision", SETTLEMENT_DECISIONS), name="decision"),
    CheckConstraint("carried_out_at >= decided_at", name="carried_out"),  # never before it was decided
    CheckConstraint(f"carried_out_as IS NULL OR (carried_out_at IS NOT NULL AND carried_out_as <> decision AND "
                    f"{_in('carried_out_as', SETTLEMENT_DECISIONS)})", name="carried_out_as"),
    CheckConstraint("attempt > 0", name="attempt"),
    CheckConstraint("(seq IS NULL) = (carried_out_at IS NULL)", name="seq"),
)
Index("ix_settlements_not_carried_out", settlements.c.signal_id, postgresql_where=text("carried_out_at IS NULL"))
# A connection's settlements carried out in the last day (connection_metrics): they are carried out
# in time order, so a block range index finds them (setting seq already makes the update not HOT).
Index("ix_settlements_carried_out_at", settlements.c.carried_out_at, postgresql_using="brin")

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
# Each step's last run, for the metrics (the view ledger_gauges): a key, not a scan of every run.
Index(None, pipeline_runs.c.step, pipeline_runs.c.id)

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
    Column("signal_id", BigInteger, primary_key=True, autoincrement=False),
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
    Column("signal_id", BigInteger, primary_key=True, autoincrement=False),
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
    _seq(),
)

# Positions of steps that read an append-only table in order: validate's, the last result batch
# and settlement id it passed (what is decided but not validated is past them: awaiting_validation()).
pipeline_watermarks = Table(
    "pipeline_watermarks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", BigInteger, nullable=False),
)

# --- seals (issue 28, decisions #101): the proof that no fact was changed after it was sealed ----

# The tables whose rows are facts, each row one leaf of the Merkle tree of the seal that covers it:
# the one list of them. Python reads it (seals, verify, archive_lookups, jobs/archive.py); the SQL that must
# name each table — fact_leaves (each table's columns differ), the triggers of sealing.sql and
# archiving.sql, signal_facts, grants.sql — is held to it by tests/ledger/test_migrations.py.
SEALED_TABLES = (acks, attempts, command_responses, ledger_batches, request_results, search_marks, settlements,
                 signals, validation_passes)
for _table in SEALED_TABLES:
    _seq_index(_table)

# The fact tables whose rows name their signal: with the signal's own row, the facts that are one
# signal's alone, found by its id (signal_facts in sealing.sql; the rest of a signal's facts are
# shared: the search mark that indexed its change, the batches, the validation pass). archive_lookups
# looks them up by it, blocked_from (jobs/sql/archive.sql) finds the signals of an interval by them.
SIGNAL_FACT_TABLES = tuple(table for table in SEALED_TABLES if "signal_id" in table.c)

# One row per seal: the facts numbered (after_seq, upto_seq], in ``seq`` order the leaves of an
# RFC 6962 tree of root ``root`` (ackstore.rules.merkle), so many of each table (``counts``), and
# ``hash`` chaining the seal to the one before (``previous``; 32 zero bytes before the first).
seals = Table(
    "seals",
    metadata,
    Column("number", BigInteger, primary_key=True, autoincrement=False),
    Column("after_seq", BigInteger, nullable=False),
    Column("upto_seq", BigInteger, nullable=False),
    Column("counts", JSONB, nullable=False),  # table name -> rows (every sealed table, 0 too)
    Column("leaves", BigInteger, nullable=False),
    Column("root", LargeBinary, nullable=False),
    Column("previous", LargeBinary, nullable=False),
    Column("hash", LargeBinary, nullable=False),
    _timestamp("sealed_at"),
    UniqueConstraint("upto_seq"),
    CheckConstraint("number > 0 AND upto_seq >= after_seq AND after_seq >= 0 AND leaves >= 0", name="numbers"),
    CheckConstraint("octet_length(root) = 32 AND octet_length(previous) = 32 AND octet_length(hash) = 32",
                    name="hashes"),
)

# A seal's leaf hashes, in order, 32 bytes each, in chunks of ``LEAVES_PER_CHUNK``: proof of
# inclusion reads them, and verify names the row whose leaf differs (they are trusted only as
# far as their tree's root is the seal's).
seal_leaves = Table(
    "seal_leaves",
    metadata,
    Column("seal", BigInteger, ForeignKey("seals.number", deferrable=True, initially="DEFERRED"), nullable=False),
    Column("chunk", Integer, nullable=False),
    Column("leaves", LargeBinary, nullable=False),
    PrimaryKeyConstraint("seal", "chunk"),
    CheckConstraint("chunk >= 0 AND octet_length(leaves) % 32 = 0 AND octet_length(leaves) > 0", name="leaves"),
)

# One row per archiving (issue 28, decisions #102): the seals first..last — the facts numbered
# (after_seq, upto_seq] — were written as Parquet under ``location``, read back, checked against
# their seals' roots, and deleted from the hot tables in the transaction that wrote this row.
archives = Table(
    "archives",
    metadata,
    Column("number", BigInteger, primary_key=True, autoincrement=False),
    Column("first_seal", BigInteger, nullable=False),
    Column("last_seal", BigInteger, nullable=False),
    Column("after_seq", BigInteger, nullable=False),
    Column("upto_seq", BigInteger, nullable=False),
    Column("location", Text, nullable=False),  # the archive's root: a folder or a Hadoop URI
    Column("counts", JSONB, nullable=False),  # table name -> rows moved out
    # the last time a signal it holds was received (NULL: none): a window after it is all hot
    Column("received_upto", TIMESTAMP(timezone=True), nullable=True),
    _timestamp("archived_at"),
    UniqueConstraint("last_seal"),
    CheckConstraint("number > 0 AND last_seal >= first_seal AND first_seal > 0 AND upto_seq >= after_seq",
                    name="numbers"),
)

# Never holds a row: its lock is the numbering lock (decisions #101) — ROW EXCLUSIVE by every
# statement that draws fact numbers, SHARE by seal_position(); no role but its owner may lock it.
fact_numbering = Table(
    "fact_numbering",
    metadata,
    Column("id", SmallInteger, primary_key=True, autoincrement=False),
)

# A connection belongs to the database login that claimed it first (issue 37): declaring into it,
# storing its first signal, or its connector starting. Only that login declares its subscribers,
# stores its signals and records their settlements carried out (sql/objects/declaring.sql).
connections = Table(
    "connections",
    metadata,
    Column("id", Text, primary_key=True),
    # NULL: claimed before migration 0020 by subscribers of several logins or none, until an admin
    # gives it one
    Column("owner_login", Text, nullable=True),
    _timestamp("claimed_at"),
    # When its connector last said it runs (connector_seen, every 15 s), and since when it cannot
    # reach its broker (NULL: it can): the Ledger page lists the connectors by them (migration 0025).
    Column("seen_at", TIMESTAMP(timezone=True), nullable=True),
    Column("broker_out_since", TIMESTAMP(timezone=True), nullable=True),
    # When its connector stopped cleanly (connector_stopped; NULL: since then it said it runs, or
    # it never stopped so): stopped, not down (decisions #133).
    Column("stopped_at", TIMESTAMP(timezone=True), nullable=True),
    CheckConstraint("id <> ''", name="id"),
)
# The metrics' sources are the first connections claimed (metric_sources, decisions #127): read in
# claim order, never all of them.
Index("ix_connections_claimed_at", connections.c.claimed_at, connections.c.id)

# What a connector could not do, per connection (issue 38, decisions #109): messages dropped or
# refused by enforcement, answers no protocol carries, outages. Written through log_connection_event
# alone, which keeps each connection's newest 1 000.
CONNECTION_EVENTS = ("dropped", "enforced", "unsendable", "outage")
connection_log = Table(
    "connection_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("connection", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("message_id", Text, nullable=True),  # the broker message it is about, if one
    _timestamp("happened_at"),
    CheckConstraint(_in("kind", CONNECTION_EVENTS), name="kind"),
    CheckConstraint("length(detail) <= 2000 AND length(message_id) <= 1000", name="sizes"),
)
Index(None, connection_log.c.connection, connection_log.c.id)

# The locks writers and steps wait for, as rows no role may lock but through the functions of
# sql/objects/locking.sql (issue 37: an advisory lock is anyone's to take, and so to stall with).
# One row per bucket of things (per-thing ingestion order, decisions #19), seeded by tables.sql.
thing_locks = Table(
    "thing_locks",
    metadata,
    Column("bucket", Integer, primary_key=True, autoincrement=False),
    CheckConstraint("bucket BETWEEN 0 AND 65535", name="bucket"),
)
# One row per named lock: 'declare', 'facts', 'seal', and 'step:<name>' for each step.
ledger_locks = Table(
    "ledger_locks",
    metadata,
    Column("name", Text, primary_key=True),
)

# The counters of the facts the seals cover (issue 38, decisions #108), per metric, source and
# labels ('' where a metric has none): each seal adds its interval's (the function metric_facts)
# in its own transaction, so a scrape adds only what came after the last seal (the view
# ledger_counters), and archiving, which moves only sealed facts, never lowers a counter.
metric_totals = Table(
    "metric_totals",
    metadata,
    Column("metric", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("label", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("value", Float(precision=53), nullable=False),
    PrimaryKeyConstraint("metric", "source", "label", "detail"),
)

# Decided attempts that did not count a requested built-in label whose fact may still come (issue
# 50, migration 0025): when it comes it is late for them, and the metrics count it then. The seal
# adds the attempts it seals and forgets each once its facts are sealed (or can never come). The
# new facts probe it — a twin response by its signal, a search mark by its thing (the signal's) —
# so neither the metrics nor the seal read all of it, however many wait.
metric_awaited_facts = Table(
    "metric_awaited_facts",
    metadata,
    Column("signal_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("thing_id", Text, nullable=False),
    PrimaryKeyConstraint("signal_id", "attempt"),
)
Index(None, metric_awaited_facts.c.thing_id)

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

# The bulk intake's staging (migration 0016): the ingest role COPYs a batch's signals here, and
# merge_staged_signals moves this transaction's rows into signals in the same transaction. The
# role may insert every column but ``batch``, so a batch is always its own transaction's.
STAGED_SIGNAL_COLUMNS = ("source", "api", "source_message_id", "correlation_id", "channel", "kind", "action",
                         "thing_id", "topic", "path", "headers", "value", "requested_acks", "response_required",
                         "timeout_ms")
stage_signals = Table(
    "stage_signals",
    metadata,
    Column("batch", BigInteger, nullable=False, server_default=text("txid_current()")),
    Column("ord", Integer, nullable=False),  # the batch's order
    *(Column(column.name, column.type, nullable=column.nullable) for column in signals.columns
      if column.name in STAGED_SIGNAL_COLUMNS),
    prefixes=["UNLOGGED"],
)
# A merge reads its own batch by this index: the rows merges deleted stay in the table's pages
# until vacuum, and a scan of them would grow with every batch since (measured: 16 → 35 ms a
# merge of 1 000 over 300 batches).
Index(None, stage_signals.c.batch, postgresql_using="hash")

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
    connections,
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
    seals,
    seal_leaves,
    archives,
    metric_totals,
    metric_awaited_facts,
    connection_log,
)


# Signals are read by their receipt time for the windowed reports' window (migration 0010): they
# arrive in time order, so a block range index of a few pages finds a window's signals.
Index("ix_signals_received_at", signals.c.received_at, postgresql_using="brin")
