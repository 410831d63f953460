"""Settling deliveries in as few frames as AMQP allows (ackstore/connectors/tags.py).

The frames are checked against a model channel — ``multiple`` settles every outstanding delivery
up to its tag, a tag settled twice is an error — and, on the real RabbitMQ, for their cost: 30 000
held deliveries decided in any order are settled in about the time of one pass of single acks in
tag order (a shuffled pass of single acks costs the square of the batch: 58.8 s against 1.6 s).
"""

from __future__ import annotations

import random
import time

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.connectors.amqp import send
from ackstore.connectors.tags import DeliveryTags, Frame
from ackstore.rules.connectivity import Disposition
from tests.broker import AMQP_URL, Broker
from tests.test_amqp_connector import broker  # noqa: F401 (fixture)

ACK = Disposition(ack=True)
REJECT = Disposition(ack=False, requeue=False)
REDELIVER = Disposition(ack=False, requeue=True)


class ModelChannel:
    """What a broker does with the frames: which disposition each delivery got."""

    def __init__(self, delivered: int) -> None:
        self.outstanding = set(range(1, delivered + 1))
        self.settled: dict[int, Disposition] = {}

    def apply(self, frame: Frame) -> None:
        assert frame.tag in self.outstanding, f"tag {frame.tag} settled twice or never delivered"
        covered = [t for t in self.outstanding if t <= frame.tag] if frame.multiple else [frame.tag]
        for tag in covered:
            self.outstanding.remove(tag)
            self.settled[tag] = frame.disposition


def tags_with(delivered: int) -> DeliveryTags:
    tags = DeliveryTags()
    for tag in range(1, delivered + 1):
        tags.delivered(tag)
    return tags


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_delivery_gets_the_disposition_decided_for_it_once_whatever_the_order(data) -> None:
    delivered = data.draw(st.integers(1, 60))
    wanted = {tag: data.draw(st.sampled_from([ACK, REJECT, REDELIVER])) for tag in range(1, delivered + 1)}
    order = data.draw(st.permutations(list(range(1, delivered + 1))))
    cuts = sorted(data.draw(st.lists(st.integers(0, delivered), max_size=6)))
    passes = [order[a:b] for a, b in zip([0, *cuts], [*cuts, delivered])]
    tags, channel = tags_with(delivered), ModelChannel(delivered)
    for chunk in passes:
        again = data.draw(st.lists(st.sampled_from(order), max_size=3))  # settled earlier: left out
        for frame in tags.settle({tag: wanted[tag] for tag in [*chunk, *again]}):
            channel.apply(frame)
    assert channel.settled == wanted
    assert tags.outstanding == 0 and not channel.outstanding
    assert tags.settle({1: ACK}) == [], "nothing is settled twice"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_undecided_deliveries_are_never_settled_and_a_give_back_returns_them_all(data) -> None:
    delivered = data.draw(st.integers(1, 60))
    decided = data.draw(st.sets(st.integers(1, delivered)))
    wanted = {tag: data.draw(st.sampled_from([ACK, REJECT])) for tag in decided}
    tags, channel = tags_with(delivered), ModelChannel(delivered)
    for frame in tags.settle(wanted):
        channel.apply(frame)
    assert channel.settled == wanted, "a multiple frame never reaches over a held delivery"
    assert tags.outstanding == delivered - len(decided)
    back = tags.give_back(REDELIVER)
    if back is None:
        assert not channel.outstanding
    else:
        channel.apply(back)
        assert {t for t, d in channel.settled.items() if d == REDELIVER} == set(range(1, delivered + 1)) - decided
    assert tags.give_back(REDELIVER) is None


@pytest.mark.parametrize("decisions, frames", [
    ({t: ACK for t in (3, 1, 2, 5, 4)}, [Frame(5, True, ACK)]),
    ({1: ACK, 2: ACK, 3: REJECT, 4: REJECT, 5: ACK}, [Frame(2, True, ACK), Frame(4, True, REJECT), Frame(5, False, ACK)]),
    # tag 1 is still held: no frame may be multiple
    ({t: ACK for t in (5, 3, 2, 4)}, [Frame(2, False, ACK), Frame(3, False, ACK), Frame(4, False, ACK), Frame(5, False, ACK)]),
])
def test_runs_of_the_oldest_tags_are_one_frame_the_rest_go_one_by_one_oldest_first(decisions, frames) -> None:
    assert tags_with(5).settle(decisions) == frames


def test_a_run_reaches_over_deliveries_settled_before() -> None:
    tags = tags_with(6)
    assert tags.settle({3: ACK, 5: ACK}) == [Frame(3, False, ACK), Frame(5, False, ACK)]
    assert tags.settle({1: ACK, 2: ACK, 4: ACK, 6: ACK}) == [Frame(6, True, ACK)]


def test_tags_only_grow() -> None:
    tags = tags_with(2)
    with pytest.raises(ValueError):
        tags.delivered(2)


# --- the cost on the real broker -----------------------------------------------------------------

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
