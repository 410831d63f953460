"""What RabbitMQ 3.10's AMQP 1.0 plugin (Debian's ``rabbitmq_amqp1_0``) does with each outcome a
consumer settles a delivery with — the facts an AMQP 1.0 connector settling as Ditto settles
(accepted / rejected / modified with delivery-failed) is designed around (issue 41). Measured on a
node of our own (tests/support/own_rabbitmq.py) with python-qpid-proton; each test fails if the
broker stops behaving so.

* ``accepted`` removes the message; ``rejected`` drops it (dead-letters it, with a DLX).
* ``released`` puts it back where it was: redelivered with first-acquirer false and its
  delivery-count unchanged.
* ``modified`` (Ditto's "redeliver": delivery-failed, with or without undeliverable-here) is not
  supported: the broker ends the session with ``amqp:invalid-field``, and every delivery the
  session held unsettled goes back to the queue.
"""

from __future__ import annotations

from typing import Iterator

import pika
import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from tests.support.own_rabbitmq import OwnRabbitMQ

MESSAGES = ("m0", "m1", "m2")


@pytest.fixture(scope="module")
def node() -> Iterator[OwnRabbitMQ]:
    broker = OwnRabbitMQ(plugins=("rabbitmq_amqp1_0",))
    broker.start()
    yield broker
    broker.close()


def url(node: OwnRabbitMQ) -> str:
    return f"amqp://guest:guest@127.0.0.1:{node.port}"  # AMQP 1.0 on the node's AMQP port


def ready(node: OwnRabbitMQ, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        return connection.channel().queue_declare(queue, durable=True, passive=True).method.message_count
    finally:
        connection.close()


def settle_first(node: OwnRabbitMQ, queue: str, state: int, *, failed: bool = False, undeliverable: bool = False,
                 accept: bool = True) -> tuple[list[tuple[str, int, bool]], str | None]:
    """Publish MESSAGES to a fresh ``queue``, receive the first with one credit, settle it with
    ``state``; then receive whatever comes (accepting it, if ``accept``): (body, delivery-count,
    first-acquirer) of each, and the error the session ended with, if it did."""
    admin = pika.BlockingConnection(pika.URLParameters(node.url))
    admin.channel().queue_declare(queue, durable=True)
    admin.close()
    connection = BlockingConnection(url(node), timeout=10)
    sender = connection.create_sender(f"/amq/queue/{queue}")
    for body in MESSAGES:
        sender.send(Message(body=body, id=f"id-{body}", durable=True))
    receiver = connection.create_receiver(f"/amq/queue/{queue}", credit=1)
    receiver.receive(timeout=5)
    delivery = receiver.fetcher.unsettled.popleft()
    if state == Delivery.MODIFIED:
        delivery.local.failed, delivery.local.undeliverable = failed, undeliverable
    delivery.update(state)
    delivery.settle()
    then, ended = [], None
    try:
        for _ in range(len(MESSAGES) + 1):
            message = receiver.receive(timeout=1.5)
            then.append((message.body, message.delivery_count, message.first_acquirer))
            if accept:
                receiver.accept()
    except Exception as error:  # the receive's timeout, or the session the broker ended
        ended = None if type(error).__name__ == "Timeout" else str(error)
        if ended is None and receiver.link.remote_condition is not None:
            ended = receiver.link.remote_condition.name
        if ended is None and receiver.link.session.remote_condition is not None:
            ended = receiver.link.session.remote_condition.name
    connection.close()
    return then, ended


def test_accepted_removes_the_message(node: OwnRabbitMQ) -> None:
    then, ended = settle_first(node, "accepted", Delivery.ACCEPTED)
    assert (then, ended) == ([("m1", 0, True), ("m2", 0, True)], None)
    assert ready(node, "accepted") == 0


def test_rejected_drops_the_message(node: OwnRabbitMQ) -> None:
    then, ended = settle_first(node, "rejected", Delivery.REJECTED)
    assert (then, ended) == ([("m1", 0, True), ("m2", 0, True)], None)
    assert ready(node, "rejected") == 0


def test_released_puts_it_back_neither_counted_nor_first(node: OwnRabbitMQ) -> None:
    then, ended = settle_first(node, "released", Delivery.RELEASED)
    assert ended is None
    assert sorted(then) == [("m0", 0, False), ("m1", 0, True), ("m2", 0, True)]
    assert ready(node, "released") == 0


@pytest.mark.parametrize("undeliverable", [False, True], ids=["delivery-failed", "and-undeliverable-here"])
def test_modified_ends_the_session_and_gives_back_everything_it_held(node: OwnRabbitMQ, undeliverable: bool) -> None:
    queue = f"modified-{undeliverable}"
    # what the broker sent before it read the disposition is held unsettled, never accepted
    _, ended = settle_first(node, queue, Delivery.MODIFIED, failed=True, undeliverable=undeliverable, accept=False)
    assert ended == "amqp:invalid-field"
    assert ready(node, queue) == len(MESSAGES)  # the modified one too: nothing is lost, nothing settled
