"""Where a signal stands is one answer (signal_state, docs/signal-states.md) on every surface:
`show`, `show --json`, the timeline's title, the Ledger page, the watermarks and the unsettled
list — for every signal of generated ledgers; and a redelivered or dead-lettered signal is never
settled anywhere."""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.ledger import reports
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.reporting.terminal import render_timeline
from ackstore.rules import settlement
from ackstore.rules.settings import Settings
from ackstore.rules.settlement import SignalState
from ackstore.ui import ledger_page

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
EXAMPLES = int(os.environ.get("ACKSTORE_PROPERTY_EXAMPLES", "25"))


@dataclass(frozen=True)
class Generated:
    """One signal's facts: its source, its command's response, and its current attempt's path."""

    source: str  # "api" or a connection
    response: str | None  # None: not applied; "ok" / "failed"
    redelivered: bool  # attempt 1 was redelivered and carried out; the facts below are attempt 2's
    decided: bool
    decision: str | None
    carried_out: bool

    @property
    def api(self) -> str:
        return "http" if self.source == "api" else "connectivity"

    def expected(self) -> SignalState:
        return settlement.signal_state(
            needs_transport=settlement.needs_transport_settlement(self.api, self.source),
            response_failed=None if self.response is None else self.response == "failed",
            decided=self.decided, decision=self.decision if self.decided else None,
            carried_out=self.carried_out)


@st.composite
def generated(draw: st.DrawFn) -> Generated:
    source = draw(st.sampled_from(["api", "plant-a", "plant-b"]))
    decided = draw(st.booleans())
    transport = source != "api" and decided
    decision = draw(st.sampled_from([None, "ack", "reject", "redeliver", "dead-letter"])) if transport else None
    return Generated(source, draw(st.sampled_from([None, "ok", "failed"])),
                     source != "api" and draw(st.booleans()), decided, decision,
                     decision is not None and draw(st.booleans()))


def seed(engine: Engine, signals: list[Generated]) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE signals, attempts, acks, command_responses, ledger_batches, request_results, "
                          "settlements RESTART IDENTITY CASCADE"))
        batch = conn.execute(text("INSERT INTO ledger_batches (step, committed_at) VALUES ('apply_twin', :t) "
                                  "RETURNING id"), {"t": T0 + timedelta(seconds=1)}).scalar_one()
        for n, signal in enumerate(signals):
            received = T0 + timedelta(seconds=n)
            signal_id = conn.execute(text(
                "INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action, thing_id, "
                "topic, path, value, headers, requested_acks, response_required, timeout_ms, received_at, deadline_at) "
                "VALUES (:source, :name, :name, :api, 'twin', 'twin-command', 'modify', 'org.acme:t', "
                "'org.acme/t/things/twin/commands/modify', '/attributes/n', '1', '{}', '{}', false, 60000, "
                ":received, :deadline) RETURNING id"),
                {"source": signal.source, "name": f"s{n}", "api": signal.api, "received": received,
                 "deadline": received + timedelta(minutes=1)}).scalar_one()
            if signal.response is not None:
                conn.execute(text("INSERT INTO command_responses (signal_id, status, is_error, batch_id) "
                                  "VALUES (:s, :st, :e, :b)"),
                             {"s": signal_id, "st": 409 if signal.response == "failed" else 204,
                              "e": signal.response == "failed", "b": batch})
            attempt = 1
            if signal.redelivered:
                _decide(conn, signal_id, 1, received, "redeliver", carried_out=True)
                attempt = 2
                conn.execute(text("INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at) "
                                  "VALUES (:s, 2, '{}', :o, :d)"),
                             {"s": signal_id, "o": received + timedelta(seconds=30), "d": received + timedelta(minutes=2)})
            if signal.decided:
                _decide(conn, signal_id, attempt, received, signal.decision, signal.carried_out)


def _decide(conn, signal_id: int, attempt: int, received: datetime, decision: str | None, carried_out: bool) -> None:  # type: ignore[no-untyped-def]
    conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, decided_at, batch_id) "
                      "VALUES (:s, :n, 200, '{}', 'acks', :at, 1)"),
                 {"s": signal_id, "n": attempt, "at": received + timedelta(seconds=5 + 30 * (attempt - 1))})
    if decision is not None:
        conn.execute(text("INSERT INTO settlements (signal_id, attempt, decision, decided_at, carried_out_at) "
                          "VALUES (:s, :n, :d, :at, :c)"),
                     {"s": signal_id, "n": attempt, "d": decision, "at": received + timedelta(seconds=10),
                      "c": received + timedelta(seconds=20) if carried_out else None})


def _printed(action) -> str:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        action()
    return out.getvalue()


def surfaces(store: AckStore, database_url: str, correlation_id: str) -> dict[str, str]:
    """Where each surface says the signal stands."""
    shown = store.show(correlation_id)
    assert shown is not None
    as_json = json.loads(_printed(lambda: cli.main(["--database-url", database_url, "show", correlation_id, "--json"])))
    title = _printed(lambda: render_timeline(shown, shown["timeline"])).splitlines()[0]
    page = ledger_page.render(ledger_page.gather(store, T0 + timedelta(hours=1), correlation_id))
    page_title = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p id="signal-title">(.*?)</p>', page, re.S).group(1)))
    return {"show": shown["state"], "show --json": as_json["state"],
            "timeline": title.rsplit(" — ", 1)[1].split(",")[0].split(";")[0].strip(),
            "page": page_title.rsplit(" — ", 1)[1].split(",")[0].strip()}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(signals=st.lists(generated(), min_size=1, max_size=6))
def test_every_surface_says_where_a_signal_stands_alike(engine: Engine, database_url: str,
                                                        signals: list[Generated]) -> None:
    seed(engine, signals)
    store = AckStore(engine, Settings())
    window = Window(T0 - timedelta(minutes=1), T0 + timedelta(hours=1))
    with engine.connect() as conn:
        unsettled = {row["correlation_id"]: row["why"] for row in reports.unsettled(conn, window, 1000)}
        marks = {row["source"]: row for row in reports.watermarks(conn, window, 1000)}
    for n, signal in enumerate(signals):
        cid = f"s{n}"
        expected = signal.expected().value
        said = surfaces(store, database_url, cid)
        said["unsettled list"] = unsettled.get(cid, SignalState.SETTLED.value)
        assert said == dict.fromkeys(said, expected), (signal, said)
        if signal.decision in ("redeliver", "dead-letter") or signal.redelivered and not signal.decided:
            assert expected != SignalState.SETTLED.value
    for source, mark in marks.items():
        ours = [s for s in signals if s.source == source]
        assert mark["settled"] == sum(s.expected() is SignalState.SETTLED for s in ours)


def test_a_carried_out_dead_letter_is_dead_lettered_on_every_surface(engine: Engine, database_url: str) -> None:
    signal = Generated("plant-a", "ok", False, True, "dead-letter", True)
    seed(engine, [signal])
    store = AckStore(engine, Settings())
    assert surfaces(store, database_url, "s0") == dict.fromkeys(
        ("show", "show --json", "timeline", "page"), SignalState.DEAD_LETTERED.value)
    with engine.connect() as conn:
        window = Window(T0 - timedelta(minutes=1), T0 + timedelta(hours=1))
        assert [(row["correlation_id"], row["why"]) for row in reports.unsettled(conn, window, 10)] == [
            ("s0", "dead-lettered")]
        assert [(row["settled"], row["unsettled"]) for row in reports.watermarks(conn, window, 10)] == [(0, 1)]
