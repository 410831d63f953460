"""What the AMQP connector's tests share: a test's own queues on the machine's RabbitMQ (the
``broker`` fixture) and waiting for a connector that ends by itself (``--once``,
``--max-messages``)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.support.broker import Broker
from tests.support.no_secrets import assert_no_password


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


def stop_when_done(process, timeout: float = 120) -> tuple[int, str]:
    _, log = process.communicate(timeout=timeout)
    assert_no_password(log or "")
    return process.returncode, log
