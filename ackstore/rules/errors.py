"""Errors in Ditto's JSON shape, and the one factory per error code we answer with.

Every client error leaves ackstore as ``{"status", "error", "message", "description"}``
(Ditto's ``DittoRuntimeException`` JSON, ack-semantics.md B.3). Codes, messages and
descriptions are Ditto's to the letter unless Part A of the specification names others.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from typing import Any

from ackstore.rules import jsontext


def java_number(value: int) -> str:
    """Format an integer as Java's ``MessageFormat`` does in Ditto's messages: ``42,000``."""
    return f"{value:,}"


@dataclass(frozen=True)
class DittoError(Exception):
    """The project's own error type: a client-visible error with Ditto's fields."""

    status: int
    error: str
    message: str
    description: str | None = None
    href: str | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.error}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The error object as sent to a client; absent fields are omitted, as in Ditto."""
        body: dict[str, Any] = {"status": self.status, "error": self.error, "message": self.message}
        if self.description is not None:
            body["description"] = self.description
        if self.href is not None:
            body["href"] = self.href
        return body


_FROZEN_SETATTR = DittoError.__setattr__
_EXCEPTION_STATE = frozenset({"__traceback__", "__context__", "__cause__", "__suppress_context__", "__notes__"})


def _setattr(self: DittoError, name: str, value: Any) -> None:
    """The fields stay frozen; Python's own exception state does not, so that a DittoError can
    be raised through a ``with`` block (``contextlib`` sets ``__traceback__`` on the way out)."""
    if name in _EXCEPTION_STATE:
        object.__setattr__(self, name, value)
    else:
        _FROZEN_SETATTR(self, name, value)


DittoError.__setattr__ = _setattr  # type: ignore[method-assign]  # after @dataclass, which forbids defining it


# --- acknowledgement labels (B.2, B.3) ---------------------------------------------------

LABEL_DESCRIPTION = "An acknowledgement label must conform to the regular expression of Ditto documentation."
CONNECTION_LABEL_DESCRIPTION = (
    "Declared acknowledgement labels of a connection must have the form <id>:<alphanumeric-suffix>"
)


def label_invalid(label: str, description: str = LABEL_DESCRIPTION) -> DittoError:
    return DittoError(400, "acknowledgement:label.invalid", f"Acknowledgement label <{label}> is invalid.", description)


def label_not_unique() -> DittoError:
    return DittoError(
        409,
        "acknowledgement:label.not.unique",
        "One or more declared acknowledgement labels are taken by other subscribers.",
        "Please ensure all other subscribers with the declared acknowledgement labels are offline.",
    )


def label_not_declared(label: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:label.not.declared",
        f"Cannot send acknowledgement with label <{label}>, which is not declared.",
        "Each connection may only send acknowledgements whose label matches one declared for the connection.",
    )


def label_forbidden(label: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:ditto.acklabel.forbidden",
        f"The Ditto internal Acknowledgement label <{label}> is not allowed to be issued externally!",
        "Make sure to not issue an Ditto internal Acknowledgement label.",
    )


def correlation_id_missing() -> DittoError:
    return DittoError(
        400,
        "acknowledgement:correlation-id.missing",
        "Correlation-id header for acknowledgement is missing.",
        "Please provide the mandatory header 'correlation-id' as part of your acknowledgement",
    )


def duplicate_correlation_id(correlation_id: str) -> DittoError:
    return DittoError(
        409,
        "acknowledgement:request.duplicate.correlation-id",
        f"Correlation-id <{correlation_id}> for acknowledgement request was already used very recently.",
        "Please use a unique correlation-id for each acknowledgement request.",
    )


def request_not_found(correlation_id: str) -> DittoError:
    # Ditto has no such error (an ack without an aggregator is dropped); the ledger must answer.
    return DittoError(
        404,
        "acknowledgement:request.notfound",
        f"No acknowledgement request with correlation-id <{correlation_id}> was found.",
        "Check the correlation-id: it must be the one of a signal submitted to the ledger.",
    )


# --- subscribers: leases and live responses (A.3, issue 8; no Ditto counterpart) ------------


def subscriber_not_found(subscriber: str) -> DittoError:
    return DittoError(
        404,
        "acknowledgement:subscriber.notfound",
        f"The subscriber <{subscriber}> was not found.",
        "Declare the subscriber (its labels, channels, namespaces and filter) before it pulls or responds.",
    )


def token_invalid(token: object) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:token.invalid",
        f"The ack-token <{shown(token)}> was not issued for this subscriber and signal.",
        "Send the ack-token from the headers of the signal as it was pulled, with the same subscriber.",
    )


def lease_superseded() -> DittoError:
    return DittoError(
        412,
        "acknowledgement:lease.superseded",
        "The signal was handed out again since this ack-token was issued; the acknowledgement was not stored.",
        "Pull the signal again and acknowledge it with the ack-token of that hand-out.",
    )


def subscriber_not_yours(subscriber: str) -> DittoError:
    return DittoError(
        403,
        "acknowledgement:subscriber.forbidden",
        f"The subscriber <{subscriber}> belongs to another database login.",
        "Only the login that declared a subscriber first may declare, pull, acknowledge or respond as it: connect "
        "with that login (its password from ~/.pgpass or PGPASSWORD, never on the command line).",
    )


def connection_not_yours(connection: str) -> DittoError:
    return DittoError(
        403,
        "connectivity:connection.forbidden",
        f"The connection <{shown(connection)}> is not this database login's.",
        "Only the login an operator reserved a connection for (ackstore connection reserve ID --login LOGIN, "
        "docs/roles.md) declares its subscribers, stores its messages and settles them: ask an operator to reserve "
        "it for this login, or connect with the login it is reserved for.",
    )


def connection_reserved(connection: str) -> DittoError:
    """``ackstore connection reserve`` of a connection that is another login's already (issue 50)."""
    return DittoError(
        409,
        "connectivity:connection.conflict",
        f"The connection <{shown(connection)}> is reserved for another database login.",
        "A connection keeps the login it was reserved for: reserve another id, or move this one as docs/roles.md "
        "says (its subscribers and its signals' settlements go with it).",
    )


def connection_login_invalid(login: str) -> DittoError:
    """A connection reserved for a name that is no login of the ingest role (issue 50)."""
    return DittoError(
        400,
        "connectivity:connection.login.invalid",
        f"The database login <{shown(login)}> is no login of the ingest role.",
        "Reserve a connection for a login role that is a member of ackstore_ingest (CREATE ROLE … LOGIN IN ROLE "
        "ackstore_ingest, docs/roles.md): its connector claims the connection when it starts.",
    )


def connection_not_found(connection: str) -> DittoError:
    return DittoError(
        404,
        "connectivity:connection.notfound",
        f"The Connection with ID '{shown(connection)}' could not be found or requester had insufficient permissions to access it.",
        "Check if the ID of your requested Connection was correct: the ledger knows a connection once its "
        "connector started, a subscriber was declared into it, or a message of it was stored.",
    )


def live_response_forbidden(subscriber: str) -> DittoError:
    return DittoError(
        403,
        "acknowledgement:live.response.forbidden",
        f"The subscriber <{subscriber}> does not consume the live channel, so it cannot send live responses.",
        "Declare the subscriber with the channel 'live' to receive and answer live commands and messages.",
    )


def live_response_invalid(correlation_id: str, why: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:live.response.invalid",
        f"The live response with correlation-id <{correlation_id}> does not answer its live signal: "
        f"{why.rstrip('.')}.",
        "A live response has the topic of the live command or message it answers and the same correlation-id.",
    )


def live_response_not_handed(subscriber: str, correlation_id: str) -> DittoError:
    return DittoError(
        403,
        "acknowledgement:live.response.forbidden",
        f"The subscriber <{subscriber}> was not handed the live signal with correlation-id <{correlation_id}>.",
        "Only a subscriber that pulled a live signal may answer it (with the ack-token of that hand-out).",
    )


def ack_thing_mismatch(ack_thing_id: str, signal_thing_id: str, correlation_id: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:entity.id.mismatch",
        f"Entity ID of acknowledgement <{ack_thing_id}> differs from entity ID <{signal_thing_id}> of the signal "
        f"with correlation-id <{correlation_id}>.",
        "Send an acknowledgement on the topic of the thing whose signal it answers.",
    )


def ack_channel_mismatch(ack_channel: str, signal_channel: str, correlation_id: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:channel.mismatch",
        f"The acknowledgement was sent on the <{ack_channel}> channel, but the signal with correlation-id "
        f"<{correlation_id}> was sent on the <{signal_channel}> channel.",
        "Send an acknowledgement on its signal's channel: <thing>/things/twin/acks/<label> for a twin command, "
        "<thing>/things/live/acks/<label> for a live command or message.",
    )


def lease_invalid(text: str, maximum: str) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:lease.invalid",
        f"The lease <{_clip(text)}> is not a duration between 1ms and {maximum}.",
        "Give the lease as a duration such as 30s or 5m.",
    )


def pull_max_invalid(value: object, maximum: int) -> DittoError:
    return DittoError(
        400,
        "acknowledgement:pull.max.invalid",
        f"The number of signals to pull <{_clip(str(value))}> is not an integer between 1 and {maximum}.",
        "Ask for at least one signal and at most the maximum per pull.",
    )


def report_option_invalid(option: str, value: object, expected: str) -> DittoError:
    return DittoError(
        400,
        "report:option.invalid",
        f"The report's {option} <{_clip(str(value))}> is not {expected}.",
        "Give --since and --until as a time (2026-11-24, 2026-11-24T09:30, 2026-11-24T09:30+01:00), 'now', "
        "or a duration before now (90m, 24h, 7d); --bucket as a duration (15m, 1h, 1d); --limit as a "
        "positive integer.",
    )


def request_timeout(timeout_ms: int) -> DittoError:
    """The payload of a 408 placeholder ack (B.5 item 1)."""
    return DittoError(
        408,
        "acknowledgement:request.timeout",
        f"The acknowledgement request reached the specified timeout of {java_number(timeout_ms)}ms.",
        "Try increasing the timeout and make sure that the requested acknowledgement is sent back in time.",
    )


def command_timeout(timeout_ms: int, invalid_response: str | None = None) -> DittoError:
    """The answer when only one built-in label was requested and it never came (B.5); when a
    live response came but did not match the command, the description says why (Ditto's
    ``AcknowledgementAggregatorActor.getInvalidLiveResponseReceivedGetAsTimeoutError``)."""
    description = "Try increasing the command timeout."
    if invalid_response is not None:
        description = ("Received no appropriate live response within the specified timeout. "
                       f"An invalid response was received, though: {invalid_response}")
    return DittoError(
        408,
        "command.timeout",
        f"The Command reached the specified timeout of {java_number(timeout_ms)}ms.",
        description,
    )


# --- headers (B.6, B.7) --------------------------------------------------------------------

HEADER_DESCRIPTION = "Verify that the header has the correct syntax and try again."


def header_invalid_type(name: str, value: str, expected: str) -> DittoError:
    return DittoError(
        400,
        "header.invalid",
        f"The value '{value}' of the header '{name}' is not a valid {expected}.",
        f"Verify that the value of the header '{name}' is a valid '{expected}' and try again.",
    )


def header_invalid(message: str, description: str = HEADER_DESCRIPTION) -> DittoError:
    return DittoError(400, "header.invalid", message, description)


def timeout_zero_with_response() -> DittoError:
    return header_invalid(
        "The value of the header 'timeout' must not be zero if response or acknowledgements are requested.",
        "Please provide a positive timeout.",
    )


def websocket_acks_without_response() -> DittoError:
    return header_invalid(
        "For WebSocket, it is forbidden to request acknowledgements while 'response-required' is set to false."
    )


TIMEOUT_DESCRIPTION = "Please choose a valid timeout."


def timeout_unparsable(message: str) -> DittoError:
    return DittoError(400, "timeout.invalid", message, TIMEOUT_DESCRIPTION)


def timeout_out_of_bounds(timeout_ms: int, max_ms: int) -> DittoError:
    return DittoError(
        400,
        "timeout.invalid",
        f"The timeout <{java_number(timeout_ms)}ms> is not inside its allowed bounds "
        f"<0ms - {java_number(max_ms)}ms>",
        TIMEOUT_DESCRIPTION,
    )


# --- envelopes ---------------------------------------------------------------------------

JSON_DESCRIPTION = "Check if the JSON was valid (e.g. on https://jsonlint.com) and if it was in required format."


def json_invalid(message: str) -> DittoError:
    return DittoError(400, "json.invalid", message, JSON_DESCRIPTION)


def json_too_deep(max_depth: int, pointer: str | None) -> DittoError:
    """A sender's JSON nested past ``max_depth`` levels (limits.MAX_JSON_DEPTH), at ``pointer`` when
    known. Ditto's parser answers such text ``json.invalid`` when its stack overflows (decisions #115)."""
    where = f" at <{_clip(pointer)}>" if pointer is not None else ""
    return DittoError(
        400,
        "json.invalid",
        f"The JSON nests objects and arrays deeper than the maximum of {java_number(max_depth)} levels{where}.",
        f"Send JSON nested at most {java_number(max_depth)} levels deep, the message itself the first.",
    )


def policy_id_invalid(policy_id: str) -> DittoError:
    """A thing's ``policyId`` that is no namespaced entity id (Ditto's PolicyIdInvalidException)."""
    return DittoError(400, "policies:id.invalid", f"Policy ID '{_clip(policy_id, 64)}' is not valid!",
                      "It must conform to the namespaced entity ID notation (see Ditto documentation)")


def definition_invalid(identifier: str) -> DittoError:
    """A thing's or a feature's definition that is no identifier (Ditto's DefinitionIdentifierInvalidException)."""
    return DittoError(400, "things:definition.identifier.invalid",
                      f"Definition identifier <{_clip(identifier, 64)}> is invalid!",
                      "An identifier string is expected to have the structure 'namespace:name:version' where each "
                      "segment must contain at least one char of [_a-zA-Z0-9\\-.] OR it must be a valid HTTP(s) URL.")


def thing_ids_missing() -> DittoError:
    """``GET /api/2/things`` without ``ids`` (Ditto's MissingThingIdsException)."""
    return DittoError(400, "things:things.ids.missing", "The required list of thing ids was missing.",
                      "Please provide at least one thing id and try again.")


def json_field_missing(pointer: str) -> DittoError:
    return DittoError(
        400,
        "json.field.missing",
        f"JSON did not include required <{pointer}> field!",
        "Check if all required JSON fields were set.",
    )


def json_field_invalid(pointer: str, expected: str) -> DittoError:
    return json_invalid(f"Value of field <{pointer}> is not a valid {expected}.")


def unknown_topic(topic: str, why: str = "Check if the topic path is correct.") -> DittoError:
    return DittoError(
        400, "things.protocol.adapter:unknown.topicpath", f"The topic path '{topic}' is not supported.", why
    )


def message_too_large(size: int, limit: int) -> DittoError:
    return DittoError(
        413,
        "message.toolarge",
        f"The size of <{java_number(size)}> bytes exceeds the maximum allowed size of <{java_number(limit)}> bytes.",
        "Reduce the size of the message or its value and try again.",
    )


def connection_config_invalid(message: str) -> DittoError:
    return DittoError(
        400,
        "connectivity:connection.configuration.invalid",
        message,
        "Check the connection's configuration: its id, sources and targets.",
    )


def connection_failed(message: str) -> DittoError:
    """A broker that cannot be reached or refused the connection (Ditto's ``ConnectionFailedException``)."""
    return DittoError(503, "connectivity:connection.failed", message,
                      "Check that the broker runs at the URL given and accepts this client.")


def message_sending_failed(message: str) -> DittoError:
    """A message that could not be sent (Ditto's ``MessageSendingFailedException``, 503)."""
    return DittoError(503, "connectivity:message.sending.failed", message,
                      "Sending the message to an external system failed, please check if your connection is "
                      "configured properly and the target system is available and consuming messages.")


def database_url_invalid(origin: str, why: str, shown: str | None = None) -> DittoError:
    """A database URL that cannot be used; ``shown`` is the URL without its password."""
    where = f" ({shown})" if shown else ""
    return DittoError(
        400,
        "database.url.invalid",
        f"The database URL of <{origin}>{where} is invalid: {why}.",
        "Give a PostgreSQL URL such as postgresql://user:password@host:5432/database "
        "(user, password, host and port may be left out; percent-encode special characters).",
    )


def database_unavailable(where: str, reason: str) -> DittoError:
    """The ledger's database could not be reached or refused the session; ``where`` names the
    server and database, ``reason`` is libpq's, both without the password."""
    return DittoError(
        503,
        "database.unavailable",
        f"The ledger database {where} is unavailable: {reason}" + ("" if reason.endswith(("?", ".")) else "."),
        "Check that PostgreSQL runs there, that the database exists and that the URL's user, password and "
        "options are right; then try again.",
    )


def nul_character(what: str) -> DittoError:
    return DittoError(400, "json.invalid", f"The {what} contains the character U+0000, which cannot be stored.",
                      "Remove the U+0000 characters and try again.")


def not_unicode(what: str) -> DittoError:
    return DittoError(400, "json.invalid", f"The {what} is not valid Unicode text (it holds a lone surrogate).",
                      "Send text that can be encoded as UTF-8.")


def id_too_long(what: str, text: str, max_bytes: int) -> DittoError:
    return DittoError(
        400,
        "id.invalid",
        f"The {what} <{_clip(text, 64)}> is longer than the maximum of {java_number(max_bytes)} bytes.",
        f"Choose a {what} of at most {java_number(max_bytes)} bytes (UTF-8).",
    )


def message_not_storable(reason: str) -> DittoError:
    """The ledger refused to store a message, and would again: it is rejected, not retried."""
    return DittoError(
        400,
        "message.notstorable",
        f"The message could not be stored in the ledger: {_clip(reason)}.",
        "The message is rejected without redelivery; send it again only once it is changed.",
    )


def parse_json_text(text: str | bytes) -> Any:
    """Parse JSON text a sender chose (UTF-8 if bytes) or raise ``json.invalid`` — a member name
    given twice in one object too (``jsontext.parse``). A message's depth is bounded before:
    ``limits.check_text_depth``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json_invalid(f"The input is not valid UTF-8: {exc.reason} at byte {exc.start}.") from None
    try:
        return jsontext.parse(text)
    except RecursionError:  # deeper than Python's stack
        raise json_invalid(f"Failed to parse JSON string '{_clip(text)}': it nests too deeply.") from None
    except ValueError as exc:  # JSONDecodeError, NumberOutOfRange, DuplicateName
        raise json_invalid(f"Failed to parse JSON string '{_clip(text)}': {exc}") from None


def shown(value: object, limit: int = 200) -> str:
    """Any client value as a message may show it: text as it is, other JSON compactly, an
    integer too long to print as its size (Python refuses ``str`` past 4 300 digits), clipped."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 10_000:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    if isinstance(value, str):
        return _clip(value, limit)
    try:
        return _clip(json.dumps(value, separators=(",", ":"), ensure_ascii=False), limit)
    except (TypeError, ValueError, RecursionError):
        return _clip(type(value).__name__, limit)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def internal_error() -> DittoError:
    """What could not be decided for one command or request without the rest of the pass failing
    with it (Ditto's DittoInternalErrorException, its defaults; decisions #116)."""
    return DittoError(500, "internalerror", "There was a rare case of an unexpected internal error.",
                      "Please contact the service team or your administrator.")


# What every row guard of a step lets through though it catches any other exception (decisions
# #116): a failure of the process, not of the row it was working on — the memory running out, the
# interpreter's own error, the operating system's (no row's content makes a step's Python do I/O).
# Each may not happen again, so recorded as the row's outcome it would be a fact a re-run could
# not correct: the step fails instead, and its next run decides the row. (KeyboardInterrupt and
# SystemExit are no Exception: no guard catches them.)
PROCESS_FAILURES: tuple[type[BaseException], ...] = (MemoryError, SystemError, OSError)


# --- search ------------------------------------------------------------------------------


def rql_invalid(expression: str, problem: str, position: int) -> DittoError:
    """A malformed RQL filter; ``position`` is 1-based, as Ditto's parser reports it."""
    return DittoError(
        400,
        "rql.expression.invalid",
        f"The RQL expression '{_clip(expression)}' is invalid: {problem} at position {position}.",
        "Only the normalized form is supported, e.g. and(eq(attributes/location,\"kitchen\"),gt(attributes/floor,2)).",
    )


def stored_filter_refused(subscriber: str, refusal: DittoError) -> DittoError:
    """A subscriber's filter a ledger stored before the bounds of RQL (decisions #117), past them:
    the door's refusal of it, answered to the subscriber's pull (decisions #132)."""
    return DittoError(
        400,
        refusal.error,
        f"The filter of subscriber <{subscriber}>, declared before the bounds of a filter, is refused: {refusal.message}",
        "Declare the subscriber again with a filter within the bounds; until then it receives nothing.",
    )


# --- twin commands (B.10) -----------------------------------------------------------------
# Codes and templates of Ditto's things service (things/model/.../commands/exceptions).

_NOT_FOUND_TAIL = "could not be found or the requester had insufficient permissions to access it."


def thing_not_found(thing_id: str) -> DittoError:
    return DittoError(
        404,
        "things:thing.notfound",
        f"The Thing with ID '{thing_id}' could not be found or requester had insufficient permissions to access it.",
        "Check if the ID of your requested Thing was correct and you have sufficient permissions.",
    )


def thing_part_not_found(kind: str, thing_id: str, feature_id: str | None = None, pointer: str | None = None) -> DittoError:
    """404 for a missing part of an existing thing; ``kind`` names the part as Ditto's code does."""
    templates = {
        "attributes": ("attributes.notfound", f"The attributes of the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}"),
        "attribute": (
            "attribute.notfound",
            f"The attribute with key '{pointer}' on the thing with ID '{thing_id}' {_NOT_FOUND_TAIL}",
        ),
        "definition": ("definition.notfound", f"The definition of the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}"),
        "policyId": ("policyid.notfound", f"The Policy ID of the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}"),
        "features": ("features.notfound", f"The Features on the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}"),
        "feature": (
            "feature.notfound",
            f"The Feature with ID '{feature_id}' on the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}",
        ),
        "feature.definition": (
            "feature.definition.notfound",
            f"The Definition of the Feature with ID '{feature_id}' on the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}",
        ),
        "feature.properties": (
            "feature.properties.notfound",
            f"The Properties of the Feature with ID '{feature_id}' on the Thing with ID '{thing_id}' {_NOT_FOUND_TAIL}",
        ),
        "feature.property": (
            "feature.property.notfound",
            f"The Property with JSON Pointer '{pointer}' of the Feature with ID '{feature_id}' on the Thing with ID "
            f"'{thing_id}' does not exist or the requester had insufficient permissions to access it.",
        ),
        "feature.desiredProperties": (
            "feature.desiredproperties.notfound",
            f"The desired properties of the Feature with ID '{feature_id}' on the Thing with ID '{thing_id}' "
            f"{_NOT_FOUND_TAIL}",
        ),
        "feature.desiredProperty": (
            "feature.desiredproperty.notfound",
            f"The desired property with JSON Pointer '{pointer}' of the Feature with ID '{feature_id}' on the Thing "
            f"with ID '{thing_id}' does not exist or the requester had insufficient permissions to access it.",
        ),
    }
    code, message = templates[kind]
    return DittoError(404, f"things:{code}", message, "Check if the ID of the Thing and the requested resource was correct and you have sufficient permissions.")


def thing_id_invalid(thing_id: str) -> DittoError:
    """Ditto's ``ThingIdInvalidException`` (here: an id over the 256-character maximum)."""
    return DittoError(
        400,
        "things:id.invalid",
        f"Thing ID '{_clip(thing_id, 64)}' is not valid!",
        "It must conform to the namespaced entity ID notation (see Ditto documentation) and be at most 256 "
        "characters long.",
    )


def thing_conflict(thing_id: str) -> DittoError:
    return DittoError(
        409,
        "things:thing.conflict",
        f"The Thing with ID '{thing_id}' already exists",
        "Choose another Thing ID",
    )


def precondition_failed(header: str, expected: str, actual: str) -> DittoError:
    return DittoError(
        412,
        "things:precondition.failed",
        f"The comparison of precondition header '{header}' for the requested Thing resource evaluated to false. "
        f"Header value: '{expected}', actual entity-tag: '{actual}'.",
        "The comparison of the provided precondition header with the current ETag value of the requested Thing "
        "resource evaluated to false. Check the value of your conditional header value.",
    )


def equal_value_skipped() -> DittoError:
    """``if-equal: skip`` (or ``skip-minimizing-merge`` on a merge) and nothing would change
    (ThingsConditionalHeadersValidatorProvider)."""
    return DittoError(
        412,
        "things:precondition.failed",
        "The previous value was equal to the new value and the 'if-equal' header was set to 'skip'.",
        "Your changes were not applied, which is probably the expected outcome.",
    )


def if_equal_invalid(value: str) -> DittoError:
    """An ``if-equal`` header none of its options (Ditto's EnumValueValidator)."""
    return DittoError(
        400,
        "header.invalid",
        f"The value '{value}' of the header 'if-equal' is not a valid enum value of type 'IfEqual'.",
        "The value must be one of: <update|skip|skip-minimizing-merge>.",
    )


def condition_failed() -> DittoError:
    """The ``condition`` header's RQL does not hold for the thing (ThingConditionFailedException)."""
    return DittoError(
        412,
        "things:condition.failed",
        "The specified condition does not match the state of the requested Thing.",
        "The provided condition did not match the actual Thing state. Please check your provided condition.",
    )


def condition_invalid(condition: str, problem: str) -> DittoError:
    """A ``condition`` header that is no RQL (ThingConditionInvalidException: the parser's
    message is its description)."""
    return DittoError(400, "things:condition.invalid", f"The specified condition '{_clip(condition)}' is invalid.",
                      problem or "The provided condition is not valid. Please check the value of your condition header.")


def thing_too_large(actual_bytes: int, max_bytes: int) -> DittoError:
    return DittoError(
        413,
        "things:thing.toolarge",
        f"The size of '{_java_decimal(actual_bytes / 1024.0)}' kB exceeds the maximal allowed Thing size of "
        f"'{_java_decimal(max_bytes / 1024.0)}' kB.",
        "Reduce the Thing size in the bounds of the specified limit",
    )


def _java_decimal(value: float) -> str:
    """``MessageFormat`` of a double: grouping, at most three fraction digits."""
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def merge_invalid() -> DittoError:
    return DittoError(
        400,
        "things:merge.invalid",
        "The provided JSON Merge Patch is invalid, it must conform to RFC7396.",
        "The provided JSON Merge Patch cannot be applied at the given path.",
        "https://tools.ietf.org/html/rfc7396",
    )


def attribute_pointer_invalid(pointer: str) -> DittoError:
    return DittoError(
        400,
        "things:attribute.pointerinvalid",
        f" The Attribute JSON pointer '{pointer}' is invalid.",
        "Check if the pointer to the requested Attribute is correct.",
    )


def json_pointer_invalid(pointer: str) -> DittoError:
    return DittoError(
        400,
        "json.pointer.invalid",
        f"JSON pointer <{pointer}> is invalid.",
        "Check if the JSON pointer is correct: no empty segments and no trailing slash.",
    )


def pointer_too_long(pointer: str, segments: int, max_segments: int) -> DittoError:
    """A path of more segments than limits.MAX_POINTER_SEGMENTS (decisions #115)."""
    return DittoError(
        400,
        "json.pointer.invalid",
        f"The JSON pointer <{_clip(pointer)}> has {java_number(segments)} segments, more than the maximum of "
        f"{java_number(max_segments)}.",
        f"Address a resource at most {java_number(max_segments)} levels below the thing.",
    )


def thing_id_not_settable() -> DittoError:
    return DittoError(
        400,
        "things:id.notsettable",
        "The Thing ID in the request body is not equal to the Thing ID in the request URL.",
        "Either delete the Thing ID from the request body or use the same Thing ID as in the request URL.",
    )


def unknown_path(path: str) -> DittoError:
    return DittoError(
        400,
        "things.protocol.adapter:unknown.path",
        f"The path '{path}' is not supported for this command.",
        "Check if the path is correct: '/', '/attributes[/…]', '/definition', '/policyId' or '/features[/…]'.",
    )


def enforcement_failed(thing_id: str) -> DittoError:
    """A message whose source identity may not address ``thing_id`` (a source's ``enforcement``)."""
    return DittoError(
        400,
        "connectivity:connection.id.enforcement.failed",
        f"The configured filters could not be matched against the given target with ID '{shown(thing_id)}'.",
        "Either modify the configured filter or ensure that the message is sent via the correct ID.",
    )


def ledger_not_as_sealed(first: str, differences: int) -> DittoError:
    """`ackstore verify` found the ledger differing from its seals or its exported heads."""
    return DittoError(
        409,
        "ledger:seal.mismatch",
        f"The ledger is not as it was sealed: {first}" + (f" (and {differences - 1} more)" if differences > 1 else ""),
        "A row, a seal or an exported head was changed, deleted or added after sealing. The first difference is "
        "named; every one is listed under 'findings'. Restore the ledger from a backup you trust and verify again.",
    )


def seal_range_invalid(first: int, last: int | None) -> DittoError:
    """`verify` or `export` asked for seals that are no range (``--from`` after ``--to``)."""
    shown_last = "the newest" if last is None else f"<{last}>"
    return DittoError(
        400,
        "ledger:seals.range.invalid",
        f"The seals from <{first}> to {shown_last} are no range of seals.",
        "Give --from and --to as seal numbers of 1 or more, --from at most --to (--to left out: up to the newest).",
    )


def heads_mismatch(path: str, why: str) -> DittoError:
    """The seal step's heads file and the ledger disagree: another ledger's file, or a rewritten ledger."""
    return DittoError(
        409,
        "ledger:heads.mismatch",
        f"The heads in '{shown(path)}' are not this ledger's: {why}",
        "The file belongs to another ledger (point $ACKSTORE_HEADS elsewhere, or move the file away), or this "
        "ledger's seals were rewritten: run 'ackstore verify --heads' on it. Nothing is exported until they agree.",
    )


def ledger_not_at_head(revision: str | None, head: str | None, known: bool) -> DittoError:
    """The ledger's schema is not the one this ackstore writes: a step would write forms its views
    do not read (an older ledger), or miss what a newer one's readers expect."""
    if known:
        return DittoError(
            503,
            "ledger:migration.pending",
            f"The ledger is at migration <{revision or 'none'}>; "
            f"this ackstore writes the ledger of migration <{head}>.",
            "Run 'ackstore db upgrade' as a member of ackstore_admin (docs/roles.md), then run the step again. "
            "Nothing was written.",
        )
    return DittoError(
        503,
        "ledger:migration.unknown",
        f"The ledger is at migration <{revision}>, which this ackstore does not know (its newest is <{head}>).",
        "A newer ackstore migrated this ledger: run the step with that version. Nothing was written.",
    )


def heads_unreadable(path: str, why: str) -> DittoError:
    """The exported heads `verify` is to compare with cannot be read."""
    return DittoError(
        400,
        "ledger:heads.invalid",
        f"The exported heads in '{shown(path)}' cannot be used: {why}",
        "Give the heads file the seal step appends to ($ACKSTORE_HEADS) with --heads, or --no-heads to check the "
        "ledger against its own seals alone.",
    )


def public_key_invalid(path: str, why: str) -> DittoError:
    return DittoError(
        400,
        "ledger:key.invalid",
        f"The public key '{shown(path)}' cannot be used: {why}",
        "Give an Ed25519 public key: a PEM file, or its 32 raw bytes in hex.",
    )


def witness_unreadable(path: str, why: str) -> DittoError:
    """The witness `verify --witness` is to hold the ledger's newest seals to cannot be read."""
    return DittoError(
        400,
        "ledger:witness.invalid",
        f"The witness '{shown(path)}' cannot be used: {why}",
        "Give a copy of a later head kept away from the database host: a heads file (one JSON head a line), a "
        "single head's JSON line, or an archive manifest.",
    )


def archive_unreadable(location: str, why: str) -> DittoError:
    """An archive the ledger records cannot be read: its root is gone, or a file in it is no Parquet."""
    return DittoError(
        503,
        "ledger:archive.unavailable",
        f"The archive at '{shown(location)}' cannot be read: {why}",
        "The ledger records history archived there (ackstore archive). Mount the archive, or restore its files "
        "from a copy, and ask again; 'ackstore verify' names each file that cannot be read.",
    )


def setting_invalid(name: str, value: str, minimum: int) -> DittoError:
    """A whole-number ``ACKSTORE_*`` setting that is none (settings.whole_number)."""
    return DittoError(
        400,
        "ackstore:setting.invalid",
        f"The value <{_clip(value, 64)}> of <{name}> is not a whole number of at least {java_number(minimum)}.",
        f"Set {name} to a whole number such as {java_number(max(minimum, 1) * 4)}, or unset it for its default "
        "(docs/operating.md lists every setting).",
    )


def retention_invalid(origin: str, value: str, maximum_days: int) -> DittoError:
    """The archive's retention is no number of days it can use (NaN, negative, past the maximum)."""
    return DittoError(
        400,
        "archive:retention.invalid",
        f"The retention <{_clip(value, 64)}> of <{origin}> is not a number of days from 0 to "
        f"{java_number(maximum_days)}.",
        "Give how long sealed history stays hot in days, such as 30 (the default) or 0.5; 0 lets every seal "
        "that is settled and validated leave.",
    )


def export_directory_invalid(path: str, why: str) -> DittoError:
    """`ackstore export` cannot write its files under the directory it was given."""
    return DittoError(
        400,
        "ledger:export.directory.invalid",
        f"The export directory '{shown(path)}' cannot be used: {why}.",
        "Give a directory to write the export into: an existing one you may write, or a new one (made with its "
        "parents). Its files export.json, tables.json, seals.jsonl and rows.jsonl are overwritten.",
    )


def file_refused(path: str, what: str, why: str, *, too_large: bool = False, setting: str | None = None) -> DittoError:
    """A file a command was told to read cannot be used (``ackstore.files``): no name, not there,
    a directory, unreadable — or longer than its maximum (413), refused before it is parsed."""
    if too_large:
        where = f" ({setting} sets it)" if setting else ""
        return DittoError(413, "file.toolarge", f"The {what} '{shown(path)}' cannot be used: {why}{where}.",
                          "Give a smaller file. A file is read to its maximum and no further, so that a device or "
                          "standard input that never ends (/dev/zero, tail -f |) is refused at once.")
    return DittoError(400, "file.invalid", f"The {what} '{shown(path)}' cannot be used: {why}.",
                      "Name a file this user may read: a path to an existing regular file (or - for standard "
                      "input where the command takes it).")


def permission_denied(login: str | None, reason: str) -> DittoError:
    """The database refused the login a statement (SQLSTATE 42501); ``reason`` is PostgreSQL's
    message, naming the table, function or schema the login lacks a privilege on."""
    who = f"The database login <{login}>" if login else "The database login"
    return DittoError(
        403,
        "database.permission.denied",
        f"{who} lacks a privilege this command needs: {_clip(reason)}.",
        "Connect as a login that is a member of the command's group role (docs/roles.md): ackstore_ingest for "
        "submit, declare, ack, pull, respond, result and search; ackstore_reporter for report, show, prove, "
        "verify and export; ackstore_pipeline for pipeline run; ackstore_archive for archive; ackstore_admin "
        "for db upgrade and connection reserve.",
    )


# --- serving metrics (issue 50) -----------------------------------------------------------


MAX_PORT = 65_535


def metrics_address_invalid(host: str, port: object, why: str) -> DittoError:
    """`ackstore metrics`, `ackstore airflow --metrics-port` or a connector's `--metrics-port` was
    given no port (0 to 65 535) or an address that is none of this machine's."""
    return DittoError(
        400,
        "ackstore:metrics.address.invalid",
        f"The metrics cannot be served on <{_clip(str(host), 100)}> port <{_clip(str(port), 20)}>: {why}.",
        f"Give --port (--metrics-port) a number from 0 (any free port, printed) to {java_number(MAX_PORT)}, and "
        "--host (--metrics-host) an address of this machine, such as 127.0.0.1 or 0.0.0.0 for every one.",
    )


def metrics_address_taken(host: str, port: int) -> DittoError:
    """The metrics' port is in use by another process."""
    return DittoError(
        409,
        "ackstore:metrics.address.taken",
        f"The metrics cannot be served on {_clip(host, 100)}:{port}: another process listens there.",
        "Give --port (ackstore metrics) or --metrics-port (ackstore airflow, a connector) another port, or 0 for "
        "any free one (printed). `make airflow` serves the ledger's metrics on 9464 itself and `ackstore metrics` "
        "on 9463 by default: one exporter per ledger is enough (docs/operating.md, Monitoring).",
    )


def metrics_unservable(host: str, port: object, problem: BaseException) -> DittoError:
    """What binding the metrics' server raised, in Ditto's shape: the port in use (409), or no port
    or address this machine has (400: Python's OverflowError for a port past 0..65 535, a name that
    does not resolve, an address not this machine's, a port it may not use)."""
    if isinstance(problem, OSError) and problem.errno == errno.EADDRINUSE and isinstance(port, int):
        return metrics_address_taken(host, port)
    if isinstance(problem, OverflowError) or not isinstance(port, int) or not 0 <= port <= MAX_PORT:
        return metrics_address_invalid(host, port, f"a port is a number from 0 to {java_number(MAX_PORT)}")
    reason = getattr(problem, "strerror", None) or str(problem) or type(problem).__name__
    return metrics_address_invalid(host, port, _clip(reason.rstrip("."), 120).lower())


def publish_refused(reasons: dict[str, int]) -> DittoError:
    """`ackstore publish`: the broker refused lines, each reason with how many (issue 50)."""
    said = "; ".join(f"{count} line{'s' if count != 1 else ''}: {_clip(reason, 200)}"
                     for reason, count in sorted(reasons.items(), key=lambda item: -item[1])[:5])
    return DittoError(
        503,
        "connectivity:message.refused",
        f"The broker refused {sum(reasons.values())} of the lines: {said}.",
        "Declare the queue (or start the connector whose source declares it) and publish the refused lines "
        "again; a line whose headers the protocol cannot carry is never sent.",
    )


# --- the HTTP front door (issue 51) -------------------------------------------------------------


def media_type_unsupported(given: str, allowed: str) -> DittoError:
    """Ditto's ``UnsupportedMediaTypeException``: a ``PATCH`` that is no merge patch (B.10)."""
    message = (f"The Media-Type <{_clip(given, 64)}> is not supported for this resource." if given.strip() else
               f'The Content-Type header was empty or not present. Please set Content-Type header to "{allowed}" '
               "for this resource")
    return DittoError(415, "mediatype.unsupported", message, f"Allowed Media-Type is: <{allowed}>.")


def method_not_allowed(method: str) -> DittoError:
    """A method the resource has no route for. Ditto's gateway answers it from its HTTP server's
    rejection; ours names the method in Ditto's error shape."""
    return DittoError(405, "http.method.notallowed", f"The HTTP method <{_clip(method, 16)}> is not allowed for this "
                      "resource.", "Check the HTTP API description for the methods of this resource.")


def authentication_failed(message: str) -> DittoError:
    """Ditto's ``GatewayAuthenticationFailedException``: no credentials, or ones the ledger's
    database did not accept (decisions #134)."""
    return DittoError(401, "gateway:authentication.failed", message, "Check if your credentials were correct.")


def jwt_invalid(why: str) -> DittoError:
    """Ditto's ``GatewayJwtInvalidException``: a Bearer token this door cannot take (decisions #137);
    ``why`` never holds the token."""
    return DittoError(401, "gateway:jwt.invalid", f"The JWT was invalid: {why}.",
                      "Check if your JWT was correct: issued with this door's key (`ackstore token`) and not expired.")


def login_name_invalid(name: str) -> DittoError:
    return DittoError(400, "ackstore:login.invalid", f"'{shown(name)}' is no ledger login's name.",
                      "Give the name of a PostgreSQL login: 1 to 63 bytes, no NUL.")


def token_key_invalid(path: str, why: str) -> DittoError:
    return DittoError(400, "ackstore:token.key.invalid", f"The token key file '{shown(path)}' cannot be used: {why}.",
                      "Give a file of at least 32 random bytes, readable only by the door and whoever issues tokens.")


def token_lifetime_invalid(seconds: int, most: int) -> DittoError:
    return DittoError(400, "ackstore:token.lifetime.invalid", f"A token's lifetime of {seconds} seconds is not taken.",
                      f"Give a lifetime between 1 and {most} seconds.")


def resource_not_found(path: str) -> DittoError:
    """A path under no route of the HTTP API (Ditto's ``NotFound`` rejection)."""
    return DittoError(404, "http.notfound", f"The requested resource <{_clip(path, 128)}> could not be found.",
                      "Check the HTTP API description for the resources it serves.")


def headers_too_large(size: int, limit: int) -> DittoError:
    """Ditto's ``DittoHeadersTooLargeException``: a request's headers past the door's bound (431)."""
    return DittoError(431, "headers.too.large", "The headers are too large.",
                      f"The number of bytes exceeded the maximum allowed value <{limit}>!")


def uri_too_long(length: int, limit: int) -> DittoError:
    """A request's URI past the door's bound (414), as Ditto's HTTP server refuses one."""
    return DittoError(414, "http.uri.toolong", f"URI length {java_number(length)} exceeds the configured limit of "
                      f"{java_number(limit)} characters.", "Shorten the request's path and query.")


def too_many_requests(what: str, limit: int) -> DittoError:
    """Ditto's ``TooManyRequestsException`` (429): a login past its share of held requests."""
    return DittoError(429, "too.many.requests", "You made too many requests.",
                      f"At most {java_number(limit)} {what} of one login at once; try again soon.")


def request_body_timeout(seconds: int) -> DittoError:
    """A client that did not send its whole request in time (408): the door reads no slower sender."""
    return DittoError(408, "http.request.timeout", f"The request was not received within {seconds} seconds.",
                      "Send the request's body without pausing, and try again.")


def field_selector_invalid(selector: str, description: str | None = None) -> DittoError:
    """A ``fields`` or ``extraFields`` that is no field selector (Ditto's JsonFieldSelectorInvalidException)."""
    return DittoError(400, "json.fieldselector.invalid", f"The field selector <{_clip(selector, 64)}> is invalid!",
                      description or "Check, for example, if the amount of opening parentheses '(' matches the "
                      "amount of closing ones ')'.")


def search_option_invalid(option: str) -> DittoError:
    """A search's ``option`` the HTTP API does not take (Ditto's ``thing-search:option.invalid``)."""
    return DittoError(400, "thing-search:option.invalid", f"The option <{_clip(option, 64)}> is not valid.",
                      "Give size(n), 1 to 200, and cursor(c) with the cursor a page answered; results are sorted by "
                      "thing id.")
