"""Who a request acts as (decisions #134), on a PostgreSQL that checks passwords (SCRAM): the login
whose Basic credentials the server accepted, and no other; refused credentials are 401 and store
nothing; a login without the ingest role's privileges is 403; no password reaches the door's log."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support import password_server
from tests.support.door import DoorProcess, running_door
from tests.support.password_server import PLAIN_USER, PasswordServer

ALICE, BOB, NOBODY = "alice", "bob", "nobody"
PASSWORDS = {ALICE: "alice-s3cret", BOB: "bob-s3cret", NOBODY: "nobody-s3cret"}
THING = "org.acme:lamp-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[PasswordServer]:
    folder = tmp_path_factory.mktemp("password-server")
    server = password_server.start(folder)
    admin = create_engine(server.url(PLAIN_USER).sqlalchemy(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SET password_encryption = 'scram-sha-256'"))
        for login, password in PASSWORDS.items():  # names and passwords of this module, never input
            groups = " IN ROLE ackstore_ingest" if login != NOBODY else ""
            conn.execute(text(f"CREATE ROLE {login} LOGIN PASSWORD '{password}'{groups}"))
    admin.dispose()
    yield server
    password_server.stop(folder)


@pytest.fixture(scope="module")
def door(server: PasswordServer) -> Iterator[DoorProcess]:
    with running_door(server.url(PLAIN_USER).text(), trusting=False) as process:
        yield process


def _signals(server: PasswordServer) -> list[tuple[str, str]]:
    engine = create_engine(server.url(PLAIN_USER).sqlalchemy())
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT correlation_id, source FROM signals ORDER BY id")).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def _put(door: DoorProcess, auth: tuple[str, str] | None, correlation_id: str) -> httpx.Response:
    return httpx.put(f"{door.url}/api/2/things/{THING}", json={}, auth=auth, timeout=30,
                     headers={"correlation-id": correlation_id, "response-required": "false"})


def test_a_request_acts_as_the_login_the_database_accepted_and_as_no_other(door, server) -> None:
    before = _signals(server)
    assert _put(door, (ALICE, PASSWORDS[ALICE]), "by-alice").status_code == 202
    whoami = httpx.get(f"{door.url}/api/2/whoami", auth=(BOB, PASSWORDS[BOB]), timeout=30)
    assert whoami.json() == {"defaultSubject": f"postgres:{BOB}", "subjects": [f"postgres:{BOB}"]}
    for auth in [(ALICE, PASSWORDS[BOB]), (BOB, PASSWORDS[ALICE]), ("mallory", "x"), (ALICE, PASSWORDS[ALICE] + " ")]:
        refused = _put(door, auth, f"as-{auth[0]}")
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"] == "gateway:authentication.failed"
    assert _signals(server) == [*before, ("by-alice", "api")]


def test_a_known_login_with_a_wrong_password_is_refused_after_it_was_accepted(door, server) -> None:
    """A login's engine is kept with its password's hash: another password connects afresh, and fails."""
    assert httpx.get(f"{door.url}/api/2/whoami", auth=(ALICE, PASSWORDS[ALICE]), timeout=30).status_code == 200
    assert httpx.get(f"{door.url}/api/2/whoami", auth=(ALICE, "guess"), timeout=30).status_code == 401
    assert httpx.get(f"{door.url}/api/2/whoami", auth=(ALICE, PASSWORDS[ALICE]), timeout=30).status_code == 200


def test_a_login_without_the_ingest_roles_privileges_is_403_and_stores_nothing(door, server) -> None:
    before = _signals(server)
    refused = _put(door, (NOBODY, PASSWORDS[NOBODY]), "by-nobody")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == "database.permission.denied"
    assert _signals(server) == before


def test_no_password_reaches_the_doors_log(door, server) -> None:
    _put(door, (ALICE, "a-wrong-password"), "wrong")
    log = "".join(door.log)
    assert not [password for password in [*PASSWORDS.values(), "a-wrong-password"] if password in log]


def test_a_login_the_database_did_not_ask_a_password_of_is_refused_unproven(door, server) -> None:
    """``plain`` is trusted by the server (pg_hba's trust line): connecting proves nothing, so the
    door — not started --trusting-database — refuses whatever password is given."""
    refused = _put(door, (PLAIN_USER, "whatever"), "by-plain")
    assert refused.status_code == 401
    assert "did not ask for this login's password" in refused.json()["message"]
    assert refused.headers["www-authenticate"] == 'Basic realm="ackstore"'
