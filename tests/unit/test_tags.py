"""Settling deliveries in as few frames as AMQP allows (ackstore/connectors/tags.py).

The frames are checked against a model channel — ``multiple`` settles every outstanding delivery
up to its tag, a tag settled twice is an error. Their cost on the real RabbitMQ:
tests/connectors/test_tags_on_rabbitmq.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.connectors.tags import DeliveryTags, Frame
from ackstore.rules.connectivity import Settling
from tests.support.dispositions import ACK, REDELIVER, REJECT


class ModelChannel:
    """What a broker does with the frames: which disposition each delivery got."""

    def __init__(self, delivered: int) -> None:
        self.outstanding = set(range(1, delivered + 1))
        self.settled: dict[int, Settling] = {}

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
