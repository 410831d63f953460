"""Ingestion: store a batch of signals in one transaction, answering each as ``submit`` would.

Every envelope is validated on its own (B.4, B.7); the valid ones are stored in the batch's
order, so that the per-thing ingestion order holds across batches and single submissions
(decisions #19). A retransmission — same source and message id as a stored signal, or as an
earlier envelope of the batch — gets the first answer and stores nothing; after a *redeliver*
decision it opens the signal's next attempt (A.2.10). A correlation id taken by another signal
is 409 (A.2.9).

A batch is stored as a whole: the message ids and correlation ids it shares with stored signals
are read in one statement, and every envelope decided in the batch's order exactly as one
submission after another would be (decisions #35) while the new ones stream through one COPY
into the staging table the ingest role may fill (Python decides and encodes the next chunk while
the server stages the last). Then the new signals' things are locked (hash order) and one call
(``merge_staged_signals``, decisions #94) stores them with their work, their ids drawn under the
locks. A merge that meets a key a concurrent submission took meanwhile is undone (a savepoint)
and run again skipping taken keys: a row that lost the race is answered as a retransmission. A
single envelope takes its own path: one call locks its thing and stores it with its work.

Besides each answer, :class:`Stored` says what a broker connector needs to settle the message:
whether its current attempt still awaits a decision, or which decision it already has.
"""

from __future__ import annotations

import gc
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ackstore.ledger import handouts
from ackstore.ledger.array_literals import text_array
from ackstore.ledger.copying import copy_in
from ackstore.ledger.named_sql import ledger_sql, ledger_statement
from ackstore.rules import envelopes, errors, headers, jsontext, limits, settlement, twin
from ackstore.rules.acks import ABSENT
from ackstore.rules.settings import Settings

UNIQUE_VIOLATION = "23505"


class Stored(NamedTuple):
    """What became of one submitted envelope (a named tuple: a batch makes one per envelope)."""

    answer: dict[str, Any]  # exactly what ``submit`` answers: 202 with the correlation id, or the error
    signal_id: int | None = None  # the stored signal (new or retransmitted); None after an error
    awaits_decision: bool = False  # its current attempt requested acknowledgements and is not decided
    decision: str | None = None  # the settlement decision its current attempt already has
    retransmitted: bool = False  # its message was stored before (a connector counts it a duplicate)

    @property
    def ok(self) -> bool:
        return self.signal_id is not None


class _Valid(NamedTuple):
    index: int
    message_id: str
    signal: envelopes.Signal
    request: headers.AckRequest


def accepted(correlation_id: str) -> dict[str, Any]:
    return {"status": 202, "correlationId": correlation_id}


def validate(
    envelope: object, *, api: headers.Api, settings: Settings
) -> tuple[envelopes.Signal, headers.AckRequest]:
    """The signal and its normalised request, or raise the client error (400 / 413)."""
    signal = envelopes.parse_signal(envelopes.load_envelope(envelope, settings.max_envelope_bytes))
    return signal, _request(signal, api, settings)


def _request(signal: envelopes.Signal, api: headers.Api, settings: Settings) -> headers.AckRequest:
    request = headers.normalize(signal.raw_headers, channel=signal.channel, api=api, settings=settings)
    if signal.kind == "twin-command":
        twin.check_conditional_headers(request.headers, signal.action)
    return request


class _Parsed(NamedTuple):
    index: int
    message_id: str
    signal: envelopes.Signal


class Intake:
    """One call's envelopes, read on arrival (no database needed), stored by :meth:`store`.

    A single envelope is validated whole on arrival: it then needs no database to fail. A batch's
    envelopes are read (ids, JSON, topic: enough to lock their things and look their keys up) on
    arrival, and their headers checked while the batch is stored, as the COPY asks for rows."""

    def __init__(
        self, batch: Sequence[object], *, api: headers.Api, source: str, message_ids: Sequence[str | None],
        settings: Settings,
    ) -> None:
        self.api, self.source, self.settings = api, source, settings
        self.results: list[Stored | None] = [None] * len(batch)
        self.parsed: list[_Parsed] = []
        self.one: _Valid | None = None  # a single envelope, validated
        try:
            limits.check_id("source", source, limits.MAX_SOURCE_BYTES)
        except errors.DittoError as error:
            self.results = [Stored(error.to_json()) for _ in batch]
            return
        for index, (envelope, message_id) in enumerate(zip(batch, message_ids)):
            self._read(index, envelope, message_id)
        if len(batch) == 1 and self.parsed:
            self.one = self._validated(self.parsed.pop())

    def _read(self, index: int, envelope: object, message_id: str | None) -> None:
        try:
            if message_id is not None:
                limits.check_id("source message id", message_id, limits.MAX_MESSAGE_ID_BYTES)
            signal = envelopes.parse_signal(envelopes.load_envelope(envelope, self.settings.max_envelope_bytes))
        except errors.DittoError as error:
            self.results[index] = Stored(error.to_json())
            return
        self.parsed.append(_Parsed(index, message_id if message_id is not None else str(uuid.uuid4()), signal))

    def _validated(self, parsed: _Parsed) -> _Valid | None:
        """The envelope with its normalised request; None after answering its client error."""
        try:
            return _Valid(*parsed, _request(parsed.signal, self.api, self.settings))
        except errors.DittoError as error:
            self.results[parsed.index] = Stored(error.to_json())
            return None

    def valid(self) -> Iterator[_Valid]:
        """The batch's envelopes whose headers are valid, in its order (the others answered)."""
        for parsed in self.parsed:
            item = self._validated(parsed)
            if item is not None:
                yield item

    def correlation_ids(self) -> Iterator[str]:
        """The correlation ids the batch's envelopes give, as normalize will read them; one it
        will refuse is left out (that envelope stores nothing)."""
        for parsed in self.parsed:
            given = headers.correlation_id_given(parsed.signal.raw_headers)
            if isinstance(given, str):
                try:
                    yield limits.check_correlation_id(given)
                except errors.DittoError:
                    pass

    @property
    def to_store(self) -> bool:
        """Whether anything may be stored (else the answers are ready without the database)."""
        return bool(self.parsed) or self.one is not None

    def answers(self) -> list[Stored]:
        assert all(result is not None for result in self.results)
        return self.results  # type: ignore[return-value]

    @property
    def alone(self) -> bool:
        """A single twin command: its one statement may be a transaction of its own (a live
        signal's hand-outs are written with it; a retransmission's answer is read after it)."""
        return self.one is not None and self.one.signal.channel == "twin"

    def store_alone(self, conn: Connection) -> bool:
        """Store the single twin command by its one statement, on a connection in autocommit: one
        round trip. False when its message or correlation id is taken: :meth:`store` answers then."""
        assert self.one is not None
        signal_id = _insert_one(conn, self.one, self.api, self.source)
        if signal_id is not None:
            self.results[self.one.index] = _accepted(self.one, signal_id)
        return signal_id is not None

    def store(self, conn: Connection) -> None:
        """Store the valid envelopes inside ``conn``'s transaction; then each envelope has its answer."""
        if self.one is not None:
            _store_one(conn, self.one, self.api, self.source, self.results)
        elif self.parsed:
            _store_batch(conn, self)


_collector = threading.Lock()


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's automatic cycle collection paused while one batch is validated and stored.

    A batch keeps some ten containers per envelope alive until it is stored; collections that
    allocation counts trigger walk them again and again, and every few batches the process's
    whole heap (a third of validation time, measured). Ingestion makes no reference cycles.
    The first batch to pause resumes the collector when it is done (allocations meanwhile
    still count, so a collection follows at once); a batch that finds it paused, by another
    batch or by the application, leaves it as it is."""
    with _collector:
        owner = gc.isenabled()
        if owner:
            gc.disable()
    try:
        yield
    finally:
        if owner:
            gc.enable()


def ingest(
    conn: Connection,
    batch: Sequence[object],
    *,
    api: headers.Api,
    source: str,
    message_ids: Sequence[str | None],
    settings: Settings,
) -> list[Stored]:
    """Store the valid envelopes of ``batch`` inside ``conn``'s transaction; one answer each."""
    intake = Intake(batch, api=api, source=source, message_ids=message_ids, settings=settings)
    intake.store(conn)
    return intake.answers()


# --- deciding, in the batch's order ----------------------------------------------------------


class _Decisions:
    """Each valid envelope decided as one submission after another would decide it, given the
    message ids and correlation ids already stored."""

    def __init__(self, taken_messages: frozenset[str], taken_correlations: frozenset[str]) -> None:
        self.taken_messages, self.taken_correlations = taken_messages, taken_correlations
        self.new: dict[str, _Valid] = {}  # message id -> the envelope that stores it
        self.new_correlations: set[str] = set()
        self.retransmitted: list[_Valid] = []
        self.clashes: list[_Valid] = []  # their correlation id is taken: 409

    def decide(self, item: _Valid) -> bool:
        """Whether ``item`` is a new signal to store."""
        correlation_id = item.request.correlation_id
        if item.message_id in self.taken_messages or item.message_id in self.new:
            self.retransmitted.append(item)
            return False
        if correlation_id in self.taken_correlations or correlation_id in self.new_correlations:
            self.clashes.append(item)
            return False
        self.new[item.message_id] = item
        self.new_correlations.add(correlation_id)
        return True


# --- a batch -----------------------------------------------------------------------------------


def _store_batch(conn: Connection, intake: Intake) -> None:
    """Validate and stage the batch with no lock held; then lock the new signals' things and store
    them (their ids are drawn under the locks, which the transaction holds until it commits:
    decisions #19); then answer every envelope."""
    taken_messages, taken_correlations = _already_stored(
        conn, intake.source, [parsed.message_id for parsed in intake.parsed], intake.correlation_ids())
    decisions = _Decisions(frozenset(taken_messages), frozenset(taken_correlations))
    copy_in(conn, ledger_sql("ingest", "copy_signals"),
            _copy_rows(_decided_new(intake.valid(), decisions), intake.api, intake.source))
    ids = _store_staged(conn, decisions)
    _answer(conn, intake.source, decisions, ids, intake.results)


def _decided_new(valid: Iterator[_Valid], decisions: _Decisions) -> Iterator[_Valid]:
    """The new signals: every envelope validated and decided in the batch's order, as one
    submission after another would be, while the COPY stores the ones before it."""
    for item in valid:
        if decisions.decide(item):
            yield item


def _store_staged(conn: Connection, decisions: _Decisions) -> dict[str, int]:
    """Store the staged new signals and queue their work, their things locked first (the merge
    locks them); their ids by message id. If a concurrent submission took a key meanwhile, that
    merge is undone and the next skips the row, which is not returned: ``_answer`` answers it as
    that submission's retransmission."""
    if not decisions.new:
        return {}
    try:
        with conn.begin_nested():
            return _merge_staged(conn, skip_taken=False)
    except DBAPIError as error:
        if getattr(error.orig, "pgcode", None) != UNIQUE_VIOLATION:
            raise
    return _merge_staged(conn, skip_taken=True)


def _merge_staged(conn: Connection, *, skip_taken: bool) -> dict[str, int]:
    ids, message_ids = conn.execute(ledger_statement("ingest", "enqueue_copied"), {"skip_taken": skip_taken}).one()
    return dict(zip(message_ids or (), ids or ()))


def _answer(
    conn: Connection, source: str, decisions: _Decisions, ids: dict[str, int], results: list[Stored | None]
) -> None:
    """Answer every valid envelope, given the ids of the new signals that were stored; fan the new
    live signals out; a new signal that was not stored lost a race and is a retransmission."""
    retransmitted = list(decisions.retransmitted)
    live = []
    for item in decisions.new.values():
        signal_id = ids.get(item.message_id)
        if signal_id is None:  # a concurrent submission stored this message or correlation id first
            retransmitted.append(item)
            continue
        results[item.index] = _accepted(item, signal_id)
        if item.signal.channel == "live":
            live.append((signal_id, item.signal))
    for item in decisions.clashes:
        results[item.index] = Stored(errors.duplicate_correlation_id(item.request.correlation_id).to_json())
    if live:
        handouts.fan_out_live(conn, live)
    if retransmitted:
        conn.execute(ledger_statement("ingest", "lock_retransmitted"),
                     {"source": source, "message_ids": text_array(sorted({item.message_id for item in retransmitted}))})
    for item in retransmitted:
        results[item.index] = resubmitted(conn, source, item.message_id, item.request.correlation_id)


def _already_stored(
    conn: Connection, source: str, message_ids: Iterable[str], correlation_ids: Iterable[str]
) -> tuple[set[str], set[str]]:
    """Which of these message ids (of ``source``) and correlation ids are taken."""
    rows = conn.execute(
        ledger_statement("ingest", "already_stored"),
        {"source": source, "message_ids": text_array(message_ids), "correlation_ids": text_array(correlation_ids)},
    ).all()
    return {row.source_message_id for row in rows if row.same_message}, {row.correlation_id for row in rows}


# --- COPY text -----------------------------------------------------------------------------------

# Text fields are joined with NUL, which no stored text can hold (validation refuses it): one
# translate then escapes what COPY's text format must see escaped and turns the NULs into tabs.
# JSON text holds no raw control character, so a backslash is all it may need escaped.
_COPY_ESCAPES = str.maketrans({"\x00": "\t", "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_NULL = "\\N"


def _copy_rows(new: Iterator[_Valid], api: str, source: str) -> Iterator[str]:
    """COPY lines (copy_signals' columns) of the new signals, made one by one as the COPY asks
    for them (the server stages one chunk while Python encodes the next)."""
    constant = "\x00".join((source, api)).translate(_COPY_ESCAPES)
    requests: dict[tuple[int, tuple[str, ...], bool], str] = {}  # most signals request alike
    for position, (_, message_id, signal, request) in enumerate(new):
        key = (request.timeout_ms, request.requested_acks, request.response_required)
        requested = requests.get(key)
        if requested is None:
            requested = requests[key] = "\t".join((
                text_array(request.requested_acks).translate(_COPY_ESCAPES), "t" if request.response_required else "f",
                str(request.timeout_ms)))
        texts = "\x00".join((message_id, request.correlation_id, signal.channel, signal.kind, signal.action,
                             signal.thing_id, signal.topic, signal.path)).translate(_COPY_ESCAPES)
        value = _NULL if signal.value is ABSENT else _copy_json(signal.value)
        yield f"{position}\t{constant}\t{texts}\t{_copy_json(request.headers)}\t{value}\t{requested}\n"


def _copy_json(value: Any) -> str:
    text = jsontext.dumps(value)
    return text if "\\" not in text else text.replace("\\", "\\\\")


# --- a single envelope ---------------------------------------------------------------------------


def _store_one(conn: Connection, item: _Valid, api: str, source: str, results: list[Stored | None]) -> None:
    """One statement locks the thing and stores the signal with its work; a taken key answers as
    the batch's retransmissions and clashes are answered."""
    signal_id = _insert_one(conn, item, api, source)
    if signal_id is None:  # taken: the first answer, or 409
        results[item.index] = resubmitted(conn, source, item.message_id, item.request.correlation_id)
        return
    results[item.index] = _accepted(item, signal_id)
    if item.signal.channel == "live":
        handouts.fan_out_live(conn, [(signal_id, item.signal)])


def _insert_one(conn: Connection, item: _Valid, api: str, source: str) -> int | None:
    """The new signal's id; None if its message or correlation id is taken."""
    signal, request = item.signal, item.request
    return conn.execute(ledger_statement("ingest", "insert_one"), {
        "source": source, "source_message_id": item.message_id,
        "correlation_id": request.correlation_id, "api": api, "channel": signal.channel, "kind": signal.kind,
        "action": signal.action, "thing_id": signal.thing_id, "topic": signal.topic, "path": signal.path,
        "value": None if signal.value is ABSENT else jsontext.dumps(signal.value),
        "headers": jsontext.dumps(request.headers), "requested_acks": text_array(request.requested_acks),
        "response_required": request.response_required, "timeout_ms": request.timeout_ms,
    }).scalar()


def _accepted(item: _Valid, signal_id: int) -> Stored:
    return Stored(accepted(item.request.correlation_id), signal_id, bool(item.request.requested_acks))


# --- retransmissions (A.3) and redeliveries (A.2.10) -----------------------------------------


def resubmitted(conn: Connection, source: str, message_id: str, correlation_id: str) -> Stored:
    """A retransmission gets the first answer; after a redeliver decision it opens the
    signal's next attempt (A.2.10); a clash of correlation ids is 409 (A.2.9)."""
    first = conn.execute(
        ledger_statement("ingest", "retransmitted"), {"source": source, "source_message_id": message_id}
    ).first()
    if first is None:
        return Stored(errors.duplicate_correlation_id(correlation_id).to_json())
    answer = accepted(first.correlation_id)
    if first.decision == settlement.Settlement.REDELIVER.value:
        _open_next_attempt(conn, first)
        return Stored(answer, first.id, awaits_decision=True, retransmitted=True)
    if first.decision is not None:
        return Stored(answer, first.id, decision=first.decision, retransmitted=True)
    return Stored(answer, first.id, awaits_decision=bool(first.requested_acks), retransmitted=True)


def _open_next_attempt(conn: Connection, current: Any) -> None:
    """Request again what did not succeed, with a new deadline from now (A.2.10). The twin
    change is not applied again; a built-in fact already in the ledger counts at once."""
    attempt = current.attempt + 1
    labels_again = list(settlement.labels_to_request_again(current.requested_acks, current.ack_statuses or {}))
    conn.execute(ledger_statement("ingest", "open_attempt"),
                 {"signal_id": current.id, "attempt": attempt, "requested_acks": labels_again})
