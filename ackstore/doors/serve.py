"""``ackstore serve``: the front doors on one address, until stopped (SIGINT / SIGTERM: every hold
ends — a held request is answered 202 with the Location of its answer, stored, nothing lost —
uvicorn stops taking requests and answers those in flight, then the door stops its threads)."""

from __future__ import annotations

import logging
import socket
from types import FrameType

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ackstore.doors import DEFAULT_HOST, DEFAULT_PORT
from ackstore.doors.app import application
from ackstore.doors.door import Door
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.rules.settings import Settings

DEFAULT_LISTEN = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
log = logging.getLogger("ackstore.doors")

# A request line and headers at most this: past it a plain 400 and the connection closed, unbuffered
# (below it, past 8 KiB, BoundedHead's 414 / 431 in Ditto's shape).
MAX_HEAD_BYTES = 16 * 1024


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol (its parser is C: h11's pure Python cost the door about a fifth
    of its CPU a request), with a request's head bounded as h11 bounds it: httptools keeps a header
    it has not seen the end of, however long, so the bytes a head arrives in are counted, and a
    head still incomplete past ``MAX_HEAD_BYTES`` is answered 400 and its connection closed."""

    def connection_made(self, transport: object) -> None:  # type: ignore[override]
        self.head_received = 0
        self.in_head = True  # the next bytes begin a request's head
        super().connection_made(transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            self.head_received += len(data)
        super().data_received(data)
        if self.in_head and self.head_received > MAX_HEAD_BYTES and not self.transport.is_closing():
            self.send_400_response("The request line and headers are too large.")

    def on_headers_complete(self) -> None:
        self.in_head, self.head_received = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True  # a keep-alive connection's next request


LIMITS = {
    "http": BoundedHttpTools,
    "timeout_keep_alive": 5,  # an idle keep-alive connection is closed after this
    "limit_concurrency": 20_000,  # connections and requests at once; past it 503 (held requests count)
    "timeout_graceful_shutdown": 70,  # a held request's hold ends within a minute
}


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as ``serve --listen`` takes it; ValueError names what is wrong."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) < 65536 or not host:
        raise ValueError(f"--listen takes host:port, e.g. {DEFAULT_LISTEN}; not {text!r}")
    return host.strip("[]"), int(port)


def ws_max_size(settings: Settings) -> int:
    """The longest WebSocket frame read: twice the ledger's message size, so that a frame a little
    past it is answered Ditto's 413 on the socket; a longer one closes the socket (1009) unread."""
    return 2 * settings.max_envelope_bytes


class _Server(uvicorn.Server):
    """uvicorn's server, that ends every hold as it is told to stop: a held request is answered
    at once (202 and the Location of its answer) rather than keeping the stop waiting a minute."""

    def __init__(self, config: uvicorn.Config, door: Door) -> None:
        super().__init__(config)
        self.door = door

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.door.stopping()  # only schedules: a signal handler may run while the loop holds a lock
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # stopped as asked, cleanly: exit 0 (uvicorn would raise the signal again, exiting -15),
        # as every ackstore process that stops cleanly does
        self._captured_signals.clear()


def serve(url: DatabaseUrl, listen: str = DEFAULT_LISTEN, settings: Settings | None = None, *,
          trusting: bool = False, token_key: bytes | None = None) -> None:
    """Serve until stopped; ``trusting``: the database asks no password (a development server),
    and a request's login is taken unproven (decisions #134); ``token_key``: Bearer tokens signed
    with it are taken too, the door's own login switching into theirs (decisions #137)."""
    host, port = listen_address(listen)
    if trusting:
        log.warning("--trusting-database: a request acts as whichever login it names, unproven; "
                    "for one machine's development server only")
    app = application(url, settings, trusting=trusting, token_key=token_key)
    # log_config None: uvicorn's lines go to the process's handlers, which the CLI guards (no token
    # of a WebSocket's query, no control character a sender chose, reaches a line)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False, lifespan="on",
                            log_config=None, ws_max_size=ws_max_size(app.state.door.settings), **LIMITS)
    _Server(config, app.state.door).run()
