"""Every database URL a user may give works everywhere: SQLAlchemy, psycopg2, Spark's JDBC,
Great Expectations and Airflow's connection — and no password is ever printed.

The end-to-end table runs ``ackstore pipeline run`` (every step with work) and the connector's
ledger writes against a server that checks passwords (``tests/support/password_server.py``).
"""

from __future__ import annotations

import getpass
import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from ackstore import cli
from ackstore.ledger.database import make_engine
from ackstore.ledger.database_url import DatabaseUrl, redacted
from ackstore.ledger.store import AckStore
from ackstore.rules.errors import DittoError
from tests.support import password_server
from tests.support.broker import Broker, connector, publish_all, stop, wait_for
from tests.conftest import ADMIN_URL
from tests.support.ledger import twin_command
from tests.support.own_postgres import free_port
from tests.support.password_server import PLAIN_USER, SECRET_PASSWORD, SECRET_USER, PasswordServer
from tests.support.paths import ROOT

QUOTED_SECRET = "p%24ss%40w%25rd%3A%2Fx%20y"
NO_ENV = {"PGUSER": "", "PGPASSWORD": "", "PGHOST": "", "PGPORT": "", "PGDATABASE": "", "PGPASSFILE": "/nonexistent"}


# --- the forms, parsed ----------------------------------------------------------------------

FORMS = [
    # (the URL as typed, environment, JDBC URL, JDBC properties)
    ("postgresql://127.0.0.1:5432/ledger", {},
     "jdbc:postgresql://127.0.0.1:5432/ledger", {"user": getpass.getuser()}),
    ("postgresql://alice@db.example:6543/ledger", {},
     "jdbc:postgresql://db.example:6543/ledger", {"user": "alice"}),
    (f"postgresql://secret:{QUOTED_SECRET}@127.0.0.1/ledger", {},
     "jdbc:postgresql://127.0.0.1:5432/ledger", {"user": "secret", "password": SECRET_PASSWORD}),
    (f"postgresql+psycopg2://secret:{QUOTED_SECRET}@127.0.0.1/ledger", {},
     "jdbc:postgresql://127.0.0.1:5432/ledger", {"user": "secret", "password": SECRET_PASSWORD}),
    ("postgres://bob:pw@[::1]:5433/x", {},
     "jdbc:postgresql://[::1]:5433/x", {"user": "bob", "password": "pw"}),
    ("postgresql://u@h/d?sslmode=disable&application_name=x", {},
     "jdbc:postgresql://h:5432/d", {"user": "u", "sslmode": "disable", "ApplicationName": "x"}),
    ("postgresql://h/d", {"PGUSER": "carol", "PGPASSWORD": "from-env"},
     "jdbc:postgresql://h:5432/d", {"user": "carol", "password": "from-env"}),
    ("postgresql://", {"PGHOST": "envhost", "PGPORT": "7000", "PGUSER": "dave", "PGDATABASE": "db1"},
     "jdbc:postgresql://envhost:7000/db1", {"user": "dave"}),
    ("postgresql:///d?host=/var/run/postgresql", {},  # a socket: JDBC reaches the same server over TCP
     "jdbc:postgresql://localhost:5432/d", {"user": getpass.getuser()}),
    ("postgresql://h1:5432,h2:5433/d?target_session_attrs=read-write", {},
     "jdbc:postgresql://h1:5432,h2:5433/d", {"user": getpass.getuser(), "targetServerType": "primary"}),
    ("host=h port=5 dbname=d user=u password='a b'", {},
     "jdbc:postgresql://h:5/d", {"user": "u", "password": "a b"}),
    ("postgresql://u@h", {},  # libpq's default database is the user's name
     "jdbc:postgresql://h:5432/u", {"user": "u"}),
]


@pytest.mark.parametrize(("typed", "env", "jdbc_url", "properties"), FORMS, ids=[form[0] for form in FORMS])
def test_each_form_gives_spark_its_jdbc_url_and_properties(typed, env, jdbc_url, properties) -> None:
    url, props = DatabaseUrl.parse(typed).jdbc({**NO_ENV, **env})
    assert url == jdbc_url + "?stringtype=unspecified&reWriteBatchedInserts=true"
    assert props == properties
    assert "password" not in url and "@" not in url  # never in the URL: it is logged by Spark


@pytest.mark.parametrize(("typed", "env", "jdbc_url", "properties"), FORMS, ids=[form[0] for form in FORMS])
def test_each_form_gives_spark_workers_the_server_jdbc_reaches(typed, env, jdbc_url, properties) -> None:
    workers = DatabaseUrl.parse(typed).for_workers({**NO_ENV, **env})
    hosts = jdbc_url.removeprefix("jdbc:postgresql://").rsplit("/", 1)[0].replace("[", "").replace("]", "")
    expected_hosts = ",".join(f"{host}:{port}" for host, port in zip(workers["host"].split(","), workers["port"].split(",")))
    assert expected_hosts == hosts
    assert {name: workers.get(name) for name in ("user", "password")} == {
        "user": properties["user"], "password": properties.get("password")}


@pytest.mark.parametrize("options", ["", "?options=-c%20statement_timeout%3D5000"], ids=["no options", "own options"])
def test_the_gates_session_settings_join_the_urls_own_options(options: str) -> None:
    import psycopg2

    typed = ADMIN_URL.replace("+psycopg2", "") + options
    params = DatabaseUrl.parse(typed).gx({"jit": "off", "work_mem": "64MB"})["kwargs"]["connect_args"]
    conn = psycopg2.connect(**params)
    try:
        with conn.cursor() as cursor:
            shown = {}
            for name in ("jit", "work_mem", "statement_timeout"):
                cursor.execute(f"SHOW {name}")
                shown[name] = cursor.fetchone()[0]
    finally:
        conn.close()
    assert shown["jit"] == "off" and shown["work_mem"] == "64MB"
    assert (shown["statement_timeout"] == "5s") == bool(options)


@pytest.mark.parametrize("typed", [form[0] for form in FORMS])
def test_each_form_round_trips_through_its_text_and_prints_without_its_password(typed) -> None:
    parsed = DatabaseUrl.parse(typed)
    assert DatabaseUrl.parse(parsed.text()).params == parsed.params
    shown = f"{parsed} {parsed!r} {redacted(typed)}"
    for secret in (SECRET_PASSWORD, QUOTED_SECRET, "from-env", "'a b'", ":pw@"):
        assert secret not in shown


@given(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1),
       st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1),
       st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1))
def test_any_user_password_and_database_survive_the_text_form(user, password, database) -> None:
    url = DatabaseUrl.from_parts(host="127.0.0.1", port=5432, user=user, password=password, dbname=database)
    assert DatabaseUrl.parse(url.text()).params == url.params
    assert json.loads(url.airflow_connection())["password"] == password
    assert url.sqlalchemy().password == password
    assert ":***@" in str(url)


def test_the_password_file_is_read_as_libpq_reads_it(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text("# comment\nother:*:*:*:no\nh:5432:d:u:wrong-db\nh:*:*:u:se\\:cr\\\\et\n*:*:*:*:fallback\n")
    passfile.chmod(0o600)
    env = {**NO_ENV, "PGPASSFILE": str(passfile)}
    assert DatabaseUrl.parse("postgresql://u@h/x").resolved(env)["password"] == "se:cr\\et"
    assert DatabaseUrl.parse("postgresql://u@h/d").resolved(env)["password"] == "wrong-db"
    assert DatabaseUrl.parse("postgresql://v@elsewhere/d").resolved(env)["password"] == "fallback"
    assert DatabaseUrl.parse("postgresql://u:given@h/x").resolved(env)["password"] == "given"
    assert DatabaseUrl.parse("postgresql://u@h/x").resolved({**env, "PGPASSWORD": "env"})["password"] == "env"
    passfile.chmod(0o644)  # readable by others: libpq ignores it, and so do we
    assert "password" not in DatabaseUrl.parse("postgresql://u@h/x").resolved(env)


def test_airflow_extras_that_are_not_libpq_keywords_are_left_out() -> None:
    url = DatabaseUrl.from_parts(host="h", port=5432, user="u", password="p", dbname="d",
                                 options={"sslmode": "require", "cursor": "realdictcursor", "iam": True})
    assert url.params == {"host": "h", "port": "5432", "user": "u", "password": "p", "dbname": "d", "sslmode": "require"}
    assert json.loads(url.airflow_connection()) == {
        "conn_type": "postgres", "host": "h", "port": 5432, "login": "u", "password": "p", "schema": "d",
        "extra": {"sslmode": "require"}}


MALFORMED = [
    "postgresql://u:sec%zzret@h/d",
    "postgresql://u:secret@h:port/d",
    "postgresql://u:secret@h/d?nosuchoption=1",
    "mysql://u:secret@h/d",
    "   ",
]


@pytest.mark.parametrize("bad", MALFORMED)
def test_a_malformed_url_is_a_ditto_error_naming_the_variable_without_the_password(bad: str) -> None:
    with pytest.raises(DittoError) as raised:
        DatabaseUrl.parse(bad, "ACKSTORE_DATABASE_URL")
    body = raised.value.to_json()
    assert (body["status"], body["error"]) == (400, "database.url.invalid")
    assert "<ACKSTORE_DATABASE_URL>" in body["message"] and body["description"]
    assert "secret" not in json.dumps(body) and "sec%zzret" not in json.dumps(body)


@pytest.mark.parametrize(("how", "origin"), [("argument", "--database-url"), ("environment", "ACKSTORE_DATABASE_URL")])
def test_the_cli_answers_a_malformed_url_with_the_error_not_a_traceback(how: str, origin: str) -> None:
    bad = "postgresql://u:hunter2@h:port/d"
    argv, env = (["--database-url", bad], {}) if how == "argument" else ([], {"ACKSTORE_DATABASE_URL": bad})
    for command in (["db", "upgrade"], ["pipeline", "run"], ["report", "audit"]):
        done = subprocess.run([sys.executable, "-m", "ackstore.cli", *argv, *command], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, **env}, timeout=120)
        assert done.returncode == cli.EXIT_ERROR_ANSWER, done.stderr
        answer = json.loads(done.stdout)
        assert answer["error"] == "database.url.invalid" and f"<{origin}>" in answer["message"]
        assert "Traceback" not in done.stderr and "hunter2" not in done.stdout + done.stderr


# Passwords with each character a URL or a key=value string treats specially, typed as a user
# would — right, or wrong (unencoded, unquoted): whatever libpq makes of it, no error shows it.
# "@", ":" and "/" also at every position of one password (and of a user, below): libpq ends a URL's
# userinfo at the first "@" and reads what follows as host, port or database.
SECRET = "S3cr3t"
USER = "alice"


def _each_position(word: str) -> list[str]:
    return [word[:i] + char + word[i:] for char in "@:/" for i in range(len(word) + 1)]


PASSWORDS = ["s3 crEt", "pa/ss", "p@ss", "pa:ss", "pa%ss", "it's", 'say"hi', "q?x#y", "/@:%'\" ",
             *_each_position(SECRET)]
USERS = _each_position(USER)
TYPED_FORMS = {
    "url, encoded": lambda pw: f"postgresql://u:{quote(pw, safe='')}@127.0.0.1:1/x",
    "url, unencoded": lambda pw: f"postgresql://u:{pw}@127.0.0.1:1/x",
    "url option, unencoded": lambda pw: f"postgresql://127.0.0.1:1/x?password={pw}&bogus",
    "keyword, quoted": lambda pw: "host=127.0.0.1 password='" + pw.replace("\\", "\\\\").replace("'", "\\'") + "' bogus",
    "keyword, unquoted": lambda pw: f"host=127.0.0.1 password={pw} bogus",
    "keyword, spaced": lambda pw: f"host=127.0.0.1 password = {pw} bogus",
    "keyword, password first": lambda pw: f"password={pw} host=127.0.0.1 port=x",
}


def _pieces(password: str) -> list[str]:
    """What of ``password`` must not be printed: all of it, and each run of three characters."""
    return [password] + [password[i:i + 3] for i in range(len(password) - 2)]


@pytest.mark.parametrize("form", TYPED_FORMS)
@pytest.mark.parametrize("password", PASSWORDS)
def test_no_password_in_the_error_of_any_typed_form(form: str, password: str) -> None:
    typed = TYPED_FORMS[form](password)
    try:
        parsed = DatabaseUrl.parse(typed)
    except DittoError as error:
        body = error.to_json()
        assert (body["status"], body["error"]) == (400, "database.url.invalid")
        shown = json.dumps(body, ensure_ascii=False)
    else:
        shown = f"{parsed} {parsed!r} {redacted(typed)}"
    leaked = [piece for piece in _pieces(password) if piece in shown.replace("127.0.0.1", "")]
    assert not leaked, shown


@pytest.mark.parametrize("user", USERS)
def test_no_password_in_the_error_of_a_url_whose_user_holds_an_unencoded_character(user: str) -> None:
    typed = f"postgresql://{user}:{SECRET}@127.0.0.1:1/x"
    try:
        parsed = DatabaseUrl.parse(typed)
    except DittoError as error:
        assert error.to_json()["error"] == "database.url.invalid"
        shown = json.dumps(error.to_json(), ensure_ascii=False)
    else:
        shown = f"{parsed} {parsed!r} {redacted(typed)} {parsed.describe()}"
    assert not [piece for piece in _pieces(SECRET) if piece in shown], shown


def test_an_at_sign_libpq_would_read_into_the_host_is_refused_not_printed() -> None:
    """libpq ends the userinfo at the first "@": 'S3cr3t@127.0.0.1' would be the host its errors quote."""
    with pytest.raises(DittoError) as raised:
        DatabaseUrl.parse("postgresql://u:Pw@S3cr3t@127.0.0.1:5432/db", "--database-url")
    body = raised.value.to_json()
    assert (body["status"], body["error"]) == (400, "database.url.invalid")
    assert "(postgresql://u:***@127.0.0.1:5432/db)" in body["message"] and "%40" in body["message"]
    # an "@" percent-encoded, or in a query value (a socket folder's name), is no password's
    assert DatabaseUrl.parse("postgresql://u:Pw%40S3cr3t@127.0.0.1/db").params["password"] == "Pw@S3cr3t"
    assert DatabaseUrl.parse("postgresql:///db?host=/srv/me@corp").params["host"] == "/srv/me@corp"


# Every URL with an unencoded "@", ":" or "/" in its password or user, to a port nobody listens on
# and to the real server (which refuses the role), through commands that connect and one (verify)
# that reads its heads file first: nothing printed, logged or answered holds a piece of the password.
UNENCODED = ([(USER, password) for password in _each_position(SECRET)] +
             [(user, SECRET) for user in USERS])
CLI_COMMANDS = [["report", "audit"], ["db", "current"], ["verify"], ["archive", "--retention-days", "1"]]


@pytest.mark.parametrize("server", ["127.0.0.1:1", "127.0.0.1:5432"], ids=["nobody listens", "the real server"])
@pytest.mark.parametrize(("user", "password"), UNENCODED, ids=[f"{u}:{p}" for u, p in UNENCODED])
def test_the_cli_prints_no_piece_of_an_unencoded_password(user: str, password: str, server: str, capfd,
                                                           caplog) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    typed = f"postgresql://{user}:{password}@{server}/ackstore_no_such_db"
    printed = []
    for command in CLI_COMMANDS:
        for argv, env in ((["--database-url", typed], {}), ([], {"ACKSTORE_DATABASE_URL": typed})):
            with pytest.MonkeyPatch.context() as patch:
                for name, value in env.items():
                    patch.setenv(name, value)
                code = cli.main([*argv, *command])
            out, err = capfd.readouterr()
            assert code == cli.EXIT_ERROR_ANSWER, (command, out, err)
            assert {"status", "error", "message"} <= set(json.loads(out)), out
            printed.append(out + err)
    printed += [record.getMessage() for record in caplog.records]
    leaked = [piece for piece in _pieces(password) if any(piece in text for text in printed)]
    assert not leaked, [text for text in printed if any(piece in text for piece in leaked)]


CONNECTION_FAILURES = {
    "a database that does not exist": lambda server: f"{server}/ackstore_no_such_database",
    "a port nobody listens on": lambda server: f"postgresql://u:{quote(SECRET_PASSWORD, safe='')}@127.0.0.1:{free_port()}/x",
    "a bad sslmode": lambda server: f"{server}/postgres?sslmode=bogus",
    "a bad options setting": lambda server: f"{server}/postgres?options=-cackstore_no_such_setting%3D1",
    "a role that does not exist, key=value": lambda server: (
        f"host=127.0.0.1 port=5432 dbname=postgres user=ackstore_no_such_role password='{SECRET_PASSWORD}'"),
}


@pytest.mark.parametrize("failure", CONNECTION_FAILURES)
def test_the_cli_answers_a_connection_failure_with_a_503_naming_server_and_database(failure: str) -> None:
    server = ADMIN_URL.rsplit("/", 1)[0]
    url = CONNECTION_FAILURES[failure](server)
    named = DatabaseUrl.parse(url).describe()
    for command in (["report", "audit"], ["db", "upgrade"], ["pipeline", "run"]):
        done = subprocess.run([sys.executable, "-m", "ackstore.cli", "--database-url", url, *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == cli.EXIT_ERROR_ANSWER, done.stderr[-2000:]
        answer = json.loads(done.stdout)
        assert (answer["status"], answer["error"]) == (503, "database.unavailable")
        assert named in answer["message"] and answer["description"]
        assert "Traceback" not in done.stderr
        assert SECRET_PASSWORD not in done.stdout + done.stderr


# --- end to end: the pipeline and the connector with every form ------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[PasswordServer]:
    folder = tmp_path_factory.mktemp("password-server")
    yield password_server.start(folder)
    password_server.stop(folder)


def _pgpass(tmp_path: Path, server: PasswordServer) -> str:
    path = tmp_path / "pgpass"
    path.write_text(f"127.0.0.1:{server.port}:*:{SECRET_USER}:{SECRET_PASSWORD.replace(':', chr(92) + ':')}\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return str(path)


def _end_to_end_forms(server: PasswordServer, tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    secret = server.url(SECRET_USER, SECRET_PASSWORD).text()
    return {
        "no user": (server.url().text(), {}),
        "a user": (server.url(PLAIN_USER).text(), {}),
        "a user and a password with $ @ % : /": (secret, {}),
        "postgresql+psycopg2://": (secret.replace("postgresql://", "postgresql+psycopg2://", 1), {}),
        "postgres://": (secret.replace("postgresql://", "postgres://", 1), {}),
        "query options": (secret + "?sslmode=disable&application_name=x", {}),
        "PGUSER and PGPASSWORD": (server.url().text(), {"PGUSER": SECRET_USER, "PGPASSWORD": SECRET_PASSWORD}),
        "~/.pgpass": (server.url(SECRET_USER).text(), {"PGPASSFILE": _pgpass(tmp_path, server)}),
    }


END_TO_END = ["no user", "a user", "a user and a password with $ @ % : /", "postgresql+psycopg2://", "postgres://",
              "query options", "PGUSER and PGPASSWORD", "~/.pgpass"]


def test_a_wrong_password_is_refused_by_the_server(server: PasswordServer) -> None:
    """The end-to-end table means something only if a mangled password cannot connect."""
    engine = make_engine(server.url(SECRET_USER, SECRET_PASSWORD + "x"))
    with pytest.raises(Exception, match="password authentication failed"):
        engine.connect()
    engine.dispose()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("form", END_TO_END)
def test_the_pipeline_and_the_connector_run_with_each_url_form(
    form: str, server: PasswordServer, spark, tmp_path: Path, monkeypatch, capsys
) -> None:
    url, env = _end_to_end_forms(server, tmp_path)[form]
    for name in NO_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ACKSTORE_DATABASE_URL", url)
    admin = make_engine(server.url())
    tag = uuid.uuid4().hex[:8]
    connection, checker = f"plant-{tag}", f"checker-{tag}"
    # A subscriber whose filter excludes the signal: its label gets a weak ack (weak_acks' work).
    with AckStore(admin) as store:
        assert store.declare(checker, [f"{checker}:done"], filter="eq(attributes/n,-1)")["status"] == 204
    envelope = twin_command("modify", thing=f"org.acme/url-{tag}", path="/", value={"attributes": {"n": 1}},
                            correlation_id=f"url-{tag}",
                            requested_acks=["twin-persisted", "search-persisted", f"{checker}:done"])
    broker = Broker()
    try:
        source = broker.queue("commands")
        publish_all(broker, source, [envelope])
        process = connector(url, "--connection-id", connection, "--queue", source, "--poll", "0.5", env=env)
        try:
            wait_for(lambda: _one(admin, "SELECT count(*) FROM signals WHERE source = :s", s=connection) == 1,
                     what="the message stored by the connector")
            if "application_name" in url:
                assert _one(admin, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'x'") >= 1
            capsys.readouterr()
            assert cli.main(["pipeline", "run"]) == cli.EXIT_OK
            printed = capsys.readouterr()
            wait_for(lambda: _one(admin, "SELECT count(*) FROM settlements s JOIN signals g ON g.id = s.signal_id "
                                         "WHERE g.source = :s AND s.carried_out_at IS NOT NULL", s=connection) == 1,
                     what="the settlement carried out")
        finally:
            code, log = stop(process)
    finally:
        broker.close()
    assert code == 0, log
    steps = json.loads(printed.out)["steps"]
    assert list(steps) == ["apply_twin", "index_search", "weak_acks", "sweep", "validate", "settle", "seal"]
    with admin.connect() as conn:
        done = conn.execute(text(
            "SELECT r.status, (SELECT count(*) FROM request_acks a WHERE a.signal_id = s.id AND a.weak) AS weak, "
            "(SELECT count(*) FROM thing_events e WHERE e.signal_id = s.id) AS events, "
            "(SELECT count(*) FROM search_index i WHERE i.thing_id = s.thing_id) AS indexed, "
            "(SELECT decision FROM settlements t WHERE t.signal_id = s.id) AS decision "
            "FROM signals s JOIN request_results r ON r.signal_id = s.id WHERE s.source = :s"), {"s": connection}).one()
        runs = conn.execute(text("SELECT stats::text FROM pipeline_runs")).scalars().all()
    admin.dispose()
    assert (done.status, done.weak, done.events, done.decision) == (200, 1, 1, "ack")
    assert done.indexed >= 1
    for shown in (printed.out, printed.err, log, *runs):
        assert SECRET_PASSWORD not in shown and QUOTED_SECRET not in shown


def _one(engine, sql: str, **params) -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()
