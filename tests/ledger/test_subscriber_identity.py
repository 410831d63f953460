"""Who a subscriber is (issue 26, decisions #97): the database login that declared it first owns
it, and another login can neither declare, pull, ack nor respond as it — through the Python API,
the CLI, and the write functions called directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ackstore.ledger.store import AckStore
from ackstore.rules.errors import DittoError
from tests.support.cli import run
from tests.support.ledger import ack_message
from tests.support.live_signals import live_message
from tests.support.logins import as_login, two_logins  # noqa: F401 — two_logins is a fixture

FORBIDDEN = "acknowledgement:subscriber.forbidden"


@pytest.fixture()
def stores(engine, database_url: str, two_logins) -> Iterator[tuple[AckStore, AckStore]]:
    """A's and B's stores, on the migrated and emptied test database (``engine``)."""
    a, b = (AckStore.connect(as_login(database_url, login)) for login in two_logins)
    yield a, b
    a.close()
    b.close()


def _handed_to_a(store: AckStore, a: AckStore) -> dict:
    """A live message submitted, handed to A's subscriber "a" under a lease."""
    assert a.declare("a", [], channels=["live"])["status"] == 204
    assert store.submit(live_message("l1"))["status"] == 202
    (message,) = a.pull("a")
    return message


def _response(message: dict) -> dict:
    return {"topic": message["topic"], "path": "/outbox/messages/ask", "status": 200, "value": "ok",
            "headers": {"correlation-id": "l1", "ack-token": message["headers"]["ack-token"]}}


def test_only_the_login_that_declared_a_subscriber_declares_it_again(stores) -> None:
    a, b = stores
    assert a.declare("a", ["a:done"]) == {"status": 204}
    answer = b.declare("a", ["a:done", "a:more"])
    assert answer["status"] == 403 and answer["error"] == FORBIDDEN and "<a>" in answer["message"]
    assert a.declare("a", ["a:done", "a:more"]) == {"status": 204}
    assert b.declare("b", ["b:done"]) == {"status": 204}  # a subscriber of its own
    with b.engine.begin() as conn:  # the function itself, called directly: nothing declared
        assert conn.execute(text("SELECT declare_subscriber('a', NULL, NULL, NULL, '{live}', '{}')")).scalar() is None
    with a.engine.connect() as conn:
        assert conn.execute(text("SELECT channels, owner_login FROM subscribers WHERE id = 'a'")).one() == (
            ["live", "twin"], a.engine.url.username)


def test_another_login_cannot_pull_ack_or_respond_as_the_subscriber(store: AckStore, stores) -> None:
    a, b = stores
    message = _handed_to_a(store, a)
    with pytest.raises(DittoError) as pulled:
        b.pull("a", lease="1ms")
    assert pulled.value.status == 403 and pulled.value.error == FORBIDDEN
    assert b.respond("a", _response(message))["error"] == FORBIDDEN
    assert b.acknowledge("a", ack_message("l1", "a:done", channel="live"))["error"] == FORBIDDEN
    # B as itself with A's token: the hand-out is A's, never B's
    assert b.declare("b", [], channels=["live"]) == {"status": 204}
    assert b.respond("b", _response(message))["status"] in (400, 403)
    assert a.respond("a", _response(message)) == {"status": 204}  # A still answers its hand-out
    shown = store.stored_signal("l1")
    assert [(k["label"], k["issuer"]) for k in shown["acks"]] == [("live-response", "a")]


# Each write function a subscriber uses, called directly as B for A's subscriber.
DIRECT = [
    "SELECT * FROM lease_ready('a', now(), 10, 60000)",
    "SELECT close_decided_handouts('a', now())",
    "SELECT lock_event_position('a')",
    "SELECT move_event_position('a', 1000)",
    "SELECT close_handouts('a', ARRAY[1]::bigint[], now())",
    "SELECT * FROM lock_handout('a', 1)",
    "SELECT answer_handout('a', 1, 1, '{}', NULL)",
    "SELECT close_handout('a', 1, NULL)",
    "SELECT store_ack(1, 1, 'live-response', 200::smallint, NULL, '{}', 'a', 'counted', NULL)",
    "SELECT * FROM hand_out_events('[{\"subscriber_id\": \"a\", \"signal_id\": 1, \"attempt\": 1, \"event_id\": 1, "
    "\"token_key\": \"k\", \"available_at\": \"2030-01-01T00:00:00+00:00\", \"leased_at\": \"2030-01-01T00:00:00+00:00\"}]')",
]


@pytest.mark.parametrize("sql", DIRECT)
def test_the_write_functions_refuse_another_logins_subscriber(store: AckStore, stores, sql: str) -> None:
    a, b = stores
    _handed_to_a(store, a)
    with pytest.raises(DBAPIError) as refused:
        with b.engine.begin() as conn:
            conn.execute(text(sql))
    assert refused.value.orig.pgcode == "42501" and "belongs to another login" in str(refused.value.orig)


def test_the_cli_acts_as_the_login_of_its_url(store: AckStore, stores, database_url: str, two_logins,
                                              tmp_path) -> None:
    a, _ = stores
    message = _handed_to_a(store, a)
    url_of_b = as_login(database_url, two_logins[1])
    code, answer = run("pull", "a", url=url_of_b)
    assert code != 0 and answer["status"] == 403 and answer["error"] == FORBIDDEN
    response = tmp_path / "response.json"
    response.write_text(json.dumps(_response(message)))
    code, answer = run("respond", "a", str(response), url=url_of_b)
    assert code != 0 and answer["error"] == FORBIDDEN
    code, answer = run("respond", "a", str(response), env={"ACKSTORE_DATABASE_URL": as_login(database_url, two_logins[0])})
    assert code == 0 and answer == {"status": 204}


def test_a_password_on_the_command_line_is_warned_of() -> None:
    """The CLI takes a subscriber's credential from ~/.pgpass or the environment; one typed into
    --database-url is in ps for every user to read."""
    completed = subprocess.run([sys.executable, "-m", "ackstore.cli", "--database-url",
                                "postgresql://someone:s3cret@127.0.0.1:1/nowhere", "db", "current"],
                               capture_output=True, text=True, timeout=120)
    assert "visible to every user of this machine" in completed.stderr
    assert "s3cret" not in completed.stdout + completed.stderr
