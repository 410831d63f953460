"""Settling deliveries on one AMQP channel in as few frames as the protocol allows.

A channel numbers its deliveries 1, 2, 3… (delivery tags). ``basic.ack``/``basic.nack`` with
``multiple`` settle every outstanding delivery up to a tag at once; a single one settles one.
RabbitMQ finds a single settled tag by walking its unacknowledged deliveries from the oldest,
so settling a big batch one by one in no particular order costs the square of its size (30 000
held deliveries: 58.8 s shuffled, 1.6 s in tag order, 0.8 s with one ``multiple``).

:class:`DeliveryTags` keeps which tags of a channel are outstanding and turns a set of
settlements into frames: a run of the lowest outstanding tags with one disposition becomes one
``multiple`` frame; what a still-held delivery separates from the oldest goes one by one, in tag
order. A frame only names an outstanding tag: RabbitMQ closes the channel on any other ("unknown
delivery tag"), even with ``multiple``. Pure: no broker here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ackstore.rules.connectivity import Settling


@dataclass(frozen=True)
class Frame:
    """One ``basic.ack`` or ``basic.nack`` to send."""

    tag: int
    multiple: bool
    disposition: Settling


class DeliveryTags:
    """The outstanding deliveries of one channel (tags arrive in increasing order)."""

    def __init__(self) -> None:
        self._through = 0  # every tag up to this one is settled
        self._settled_above: set[int] = set()  # settled tags above ``_through``
        self._highest = 0  # the newest delivery's tag

    def delivered(self, tag: int) -> None:
        if tag <= self._highest:
            raise ValueError(f"delivery tag {tag} after {self._highest}: tags of a channel only grow")
        self._highest = tag

    def is_outstanding(self, tag: int) -> bool:
        return self._through < tag <= self._highest and tag not in self._settled_above

    @property
    def outstanding(self) -> int:
        return self._highest - self._through - len(self._settled_above)

    def settle(self, settlements: Mapping[int, Settling]) -> list[Frame]:
        """The frames that settle ``settlements`` (tag -> disposition); tags no longer outstanding
        are left out. Runs of the lowest outstanding tags first, then the rest in tag order."""
        pending = sorted(tag for tag in settlements if self.is_outstanding(tag))
        frames: list[Frame] = []
        done = 0
        while done < len(pending):
            run_end = self._prefix_run(pending, done, settlements)
            if run_end == done:
                break
            last = pending[run_end - 1]
            frames.append(Frame(last, run_end - done > 1, settlements[last]))
            self._mark(pending[done:run_end])
            done = run_end
        for tag in pending[done:]:  # behind a delivery still held: one by one, oldest first
            frames.append(Frame(tag, False, settlements[tag]))
        self._mark(pending[done:])
        return frames

    def give_back(self, disposition: Settling) -> Frame | None:
        """One frame that settles every outstanding delivery (a stop returns them to the queue)."""
        if not self.outstanding:
            return None
        newest = self._highest
        while newest in self._settled_above:  # a multiple frame must name an outstanding tag
            newest -= 1
        self._through, self._settled_above = self._highest, set()
        return Frame(newest, True, disposition)

    def _prefix_run(self, pending: list[int], start: int, settlements: Mapping[int, Settling]) -> int:
        """How far from ``start`` the pending tags are the oldest outstanding ones, one disposition."""
        position, end = self._through + 1, start
        disposition = settlements[pending[start]]
        while end < len(pending):
            tag = pending[end]
            while position < tag and position in self._settled_above:
                position += 1
            if position != tag or settlements[tag] != disposition:
                break
            position, end = tag + 1, end + 1
        return end

    def _mark(self, tags: list[int]) -> None:
        self._settled_above.update(tags)
        while self._through + 1 in self._settled_above:
            self._through += 1
            self._settled_above.remove(self._through)
