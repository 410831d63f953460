"""The event log's tail a login's SSE streams share (``events.Tail``): what it hands a stream after
a position, and when it says the stream must read on its own (it is behind what the tail keeps)."""

from __future__ import annotations

from typing import NamedTuple

from ackstore.doors import events


class Row(NamedTuple):
    id: int


def _tail(ids: list[int], floor: int) -> events.Tail:
    tail = events.Tail(None, floor)  # type: ignore[arg-type] — after() reads no store
    tail.rows.extend(Row(i) for i in ids)
    tail.position = ids[-1] if ids else floor
    return tail


def test_a_stream_gets_what_came_after_its_position_in_order() -> None:
    tail = _tail([11, 12, 15, 20], floor=10)
    assert [row.id for row in tail.after(10)[0]] == [11, 12, 15, 20]
    assert [row.id for row in tail.after(12)[0]] == [15, 20]
    assert [row.id for row in tail.after(13)[0]] == [15, 20]  # the log's ids have gaps
    assert tail.after(20)[0] == [] and tail.after(99)[0] == []


def test_a_stream_behind_the_tail_reads_on_its_own() -> None:
    assert _tail([11, 12], floor=10).after(9)[0] is None


def test_a_stream_gets_at_most_a_batch_at_once() -> None:
    tail = _tail(list(range(1, events.BATCH + 51)), floor=0)
    first = tail.after(0)[0]
    assert len(first) == events.BATCH
    assert [row.id for row in tail.after(first[-1].id)[0]] == list(range(events.BATCH + 1, events.BATCH + 51))
