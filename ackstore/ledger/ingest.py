"""Ingestion: store a batch of signals in one transaction, answering each as ``submit`` would.

Every envelope is validated on its own (B.4, B.7); the valid ones are then stored in the
batch's order with one statement, so that the per-thing ingestion order holds across batches
and single submissions (decisions #19). A retransmission — same source and message id as a
stored signal, or as an earlier envelope of the batch — gets the first answer and stores
nothing; after a *redeliver* decision it opens the signal's next attempt (A.2.10). A
correlation id taken by another signal is 409 (A.2.9).

Besides each answer, :class:`Stored` says what a broker connector needs to settle the message:
whether its current attempt still awaits a decision, or which decision it already has.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from sqlalchemy import Connection

from ackstore.ledger import deliveries
from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules import envelopes, errors, headers, jsontext, labels, limits, settlement
from ackstore.rules.acks import ABSENT, BUILTIN_ISSUER
from ackstore.rules.settings import Settings

THING_INGESTION_LOCK = 1  # advisory-lock class of per-thing ingestion (two-key form)


@dataclass(frozen=True)
class Stored:
    """What became of one submitted envelope."""

    answer: dict[str, Any]  # exactly what ``submit`` answers: 202 with the correlation id, or the error
    signal_id: int | None = None  # the stored signal (new or retransmitted); None after an error
    awaits_decision: bool = False  # its current attempt requested acknowledgements and is not decided
    decision: str | None = None  # the settlement decision its current attempt already has

    @property
    def ok(self) -> bool:
        return self.signal_id is not None


@dataclass(frozen=True)
class _Valid:
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
    loaded = envelopes.load_envelope(envelope, settings.max_envelope_bytes)
    signal = envelopes.parse_signal(loaded)
    request = headers.normalize(signal.raw_headers, channel=signal.channel, api=api, settings=settings)
    return signal, request


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
    results: list[Stored | None] = [None] * len(batch)
    valid: list[_Valid] = []
    for index, (envelope, message_id) in enumerate(zip(batch, message_ids)):
        try:
            limits.check_id("source", source, limits.MAX_SOURCE_BYTES)
            if message_id is not None:
                limits.check_id("source message id", message_id, limits.MAX_MESSAGE_ID_BYTES)
            signal, request = validate(envelope, api=api, settings=settings)
        except errors.DittoError as error:
            results[index] = Stored(error.to_json())
            continue
        valid.append(_Valid(index, message_id if message_id is not None else str(uuid.uuid4()), signal, request))
    if valid:
        _store_valid(conn, valid, api, source, results)
    return [result for result in results if result is not None]


def _store_valid(
    conn: Connection, valid: list[_Valid], api: str, source: str, results: list[Stored | None]
) -> None:
    conn.execute(
        ledger_statement("ingest", "lock_things"),
        {"lock_class": THING_INGESTION_LOCK, "thing_ids": sorted({v.signal.thing_id for v in valid})},
    )
    taken_messages, taken_correlations = _already_stored(conn, source, valid)
    new: dict[str, _Valid] = {}  # message id -> the envelope that stores it
    new_correlations: set[str] = set()
    retransmitted: list[_Valid] = []
    for item in valid:  # decide in the batch's order, as one submission after another would
        correlation_id = item.request.correlation_id
        if item.message_id in taken_messages or item.message_id in new:
            retransmitted.append(item)
        elif correlation_id in taken_correlations or correlation_id in new_correlations:
            results[item.index] = Stored(errors.duplicate_correlation_id(correlation_id).to_json())
        else:
            new[item.message_id] = item
            new_correlations.add(correlation_id)
    ids = _insert_new(conn, api, source, list(new.values()))
    for item in new.values():
        if item.message_id in ids:
            results[item.index] = Stored(
                accepted(item.request.correlation_id), ids[item.message_id], bool(item.request.requested_acks)
            )
        else:  # a concurrent submission stored this message or correlation id first: its answer
            retransmitted.append(item)
    live = [(ids[item.message_id], item.signal) for item in new.values()
            if item.message_id in ids and item.signal.channel == "live"]
    if live:
        deliveries.fan_out_live(conn, live)
    if retransmitted:
        conn.execute(ledger_statement("ingest", "lock_retransmitted"),
                     {"source": source, "message_ids": sorted({item.message_id for item in retransmitted})})
    for item in retransmitted:
        results[item.index] = resubmitted(conn, source, item.message_id, item.request.correlation_id)


def _already_stored(conn: Connection, source: str, valid: list[_Valid]) -> tuple[set[str], set[str]]:
    rows = conn.execute(
        ledger_statement("ingest", "already_stored"),
        {
            "source": source,
            "message_ids": [v.message_id for v in valid],
            "correlation_ids": [v.request.correlation_id for v in valid],
        },
    ).all()
    return {row.source_message_id for row in rows if row.same_message}, {row.correlation_id for row in rows}


def _insert_new(conn: Connection, api: str, source: str, new: list[_Valid]) -> dict[str, int]:
    """Insert the new signals in the batch's order; their ids by message id."""
    if not new:
        return {}
    rows = [_signal_row(position, item) for position, item in enumerate(new)]
    inserted = conn.execute(
        ledger_statement("ingest", "insert_signals"),
        {"rows": jsontext.dumps(rows), "source": source, "api": api},
    )
    return {row.source_message_id: row.id for row in inserted}


def _signal_row(position: int, item: _Valid) -> dict[str, Any]:
    signal, request = item.signal, item.request
    return {
        "ord": position,
        "source_message_id": item.message_id,
        "correlation_id": request.correlation_id,
        "channel": signal.channel,
        "kind": signal.kind,
        "action": signal.action,
        "thing_id": signal.thing_id,
        "topic": signal.topic,
        "path": signal.path,
        "has_value": signal.value is not ABSENT,
        "value": None if signal.value is ABSENT else signal.value,
        "headers": request.headers,
        "requested_acks": list(request.requested_acks),
        "response_required": request.response_required,
        "timeout_ms": request.timeout_ms,
    }


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
        return Stored(answer, first.id, awaits_decision=True)
    if first.decision is not None:
        return Stored(answer, first.id, decision=first.decision)
    return Stored(answer, first.id, awaits_decision=bool(first.requested_acks))


def _open_next_attempt(conn: Connection, current: Any) -> None:
    """Request again what did not succeed, with a new deadline from now (A.2.10). The twin
    change is not applied again; a built-in fact already in the ledger counts at once."""
    attempt = current.attempt + 1
    labels_again = list(settlement.labels_to_request_again(current.requested_acks, current.ack_statuses or {}))
    params = {"signal_id": current.id, "attempt": attempt}
    conn.execute(
        ledger_statement("ingest", "open_attempt"),
        params | {"requested_acks": labels_again, "timeout_ms": current.timeout_ms},
    )
    conn.execute(ledger_statement("ingest", "mark_requeued"), params)
    conn.execute(ledger_statement("ingest", "enqueue_attempt"), params)
    deliveries.reopen(conn, current.id, attempt)
    builtin_again = [label for label in labels_again if labels.is_builtin(label)]
    if builtin_again:
        conn.execute(
            ledger_statement("ingest", "carry_builtin_facts"),
            params | {"labels": builtin_again, "builtin_issuer": BUILTIN_ISSUER},
        )
