"""A dependency that is away (the database restarting, the broker down): said once when it goes,
once when it is back, and asked again after waits that double — not every poll.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable


class Outage:
    """One dependency as one thread of the connector sees it."""

    def __init__(self, what: str, log: logging.Logger, first_wait_s: float, max_wait_s: float,
                 watch: Callable[[bool], None] | None = None,
                 ended: Callable[[datetime, str], None] | None = None) -> None:
        self.what = what
        self.watch = watch  # told True when an outage begins, False when it ends (the metrics)
        self.ended = ended  # told when an outage that began then ended, and what it was (the connection's log)
        self.log = log
        self.first_wait_s = first_wait_s
        self.max_wait_s = max_wait_s
        self._wait_s = first_wait_s
        self._since: float | None = None
        self._began_at: datetime | None = None
        self._problem = ""
        self._failures = 0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, problem: str) -> float:
        """Say so if this is the first failure of an outage; the seconds to wait before trying again."""
        self._failures += 1
        if self._since is None:
            self._since, self._began_at, self._problem = time.monotonic(), datetime.now(timezone.utc), problem
            if self.watch is not None:
                self.watch(True)
            self.log.warning("%s unavailable (%s); trying again after %.0f s, then after waits that double up "
                             "to %.0f s — nothing held is lost meanwhile", self.what, problem, self._wait_s,
                             self.max_wait_s)
        wait, self._wait_s = self._wait_s, min(self._wait_s * 2, self.max_wait_s)
        return wait

    def recovered(self) -> None:
        """Say so if an outage just ended."""
        if self._since is not None:
            seconds = time.monotonic() - self._since
            self.log.warning("%s back after %.1f s (%d failed tries)", self.what, seconds, self._failures)
            if self.watch is not None:
                self.watch(False)
            if self.ended is not None and self._began_at is not None:
                self.ended(self._began_at, f"{self.what} unavailable for {seconds:.1f} s ({self._failures} failed "
                                           f"tries): {self._problem}")
        self._since, self._failures, self._wait_s = None, 0, self.first_wait_s
