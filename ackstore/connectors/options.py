"""A connector's options and their defaults: the one place they are spelled (the CLI's parsers
take their defaults from here). Light on purpose: every ``ackstore`` command builds its parser
with them, and importing the connector itself would cost each command its imports."""

from __future__ import annotations

from dataclasses import dataclass

from ackstore.rules import connectivity


@dataclass
class Options:
    batch_size: int = 1000  # messages per ledger transaction
    prefetch: int = 0  # unacknowledged deliveries the broker may push; 0: no limit (held ones count)
    linger_s: float = 0.05  # how long a partial batch waits for more messages
    poll_s: float = 2.0  # how often decisions are read without a notification
    target_interval_s: float = 0.5  # how often targets pull new signals
    target_lease: str = "5m"
    pipeline_interval_ms: int = 60_000  # the DAG's schedule, for the consumer-timeout check
    consumer_timeout_ms: int = connectivity.DEFAULT_CONSUMER_TIMEOUT_MS
    max_messages: int | None = None  # stop consuming after this many, exit once all are settled
    once: bool = False  # take what is queued now, settle what is decided, exit
    once_broker_wait_s: float = 30.0  # with once: how long an unreachable broker is tried before exiting 503
    reconnect_s: float = 1.0  # the first wait before reconnecting; doubled after each failure
    max_reconnect_s: float = 30.0
    batches_waiting: int = 4  # received batches waiting to be stored before the socket is left unread
