"""Poison messages for a connector: a ledger that refuses one thing for good (the ``refusing``
fixture), commands the ledger holds until decided or refuses at once, and an envelope whose
correlation id comes from the transport."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text

from tests.support.ledger import twin_command


@pytest.fixture
def refusing(engine: Engine):
    """The ledger refuses one thing for good (a CHECK constraint on ``signals``): a stand-in for
    any value PostgreSQL refuses that validation did not foresee."""
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE signals ADD CONSTRAINT test_poison CHECK (thing_id <> 'org.acme:poison')"))
    yield
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE signals DROP CONSTRAINT IF EXISTS test_poison"))


def held_command(name: str, **headers: Any) -> dict:
    """A command stored and held until decided; ``name`` is its correlation id unless given."""
    return twin_command("modify", thing=f"org.acme/{name}", path="/", value={"attributes": {"x": 1}},
                        **{"correlation_id": name, **headers})


def refused_command(name: str, **headers: Any) -> dict:
    """Refused by the ledger (an invalid label): answered at once with 400."""
    return held_command(name, **{"requested_acks": ["not a label!"], **headers})


def without_correlation_id(envelope: dict) -> dict:
    """The correlation id then comes from the transport (AMQP's correlation_id, MQTT 5's correlation data)."""
    del envelope["headers"]["correlation-id"]
    return envelope
