"""Login roles made for a test module (trust authentication: no password), dropped after it: one
per group role, or two of the ingest role; and a database URL as one of them."""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest
from sqlalchemy import create_engine, text

from ackstore.ledger import objects
from ackstore.ledger.database_url import DatabaseUrl
from tests.conftest import ADMIN_URL

GROUPS = objects.group_roles()  # grants.sql's roles and the admin role: the one list of them


@pytest.fixture(scope="module")
def logins() -> Iterator[dict[str, str]]:
    """A LOGIN role per group, member of that group only (trust authentication: no password)."""
    admin = create_engine(DatabaseUrl.parse(ADMIN_URL).sqlalchemy(), isolation_level="AUTOCOMMIT")
    names = {group: f"{group}_login_{os.getpid()}_{uuid.uuid4().hex[:6]}" for group in GROUPS}
    with admin.connect() as conn:
        for group, login in names.items():
            conn.execute(text(f'CREATE ROLE "{login}" LOGIN IN ROLE {group}'))  # names made here, never input
    yield names
    with admin.connect() as conn:
        for login in names.values():
            conn.execute(text(f'DROP OWNED BY "{login}"'))
            conn.execute(text(f'DROP ROLE "{login}"'))
    admin.dispose()


def as_login(database_url: str, login: str) -> str:
    return DatabaseUrl({**DatabaseUrl.parse(database_url).params, "user": login}).text()


@pytest.fixture(scope="module")
def two_logins() -> Iterator[tuple[str, str]]:
    """Two logins of the ingest role, as two subscribers' applications would have."""
    admin = create_engine(DatabaseUrl.parse(ADMIN_URL).sqlalchemy(), isolation_level="AUTOCOMMIT")
    names = tuple(f"subscriber_{side}_{os.getpid()}_{uuid.uuid4().hex[:6]}" for side in "ab")
    with admin.connect() as conn:
        for login in names:
            conn.execute(text(f'CREATE ROLE "{login}" LOGIN IN ROLE ackstore_ingest'))  # names made here, never input
    yield names
    with admin.connect() as conn:
        for login in names:
            conn.execute(text(f'DROP OWNED BY "{login}"'))
            conn.execute(text(f'DROP ROLE "{login}"'))
    admin.dispose()
