"""The store API: submit signals, declare labels, acknowledge, read results.

Every public method answers in Ditto's shape: a ``{"status": 2xx, …}`` dict when it
worked, or the error object (``status``, ``error``, ``message``, ``description``) when
the input was bad — in which case nothing was written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Sequence

from sqlalchemy import Connection, Engine, and_, func, null, select
from sqlalchemy.dialects.postgresql import insert

from ackstore.ledger import deliveries, search
from ackstore.ledger import ingest as ingestion
from ackstore.ledger.database import make_engine, resolve_url
from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.schema import (
    acks,
    command_responses,
    declared_labels,
    request_results,
    signals,
    subscribers,
)
from ackstore.rules import (
    aggregation,
    envelopes,
    errors,
    headers,
    labels,
    limits,
    live_responses,
    rql,
    subscriptions,
)
from ackstore.rules.acks import ABSENT, Ack, Disposition, disposition_on_arrival
from ackstore.rules.settings import Settings

ALL_CHANNELS: tuple[labels.Channel, ...] = ("twin", "live")
NO_CONTENT = {"status": 204}


def _json_or_null(value: Any) -> Any:
    """SQL NULL for an absent value, the JSON value otherwise (JSON ``null`` included)."""
    return null() if value is ABSENT else value


class AckStore:
    """The ledger, over one SQLAlchemy engine."""

    def __init__(
        self, engine: Engine, settings: Settings | None = None, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.engine = engine
        self.settings = settings or Settings.from_env()
        self.clock = clock  # leases are judged by this clock when given (tests), else the database's

    @classmethod
    def connect(cls, url: str | None = None, *, settings: Settings | None = None) -> "AckStore":
        """Connect to ``url`` (default: ``$ACKSTORE_DATABASE_URL``, else the embedded server)."""
        return cls(make_engine(resolve_url(url)), settings)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "AckStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- signals ----------------------------------------------------------------------

    def submit(
        self,
        envelope: dict[str, Any] | str | bytes,
        *,
        api: str = "http",
        source: str = "api",
        source_message_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a twin command, live command or live message; 202 with its correlation id.

        A retransmission (same source and message id) gets the first answer and stores nothing.
        """
        return self.submit_many([envelope], api=api, source=source, source_message_ids=[source_message_id])[0]

    def submit_many(
        self,
        batch: Sequence[dict[str, Any] | str | bytes],
        *,
        api: str = "http",
        source: str = "api",
        source_message_ids: Sequence[str | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Store a batch of signals in one transaction: one answer per envelope, in order, each
        exactly what :meth:`submit` would have answered it. Bad envelopes are answered with
        their error; the good ones are stored all the same. ``None`` for a message id, or no
        ``source_message_ids`` at all, gives a fresh one."""
        return [stored.answer for stored in self.ingest(batch, api=api, source=source, source_message_ids=source_message_ids)]

    def ingest(
        self,
        batch: Sequence[dict[str, Any] | str | bytes],
        *,
        api: str = "http",
        source: str = "api",
        source_message_ids: Sequence[str | None] | None = None,
    ) -> list[ingestion.Stored]:
        """:meth:`submit_many` with what a connector needs to settle each message (ingest.Stored)."""
        checked_api = headers.check_api(api)
        if not isinstance(source, str) or not source:
            raise ValueError("source must be a non-empty string")
        message_ids = [None] * len(batch) if source_message_ids is None else list(source_message_ids)
        if len(message_ids) != len(batch):
            raise ValueError("source_message_ids must have one entry per envelope")
        if not batch:
            return []
        with self.engine.begin() as connection:
            return ingestion.ingest(
                connection, batch, api=checked_api, source=source, message_ids=message_ids, settings=self.settings
            )

    # --- subscribers ------------------------------------------------------------------

    def declare(
        self,
        subscriber: str,
        labels_to_declare: Sequence[str],
        *,
        filter: str | None = None,
        namespaces: Sequence[str] | None = None,
        connection: str | None = None,
        channels: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Declare the labels ``subscriber`` will issue (B.3); 204, or 400 / 409."""
        try:
            row = _subscriber_row(subscriber, filter, namespaces, connection, channels)
            resolved = _declarable_labels(labels_to_declare, connection)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            # Declarations are rare; one lock makes the uniqueness check and the write atomic.
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext("ackstore.declare"))))
            conflict = _declaration_conflict(conn, subscriber, row["holder"], resolved)
            if conflict is not None:
                return conflict.to_json()
            _write_declaration(conn, row, resolved)
        return dict(NO_CONTENT)

    # --- acknowledgements -------------------------------------------------------------

    def acknowledge(self, subscriber: str, ack: dict[str, Any] | str | bytes) -> dict[str, Any]:
        """Store a subscriber's single or aggregated acknowledgement; 204, or 400 / 404 / 412.

        With an ``ack-token`` header the ack answers that hand-out of a pull (A.3): a superseded
        token is 412 and stores nothing, a token never issued for this subscriber and signal is
        400, the same token again stores only labels it did not carry before.
        """
        try:
            _check_subscriber_id(subscriber)
            loaded = envelopes.load_envelope(ack, self.settings.max_envelope_bytes)
            incoming = envelopes.parse_acknowledgement(loaded)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            declared = _labels_declared_by(conn, subscriber)
            for received in incoming.acks:
                if received.label not in declared:
                    return errors.label_not_declared(received.label).to_json()
            target = _lock_request(conn, incoming.correlation_id)
            if target is None:
                return errors.request_not_found(incoming.correlation_id).to_json()
            if incoming.thing_id != target.thing_id:  # decisions #40: stored nowhere
                return errors.ack_thing_mismatch(incoming.thing_id, target.thing_id, incoming.correlation_id).to_json()
            try:
                to_store = self._answer_handout(conn, subscriber, target.id, incoming.token, incoming.acks)
            except errors.DittoError as error:
                return error.to_json()
            decided = _is_decided(conn, target.id, target.attempt)
            for received in to_store:
                _store_ack(conn, target, received, subscriber, decided)
        return dict(NO_CONTENT)

    def respond(self, subscriber: str, response: dict[str, Any] | str | bytes) -> dict[str, Any]:
        """Store a live response to a live command or message; 204, or a 4xx error.

        The first response fulfils ``live-response`` (and is the plain response the requester
        gets when that is all it asked for); later ones are kept as duplicates (A.2.8).
        """
        try:
            _check_subscriber_id(subscriber)
            loaded = envelopes.load_envelope(response, self.settings.max_envelope_bytes)
            answer = envelopes.parse_live_response(loaded)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            channels = conn.execute(select(subscribers.c.channels).where(subscribers.c.id == subscriber)).scalar()
            if channels is None:
                return errors.subscriber_not_found(subscriber).to_json()
            if "live" not in channels:
                return errors.live_response_forbidden(subscriber).to_json()
            target = _lock_request(conn, answer.correlation_id)
            if target is None:
                return errors.request_not_found(answer.correlation_id).to_json()
            if target.channel != "live":
                return errors.live_response_invalid(
                    answer.correlation_id, "its correlation-id belongs to a twin command").to_json()
            ack = Ack(labels.LIVE_RESPONSE, answer.status, answer.value, answer.headers)
            try:  # decisions #40: only a subscriber that was handed the signal may answer it
                if answer.token is not None:
                    deliveries.checked_handout(conn, subscriber, target.id, answer.token)
                elif not deliveries.was_handed(conn, subscriber, target.id):
                    return errors.live_response_not_handed(subscriber, answer.correlation_id).to_json()
            except errors.DittoError as error:
                return error.to_json()
            signal = live_responses.LiveSignal(target.thing_id, target.kind, target.action, target.path)
            mismatch = live_responses.mismatch(signal, answer)
            if mismatch is not None:  # refused, and kept for the audit (and a 408's description)
                _store_ack(conn, target, ack, subscriber, decided=False, invalid=mismatch)
                return errors.live_response_invalid(answer.correlation_id, mismatch).to_json()
            try:
                to_store = self._answer_handout(conn, subscriber, target.id, answer.token, (ack,))
            except errors.DittoError as error:
                return error.to_json()
            decided = _is_decided(conn, target.id, target.attempt)
            if to_store:
                _store_ack(conn, target, ack, subscriber, decided)
                if not decided:
                    _store_live_response(conn, target.id, answer)
        return dict(NO_CONTENT)

    def _answer_handout(
        self, conn: Connection, subscriber: str, signal_id: int, token: str | None, answered: Sequence[Ack]
    ) -> list[Ack]:
        """Record that ``subscriber`` answered its hand-out of the signal; the acks to store."""
        now = self._clock_now()  # None: the statements use the database's clock (no extra round trip)
        if token is None:
            deliveries.close_without_token(conn, subscriber, signal_id, now)
            return list(answered)
        new = deliveries.answer(conn, subscriber, signal_id, token, [a.label for a in answered], now)
        return [a for a in answered if a.label in new]

    def _clock_now(self) -> datetime | None:
        """The test's clock when one was given; ``None`` means the database's."""
        return self.clock() if self.clock else None

    # --- pulling ----------------------------------------------------------------------

    def pull(self, subscriber: str, *, max: int = 100, lease: str = "30s") -> list[dict[str, Any]]:
        """Hand the next signals for ``subscriber`` out, each under a lease (A.3).

        Twin events (``requested-acks`` with custom labels only) and live commands and messages
        that match the subscriber's channels, namespaces and filter, oldest first; each message's
        headers carry its ``correlation-id``, an ``ack-token`` for this hand-out and the
        ``delivery-count``. Raises :class:`~ackstore.rules.errors.DittoError` (404 for an
        unknown subscriber, 400 for a bad ``max`` or ``lease``).
        """
        _check_subscriber_id(subscriber)
        limit = subscriptions.pull_size(max)
        lease_ms = subscriptions.lease_ms(lease)
        with self.engine.begin() as conn:
            now = deliveries.transaction_now(conn, self._clock_now())
            return deliveries.pull(conn, subscriber, limit=limit, lease_ms=lease_ms, now=now)

    # --- results ----------------------------------------------------------------------

    def result(self, correlation_id: str) -> dict[str, Any] | None:
        """What the requester is told: ``{"status", "body", "headers"}`` of the signal's latest
        attempt; ``None`` while it is undecided. An unknown correlation id is answered 404.
        """
        try:
            limits.check_correlation_id(correlation_id)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.connect() as conn:
            row = conn.execute(ledger_statement("store", "latest_result"), {"correlation_id": correlation_id}).first()
        if row is None:
            return errors.request_not_found(correlation_id).to_json()
        if row.status is None:
            return None
        return {"status": row.status, "body": row.body, "headers": row.headers}

    def search(self, expression: str, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
        """Indexed things matching an RQL filter: 200 with their ids, or 400 for a bad filter."""
        try:
            _check_namespaces(namespaces)
            with self.engine.connect() as conn:
                items = search.search(conn, expression, namespaces)
        except errors.DittoError as error:
            return error.to_json()
        return {"status": 200, "items": items}

    def stored_signal(self, correlation_id: str) -> dict[str, Any] | None:
        """The stored state of one signal: the row, its requested labels, its acks and result."""
        try:
            limits.check_text("correlation-id", correlation_id)
        except errors.DittoError:
            return None  # no stored correlation id can hold it
        with self.engine.connect() as conn:
            row = conn.execute(select(signals).where(signals.c.correlation_id == correlation_id)).mappings().first()
            if row is None:
                return None
            stored_acks = conn.execute(ledger_statement("store", "acks_of"), {"signal_id": row["id"]}).mappings()
            state = {k: _jsonable(v) for k, v in row.items()}
            state["acks"] = [dict(a) for a in stored_acks]
            state["attempts"] = _attempts(conn, row["id"])
            state["deliveries"] = deliveries.handouts_of(conn, row["id"])
            state["state"] = _checkpoint(conn, row["id"], state["attempts"][-1])
        state["result"] = self.result(correlation_id)
        return state


# --- statements (each one named, values always bound) ---------------------------------


def _subscriber_row(
    subscriber: object,
    filter: object,
    namespaces: object,
    connection: object,
    channels: object,
) -> dict[str, Any]:
    _check_subscriber_id(subscriber)
    if filter is not None:
        rql.parse(filter)  # 400 rql.expression.invalid, with the position of the problem
    _check_namespaces(namespaces)
    if connection is not None and (not isinstance(connection, str) or not connection):
        raise errors.json_field_invalid("/connection", "non-empty String")
    if connection is not None:
        limits.check_id("connection id", connection, limits.MAX_CONNECTION_ID_BYTES)
    chosen = list(ALL_CHANNELS) if channels is None else channels
    if not _is_string_list(chosen) or not chosen or not set(chosen) <= set(ALL_CHANNELS):
        raise errors.json_field_invalid("/channels", "non-empty JSON array of 'twin' and 'live'")
    return {
        "id": subscriber,
        "holder": f"connection:{connection}" if connection else f"subscriber:{subscriber}",
        "connection_id": connection,
        "filter": filter,
        "namespaces": list(namespaces) if namespaces is not None else None,
        "channels": sorted(set(chosen)),
    }


def _is_string_list(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) and item for item in value)


def _declarable_labels(requested: object, connection: str | None) -> list[str]:
    if isinstance(requested, (str, bytes)) or not isinstance(requested, Sequence):
        raise errors.json_field_invalid("/labels", "JSON array of acknowledgement labels")
    resolved: list[str] = []
    for label in requested:
        declarable = labels.validate_declarable(label, connection)
        if declarable not in resolved:
            resolved.append(declarable)
    return resolved


def _declaration_conflict(
    conn: Connection, subscriber: str, holder: str, wanted: list[str]
) -> errors.DittoError | None:
    """409 if another holder owns one of the labels, or the group declares a different set."""
    others_in_group = conn.execute(
        select(func.count()).where(and_(subscribers.c.holder == holder, subscribers.c.id != subscriber))
    ).scalar_one()
    if others_in_group:
        group_labels = set(conn.execute(select(declared_labels.c.label).where(declared_labels.c.holder == holder)).scalars())
        if group_labels != set(wanted):
            return errors.label_not_unique()
    taken = conn.execute(
        select(func.count()).where(and_(declared_labels.c.label.in_(wanted), declared_labels.c.holder != holder))
    ).scalar_one()
    return errors.label_not_unique() if taken else None


def _write_declaration(conn: Connection, row: dict[str, Any], wanted: list[str]) -> None:
    previous_holder = conn.execute(select(subscribers.c.holder).where(subscribers.c.id == row["id"])).scalar()
    # A new subscriber starts at the end of the event log, as a new subscription does.
    log_end = select(func.coalesce(func.max(command_responses.c.event_id), 0)).scalar_subquery()
    upsert = insert(subscribers).values(**row, event_position=log_end)
    conn.execute(
        upsert.on_conflict_do_update(
            index_elements=[subscribers.c.id],
            set_={name: upsert.excluded[name] for name in row if name != "id"} | {"declared_at": func.now()},
        )
    )
    if previous_holder is not None and previous_holder != row["holder"]:
        _release_orphaned_labels(conn, previous_holder)
    conn.execute(
        declared_labels.delete().where(
            and_(declared_labels.c.holder == row["holder"], declared_labels.c.label.not_in(wanted))
        )
    )
    if wanted:
        conn.execute(
            insert(declared_labels).on_conflict_do_nothing(index_elements=[declared_labels.c.label]),
            [{"label": label, "holder": row["holder"]} for label in wanted],
        )


def _release_orphaned_labels(conn: Connection, holder: str) -> None:
    """A group nobody belongs to any more holds no labels."""
    members = conn.execute(select(func.count()).where(subscribers.c.holder == holder)).scalar_one()
    if not members:
        conn.execute(declared_labels.delete().where(declared_labels.c.holder == holder))


def _labels_declared_by(conn: Connection, subscriber: str) -> set[str]:
    return set(
        conn.execute(
            select(declared_labels.c.label)
            .join(subscribers, subscribers.c.holder == declared_labels.c.holder)
            .where(subscribers.c.id == subscriber)
        ).scalars()
    )


def _check_namespaces(namespaces: object) -> None:
    if namespaces is not None and not _is_string_list(namespaces):
        raise errors.json_field_invalid("/namespaces", "JSON array of Strings")
    for namespace in namespaces or ():
        limits.check_text("namespace", namespace)


def _check_subscriber_id(subscriber: object) -> str:
    if not isinstance(subscriber, str) or not subscriber:
        raise errors.json_field_invalid("/subscriber", "non-empty String")
    return limits.check_id("subscriber id", subscriber, limits.MAX_SUBSCRIBER_ID_BYTES)


def _lock_request(conn: Connection, correlation_id: str) -> Any:
    """The request an ack is for (its current attempt), share-locked so that deciding it waits."""
    return conn.execute(ledger_statement("store", "current_request"), {"correlation_id": correlation_id}).first()


def _store_live_response(conn: Connection, signal_id: int, answer: envelopes.LiveResponse) -> None:
    """The first live response is the signal's response: the requester's plain answer when it
    asked for none of the labels (B.7) — a live response is never an error that short-circuits."""
    conn.execute(
        insert(command_responses)
        .values(signal_id=signal_id, status=answer.status, payload=_json_or_null(answer.value), is_error=False)
        .on_conflict_do_nothing(index_elements=[command_responses.c.signal_id])
    )


def _is_decided(conn: Connection, signal_id: int, attempt: int) -> bool:
    return conn.execute(
        select(func.count()).where(request_results.c.signal_id == signal_id, request_results.c.attempt == attempt)
    ).scalar_one() > 0


def _store_ack(conn: Connection, target: Any, ack: Ack, issuer: str, decided: bool, invalid: str | None = None) -> None:
    """Store one valid ack: counted if it is the first for a requested label of an undecided
    request; otherwise kept as late, unrequested or duplicate (A.2.5, A.2.8). A live response
    that does not answer its command is kept as ``invalid``, with why."""
    row = {
        "signal_id": target.id,
        "attempt": target.attempt,
        "label": ack.label,
        "status": ack.status,
        "payload": _json_or_null(ack.payload),
        "headers": dict(ack.headers),
        "issuer": issuer,
    }
    disposition = disposition_on_arrival(
        decided=decided, requested=ack.label in target.requested_acks, invalid=invalid is not None)
    if disposition is not Disposition.COUNTED:
        conn.execute(insert(acks).values(**row, disposition=disposition.value, reason=invalid))
        return
    counted = conn.execute(
        insert(acks)
        .values(**row, disposition=Disposition.COUNTED.value)
        .on_conflict_do_nothing(
            index_elements=[acks.c.signal_id, acks.c.attempt, acks.c.label],
            index_where=acks.c.disposition == Disposition.COUNTED.value,
        )
        .returning(acks.c.id)
    ).first()
    if counted is None:  # the first for its label was counted already
        conn.execute(insert(acks).values(**row, disposition=Disposition.DUPLICATE.value))


def _attempts(conn: Connection, signal_id: int) -> list[dict[str, Any]]:
    """Every attempt of a signal: its labels and deadline, its result and its settlement."""
    rows = conn.execute(ledger_statement("store", "attempts_of"), {"signal_id": signal_id}).mappings()
    return [
        {
            "attempt": row["attempt"],
            "requestedAcks": list(row["requested_acks"]),
            "openedAt": _jsonable(row["opened_at"]),
            "deadlineAt": _jsonable(row["deadline_at"]),
            "result": None if row["status"] is None else {
                "status": row["status"], "cause": row["cause"], "decidedAt": _jsonable(row["decided_at"]),
            },
            "settlement": None if row["decision"] is None else {
                "decision": row["decision"],
                "decidedAt": _jsonable(row["settlement_decided_at"]),
                "carriedOutAt": _jsonable(row["carried_out_at"]),
            },
        }
        for row in rows
    ]


def _checkpoint(conn: Connection, signal_id: int, latest: dict[str, Any]) -> str:
    """The furthest checkpoint a signal reached: received, persisted / failed, decided, settled (A.3)."""
    if latest["settlement"] is not None:
        return "settled" if latest["settlement"]["carriedOutAt"] is not None else "decided"
    if latest["result"] is not None:
        return "decided"
    is_error = conn.execute(
        select(command_responses.c.is_error).where(command_responses.c.signal_id == signal_id)
    ).scalar()
    if is_error is None:
        return "received"
    return "failed" if is_error else "persisted"


def _jsonable(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") and value is not None else value
