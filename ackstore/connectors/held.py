"""Deliveries held until their signal's settlement is decided (QoS 1), shared by the thread that
stores messages (it holds them) and the one that carries decisions out (it takes them).

A delivery is known by its session (one broker connection) and tag: a tag means nothing on a
later connection, whose channel numbers its deliveries from 1 again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Delivery:
    session: int
    tag: int


class Held:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_signal: dict[int, list[Delivery]] = {}
        self._count = 0

    def hold(self, items: Iterable[tuple[int, Delivery]]) -> None:
        with self._lock:
            for signal_id, delivery in items:
                self._by_signal.setdefault(signal_id, []).append(delivery)
                self._count += 1

    def take(self, signal_ids: Iterable[int]) -> dict[int, list[Delivery]]:
        """The deliveries of these signals, no longer held (those of signals held here)."""
        with self._lock:
            taken = {s: self._by_signal.pop(s) for s in signal_ids if s in self._by_signal}
            self._count -= sum(len(deliveries) for deliveries in taken.values())
            return taken

    def put_back(self, taken: dict[int, list[Delivery]]) -> None:
        """Taken deliveries whose decisions could not be recorded: held again."""
        self.hold((signal_id, d) for signal_id, deliveries in taken.items() for d in deliveries)

    def forget(self, session: int) -> None:
        """A closed session's deliveries went back to the queue with its channel."""
        with self._lock:
            for signal_id in list(self._by_signal):
                kept = [d for d in self._by_signal[signal_id] if d.session != session]
                self._count -= len(self._by_signal[signal_id]) - len(kept)
                if kept:
                    self._by_signal[signal_id] = kept
                else:
                    del self._by_signal[signal_id]

    def __len__(self) -> int:
        return self._count
