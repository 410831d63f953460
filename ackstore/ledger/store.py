"""The store API: submit signals, declare labels, acknowledge, read results.

Every public method answers in Ditto's shape: a ``{"status": 2xx, …}`` dict when it
worked, or the error object (``status``, ``error``, ``message``, ``description``) when
the input was bad — in which case nothing was written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Sequence

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from ackstore.ledger import acks, archive_lookups, declarations, failures, handouts, results, search
from ackstore.ledger import ingest as ingestion
from ackstore.ledger.database import autocommitting, make_engine, resolve_url
from ackstore.rules import envelopes, errors, headers, labels, limits, live_responses, subscriptions
from ackstore.rules.acks import Ack
from ackstore.rules.settlement import shared_source
from ackstore.rules.settings import Settings

NO_CONTENT = {"status": 204}


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
        with ingestion.collection_paused():
            intake = ingestion.Intake(batch, api=checked_api, source=source, message_ids=message_ids,
                                      settings=self.settings)
            try:
                if intake.alone:
                    with self.engine.connect() as connection, autocommitting(connection):
                        if intake.store_alone(connection):
                            return intake.answers()
                if intake.to_store:
                    with self.engine.begin() as connection:
                        intake.store(connection)
            except DBAPIError as error:
                if not self._refused_connection(error, source):
                    raise
                # another login's connection (issue 37): the functions refused it, nothing was stored
                return [ingestion.Stored(errors.connection_not_yours(source).to_json()) for _ in batch]
            return intake.answers()

    def _refused_connection(self, error: DBAPIError, source: str) -> bool:
        """Whether ``error`` is the ledger refusing to store a connection's messages from a login
        that is not the connection's (any other refusal, a missing privilege say, is not)."""
        if failures.sqlstate(error) != failures.INSUFFICIENT_PRIVILEGE or shared_source(source):
            return False
        with self.engine.connect() as conn:
            return not declarations.may_act_for_connection(conn, source)

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
            row = declarations.subscriber_row(subscriber, filter, namespaces, connection, channels)
            resolved = declarations.declarable_labels(labels_to_declare, connection)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            conflict = declarations.declare(conn, row, resolved)
        return dict(NO_CONTENT) if conflict is None else conflict.to_json()

    def reserve_connection(self, connection: str, login: str) -> dict[str, Any]:
        """An operator grants ``connection`` to the database ``login``, whose connector then claims it
        (issue 50): 204; 400 for an id no connection may have or a name that is no ingest login; 409
        when another login holds it. Only a login that may write ``connections`` (the admin role's)
        reserves: PostgreSQL refuses any other (a DBAPIError, SQLSTATE 42501)."""
        try:
            declarations.check_connection_id(connection)
            limits.check_text("login", login)
        except errors.DittoError as error:
            return error.to_json()
        try:
            with self.engine.begin() as conn:
                owner = declarations.reserve_connection(conn, connection, login)
        except DBAPIError as error:
            if failures.sqlstate(error) != failures.INVALID_PARAMETER_VALUE:
                raise
            return errors.connection_login_invalid(login).to_json()
        return dict(NO_CONTENT) if owner == login else errors.connection_reserved(connection).to_json()

    def claim_connection(self, connection: str) -> dict[str, Any]:
        """Claim ``connection`` for this database login, as its connector does when it starts: 204
        when it is the login's (reserved for it, decisions #123), else the 403."""
        try:
            with self.engine.begin() as conn:
                declarations.claim_connection(conn, connection)
        except errors.DittoError as error:
            return error.to_json()
        return dict(NO_CONTENT)

    # --- acknowledgements -------------------------------------------------------------

    def acknowledge(self, subscriber: str, ack: dict[str, Any] | str | bytes) -> dict[str, Any]:
        """Store a subscriber's single or aggregated acknowledgement; 204, or 400 / 404 / 412.

        With an ``ack-token`` header the ack answers that hand-out of a pull (A.3): a superseded
        token is 412 and stores nothing, a token never issued for this subscriber and signal is
        400, the same token again stores only labels it did not carry before.
        """
        try:
            declarations.check_subscriber_id(subscriber)
            loaded = envelopes.load_envelope(ack, self.settings.max_envelope_bytes)
            incoming = envelopes.parse_acknowledgement(loaded)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            if not declarations.may_act_for(conn, subscriber):
                return errors.subscriber_not_yours(subscriber).to_json()
            declared = declarations.labels_declared_by(conn, subscriber)
            for received in incoming.acks:
                if received.label not in declared:
                    return errors.label_not_declared(received.label).to_json()
            target = acks.lock_request(conn, incoming.correlation_id)
            if target is None:
                return errors.request_not_found(incoming.correlation_id).to_json()
            if incoming.thing_id != target.thing_id:  # decisions #40: stored nowhere
                return errors.ack_thing_mismatch(incoming.thing_id, target.thing_id, incoming.correlation_id).to_json()
            if incoming.channel != target.channel:  # a twin command's ack on a live topic, or the reverse
                return errors.ack_channel_mismatch(incoming.channel, target.channel, incoming.correlation_id).to_json()
            try:
                to_store = self._answer_handout(conn, subscriber, target.id, incoming.token, incoming.acks)
            except errors.DittoError as error:
                return error.to_json()
            decided = acks.is_decided(conn, target.id, target.attempt)
            for received in to_store:
                acks.store_ack(conn, target, received, subscriber, decided)
        return dict(NO_CONTENT)

    def respond(self, subscriber: str, response: dict[str, Any] | str | bytes) -> dict[str, Any]:
        """Store a live response to a live command or message; 204, or a 4xx error.

        The first response fulfils ``live-response`` (and is the plain response the requester
        gets when that is all it asked for); later ones are kept as duplicates (A.2.8). One that
        does not answer its signal is refused, and kept as invalid all the same.
        """
        try:
            answer = self._live_response(subscriber, response)
        except errors.DittoError as error:
            return error.to_json()
        with self.engine.begin() as conn:
            try:
                self._take_live_response(conn, subscriber, answer)
            except errors.DittoError as error:  # the transaction commits: an invalid response stays kept
                return error.to_json()
        return dict(NO_CONTENT)

    def _live_response(self, subscriber: str, response: dict[str, Any] | str | bytes) -> envelopes.LiveResponse:
        """The subscriber id checked and the response parsed, before any transaction (400 / 413)."""
        declarations.check_subscriber_id(subscriber)
        loaded = envelopes.load_envelope(response, self.settings.max_envelope_bytes)
        return envelopes.parse_live_response(loaded)

    def _take_live_response(self, conn: Connection, subscriber: str, answer: envelopes.LiveResponse) -> None:
        """Store ``subscriber``'s live response in ``conn``'s transaction, or raise why it is refused."""
        _check_live_responder(conn, subscriber)
        target = _live_signal(conn, answer.correlation_id)
        _check_handed(conn, subscriber, target.id, answer)
        ack = Ack(labels.LIVE_RESPONSE, answer.status, answer.value, answer.headers)
        signal = live_responses.LiveSignal(target.thing_id, target.kind, target.action, target.path)
        mismatch = live_responses.mismatch(signal, answer)
        if mismatch is not None:  # refused, and kept for the audit (and a 408's description)
            acks.store_ack(conn, target, ack, subscriber, decided=False, invalid=mismatch)
            raise errors.live_response_invalid(answer.correlation_id, mismatch)
        self._store_live_ack(conn, subscriber, target, answer.token, ack)

    def _store_live_ack(self, conn: Connection, subscriber: str, target: Any, token: str | None, ack: Ack) -> None:
        """Record that ``subscriber`` answered its hand-out; store the response unless that hand-out
        answered already, and while the attempt is undecided make it the signal's response."""
        to_store = self._answer_handout(conn, subscriber, target.id, token, (ack,))
        decided = acks.is_decided(conn, target.id, target.attempt)
        if to_store:
            acks.store_ack(conn, target, ack, subscriber, decided)
            if not decided:
                acks.store_live_response(conn, target.id)

    def _answer_handout(
        self, conn: Connection, subscriber: str, signal_id: int, token: str | None, answered: Sequence[Ack]
    ) -> list[Ack]:
        """Record that ``subscriber`` answered its hand-out of the signal; the acks to store."""
        now = self._clock_now()  # None: the statements use the database's clock (no extra round trip)
        if token is None:
            handouts.close_without_token(conn, subscriber, signal_id, now)
            return list(answered)
        new = handouts.answer(conn, subscriber, signal_id, token, [a.label for a in answered], now)
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
        declarations.check_subscriber_id(subscriber)
        limit = subscriptions.pull_size(max)
        lease_ms = subscriptions.lease_ms(lease)
        with self.engine.begin() as conn:
            now = handouts.transaction_now(conn, self._clock_now())
            return handouts.pull(conn, subscriber, limit=limit, lease_ms=lease_ms, now=now)

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
            row = results.latest(conn, correlation_id)
        if row is None:
            return self.unknown(correlation_id)
        if row.status is None:
            return None
        return results.answer(row)

    def search(self, expression: str, namespaces: Sequence[str] | None = None, *, after: str | None = None,
               limit: int | None = None) -> dict[str, Any]:
        """Indexed things matching an RQL filter: 200 with their ids (a page: at most ``limit``
        after the id ``after``), or 400 for a bad filter."""
        try:
            declarations.check_namespaces(namespaces)
            with self.engine.connect() as conn:
                items = search.search(conn, expression, namespaces, after=after, limit=limit)
        except errors.DittoError as error:
            return error.to_json()
        return {"status": 200, "items": items}

    def count(self, expression: str, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
        """How many indexed things match an RQL filter: 200 with ``count``, or 400 for a bad filter."""
        try:
            declarations.check_namespaces(namespaces)
            with self.engine.connect() as conn:
                return {"status": 200, "count": search.count(conn, expression, namespaces)}
        except errors.DittoError as error:
            return error.to_json()

    def show(self, correlation_id: str) -> dict[str, Any] | None:
        """Everything stored of one signal, read in one transaction (one snapshot): its row,
        attempts, acks, hand-outs, where it stands (``state``), its answer (``result``) and its
        ``timeline``, oldest checkpoint first; None for an unknown correlation id. An archived
        signal is read from the archive, and says where (``archived``: its seal and archive)."""
        if not _could_be_stored(correlation_id):
            return None
        with self.engine.connect() as conn, conn.begin():
            shown = results.show(conn, correlation_id)
            archived = shown is None and archive_lookups.reaches_archive(conn, correlation_id)
        return archive_lookups.show(self.engine, correlation_id) if archived else shown

    @staticmethod
    def unknown(correlation_id: str) -> dict[str, Any]:
        """The answer for a correlation id no stored signal has: 400 for one no signal could have,
        else 404 (what ``result`` answers; ``ackstore show`` too)."""
        try:
            limits.check_correlation_id(correlation_id)
        except errors.DittoError as error:
            return error.to_json()
        return errors.request_not_found(correlation_id).to_json()

    def stored_signal(self, correlation_id: str) -> dict[str, Any] | None:
        """What ``show`` reads of one signal, without its timeline (None if unknown)."""
        shown = self.show(correlation_id)
        if shown is not None:
            del shown["timeline"]
        return shown


def _check_live_responder(conn: Connection, subscriber: str) -> None:
    """Who may respond: a declared subscriber (404), this login's (403), that consumes the live
    channel (403)."""
    channels = declarations.channels_of(conn, subscriber)
    if channels is None:
        raise errors.subscriber_not_found(subscriber)
    declarations.check_acting_for(conn, subscriber)
    if "live" not in channels:
        raise errors.live_response_forbidden(subscriber)


def _live_signal(conn: Connection, correlation_id: str) -> Any:
    """The current attempt of the live signal a response names, share-locked (``acks.lock_request``):
    404 for an unknown correlation id, 400 for a twin command's."""
    target = acks.lock_request(conn, correlation_id)
    if target is None:
        raise errors.request_not_found(correlation_id)
    if target.channel != "live":
        raise errors.live_response_invalid(correlation_id, "its correlation-id belongs to a twin command")
    return target


def _check_handed(conn: Connection, subscriber: str, signal_id: int, answer: envelopes.LiveResponse) -> None:
    """Decisions #40: only a subscriber that was handed the signal may answer it. With a token, the
    hand-out it names (400 never issued, 412 superseded); without one, any hand-out (403)."""
    if answer.token is not None:
        handouts.checked_handout(conn, subscriber, signal_id, answer.token)
    elif not handouts.was_handed(conn, subscriber, signal_id):
        raise errors.live_response_not_handed(subscriber, answer.correlation_id)


def _could_be_stored(correlation_id: str) -> bool:
    """Whether a stored signal could have this correlation id (text PostgreSQL holds, in bounds)."""
    try:
        limits.check_text("correlation-id", correlation_id)
    except errors.DittoError:
        return False
    return True
