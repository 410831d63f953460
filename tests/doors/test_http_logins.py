"""Who a request acts as (decisions #134, #137), on a PostgreSQL that checks passwords (SCRAM): the
login whose Basic credentials the server accepted, or that a Bearer token signed with the door's key
names and the door's login was granted, and no other; refused credentials are 401 and store
nothing; a login without the ingest role's privileges is 403; no password or token reaches the
door's log."""

from __future__ import annotations

from typing import Iterator

import subprocess
import time

import httpx
import jwt
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ackstore.doors import logins, tokens
from ackstore.ledger.database import acting_as, caller_login

from tests.support import password_server
from tests.support.door import ACKSTORE, DoorProcess, running_door
from tests.support.password_server import PLAIN_USER, PasswordServer

ALICE, BOB, NOBODY, DOOR, AUDITOR = "alice", "bob", "nobody", "door", "auditor"
PASSWORDS = {ALICE: "alice-s3cret", BOB: "bob-s3cret", NOBODY: "nobody-s3cret", DOOR: "door-s3cret",
             AUDITOR: "auditor-s3cret"}
GROUPS = {ALICE: " IN ROLE ackstore_ingest", BOB: " IN ROLE ackstore_ingest", NOBODY: "",
          DOOR: " IN ROLE ackstore_reporter",  # the door's own login reads the held requests' answers
          AUDITOR: " IN ROLE ackstore_reporter"}
THING = "org.acme:lamp-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[PasswordServer]:
    folder = tmp_path_factory.mktemp("password-server")
    server = password_server.start(folder)
    admin = create_engine(server.url(PLAIN_USER).sqlalchemy(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SET password_encryption = 'scram-sha-256'"))
        for login, password in PASSWORDS.items():  # names and passwords of this module, never input
            conn.execute(text(f"CREATE ROLE {login} LOGIN PASSWORD '{password}'{GROUPS[login]}"))
        conn.execute(text(f"GRANT {ALICE}, {AUDITOR} TO {DOOR}"))  # the door may act as alice and the auditor, not bob
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


def test_refused_credentials_are_refused_again_without_asking_the_database_until_the_refusal_ends(
        door, server) -> None:
    """A client retrying a wrong password costs no connection each: its credentials are refused from
    memory for ``REFUSED_FOR_S`` — shown by making them right meanwhile (the door does not ask) —
    and asked again after."""
    admin = create_engine(server.url(PLAIN_USER).sqlalchemy(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("CREATE ROLE carol LOGIN PASSWORD 'carol-s3cret' IN ROLE ackstore_ingest"))
    try:
        assert httpx.get(f"{door.url}/api/2/whoami", auth=("carol", "later"), timeout=30).status_code == 401
        with admin.connect() as conn:
            conn.execute(text("ALTER ROLE carol PASSWORD 'later'"))
        refused_at = time.monotonic()
        again = httpx.get(f"{door.url}/api/2/whoami", auth=("carol", "later"), timeout=30)
        assert (again.status_code, again.json()["error"]) == (401, "gateway:authentication.failed")
        assert httpx.get(f"{door.url}/api/2/whoami", auth=("carol", "later!"), timeout=30).status_code == 401
        time.sleep(max(0.0, logins.REFUSED_FOR_S + 0.5 - (time.monotonic() - refused_at)))
        assert httpx.get(f"{door.url}/api/2/whoami", auth=("carol", "later"), timeout=30).status_code == 200
    finally:
        with admin.connect() as conn:
            conn.execute(text("DROP OWNED BY carol; DROP ROLE carol"))
        admin.dispose()


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


# Bearer tokens (decisions #137): the door connects as its own login and switches into the token's.

KEY = b"k" * 16 + b"this module's token key, 48 bytes"


@pytest.fixture(scope="module")
def key_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("token-key") / "door.key"
    path.write_bytes(KEY + b"\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def token_door(server: PasswordServer, key_file: str) -> Iterator[DoorProcess]:
    with running_door(server.url(DOOR).text(), trusting=False, arguments=["--token-key", key_file],
                      environment={"PGPASSWORD": PASSWORDS[DOOR]}) as process:
        yield process


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _put_with(door: DoorProcess, headers: dict[str, str], correlation_id: str) -> httpx.Response:
    return httpx.put(f"{door.url}/api/2/things/{THING}", json={}, timeout=30,
                     headers={**headers, "correlation-id": correlation_id, "response-required": "false"})


def _issued(key_file: str, login: str) -> str:
    """A token as an operator issues one: ``ackstore token``."""
    done = subprocess.run([ACKSTORE, "token", "--login", login, "--key", key_file, "--lifetime", "600"],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_a_token_acts_as_its_login_when_the_door_was_granted_it(token_door, server, key_file) -> None:
    before = _signals(server)
    token = _issued(key_file, ALICE)
    assert _put_with(token_door, _bearer(token), "alice-by-token").status_code == 202
    whoami = httpx.get(f"{token_door.url}/api/2/whoami", headers=_bearer(token), timeout=30)
    assert whoami.json() == {"defaultSubject": f"postgres:{ALICE}", "subjects": [f"postgres:{ALICE}"]}
    assert _signals(server) == [*before, ("alice-by-token", "api")]
    # the same request again with Basic credentials is alice's retry: nothing stored twice
    assert _put(token_door, (ALICE, PASSWORDS[ALICE]), "alice-by-token").status_code == 202
    assert _signals(server) == [*before, ("alice-by-token", "api")]


@pytest.mark.parametrize("login", [BOB, "ackstore_ingest", "mallory", DOOR + "x", DOOR])
def test_a_token_for_a_login_the_door_was_not_granted_is_refused_and_stores_nothing(token_door, server,
                                                                                     login) -> None:
    """bob is a login of the ingest role but not granted to the door; ackstore_ingest is a group role
    the door could switch into (through alice) but no login; mallory is nobody; the door's own login
    would switch into itself and write with alice's privileges, which it inherits."""
    before = _signals(server)
    refused = _put_with(token_door, _bearer(tokens.issue(KEY, login, 600)), f"as-{login}")
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"] == "gateway:authentication.failed"
    assert f"may not act as the login '{login}'" in refused.json()["message"]
    assert _signals(server) == before


def _forged(**changes) -> str:
    now = int(time.time())
    claims = {"sub": ALICE, "aud": tokens.AUDIENCE, "iat": now, "exp": now + 600}
    key, algorithm = changes.pop("key", KEY), changes.pop("algorithm", "HS256")
    claims.update(changes)
    return jwt.encode({name: value for name, value in claims.items() if value is not None}, key, algorithm)


UNTAKEN_TOKENS = {
    "another key": (lambda: _forged(key=b"x" * 48), "signature is not this door's key's"),
    "expired": (lambda: _forged(iat=int(time.time()) - 700, exp=int(time.time()) - 100), "expired"),
    "no expiry": (lambda: _forged(exp=None), "exp"),
    "no audience": (lambda: _forged(aud=None), "aud"),
    "another audience": (lambda: _forged(aud="ditto"), "Audience"),
    "alg none": (lambda: jwt.encode({"sub": ALICE, "aud": tokens.AUDIENCE, "exp": int(time.time()) + 600}, None,
                                    algorithm="none"), "alg value is not allowed"),
    "HS512": (lambda: _forged(algorithm="HS512"), "alg value is not allowed"),
    "subject not text": (lambda: _forged(sub=42), "Subject must be a string"),
    "empty subject": (lambda: _forged(sub=""), "login name"),
    "subject past 63 bytes": (lambda: _forged(sub="a" * 64), "login name"),
    "not a JWT": (lambda: "abc", "Not enough segments"),
    "past 4096 characters": (lambda: "a" * 5000, "longer than 4096"),
}


@pytest.mark.parametrize("name", list(UNTAKEN_TOKENS))
def test_a_token_the_door_cannot_take_is_401_and_says_why(token_door, server, name) -> None:
    make, why = UNTAKEN_TOKENS[name]
    before = _signals(server)
    token = make()
    refused = _put_with(token_door, _bearer(token), f"forged-{name}")
    assert refused.status_code == 401, refused.text
    body = refused.json()
    assert body["error"] == "gateway:jwt.invalid" and why in body["message"], body
    assert token not in body["message"] or len(token) < 4
    assert refused.headers["www-authenticate"] == 'Bearer realm="ackstore", error="invalid_token"'
    assert _signals(server) == before


def test_a_door_without_a_key_takes_no_token(door) -> None:
    refused = _put_with(door, _bearer(tokens.issue(KEY, ALICE, 600)), "no-key")
    assert refused.status_code == 401 and "Only HTTP Basic credentials are accepted" in refused.json()["message"]


def test_a_switched_session_acts_as_the_login_it_switched_into_never_a_group(server) -> None:
    """caller_login (migration 0028): what the write functions take the caller for."""
    engine = acting_as(create_engine(server.url(DOOR, PASSWORDS[DOOR]).sqlalchemy()), ALICE)
    with engine.begin() as conn:
        assert caller_login(conn) == ALICE
        assert conn.execute(text("SELECT declare_subscriber('alice-app', NULL, NULL, NULL, ARRAY['twin'], "
                                 "ARRAY['alice:done'])")).scalar_one() is True
        assert conn.execute(text("SELECT owner_login FROM subscribers WHERE id = 'alice-app'")).scalar_one() == ALICE
    engine.dispose()
    engine = create_engine(server.url(DOOR, PASSWORDS[DOOR]).sqlalchemy())
    with engine.connect() as conn:
        assert caller_login(conn) == DOOR
        conn.execute(text("SET ROLE ackstore_ingest"))  # the door may, through alice: an identity of no one
        with pytest.raises(ProgrammingError, match="which is no login"):
            conn.execute(text("SELECT declare_subscriber('group-app', NULL, NULL, NULL, ARRAY['twin'], ARRAY['g:done'])"))
    engine.dispose()


def test_no_token_reaches_the_doors_log(token_door, key_file) -> None:
    given = [tokens.issue(KEY, ALICE, 600), tokens.issue(KEY, BOB, 600), _forged(key=b"y" * 48)]
    for number, token in enumerate(given):
        _put_with(token_door, _bearer(token), f"logged-{number}")
    log = "".join(token_door.log)
    assert not [token for token in given if token in log or token.split(".")[2] in log]
    assert PASSWORDS[DOOR] not in log


def test_a_socket_with_a_token_declares_its_labels_as_the_tokens_login(token_door, server) -> None:
    url = token_door.url.replace("http://", "ws://", 1) + "/ws/2?declared-acks=alice:socket"
    with connect(url, additional_headers=_bearer(tokens.issue(KEY, ALICE, 600)), open_timeout=30) as socket:
        socket.send("START-SEND-EVENTS")
        assert socket.recv(timeout=30) == "START-SEND-EVENTS:ACK"
        engine = create_engine(server.url(PLAIN_USER).sqlalchemy())
        with engine.connect() as conn:
            owners = conn.execute(text("SELECT u.owner_login FROM subscribers u JOIN declared_labels d "
                                       "ON d.holder = u.holder WHERE d.label = 'alice:socket'")).scalars().all()
        engine.dispose()
    assert owners and set(owners) == {ALICE}
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=_bearer(tokens.issue(KEY, BOB, 600)), open_timeout=30)
    assert refused.value.response.status_code == 401


def test_a_token_in_the_access_token_parameter_is_taken_as_a_browser_sends_it(token_door, server) -> None:
    """RFC 6750's ``access_token`` query parameter, which a browser's WebSocket or EventSource must
    use (it cannot set a header): the same token, the same login; never in the door's log."""
    token = tokens.issue(KEY, ALICE, 600)
    whoami = httpx.get(f"{token_door.url}/api/2/whoami", params={"access_token": token}, timeout=30)
    assert whoami.json()["defaultSubject"] == f"postgres:{ALICE}"
    refused = httpx.get(f"{token_door.url}/api/2/whoami", params={"access_token": token + "x"}, timeout=30)
    assert (refused.status_code, refused.json()["error"]) == (401, "gateway:jwt.invalid")
    url = token_door.url.replace("http://", "ws://", 1) + f"/ws/2?access_token={token}"
    with connect(url, open_timeout=30) as socket:
        socket.send('{"topic": "_/_/things/twin/commands/retrieve", "path": "/", "headers": {}}')
        assert "error" in socket.recv(timeout=30)  # served: Ditto's error for a thing id the topic lacks
    assert token not in "".join(token_door.log)


def test_a_token_for_the_reporter_acts_as_the_reporter_who_may_not_write(token_door, server) -> None:
    """Granted to the door, the reporter's token is the reporter's: its write is 403, nothing stored."""
    before = _signals(server)
    refused = _put_with(token_door, _bearer(tokens.issue(KEY, AUDITOR, 600)), "by-the-auditor")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == "database.permission.denied"
    assert _signals(server) == before
    whoami = httpx.get(f"{token_door.url}/api/2/whoami", headers=_bearer(tokens.issue(KEY, AUDITOR, 600)),
                       timeout=30)
    assert whoami.json()["defaultSubject"] == f"postgres:{AUDITOR}"
