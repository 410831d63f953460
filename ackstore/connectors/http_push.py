"""HTTP push targets: a connection of type ``http-push`` sends each twin event or live signal its
targets subscribe to as an HTTP request, and the endpoint's response issues the target's label
(B.9's HTTP push row, Ditto's ``HttpPublisherActor``, decisions #113).

A target's ``address`` is ``VERB:/path`` on the connection's ``uri`` (``http://`` or
``https://``, with ``user:password@`` as basic authentication). Each request carries the Ditto
Protocol message as ``application/vnd.eclipse.ditto+json`` (none for GET and DELETE) with its
``correlation-id`` header. The response's status issues the label (2xx, 4xx and 5xx alike), its
body the ack's value; a request not answered whole within ``specificConfig.idleTimeout`` (default
60 s: connecting, sending, the status, headers and body together, as Ditto's ``TimeoutFlow`` bounds
a request) is 408; a request that fails (refused, reset) is 500; a status that is no final HTTP
status (101, 600-999; interim 1xx are skipped) is 503. A message whose correlation id no HTTP
header can carry is refused: its label 400, one log line, counted (decisions #118). A target that
issues ``live-response`` sends live signals, and the response is the signal's live response
(Ditto PR #809).

An HTTP push connection has no sources: the connector's only work is its targets', on their own
thread, ``specificConfig.parallelism`` requests at once (default 1, Ditto's). A request whose
answer never reaches the ledger (the connector killed) is sent again when its lease ends. A
request that fails in a way nobody foresaw (a bug) is logged with its traceback and its label
issued 500; the other requests go on.
"""

from __future__ import annotations

import base64
import http.client
import logging
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Mapping

from ackstore.connectors.config import ConnectionConfig, HttpPushSettings, Target
from ackstore.connectors.core import Connector
from ackstore.connectors.logs import shown
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.options import Options
from ackstore.connectors.targets import Published, TargetFeed, targets_work
from ackstore.connectors.transport import Message, Session, Transport, Unencodable, json_payload
from ackstore.ledger.store import AckStore
from ackstore.rules import http_push, labels, wire
from ackstore.rules.connectivity import Settling

log = logging.getLogger("ackstore.connector")

__all__ = ["HttpPushConnector", "HttpPushTransport", "Endpoint"]


class HttpPushConnector(Connector):
    """A connector whose targets push to an HTTP endpoint."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None,
                 metrics: ConnectorMetrics | None = None) -> None:
        options = options or Options()
        super().__init__(store, config, HttpPushTransport(config, options), options, metrics)


class HttpPushTransport(Transport):
    def __init__(self, config: ConnectionConfig, options: Options) -> None:
        if config.http_push is None:
            raise ValueError("not an HTTP push connection")
        self.config = config
        self.settings: HttpPushSettings = config.http_push
        self.options = options

    def connect(self, deliver: Callable[[Message], None]) -> Session:
        return _NoSources()

    def disposition(self, decision: str) -> Settling:
        raise AssertionError("an HTTP push connection receives nothing to settle")

    def consuming(self) -> str:
        return f"nothing (HTTP push to {Endpoint(self.config.uri).shown}, {self.settings.parallelism} at once)"

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event, answered: Callable[[int, bool], None],
                dropped: Callable[[str, BaseException], None]) -> Callable[[], None] | None:
        return targets_work(store, self.config, self.options, outage, answered, dropped,
                            lambda feed: HttpPushTargets(feed, self.settings, interval_s=self.options.target_interval_s,
                                                         stop=stop).run)


class _NoSources(Session):
    """The session of a connection without sources: nothing arrives, nothing is settled."""

    def process(self, time_limit: float) -> None:
        time.sleep(time_limit)

    def settle(self, dispositions: Mapping[int, Settling]) -> None:
        return None

    def give_back(self) -> bool:
        return False

    def stop_consuming(self) -> None:
        return None

    def reply(self, reply_to: str, message: dict[str, Any]) -> bool:
        raise Unencodable("an HTTP push connection answers nothing")

    def close(self) -> None:
        return None


class Endpoint:
    """The connection's ``uri``: where requests go, and the basic authentication it names."""

    def __init__(self, uri: str) -> None:
        address = http_push.parse_endpoint(uri)  # checked when the connection was read
        self.https = address.https
        self.host = address.host
        self.port = address.port
        self.base = address.base
        self.authorization: str | None = None
        if address.username is not None:
            pair = f"{address.username}:{address.password or ''}".encode("utf-8", "surrogatepass")
            self.authorization = "Basic " + base64.b64encode(pair).decode()

    @property
    def shown(self) -> str:
        """The endpoint as a log line shows it: never its password."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.https else 'http'}://{host}:{self.port}{self.base}"

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                timeout_s: float) -> tuple[int, str | None, bytes]:
        """One request: (status, content type, body); :class:`TimeoutError` when it was not
        answered whole within ``timeout_s`` — connecting, sending, the status, headers and body
        together (an endpoint trickling a byte at a time is cut off) —, :class:`OSError` when it
        failed."""
        kind = _HttpsConnection if self.https else _HttpConnection
        connection = kind(self.host, self.port, timeout=timeout_s)
        expired = threading.Event()
        watchdog = threading.Timer(timeout_s, _cut_off, (connection, expired))
        watchdog.daemon = True
        watchdog.start()
        try:
            sent = dict(headers)
            if self.authorization:
                sent["Authorization"] = self.authorization
            connection.request(method, self.base + path, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read(http_push.MAX_BODY_BYTES + 1)
        except (OSError, http.client.HTTPException) as problem:
            if expired.is_set() or isinstance(problem, socket.timeout):
                raise TimeoutError(f"no whole answer within {timeout_s:g} s") from None
            raise OSError(f"{type(problem).__name__}: {problem}") from None
        finally:
            watchdog.cancel()
            connection.close()
        if expired.is_set():  # cut off: what was read may be a part only
            raise TimeoutError(f"no whole answer within {timeout_s:g} s")
        return response.status, response.getheader("Content-Type"), data


def _cut_off(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The request's time is up: end its socket, so the read waiting on it returns at once."""
    expired.set()
    sock = connection.sock
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the socket's own, under TLS too
        except OSError:
            pass  # closed meanwhile


class _FinalResponse(http.client.HTTPResponse):
    """A response read past its interim 1xx responses (RFC 9110 §15.2: a client reads on to the
    final one; http.client skips 100 Continue only). 101 stays: it ends HTTP on the connection."""

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()
            if not 100 <= status < 200 or status == 101:
                return version, status, reason
            while self.fp.readline(http.client._MAXLINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # the interim response's headers


class _HttpConnection(http.client.HTTPConnection):
    response_class = _FinalResponse


class _HttpsConnection(http.client.HTTPSConnection):
    response_class = _FinalResponse


class HttpPushTargets:
    """Send what the targets pull, ``parallelism`` requests at once, until ``stop`` is set."""

    def __init__(self, feed: TargetFeed, settings: HttpPushSettings, *, interval_s: float,
                 stop: threading.Event) -> None:
        self.feed = feed
        self.settings = settings
        self.interval_s = interval_s
        self.stop = stop
        self.endpoint = Endpoint(feed.config.uri)

    def run(self) -> None:
        with ThreadPoolExecutor(self.settings.parallelism, thread_name_prefix="http-push") as pool:
            running: set[Future[None]] = set()
            while not self.stop.is_set():
                if len(running) < self.settings.parallelism * 4:  # pull more while few wait
                    pulled, retry = self.feed.pull()
                    running |= {pool.submit(self._push_guarded, target, item) for target, item in pulled}
                    if not pulled:
                        self.stop.wait(max(self.interval_s, retry))
                if running:
                    _, running = wait(running, timeout=self.interval_s, return_when=FIRST_COMPLETED)
            for future in running:  # stopping: what is in flight is answered, or pulled again later
                future.cancel()

    def _push_guarded(self, target: Target, item: Published) -> None:
        """One request, whatever happens to it: a failure nobody foresaw is a bug, logged with its
        traceback, and its label issued 500 (Ditto's converter makes any other exception 500); the
        other requests go on."""
        try:
            self._push(target, item)
        except Exception:  # noqa: BLE001 — one request must not stop the others
            correlation_id = str(item.message["headers"].get("correlation-id"))
            log.exception("connector %s: sending %s to %s failed unexpectedly; its label is issued %d",
                          self.feed.config.id, shown(correlation_id), shown(target.topic), http_push.FAILED)
            try:
                self.feed.issue(item, http_push.FAILED)
            except Exception:  # noqa: BLE001 — not issued: its lease ends, it is pulled again
                log.exception("connector %s: issuing the label of %s failed", self.feed.config.id,
                              shown(correlation_id))

    def _push(self, target: Target, item: Published) -> None:
        method, path = http_push.parse_address(target.topic)
        headers = {"Content-Type": wire.DITTO_CONTENT_TYPE,
                   "correlation-id": str(item.message["headers"].get("correlation-id", ""))}
        try:
            for name, value in headers.items():
                problem = http_push.header_problem(name, value)
                if problem is not None:
                    raise Unencodable(problem)
            body = http_push.request_body(method, json_payload(item.message))
        except Unencodable as problem:
            self.feed.unsendable(target.topic, item, problem)
            return
        status: int | None = None
        content_type: str | None = None
        data = b""
        timed_out = False
        try:
            status, content_type, data = self.endpoint.request(method, path, body, headers, self.settings.idle_timeout_s)
        except TimeoutError:
            timed_out = True
        except OSError as problem:
            log.warning("connector %s: the request to %s%s failed (%s)", self.feed.config.id, self.endpoint.shown, path,
                        problem)
        if status is not None and not http_push.is_final(status):
            log.warning("connector %s: %s%s answered %s with status %d, no final HTTP status; answered %d",
                        self.feed.config.id, self.endpoint.shown, path, shown(headers["correlation-id"]), status,
                        http_push.UNKNOWN_STATUS)
        if target.issued_label == labels.LIVE_RESPONSE:  # whatever the pulled signal's headers list
            if status is not None:
                self._respond(item, status, content_type, data)
            else:  # no live response: the signal's own timeout decides (408, by the sweep)
                self.feed.told(1, False)
            return
        issued = http_push.issued_status(status, timed_out)
        self.feed.told(1, 200 <= issued < 300)
        self.feed.issue(item, issued, _value(status, content_type, data))

    def _respond(self, item: Published, status: int, content_type: str | None, data: bytes) -> None:
        """The endpoint's response as the live signal's response (Ditto PR #809)."""
        answer = self.feed.respond(item, http_push.live_response(item.message, status, content_type, data))
        self.feed.told(1, answer is not None and answer.get("status") == 204)
        if answer is not None and answer.get("status") != 204:
            log.warning("connector %s: the endpoint's response to %s is no live response the ledger takes: %s",
                        self.feed.config.id, shown(str(item.message["headers"].get("correlation-id"))),
                        shown(str(answer.get("message")), 300))


def _value(status: int | None, content_type: str | None, data: bytes) -> Any:
    """The ack's value: the response's body; Ditto's error for a status that is no final one; none without a response."""
    if status is None:
        return None
    return http_push.ack_value(content_type, data) if http_push.is_final(status) else http_push.unknown_status_error(status)
