"""Handing twin events and live signals to subscribers, with leases (A.3).

Two sources feed a subscriber:

* twin events, read from the event log after the subscriber's ``event_position``. The log has
  one writer at a time (apply_twin's merge, under its step lock), so its ids commit in order
  and a position never skips an event that commits later;
* live commands and messages, which have many concurrent writers: ``fan_out_live`` writes a
  ready hand-out (a row of the ``deliveries`` table, which keeps its SQL name) per matching live
  subscriber in the transaction that stores the signal, so nothing depends on commit order.

A pull hands out ready rows (never handed out, or whose lease ran out) with ``FOR UPDATE SKIP
LOCKED`` — competing consumers of one subscriber never get the same row — and then new events
from the position, which one consumer at a time advances. Its cost follows what it returns:
the pending rows (a partial index) and the events after the position, never the history.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any, Sequence

from sqlalchemy import Connection, select

from ackstore.ledger import declarations
from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.schema import deliveries  # the hand-outs: the table keeps its SQL name
from ackstore.rules import errors, jsontext, limits, subscriptions, wire
from ackstore.rules.acks import ABSENT
from ackstore.rules.envelopes import Signal

EVENT_SCAN = 500  # events read per round while looking for ones that match the subscriber


def _sql(name: str) -> Any:
    return ledger_statement("handouts", name)


def transaction_now(conn: Connection, clock: datetime | None) -> datetime:
    return conn.execute(_sql("now"), {"now": clock}).scalar_one()


def scan_budget(limit: int) -> int:
    """Events one pull may read past while looking for ones its subscriber receives: enough for a
    selective filter, bounded so that one pull stays short (the rest waits for the next pull)."""
    return max(1000, 20 * limit)


def pull(
    conn: Connection, subscriber_id: str, *, limit: int, lease_ms: int, now: datetime, max_scan: int | None = None
) -> list[dict[str, Any]]:
    """Hand out up to ``limit`` signals to ``subscriber_id``, each under a new lease token; at
    most ``max_scan`` events are read past (default: :func:`scan_budget`)."""
    subscriber = conn.execute(_sql("subscriber"), {"subscriber": subscriber_id}).mappings().first()
    if subscriber is None:
        raise errors.subscriber_not_found(subscriber_id)
    declarations.check_acting_for(conn, subscriber_id)
    refusal = subscriptions.filter_refusal(subscriptions.Subscriber.from_row(subscriber))
    if refusal is not None:  # before anything moves: declared again, it pulls from where it was
        raise refusal
    params = {"subscriber": subscriber_id, "now": now, "lease_ms": lease_ms}
    conn.execute(_sql("decided_ready"), params)
    handed = [dict(row) for row in conn.execute(_sql("ready"), params | {"limit": limit}).mappings()]
    handed = _within_filter(conn, subscriber, handed, params)
    if len(handed) < limit and "twin" in subscriber["channels"]:
        budget = scan_budget(limit) if max_scan is None else max_scan
        handed += _hand_out_new_events(conn, subscriber, limit - len(handed), params, budget)
    if not handed:
        return []
    _finish_unawaited(conn, subscriber, handed, params)
    return _messages(conn, handed, subscriber["declared"])


def _within_filter(conn: Connection, subscriber: Any, handed: list[dict[str, Any]],
                   params: dict[str, Any]) -> list[dict[str, Any]]:
    """The leased hand-outs the subscriber receives: a live one another login's submission made
    (fan_out_live, in that login's process) is checked again against this subscriber's filter,
    which the database cannot check (issue 37); one outside it is closed, never handed out."""
    if not handed or subscriber["filter"] is None:
        return handed
    spec = subscriptions.Subscriber.from_row(subscriber)
    views = conn.execute(_sql("live_views"), {"signal_ids": [row["signal_id"] for row in handed]}).mappings()
    outside = {view["signal_id"] for view in views
               if subscriptions.exclusion(spec, _live_view(view), now=params["now"]) is not None}
    if outside:
        conn.execute(_sql("close"), params | {"signal_ids": sorted(outside)})
    return [row for row in handed if row["signal_id"] not in outside]


def _live_view(signal: Any) -> subscriptions.SignalView:
    return subscriptions.SignalView(signal["kind"], signal["thing_id"], signal["action"], signal["path"],
                                    _filtered_value(signal["value"]))


def _filtered_value(text: str | None) -> Any:
    """A value a filter sees, read from its text by msgspec (a scan reads hundreds), to the depth
    every reader of the ledger reads to (limits.MAX_READ_DEPTH): deeper, a ledger from before the
    limits holds it, and the rest is its text."""
    return None if text is None else jsontext.loads_within(text, limits.MAX_READ_DEPTH, jsontext.loads)


def _hand_out_new_events(
    conn: Connection, subscriber: Any, wanted: int, params: dict[str, Any], max_scan: int
) -> list[dict[str, Any]]:
    """Events after the subscriber's position that it receives, up to ``wanted``; the position
    moves past every event read, handed out or filtered out."""
    spec = subscriptions.Subscriber.from_row(subscriber)
    position = conn.execute(_sql("lock_position"), params).scalar_one()
    chosen: list[dict[str, Any]] = []
    scanned = 0
    while len(chosen) < wanted and scanned < max_scan:
        events = conn.execute(
            _sql("events_after"), {"position": position, "scan": min(EVENT_SCAN, max_scan - scanned)}
        ).mappings().all()
        for event in events:
            scanned += 1
            position = event["event_id"]
            if subscriptions.exclusion(spec, _event_view(event), now=params["now"]) is None:
                chosen.append(dict(event))
                if len(chosen) == wanted:
                    break
        if len(events) < EVENT_SCAN:
            break
    conn.execute(_sql("move_position"), params | {"position": position})
    if not chosen:
        return []
    rows = [
        {
            "subscriber_id": params["subscriber"],
            "signal_id": event["signal_id"],
            "attempt": event["attempt"],
            "event_id": event["event_id"],
            "token_key": secrets.token_hex(16),
            "available_at": _lease_end(params).isoformat(),
            "leased_at": params["now"].isoformat(),
        }
        for event in chosen
    ]
    inserted = conn.execute(_sql("hand_out_events"), {"rows": jsontext.dumps(rows)})
    return [dict(row) for row in inserted.mappings()]


def _lease_end(params: dict[str, Any]) -> datetime:
    return params["now"] + timedelta(milliseconds=params["lease_ms"])


def _event_view(event: Any) -> subscriptions.SignalView:
    return subscriptions.event_view(event["thing_id"], event["action"], event["path"], _filtered_value(event["value"]))


def _finish_unawaited(conn: Connection, subscriber: Any, handed: list[dict[str, Any]], params: dict[str, Any]) -> None:
    """A hand-out that awaits no answer from this subscriber is done at once (QoS 0 for it)."""
    ids = [row["signal_id"] for row in handed]
    requested = conn.execute(_sql("requested_now"), {"signal_ids": ids}).mappings()
    unawaited = [
        row["signal_id"]
        for row in requested
        if not subscriptions.expects_ack(row["requested_acks"], subscriber["declared"], live=row["live"])
    ]
    if unawaited:
        conn.execute(_sql("close"), params | {"signal_ids": unawaited})


def _messages(conn: Connection, handed: list[dict[str, Any]], declared: Sequence[str]) -> list[dict[str, Any]]:
    by_id = {row["signal_id"]: row for row in handed}
    stored = conn.execute(_sql("messages"), {"signal_ids": list(by_id)}).mappings()
    messages = [_message(row, by_id[row["signal_id"]], declared) for row in stored]
    return [message for _, message in sorted(messages, key=lambda pair: pair[0])]


def _message(row: Any, handout: dict[str, Any], declared: Sequence[str]) -> tuple[int, dict[str, Any]]:
    """One signal in Ditto Protocol form, as its subscriber receives it."""
    token = subscriptions.lease_token(handout["token_key"], handout["handouts"])
    if row["kind"] == "twin-command":
        message: dict[str, Any] = {
            "topic": f"{wire.thing_topic_prefix(row['thing_id'])}/twin/events/{row['event_action']}",
            "headers": subscriptions.outbound_headers(row["event_headers"], token, handout["handouts"], declared),
            "path": row["event_path"],
            "revision": row["revision"],
            "timestamp": row["event_time"].isoformat(),
        }
        if row["event_value"] is not None:
            message["value"] = row["event_value"]
    else:
        message = {
            "topic": row["topic"],
            "headers": subscriptions.outbound_headers(row["headers"], token, handout["handouts"], declared),
            "path": row["path"],
        }
        if row["has_value"]:
            message["value"] = row["value"]
    return row["signal_id"], message


# --- live signals: fan-out when stored --------------------------------------------------------


def fan_out_live(conn: Connection, stored: Sequence[tuple[int, Signal]]) -> None:
    """Make new live signals (id, signal) ready for every live subscriber each one matches."""
    live_subscribers = [subscriptions.Subscriber.from_row(row) for row in conn.execute(_sql("live_subscribers")).mappings()]
    rows = []
    for signal_id, signal in stored:
        value = None if signal.value is ABSENT else signal.value
        view = subscriptions.SignalView(signal.kind, signal.thing_id, signal.action, signal.path, value)
        rows.extend(
            {"subscriber_id": sub.id, "signal_id": signal_id}  # the token key is drawn in SQL
            for sub in live_subscribers
            if subscriptions.exclusion(sub, view) is None
        )
    if rows:
        conn.execute(_sql("hand_out_live"), {"rows": jsontext.dumps(rows)})


def handouts_of(conn: Connection, signal_id: int) -> list[dict[str, Any]]:
    """Who the signal was handed to, how often, and whether that subscriber answered (A.3)."""
    rows = conn.execute(
        select(deliveries.c.subscriber_id, deliveries.c.handouts, deliveries.c.available_at,
               deliveries.c.done_at, deliveries.c.answered_handout)
        .where(deliveries.c.signal_id == signal_id)
        .order_by(deliveries.c.subscriber_id)
    ).mappings()
    return [
        {
            "subscriber": row["subscriber_id"],
            "deliveryCount": row["handouts"],
            "answered": row["answered_handout"] is not None,
            "doneAt": _iso(row["done_at"]),
            "leasedUntil": None if row["done_at"] is not None or not row["handouts"] else _iso(row["available_at"]),
        }
        for row in rows
    ]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# --- answers: acks and live responses ------------------------------------------------------------


def answer(
    conn: Connection, subscriber: str, signal_id: int, token: object, answered: Sequence[str], now: datetime | None
) -> list[str]:
    """Check an answer's lease token and record it; the labels of ``answered`` to store.

    The current token → all of them (or, repeated after a success, the ones it did not answer yet:
    a retransmission stores nothing); a superseded one → 412; one this hand-out never issued → 400.
    """
    row, handout = checked_handout(conn, subscriber, signal_id, token)
    already = set(row["answered_labels"]) if row["answered_handout"] == handout else set()
    new = [label for label in answered if label not in already]
    conn.execute(
        _sql("answer"),
        {"subscriber": subscriber, "signal_id": signal_id, "handout": handout, "labels": new, "now": now},
    )
    return new


def checked_handout(conn: Connection, subscriber: str, signal_id: int, token: object) -> tuple[Any, int]:
    """The hand-out row (locked) and the hand-out ``token`` names: 400 for a token this hand-out
    never issued, 412 for a superseded one. Nothing is recorded."""
    row = conn.execute(_sql("lock_handout"), {"subscriber": subscriber, "signal_id": signal_id}).mappings().first()
    if row is None:
        raise errors.token_invalid(token)
    handout = subscriptions.token_handout(token, row["token_key"])
    if not 1 <= handout <= row["handouts"]:
        raise errors.token_invalid(token)
    if handout < row["handouts"]:
        raise errors.lease_superseded()
    return row, handout


def was_handed(conn: Connection, subscriber: str, signal_id: int) -> bool:
    """Whether ``subscriber`` was ever handed the signal (pulled it)."""
    row = conn.execute(_sql("lock_handout"), {"subscriber": subscriber, "signal_id": signal_id}).mappings().first()
    return row is not None and row["handouts"] > 0


def close_without_token(conn: Connection, subscriber: str, signal_id: int, now: datetime | None) -> None:
    conn.execute(_sql("close_without_token"), {"subscriber": subscriber, "signal_id": signal_id, "now": now})

