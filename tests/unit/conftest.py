"""tests/unit/ needs nothing but Python: no PostgreSQL, no broker, no Spark. A test here that
asks for a server's fixture (tests/conftest.py: SERVER_FIXTURES) or opens a network connection
fails, so the folder stays the loop that runs in seconds (`make test-unit`); a test that needs a
server belongs in tests/ledger, tests/pipeline, tests/connectors or tests/system."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import SERVER_FIXTURES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if used and "tests/unit/" in item.nodeid:
            raise pytest.UsageError(f"{item.nodeid} uses {sorted(used)}: it belongs outside tests/unit")


def _refused(_socket: socket.socket, address: object) -> None:
    raise RuntimeError(f"a unit test opened a connection to {address!r}: move it out of tests/unit")


@pytest.fixture(autouse=True)
def no_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _refused)
    monkeypatch.setattr(socket.socket, "connect_ex", _refused)
