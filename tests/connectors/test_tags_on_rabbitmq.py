"""Settling deliveries in as few frames as AMQP allows (ackstore/connectors/tags.py), on the real
RabbitMQ, for their cost: 30 000 held deliveries decided in any order are settled in about the time
of one pass of single acks in tag order (a shuffled pass of single acks costs the square of the
batch: 58.8 s against 1.6 s). The frames themselves are checked against a model channel in
tests/unit/test_tags.py.
"""

from __future__ import annotations

import random
import time

import pika
import pytest

from ackstore.connectors.amqp import send
from ackstore.connectors.tags import DeliveryTags, Frame
from tests.support.amqp_connector import broker  # noqa: F401 (fixture)
from tests.support.broker import AMQP_URL, Broker
from tests.support.dispositions import ACK, REJECT

HELD = 30_000


def holding(broker: Broker, name: str) -> tuple[pika.BlockingConnection, object, str, list[int]]:
    """A consumer on a connection of its own holding HELD deliveries unacknowledged."""
    queue = broker.queue(name)
    for n in range(HELD):
        broker.channel.basic_publish("", queue, b"{}", pika.BasicProperties(message_id=str(n)))
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=0)
    tags: list[int] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: tags.append(method.delivery_tag))
    deadline = time.monotonic() + 120
    while len(tags) < HELD and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert len(tags) == HELD
    return connection, channel, queue, tags


def settled_by_the_broker(channel, queue: str) -> None:
    """A synchronous call on the same channel: its answer comes after the queue has taken every
    frame sent before it (a channel's messages to its queue arrive in order)."""
    channel.queue_declare(queue, passive=True)


def timed_pass(broker: Broker, name: str, frames_of, still_held: int = 0) -> tuple[float, int]:
    """Seconds for the broker to take the frames ``frames_of`` makes for HELD held deliveries."""
    connection, channel, queue, tags = holding(broker, name)
    frames = frames_of(tags)
    started = time.perf_counter()
    for frame in frames:
        send(channel, frame)
    settled_by_the_broker(channel, queue)
    seconds = time.perf_counter() - started
    connection.close()
    time.sleep(0.5)
    assert broker.depth(queue) == still_held, "only the undecided deliveries went back to the queue"
    return seconds, len(frames)


def book_of(tags: list[int]) -> DeliveryTags:
    book = DeliveryTags()
    for tag in tags:
        book.delivered(tag)
    return book


@pytest.mark.slow
def test_30000_held_deliveries_decided_by_scheduled_runs_settle_in_about_one_sorted_pass(broker: Broker) -> None:
    """The decisions come as the settle step writes them: a run decides what arrived before it,
    in the order the decision query returns (none in particular). A delivery with a longer
    timeout may stay held behind them: what it separates from the oldest goes one by one, each
    single ack walking past the older held ones, so that case is bounded looser."""
    randomness = random.Random(25)

    def bare_sorted(tags: list[int]) -> list[Frame]:
        return [Frame(tag, False, ACK) for tag in sorted(tags)]

    def one_run(tags: list[int]) -> list[Frame]:
        decided = tags[:]
        randomness.shuffle(decided)
        return book_of(tags).settle({t: ACK for t in decided})

    def ten_runs(tags: list[int]) -> list[Frame]:
        """Ten scheduled runs, each deciding the next tenth of the deliveries, shuffled."""
        book, tenth = book_of(tags), len(tags) // 10
        frames = []
        for n in range(10):
            decided = tags[n * tenth:(n + 1) * tenth]
            randomness.shuffle(decided)
            frames += book.settle({t: REJECT if t % 7 == 0 and n == 3 else ACK for t in decided})
        return frames

    def one_held_in_a_hundred(tags: list[int]) -> list[Frame]:
        decided = [t for t in tags if t % 100 != 1]
        randomness.shuffle(decided)
        return book_of(tags).settle({t: ACK for t in decided})

    baseline, _ = timed_pass(broker, "sorted", bare_sorted)
    run, run_frames = timed_pass(broker, "run", one_run)
    runs, runs_frames = timed_pass(broker, "runs", ten_runs)
    held, held_frames = timed_pass(broker, "held", one_held_in_a_hundred, still_held=HELD // 100)
    print(f"\n{HELD} held deliveries: single acks in tag order {baseline:.2f} s; one run's decisions {run:.2f} s "
          f"({run_frames} frame); ten runs' {runs:.2f} s ({runs_frames} frames); one in a hundred still held "
          f"{held:.2f} s ({held_frames} frames)")
    assert run_frames == 1
    fourth = [t % 7 == 0 for t in range(3 * HELD // 10 + 1, 4 * HELD // 10 + 1)]
    changes = sum(1 for a, b in zip(fourth, fourth[1:]) if a != b)
    assert runs_frames == 9 + changes + 1, "one frame per run of one disposition"
    assert run <= 1.5 * baseline + 0.5, (run, baseline)
    assert runs <= 1.5 * baseline + 0.5, (runs, baseline)
    assert held <= 4 * baseline + 1.0, (held, baseline)  # shuffled single acks: about 60 times the baseline
