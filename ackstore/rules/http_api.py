"""Ditto's HTTP API 2 in the ledger's terms (issue 51): a request's resource, method, headers and
query become a Ditto Protocol signal — B.10: ``PUT`` modifies (or creates), ``PATCH`` merges,
``DELETE`` deletes, ``POST`` to an inbox or outbox sends a live message — and what the ledger
decided becomes the HTTP answer. Pure: the front door (``ackstore/doors``) does the I/O.

A request is held until its decision for at most Ditto's HTTP request timeout (B.6: one minute);
the ledger's own deadline is the request's ``timeout`` as ingestion fixed it (A.2.2). A hold that
ends first is answered 202 with where to read the decision later (decisions #134).
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

from ackstore.rules import envelopes, errors, fields, jsontext, twin
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, RESPONSE_REQUIRED, TIMEOUT, AckRequest, Outcome
from ackstore.rules.wire import DITTO_CONTENT_TYPE, location, thing_topic_prefix

API = "/api/2"
HOLD_MAX_MS = 60_000  # ditto.gateway.http.request-timeout: the longest a request is held (B.6)
MESSAGE_TIMEOUT_MS = 10_000  # an HTTP live message's default timeout (B.6)
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# The Ditto headers a request gives as HTTP headers — and, the first four, as query parameters,
# which win (Ditto's routes read both; D13).
QUERY_HEADERS = (REQUESTED_ACKS, TIMEOUT, RESPONSE_REQUIRED, "condition")
DITTO_HEADERS = (CORRELATION_ID, *QUERY_HEADERS, "if-match", "if-none-match", "if-equal")
MAX_URI_CHARS = 8_192  # akka-http's default, which Ditto's gateway keeps
MAX_HEADER_BYTES = 8_192  # every header's name and value together
MAX_HELD_PER_LOGIN = 10_000  # requests one login has held at once (429 past it)
BODY_READ_S = 30  # a request's body arrives within this, or 408
SOURCE = "api"  # the HTTP API's signals are the API's: answered by their stored result, no transport to settle
_PREFIX = "http:"
_MESSAGE = re.compile(r"(?:features/(?P<feature>[^/]+)/)?(?P<box>inbox|outbox)/messages/(?P<subject>.+)", re.DOTALL)
_TWIN_PARTS = ("attributes", "definition", "policyId", "features")
_CLAIM = "inbox/claim"  # a claim message: a live message of subject claim to the thing's inbox
DEFAULT_NAMESPACE = "org.eclipse.ditto"  # Ditto's default-namespace: where POST /things creates a thing


@dataclass(frozen=True)
class Resource:
    """What a path under ``/api/2/things/<thing id>`` names: a part of the twin (``path``, a Ditto
    Protocol pointer) or a mailbox a live message is sent to (``subject`` set)."""

    thing_id: str
    path: str
    subject: str | None = None

    @property
    def is_message(self) -> bool:
        return self.subject is not None


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP response in Ditto's shape: status, headers, and a JSON body (None: no body)."""

    status: int
    headers: dict[str, str]
    body: Any = None

    def content(self) -> bytes:
        return b"" if self.body is None else jsontext.dumps(self.body).encode("utf-8")


def resource(thing_id: str, rest: str) -> Resource:
    """The resource ``/api/2/things/<thing_id>/<rest>`` names, or the 400 Ditto answers."""
    checked_thing_id(thing_id)
    rest = rest.strip("/") if rest.endswith("/") else rest.lstrip("/")
    if not rest:
        return Resource(thing_id, "/")
    message = _MESSAGE.fullmatch(rest)
    if message is not None:
        feature = message.group("feature")
        box = f"/{message.group('box')}/messages/{message.group('subject')}"
        return Resource(thing_id, f"/features/{feature}{box}" if feature else box, message.group("subject"))
    if rest == _CLAIM:
        return Resource(thing_id, "/" + rest, "claim")
    if rest.split("/", 1)[0] not in _TWIN_PARTS:
        raise errors.unknown_path("/" + rest)
    return Resource(thing_id, "/" + rest)


def checked_thing_id(thing_id: str) -> str:
    """``thing_id`` when it is a namespaced entity id, else Ditto's 400 ``things:id.invalid``."""
    if not envelopes.is_entity_id(thing_id):
        raise errors.thing_id_invalid(thing_id)
    return thing_id


def check_head(uri_chars: int, header_bytes: int) -> None:
    """A request's URI and headers within the door's bounds, or Ditto's 414 / 431."""
    if uri_chars > MAX_URI_CHARS:
        raise errors.uri_too_long(uri_chars, MAX_URI_CHARS)
    if header_bytes > MAX_HEADER_BYTES:
        raise errors.headers_too_large(header_bytes, MAX_HEADER_BYTES)


def ditto_headers(http_headers: Mapping[str, str], query: Mapping[str, str]) -> dict[str, Any]:
    """The Ditto headers of a request: those it gave as HTTP headers, then as query parameters."""
    given = {name: http_headers[name] for name in DITTO_HEADERS if name in http_headers}
    given.update({name: query[name] for name in QUERY_HEADERS if name in query})
    return given


def signal(method: str, where: Resource, headers: Mapping[str, Any], body: bytes, content_type: str | None,
           max_bytes: int) -> dict[str, Any]:
    """The Ditto Protocol signal of a writing request (B.10), or the 4xx Ditto answers it. The
    body is at most ``max_bytes`` (the door refused a longer one, 413)."""
    if where.is_message:
        if method != "POST":
            raise errors.method_not_allowed(method)
        return _envelope(where, "live", "messages", where.subject or "", message_default_timeout({
            **headers, "content-type": content_type or "text/plain"}), _message_value(body, content_type, max_bytes))
    if method == "POST" and where.path == "/":  # POST /things: create a thing of a generated id
        value = _json_body(body, max_bytes) if body.strip() else {}
        if isinstance(value, dict) and "thingId" in value:
            raise errors.thing_id_not_settable()
        twin.check_value("create", where.path, value)
        return _envelope(where, "twin", "commands", "create", headers, value)
    if method == "PUT":
        value = _json_body(body, max_bytes)
        twin.check_value("modify", where.path, value)  # refused at once, as Ditto's gateway does
        return _envelope(where, "twin", "commands", "modify", headers, value)
    if method == "PATCH":
        if _media_type(content_type) != MERGE_PATCH:
            raise errors.media_type_unsupported(content_type or "", MERGE_PATCH)
        return _envelope(where, "twin", "commands", "merge", headers, _json_body(body, max_bytes))
    if method == "DELETE":
        return _envelope(where, "twin", "commands", "delete", headers)
    raise errors.method_not_allowed(method)


def generated_thing_id(namespace: str | None, login: str, correlation_id: str | None) -> str:
    """The id ``POST /things`` creates a thing under: in ``namespace`` (Ditto's default namespace
    when none is given), its name a UUID — derived from the request's ``correlation-id`` when it
    gave one, so that a retry names the same thing (and stores nothing twice)."""
    name = uuid.uuid4() if correlation_id is None else uuid.uuid5(uuid.NAMESPACE_URL, message_id(login, correlation_id))
    return f"{DEFAULT_NAMESPACE if namespace is None else namespace}:{name}"


MAX_LOGIN_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1


def login_name(name: object) -> bool:
    """Whether ``name`` may name a ledger login: what Basic credentials and a token's subject give."""
    return isinstance(name, str) and bool(name) and "\0" not in name and len(name.encode("utf-8")) <= MAX_LOGIN_BYTES


def message_id(login: str, correlation_id: str) -> str:
    """The stored message id of a login's request with a ``correlation-id``: a retry is its
    retransmission (nothing stored twice), another login's request with the same id is not (A.2.9:
    409) — the login is in the key, its length first so that no two logins' keys can meet, and the
    correlation id by its SHA-256 (as long as a message id may be, with the login before it)."""
    return f"{_PREFIX}{len(login)}:{login}{hashlib.sha256(correlation_id.encode('utf-8')).hexdigest()}"


def stored_by(login: str, source: str, stored_message_id: str | None) -> bool:
    """Whether a signal is one ``login`` sent through the HTTP API (:func:`message_id`'s)."""
    return source == SOURCE and (stored_message_id or "").startswith(f"{_PREFIX}{len(login)}:{login}")


def hold_ms(request: AckRequest) -> int:
    """How long to hold a stored request for its decision: not at all when Ditto answers 202 at
    once (B.7: no response and no acks asked), else its timeout, at most one minute."""
    if request.outcome is Outcome.ACCEPTED:
        return 0
    return min(request.timeout_ms, HOLD_MAX_MS)


def message_default_timeout(headers: Mapping[str, Any]) -> dict[str, Any]:
    """An HTTP live message waits 10 s by default, not a command's default (B.6)."""
    return {**headers} if TIMEOUT in headers else {**headers, TIMEOUT: f"{MESSAGE_TIMEOUT_MS}ms"}


def decided(result: Mapping[str, Any], where: Resource | None = None) -> HttpAnswer:
    """The ledger's decision (``AckStore.result``: status, body, headers) as the HTTP answer: a
    plain 201 of a twin command says where the created resource is (Ditto's ``Location``)."""
    status, stored = result["status"], result.get("headers") or {}
    out = {name: str(stored[name]) for name in (CORRELATION_ID, "etag") if name in stored}
    if status == 201 and where is not None and not where.is_message:
        out["location"] = location(where.thing_id, where.path)
    return HttpAnswer(status, out, result.get("body"))


def accepted(correlation_id: str, still_deciding: bool) -> HttpAnswer:
    """202: Ditto's answer to a request that asked for nothing; or ours to one whose hold ended
    before the ledger decided it, with where its decision will be (decisions #134)."""
    out = {CORRELATION_ID: correlation_id}
    if still_deciding:
        out["location"] = answer_location(correlation_id)
    return HttpAnswer(202, out)


def answer_location(correlation_id: str) -> str:
    return f"{API}/answers/{quote(correlation_id, safe='')}"


RETRY_AFTER_S = 10  # what a 429 or 503 tells the client to wait


def error(problem: errors.DittoError, correlation_id: str | None = None) -> HttpAnswer:
    out = {CORRELATION_ID: correlation_id} if correlation_id else {}
    if problem.status in (429, 503):
        out["retry-after"] = str(RETRY_AFTER_S)
    if problem.status == 401:  # RFC 7235: what credentials to give; RFC 6750 3.1 for a token refused
        out["www-authenticate"] = ('Bearer realm="ackstore", error="invalid_token"' if problem.error == "gateway:jwt.invalid"
                                   else 'Basic realm="ackstore"')
    return HttpAnswer(problem.status, out, problem.to_json())


def refused(answer: Mapping[str, Any]) -> HttpAnswer:
    """An error the store answered (Ditto's error JSON, its ``status`` in it) as the HTTP answer."""
    return HttpAnswer(answer["status"], {}, dict(answer))


def retrieved(value: Any, etag: str | None) -> HttpAnswer:
    return HttpAnswer(200, {"etag": etag} if etag else {}, value)


# --- reads: ``fields`` ------------------------------------------------------------------------------


def field_selector(given: list[str]) -> tuple[fields.Pointer, ...] | None:
    """A read's ``fields`` (every one given, joined: Ditto reads only the first), or None for none."""
    return fields.parse(",".join(given)) if given else None


def thing_shown(document: Any, selector: tuple[fields.Pointer, ...] | None, thing_id: str, revision: int,
                modified: str | None) -> Any:
    """A thing as a read shows it: its document, or the fields ``selector`` selects of it."""
    return document if selector is None else fields.select_thing(document, selector, thing_id, revision, modified)


def part_shown(value: Any, selector: tuple[fields.Pointer, ...] | None) -> Any:
    """A part of a thing as a read shows it: ``fields`` selects within an object, leaves other values be."""
    return fields.select(value, selector) if selector is not None and isinstance(value, dict) else value


# --- the pieces ---------------------------------------------------------------------------------


_NO_VALUE = object()  # a signal without a value (a delete, a message without a payload); JSON null is a value


def _envelope(where: Resource, channel: str, criterion: str, action: str, headers: Mapping[str, Any],
              value: Any = _NO_VALUE) -> dict[str, Any]:
    envelope = {"topic": f"{thing_topic_prefix(where.thing_id)}/{channel}/{criterion}/{action}",
                "headers": dict(headers), "path": where.path}
    if value is not _NO_VALUE:
        envelope["value"] = value
    return envelope


def _json_body(body: bytes, max_bytes: int) -> Any:
    if not body.strip():
        raise errors.json_invalid("The request body is empty; a JSON value was expected.")
    return envelopes.parse_text(body, max_bytes)


def _message_value(body: bytes, content_type: str | None, max_bytes: int) -> Any:
    """A message's payload: JSON when it says so, else its text (the ledger stores no other bytes)."""
    if not body:
        return _NO_VALUE
    if _media_type(content_type) in (JSON, DITTO_CONTENT_TYPE):
        return envelopes.parse_text(body, max_bytes)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as problem:
        raise errors.json_invalid("A message's payload must be JSON or UTF-8 text.") from problem


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


# --- the REST pull (A.3): a consumer resource per subscriber -------------------------------------


def consumer_path(subscriber: str) -> str:
    return f"{API}/subscribers/{quote(subscriber, safe='')}/messages"


def acknowledgement_link(subscriber: str, correlation_id: str, token: str) -> str:
    """The ``Link`` of a handed-out message: where its acknowledgement goes, its lease token in it (A.3)."""
    target = f"{consumer_path(subscriber)}/{quote(correlation_id, safe='')}/acknowledgement;etag={quote(token, safe='')}"
    return f"<{target}>; rel=acknowledgement"


def handed_out(message: Mapping[str, Any], subscriber: str) -> HttpAnswer:
    """One pulled message (a Ditto Protocol message, its hand-out's headers in it) and its ``Link``."""
    message_headers = message.get("headers", {})
    link = acknowledgement_link(subscriber, message_headers[CORRELATION_ID], message_headers[envelopes.ACK_TOKEN])
    return HttpAnswer(200, {"link": link, CORRELATION_ID: message_headers[CORRELATION_ID]}, dict(message))


def answer_at_link(body: bytes, correlation_id: str, token: str, max_bytes: int) -> dict[str, Any]:
    """A POST to a message's acknowledgement link: its body (a Ditto Protocol ack, aggregated acks or
    a live response) with the link's lease token; its correlation id the link's (400 if another)."""
    answer = envelopes.parse_text(body, max_bytes) if body.strip() else None
    if not isinstance(answer, dict):
        raise errors.json_invalid("The acknowledgement link takes a Ditto Protocol acknowledgement or live response.")
    given = answer.get("headers", {})
    if not isinstance(given, Mapping):
        raise errors.json_field_invalid("/headers", "JSON object")
    if given.get(CORRELATION_ID, correlation_id) != correlation_id:
        raise errors.header_invalid(f"The correlation-id of the body is not the link's <{correlation_id}>.",
                                    "Post a message's answer to its own acknowledgement link.")
    return {**answer, "headers": {**given, CORRELATION_ID: correlation_id, envelopes.ACK_TOKEN: token}}


# --- search (B.12): Ditto's pages ------------------------------------------------------------------

EVERY_THING = "exists(thingId)"  # a search's filter when it gives none
FORM = "application/x-www-form-urlencoded"
PAGE_SIZE, MAX_PAGE_SIZE = 25, 200  # Ditto's search: size(n) defaults to 25, at most 200
_OPTION = re.compile(r"(size|cursor|sort)\(([^()]*)\)")
_SORTED_BY = ("+thingId", " thingId", "thingId")  # the one order pages have ('+' arrives as ' ' when sent unencoded)


def search_page(option: str | None) -> tuple[int, str | None]:
    """``option=size(n),cursor(c),sort(+thingId)``: the page size and the thing id the page starts
    after; 400 for any other option (sorting is by thing id only) or a cursor no page gave."""
    size, after = PAGE_SIZE, None
    parts = fields.split_outside_parentheses(option or "")
    if parts is None:
        raise errors.search_option_invalid(option or "")
    for part in filter(None, parts):
        found = _OPTION.fullmatch(part.strip())
        if found is None:
            raise errors.search_option_invalid(part)
        name, value = found.groups()
        if name == "size":
            if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE_SIZE:
                raise errors.search_option_invalid(part)
            size = int(value)
        elif name == "sort":
            if value not in _SORTED_BY:
                raise errors.search_option_invalid(part)
        else:
            after = _cursor_id(value)
    return size, after


def form_text(body: bytes, content_type: str | None) -> str:
    """The parameters a search ``POST``s (Ditto: an URL-encoded form), as text; 415 for another
    media type, 400 for bytes that are no text."""
    if body and _media_type(content_type) != FORM:
        raise errors.media_type_unsupported(content_type or "", FORM)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.json_invalid("A search's form must be URL-encoded UTF-8 text.") from None


def search_answer(items: list[Any], last_id: str | None) -> dict[str, Any]:
    """A page of things; with a ``cursor`` to the next page when there is one (``last_id`` the
    page's last thing, None when the search found no more)."""
    page: dict[str, Any] = {"items": items}
    if last_id is not None:
        page["cursor"] = base64.urlsafe_b64encode(last_id.encode("utf-8")).decode("ascii").rstrip("=")
    return page


def _cursor_id(cursor: str) -> str:
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise errors.search_option_invalid(f"cursor({cursor[:64]})") from None
