"""HTTP push targets: a connection of type ``http-push`` sends each twin event or live signal its
targets subscribe to as an HTTP request, and the endpoint's response issues the target's label
(B.9's HTTP push row, Ditto's ``HttpPublisherActor``, decisions #113).

A target's ``address`` is ``VERB:/path`` on the connection's ``uri`` (``http://`` or
``https://``, with ``user:password@`` as basic authentication). Each request carries the Ditto
Protocol message as ``application/vnd.eclipse.ditto+json`` (none for GET and DELETE) with its
``correlation-id`` header. The response's status issues the label (2xx, 4xx and 5xx alike), its
body the ack's value; no answer within ``specificConfig.idleTimeout`` (default 60 s) is 408; a
request that fails (refused, reset) is 500. A target that issues ``live-response`` sends live
signals, and the response is the signal's live response (Ditto PR #809).

An HTTP push connection has no sources: the connector's only work is its targets', on their own
thread, ``specificConfig.parallelism`` requests at once (default 1, Ditto's). A request whose
answer never reaches the ledger (the connector killed) is sent again when its lease ends.
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
from urllib.parse import unquote, urlsplit

from ackstore.connectors.config import ConnectionConfig, HttpPushSettings, Target
from ackstore.connectors.core import Connector, Message, Options, Session, Transport, Unencodable, json_payload
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.targets import Published, TargetFeed, targets_work
from ackstore.ledger.store import AckStore
from ackstore.rules import http_push, labels, wire
from ackstore.rules.connectivity import Disposition

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

    def disposition(self, decision: str) -> Disposition:
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

    def settle(self, dispositions: Mapping[int, Disposition]) -> None:
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
        parts = urlsplit(uri)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.base = parts.path.rstrip("/")
        self.authorization: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode()

    @property
    def shown(self) -> str:
        """The endpoint as a log line shows it: never its password."""
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}{self.base}"

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                timeout_s: float) -> tuple[int, str | None, bytes]:
        """One request: (status, content type, body); :class:`TimeoutError` when no answer came
        within ``timeout_s``, :class:`OSError` when it failed."""
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=timeout_s)
        try:
            sent = dict(headers)
            if self.authorization:
                sent["Authorization"] = self.authorization
            connection.request(method, self.base + path, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read(http_push.MAX_BODY_BYTES + 1)
            return response.status, response.getheader("Content-Type"), data
        except socket.timeout as problem:
            raise TimeoutError(str(problem)) from None
        except http.client.HTTPException as problem:
            raise OSError(f"{type(problem).__name__}: {problem}") from None
        finally:
            connection.close()


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
                    running |= {pool.submit(self._push, target, item) for target, item in pulled}
                    if not pulled:
                        self.stop.wait(max(self.interval_s, retry))
                if running:
                    done, running = wait(running, timeout=self.interval_s, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()  # a failure here is a bug: it stops the connector (core)
            for future in running:  # stopping: what is in flight is answered, or pulled again later
                future.cancel()

    def _push(self, target: Target, item: Published) -> None:
        method, path = http_push.parse_address(target.topic)
        headers = {"Content-Type": wire.DITTO_CONTENT_TYPE,
                   "correlation-id": str(item.message["headers"].get("correlation-id", ""))}
        try:
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
        if target.issued_label == labels.LIVE_RESPONSE:  # whatever the pulled signal's headers list
            if status is not None:
                self._respond(item, status, content_type, data)
            else:  # no live response: the signal's own timeout decides (408, by the sweep)
                self.feed.told(1, False)
            return
        issued = http_push.issued_status(status, timed_out)
        self.feed.told(1, status is not None and 200 <= status < 300)
        self.feed.issue(item, issued, http_push.ack_value(content_type, data) if status is not None else None)

    def _respond(self, item: Published, status: int, content_type: str | None, data: bytes) -> None:
        """The endpoint's response as the live signal's response (Ditto PR #809)."""
        answer = self.feed.respond(item, http_push.live_response(item.message, status, content_type, data))
        self.feed.told(1, answer is not None and answer.get("status") == 204)
        if answer is not None and answer.get("status") != 204:
            log.warning("connector %s: the endpoint's response to %s is no live response the ledger takes: %s",
                        self.feed.config.id, item.message["headers"].get("correlation-id"), answer.get("message"))
