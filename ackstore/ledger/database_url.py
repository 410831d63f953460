"""The ledger's database URL, turned into what each consumer needs.

A user may give any libpq connection string (``postgresql://``, ``postgres://``, SQLAlchemy's
``postgresql+psycopg2://``, or ``key=value`` pairs), with or without a user, a password, a
host or a port, and with libpq query options (``sslmode``, ``application_name``, …). libpq's
own parser reads it (``psycopg2.extensions.parse_dsn``: percent-decoding, several hosts, a
socket directory in ``?host=``), and :class:`DatabaseUrl` renders it for:

* SQLAlchemy and psycopg2 (:meth:`~DatabaseUrl.sqlalchemy`, :meth:`~DatabaseUrl.libpq`): libpq
  itself fills in what is missing (``PGUSER``, ``PGPASSWORD``, ``~/.pgpass``, the socket);
* Spark's JDBC driver (:meth:`~DatabaseUrl.jdbc`), which knows none of libpq's defaults: they
  are resolved here, as libpq would, and the user and password go as properties, never in the
  URL;
* Great Expectations (:meth:`~DatabaseUrl.gx`): the parameters as psycopg2 connect arguments,
  so that GX neither requires a user in a URL nor reads a ``$`` in a password as a variable;
* Airflow's connection (:meth:`~DatabaseUrl.airflow_connection`): its JSON form.

No rendering meant for people (:meth:`~DatabaseUrl.redacted`, errors) holds the password.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import stat
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

from psycopg2.extensions import parse_dsn
from sqlalchemy.engine import URL

from ackstore import files
from ackstore.rules import errors

LEDGER_CONNECTION = "ackstore_ledger"  # the Airflow connection that names the ledger: the DAG's and the Ledger page's

DRIVER = "postgresql+psycopg2"
_SCHEME = re.compile(r"^(postgres(?:ql)?)(?:\+[A-Za-z0-9_]+)?://", re.IGNORECASE)
_URL_FORM = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://")
_PASSWORD_KEYWORD = re.compile(r"(?:^|\s)password\s*=\s*")
_QUOTED = re.compile(r"([\"'])(.*?)\1")  # a fragment libpq's reason cites
_KEYWORD_VALUE = re.compile(r"'(?:[^'\\]|\\.)*'?|\S*")  # quoted (to its closing quote), or to the next space
_URL_PARTS = ("host", "port", "user", "password", "dbname")
_LIBPQ_USERINFO = re.compile(r"[^@/]*@")  # libpq ends a URL's user and password at the first "@" before any "/"
_STRAY_AT = ('it holds an "@" in its host, port or database: percent-encode "@", ":" and "/" in the user and '
             'password (%40, %3A, %2F)')
DEFAULT_PORT = "5432"
MAX_PASSWORD_FILE_BYTES = 1024 * 1024  # some 10 000 lines of host:port:database:user:password
# libpq's connection keywords (PostgreSQL 15-17, "Parameter Key Words"): what an Airflow
# connection's extras may pass on; its other extras (the provider's own) are not libpq's.
LIBPQ_KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
    "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs",
    "load_balance_hosts",
})
JDBC_DEFAULT_HOST = "localhost"  # libpq's default is a Unix socket, which JDBC cannot reach

# libpq options JDBC knows under another name (pgjdbc's documented connection properties);
# the others have no JDBC meaning and are left out of Spark's connection.
_JDBC_PROPERTIES = {
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "sslpassword": "sslpassword",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
    "target_session_attrs": "targetServerType",
    "gssencmode": "gssEncMode",
}
_TARGET_SERVER_TYPES = {"read-write": "primary", "primary": "primary", "read-only": "secondary", "standby": "secondary",
                        "prefer-standby": "preferSecondary", "any": "any"}
# Environment variables libpq reads for a parameter the URL leaves out (libpq's documentation,
# "Environment Variables"); PGUSER and PGPASSWORD are resolved on their own below.
_ENVIRONMENT = {"host": "PGHOST", "port": "PGPORT", "dbname": "PGDATABASE", "sslmode": "PGSSLMODE",
                "application_name": "PGAPPNAME", "connect_timeout": "PGCONNECT_TIMEOUT", "options": "PGOPTIONS",
                "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY", "sslrootcert": "PGSSLROOTCERT",
                "target_session_attrs": "PGTARGETSESSIONATTRS", "gssencmode": "PGGSSENCMODE"}


@dataclass(frozen=True)
class DatabaseUrl:
    """A database's libpq parameters, as the user gave them (nothing resolved yet)."""

    params: Mapping[str, str] = field(repr=False)  # repr=False: it may hold the password

    @classmethod
    def parse(cls, text: str, origin: str = "ACKSTORE_DATABASE_URL") -> "DatabaseUrl":
        """Parse ``text``; a malformed one raises ``database.url.invalid`` naming ``origin``."""
        if not isinstance(text, str) or not text.strip():
            raise errors.database_url_invalid(origin, "it is empty")
        libpq_text = _SCHEME.sub(lambda m: "postgresql://", text.strip(), count=1)
        if _SCHEME.match(libpq_text) and _stray_at(libpq_text):
            raise errors.database_url_invalid(origin, _STRAY_AT, redacted(text, malformed=True))
        try:
            params = parse_dsn(libpq_text)
        except Exception as exc:  # psycopg2.ProgrammingError: libpq's own reason
            raise errors.database_url_invalid(origin, _without(str(exc).strip(), text), redacted(text, malformed=True)) from None
        port = params.get("port")
        if port and not all(part.strip().isascii() and part.strip().isdigit() for part in port.split(",")):
            # a password holding "/" reads as a host and a port: the "port" may be part of it
            why = _without(f"the port {port!r} is not a number", text)
            raise errors.database_url_invalid(origin, why, redacted(text, malformed=True))
        return cls(params)

    @classmethod
    def from_parts(cls, *, host: str | None = None, port: int | str | None = None, user: str | None = None,
                   password: str | None = None, dbname: str | None = None,
                   options: Mapping[str, Any] | None = None) -> "DatabaseUrl":
        """From separate fields, e.g. an Airflow connection's; empty ones are left to libpq, and
        ``options`` that are not libpq keywords are left out."""
        extra = {key: value for key, value in (options or {}).items() if key in LIBPQ_KEYWORDS}
        given = {**extra, "host": host, "port": port, "user": user, "password": password, "dbname": dbname}
        return cls({key: str(value) for key, value in given.items() if value not in (None, "")})

    @classmethod
    def from_airflow_connection(cls, connection: Any) -> "DatabaseUrl":
        """An Airflow connection's fields — not its ``get_uri()``: no URL quoting between Airflow's
        parser and libpq's. The DAG's tasks and the Ledger page read the ledger so."""
        return cls.from_parts(host=connection.host, port=connection.port, user=connection.login,
                              password=connection.password, dbname=connection.schema,
                              options=connection.extra_dejson)

    # --- what libpq itself reads ----------------------------------------------------------

    def libpq(self) -> dict[str, str]:
        """psycopg2's connect keywords; libpq fills in what is missing."""
        return dict(self.params)

    def sqlalchemy(self) -> URL:
        """A SQLAlchemy URL object (never a string: no quoting can go wrong) for psycopg2."""
        params = dict(self.params)
        host = params.pop("host", None)
        port = params.pop("port", None)
        single_tcp_host = host and "," not in host and not host.startswith("/")
        query = {key: value for key, value in params.items() if key not in _URL_PARTS}
        if host and not single_tcp_host:  # a socket directory or several hosts: libpq reads them
            query["host"] = host
            if port:
                query["port"] = port
        return URL.create(
            DRIVER,
            username=params.get("user"),
            password=params.get("password"),
            host=host if single_tcp_host else None,
            port=int(port) if single_tcp_host and port else None,
            database=params.get("dbname"),
            query=query,
        )

    def gx(self, settings: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Great Expectations' ``add_sql`` arguments: every parameter goes to psycopg2 as a
        connect argument, none through GX's URL parsing or its ``$variable`` substitution.
        ``settings`` are server settings for its sessions, after the URL's own ``options``."""
        params = self.libpq()
        if settings:
            given = " ".join(f"-c {name}={value}" for name, value in settings.items())
            params["options"] = f"{params['options']} {given}" if params.get("options") else given
        return {"connection_string": f"{DRIVER}://", "kwargs": {"connect_args": params}}

    # --- what needs libpq's defaults spelled out ----------------------------------------------

    def resolved(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The parameters with libpq's defaults filled in: ``PG*`` variables, the OS user,
        ``~/.pgpass`` (or ``$PGPASSFILE``), port 5432, the user's name as database."""
        env = os.environ if environ is None else environ
        params = dict(self.params)
        for name, variable in _ENVIRONMENT.items():
            if not params.get(name) and env.get(variable):
                params[name] = env[variable]
        params.setdefault("port", DEFAULT_PORT)
        if not params.get("user"):
            params["user"] = env.get("PGUSER") or getpass.getuser()
        params.setdefault("dbname", params["user"])
        if not params.get("password"):
            password = env.get("PGPASSWORD") or _pgpass_password(params, env)
            if password:
                params["password"] = password
        return params

    def jdbc(self, environ: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
        """Spark's JDBC URL and connection properties (user and password among them)."""
        params = self._over_tcp(environ)
        hosts = params["host"]
        ports = params["port"].split(",")
        addresses = [
            f"{_jdbc_host(host)}:{ports[i] if i < len(ports) else ports[-1]}"
            for i, host in enumerate(hosts.split(","))
        ]
        # stringtype=unspecified lets text columns land in jsonb; batched inserts are rewritten
        # into multi-row INSERTs (docs/stack-notes.md).
        url = (f"jdbc:postgresql://{','.join(addresses)}/{quote(params['dbname'], safe='')}"
               "?stringtype=unspecified&reWriteBatchedInserts=true")
        properties = {"user": params["user"]}
        if params.get("password"):
            properties["password"] = params["password"]
        for name, jdbc_name in _JDBC_PROPERTIES.items():
            if params.get(name):
                value = params[name]
                properties[jdbc_name] = _TARGET_SERVER_TYPES.get(value, value) if name == "target_session_attrs" else value
        return url, properties

    def for_workers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """psycopg2's connect keywords for Spark's Python workers, which may run on another
        machine: libpq's defaults resolved here (as for JDBC), and the same server over TCP when
        the URL names a socket (as JDBC reaches it)."""
        return self._over_tcp(environ)

    def _over_tcp(self, environ: Mapping[str, str] | None) -> dict[str, str]:
        """The resolved parameters, with the same server over TCP where the URL names a Unix
        socket or no host: JDBC has no sockets, and Spark's workers may run elsewhere."""
        params = self.resolved(environ)
        if not params.get("host") or params["host"].startswith("/"):
            params["host"] = JDBC_DEFAULT_HOST
        return params

    def airflow_connection(self) -> str:
        """The ``AIRFLOW_CONN_<ID>`` value: Airflow's JSON form, which needs no URL quoting."""
        params = dict(self.params)
        connection: dict[str, Any] = {"conn_type": "postgres"}
        for name, key in (("host", "host"), ("user", "login"), ("password", "password"), ("dbname", "schema")):
            if params.get(name):
                connection[key] = params.pop(name)
        if params.get("port"):
            port = params.pop("port")
            if port.isdigit():
                connection["port"] = int(port)
            else:
                params["port"] = port  # several ports: libpq reads them from the extras
        extra = {key: value for key, value in params.items() if key not in _URL_PARTS}
        if extra:
            connection["extra"] = extra
        return json.dumps(connection)

    # --- renderings ---------------------------------------------------------------------------

    def with_database(self, dbname: str) -> "DatabaseUrl":
        return DatabaseUrl({**self.params, "dbname": dbname})

    def with_login(self, user: str, password: str) -> "DatabaseUrl":
        """The same server and database as another login, with its own password (the HTTP door's
        caller). The password must not be empty: libpq would then take one from the environment
        or a password file — the server's, never the caller's."""
        if not password:
            raise ValueError("a login's password must not be empty")
        return DatabaseUrl({**self.params, "user": user, "password": password})

    @property
    def database(self) -> str | None:
        return self.params.get("dbname")

    def describe(self) -> str:
        """Which server and database, for people: ``<dbname> at <host:port>``, libpq's defaults filled in."""
        params = self.resolved()
        host = params.get("host") or "the local socket"
        return f"<{params['dbname']}> at <{_url_host(host)}:{params['port']}>"

    def without_password(self, message: str) -> str:
        """``message`` with this URL's password (given, or libpq's default) and its pieces hidden."""
        password = self.resolved().get("password")
        return _without(message, f"password={password}") if password else message

    def text(self) -> str:
        """A libpq URL of the same parameters (the password percent-encoded in it)."""
        params = dict(self.params)
        user = quote(params.pop("user", ""), safe="")
        password = params.pop("password", None)
        userinfo = f"{user}:{quote(password, safe='')}@" if password is not None else (f"{user}@" if user else "")
        host = params.pop("host", "")
        port = params.pop("port", "")
        netloc = ""
        if host and "," not in host and not host.startswith("/") and "," not in port:
            netloc = _url_host(host) + (f":{port}" if port else "")
        else:
            if host:
                params["host"] = host
            if port:
                params["port"] = port
        dbname = quote(params.pop("dbname", ""), safe="")
        query = "&".join(f"{quote(key, safe='')}={quote(value, safe='')}" for key, value in params.items())
        return f"postgresql://{userinfo}{netloc}/{dbname}" + (f"?{query}" if query else "")

    def redacted(self) -> str:
        """:meth:`text` with the password shown as ``***``."""
        return redacted(self.text())

    def __str__(self) -> str:
        return self.redacted()


def redacted(text: str, *, malformed: bool = False) -> str:
    """A URL as it may be printed: the password after ``user:`` replaced by ``***``, and a
    ``password=`` option's value too. ``malformed``: libpq could not read ``text``, so where its
    password ends is a guess — everything from the password on is hidden."""
    if _URL_FORM.match(text):
        text = re.sub(r"(password=)[^&]*" if malformed else r"(password=)[^&\s]*", r"\1***", text)
        start, userinfo, rest = _userinfo(text)
        if ":" in userinfo:
            text = f"{start}{userinfo.split(':', 1)[0]}:***{rest}"
        return text
    keyword = _PASSWORD_KEYWORD.search(text)
    if keyword is None:
        return text
    if malformed:
        return text[:keyword.end()] + "***"
    value = _KEYWORD_VALUE.match(text, keyword.end())
    return text[:keyword.end()] + "***" + text[value.end() if value else keyword.end():]


def _secret(text: str) -> str:
    """What in ``text`` may be (part of) its password: the userinfo after ``user:`` and the
    ``password=`` options of a URL; everything from the keyword on in ``key=value`` form."""
    if _URL_FORM.match(text):
        _, userinfo, _ = _userinfo(text)
        secret = userinfo.split(":", 1)[1] if ":" in userinfo else ""
        secret += " " + " ".join(re.findall(r"password=([^&]*)", text))
    else:
        keyword = _PASSWORD_KEYWORD.search(text)
        secret = text[keyword.end():] if keyword else ""
    return secret.strip()


def _userinfo(text: str) -> tuple[str, str, str]:
    """A URL's text split around its userinfo: what comes before it (the scheme), the userinfo
    ("" when there is none) and the rest from its "@". A password may hold an unencoded "/", "?",
    "#" or "@": libpq ends it at the first "@" (or reads none before a "/"), the user meant the
    last — split there, all that either reads as the password is hidden."""
    scheme_end = _URL_FORM.match(text).end()  # type: ignore[union-attr]  # callers matched it
    at = text.rfind("@")
    if at <= scheme_end:
        return text[:scheme_end], "", text[scheme_end:]
    return text[:scheme_end], text[scheme_end:at], text[at:]


def _stray_at(url: str) -> bool:
    """Whether a ``postgresql://`` URL holds an "@" in its host, port or database (before its
    query): libpq ends the user and password at the first "@" (none when a "/" comes first), so a
    later one is an unencoded "@", ":" or "/" in them, and libpq would take the rest of the
    password for a host, a port or a database — and print it in its errors."""
    rest = url[_URL_FORM.match(url).end():]  # type: ignore[union-attr]  # the caller matched the scheme
    userinfo = _LIBPQ_USERINFO.match(rest)
    return "@" in rest[userinfo.end() if userinfo else 0:].split("?", 1)[0]


def _without(message: str, text: str) -> str:
    """A reason for rejecting ``text`` (libpq's, or ours), with any piece of its password taken
    out: each quoted fragment the reason cites that overlaps it, and the pieces of it."""
    secret = _secret(text)
    if not secret:
        return message

    def hidden(match: re.Match[str]) -> str:
        return f"{match.group(1)}***{match.group(1)}" if _overlaps(match.group(2), secret) else match.group(0)

    message = _QUOTED.sub(hidden, message)
    pieces = {secret} | set(re.split(r"[\s/?#:@&'\"=]+", secret))
    for piece in sorted((piece for piece in pieces if len(piece) >= 3), key=len, reverse=True):
        message = message.replace(piece, "***")
    return message


def _overlaps(fragment: str, secret: str) -> bool:
    """Whether ``fragment`` is in ``secret`` (one character only if that is all of it: not the
    "=" of "missing "=" after …") or shares three characters in a row with it."""
    if fragment in secret and (len(fragment) >= 2 or fragment == secret):
        return True
    match = SequenceMatcher(None, fragment, secret, autojunk=False).find_longest_match()
    return match.size >= 3


def _jdbc_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


_url_host = _jdbc_host  # an IPv6 address is bracketed in both URL forms


def _pgpass_password(params: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    """The password libpq would take from the password file for these parameters, if any."""
    path = Path(env["PGPASSFILE"]) if env.get("PGPASSFILE") else Path.home() / ".pgpass"
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode) or mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None  # libpq ignores a password file that is no plain file, or that others may read
        text = files.read_capped(str(path), MAX_PASSWORD_FILE_BYTES)
    except (OSError, files.FileRefused):
        return None
    lines = text.decode("utf-8", errors="replace").splitlines()
    host = (params.get("host") or "").split(",")[0]
    wanted = (
        "localhost" if not host or host.startswith("/") else host,
        params.get("port", DEFAULT_PORT).split(",")[0],
        params.get("dbname", ""),
        params.get("user", ""),
    )
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _pgpass_fields(line)
        if len(fields) == 5 and all(pattern in ("*", value) for pattern, value in zip(fields[:4], wanted)):
            return fields[4]
    return None


def _pgpass_fields(line: str) -> list[str]:
    """``host:port:db:user:password`` with ``\\:`` and ``\\\\`` escapes."""
    fields, current, escaped = [], [], False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":" and len(fields) < 4:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields
