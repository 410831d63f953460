"""``ackstore serve``: the front doors on one address, until stopped (SIGINT / SIGTERM: uvicorn
stops taking requests, answers those in flight, then the door stops its threads)."""

from __future__ import annotations

import uvicorn

from ackstore.doors import DEFAULT_HOST, DEFAULT_PORT
from ackstore.doors.app import application
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.rules.settings import Settings

DEFAULT_LISTEN = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
LIMITS = {
    "timeout_keep_alive": 5,  # an idle keep-alive connection is closed after this
    "limit_concurrency": 20_000,  # connections and requests at once; past it 503 (held requests count)
    "h11_max_incomplete_event_size": 16 * 1024,  # a request line and headers at most 16 KiB (431 past it)
    "timeout_graceful_shutdown": 70,  # a held request's hold ends within a minute
}


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as ``serve --listen`` takes it; ValueError names what is wrong."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) < 65536 or not host:
        raise ValueError(f"--listen takes host:port, e.g. {DEFAULT_LISTEN}; not {text!r}")
    return host.strip("[]"), int(port)


def serve(url: DatabaseUrl, listen: str = DEFAULT_LISTEN, settings: Settings | None = None) -> None:
    host, port = listen_address(listen)
    uvicorn.run(application(url, settings), host=host, port=port, log_level="info", access_log=False,
                lifespan="on", **LIMITS)
