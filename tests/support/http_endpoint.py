"""An HTTP endpoint of the test's own for HTTP push (the standard library's server, in a thread):
it records each request and answers by its path — a status and body, after a delay; as raw bytes
(interim and unknown statuses); or a byte at a time, for ever (a trickling endpoint)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.own_postgres import free_port

ANSWERS: dict[str, tuple[int, str, bytes, float]] = {  # path -> status, content type, body, delay
    "/ok": (200, "application/json", b'{"seen": true}', 0.0),
    "/created": (201, "text/plain", b"stored it", 0.0),
    "/refuse": (400, "application/json", b'{"error": "no"}', 0.0),
    "/fail": (500, "text/plain", b"down", 0.0),
    "/slow": (200, "application/json", b"{}", 3.0),  # past the connection's idleTimeout of 1s
    "/answer": (200, "application/json", b'{"answer": 42}', 0.0),  # a live message's answer
}
COMMAND_RESPONSE = (200, "application/vnd.eclipse.ditto+json", json.dumps(  # a live command's, as Ditto Protocol
    {"topic": "org.acme/lamp-1/things/live/commands/modify", "headers": {}, "path": "/attributes/on",
     "status": 204}).encode(), 0.0)


class Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://user:secret@127.0.0.1:{self.server_address[1]}"


TRICKLE_S = 0.3  # between two bytes of a trickling answer: each read well within idleTimeout (1 s)
RAW = {  # path -> the bytes an endpoint answers with, as they are (interim and unknown statuses)
    "/interim": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"late\": true}",
    "/switching": b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n",
    "/status-600": b"HTTP/1.1 600 Beyond\r\nContent-Length: 2\r\n\r\n{}",
    "/status-999": b"HTTP/1.1 999 Far Beyond\r\nContent-Length: 0\r\n\r\n",
}
TRICKLED = {  # path -> an answer sent a byte every TRICKLE_S, for ever: its status line, or its body
    "/trickle-status": b"HTTP/1.1 200 OK\r\n" * 1000,
    "/trickle-body": b"x" * 100_000,
}


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                     "body": json.loads(body) if body else None})
        if self.path in RAW or self.path in TRICKLED:
            self.close_connection = True
            self._raw(self.path)
            return
        sent = self.server.requests[-1]["body"] or {}
        command = "/things/live/commands/" in str(sent.get("topic"))
        status, content_type, answer, delay = COMMAND_RESPONSE if command else ANSWERS[self.path]
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _raw(self, path: str) -> None:
        try:
            if path in RAW:
                self.wfile.write(RAW[path])
                return
            if path == "/trickle-body":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            for byte in TRICKLED[path]:
                self.wfile.write(bytes([byte]))
                time.sleep(TRICKLE_S)
        except OSError:  # the connector cut the request off
            return

    do_POST = do_PUT = do_GET = _answer

    def log_message(self, *_: Any) -> None:
        return None
