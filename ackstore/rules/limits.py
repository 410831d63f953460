"""The longest identifiers ackstore accepts, checked before anything reaches the database.

Identifiers are keys of unique indexes, and PostgreSQL refuses an index entry larger than a
third of a page (about 2 700 bytes): a longer one would be a 500 instead of a client error.
Ditto caps them too (an entity id at 256 characters, all headers together at 5 000 bytes).
Sizes are UTF-8 bytes, what the index stores. docs/decisions.md lists them for users.

A sender's JSON is bounded in depth too, and a path in segments (decisions #115): every step's
Python — the fold's JSON equality and merge, the index's flattening, the sweep's answers, `show` —
walks a document recursively, and a thing holds at most a path's segments plus a value's levels.
"""

from __future__ import annotations

from ackstore.rules import errors, jsontext

MAX_THING_ID_CHARS = 256  # Ditto's namespaced entity ids (<namespace>:<name>)
MAX_CORRELATION_ID_BYTES = 1024
MAX_SUBSCRIBER_ID_BYTES = 256
MAX_CONNECTION_ID_BYTES = 256
MAX_SOURCE_BYTES = 256  # a connection id, or api / cli / what --source names
MAX_MESSAGE_ID_BYTES = 1024  # AMQP's message-id is at most 255 bytes; a CLI's may be longer
# Levels of objects and arrays in a sender's message, the message itself the first: MongoDB's limit
# on a BSON document, under which a Ditto thing lives.
MAX_JSON_DEPTH = 100
# A value sits one level inside its message (a command's value, an ack's or a response's): at most
# this many levels of its own.
MAX_VALUE_DEPTH = MAX_JSON_DEPTH - 1
# Segments of a signal's path (JSON pointer): no Ditto thing is deeper than its BSON limit either.
# A thing the fold builds is at most MAX_POINTER_SEGMENTS + MAX_VALUE_DEPTH levels deep (a modify
# at the deepest path of the deepest value); every step is tested at that depth.
MAX_POINTER_SEGMENTS = 100
MAX_DOCUMENT_DEPTH = MAX_POINTER_SEGMENTS + MAX_VALUE_DEPTH
# Levels a reader of the ledger reads its JSON to (jsonb read back: show, result, the Ledger page,
# a pull): twice the deepest thing there can be, far inside Python's stack of 1 000 frames with
# the reader's own; a container nested deeper, which only a ledger from before the limits holds, is
# read as its JSON text (decisions #115).
MAX_READ_DEPTH = 2 * MAX_DOCUMENT_DEPTH
# RQL a sender gives, a condition or a subscriber's filter (decisions #117): Ditto bounds all of a
# signal's headers together at 5 KiB (DefaultDittoHeadersValidator, max-bytes = 5k), so no
# condition is longer there; a like pattern holds at most this many * and ?.
MAX_RQL_BYTES = 5 * 1024
MAX_LIKE_WILDCARDS = 16


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_id(what: str, text: str, max_bytes: int) -> str:
    """``text`` if at most ``max_bytes`` long and storable, else 400 naming ``what``."""
    if len(text) > max_bytes or utf8_size(text) > max_bytes:  # chars ≤ bytes: the cheap test first
        raise errors.id_too_long(what, text, max_bytes)
    return check_text(what, text)


def check_text(what: str, text: str) -> str:
    """``text`` unless PostgreSQL's text cannot hold it: U+0000, or a lone surrogate (no UTF-8)."""
    if "\x00" in text:
        raise errors.nul_character(what)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.not_unicode(what) from None
    return text


def storable(text: str) -> str:
    """``text`` as PostgreSQL's text can hold it, for what is kept whatever a sender chose (a
    connection's log): U+0000 written as ``\\x00`` and a lone surrogate as ``\\udc80``, the rest
    as it is."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def check_thing_id(thing_id: str) -> str:
    if len(thing_id) > MAX_THING_ID_CHARS:
        raise errors.thing_id_invalid(thing_id)
    return thing_id


def check_correlation_id(correlation_id: str) -> str:
    check_text("correlation-id", correlation_id)
    if len(correlation_id) > MAX_CORRELATION_ID_BYTES or utf8_size(correlation_id) > MAX_CORRELATION_ID_BYTES:
        raise errors.header_invalid(
            f"The value of the header 'correlation-id' must not be longer than "
            f"{errors.java_number(MAX_CORRELATION_ID_BYTES)} bytes.",
            "Use a shorter correlation-id.",
        )
    return correlation_id


def check_json_depth(value: object, text: str | bytes | None = None) -> None:
    """400 ``json.invalid`` naming where ``value`` (a sender's message; ``text``, its JSON text
    when known, spares the walk of a message that nests within) nests past MAX_JSON_DEPTH."""
    if text is not None and jsontext.nests_within(text, MAX_JSON_DEPTH):
        return
    pointer = jsontext.too_deep(value, MAX_JSON_DEPTH)
    if pointer is not None:
        raise errors.json_too_deep(MAX_JSON_DEPTH, pointer)


def check_text_depth(text: str | bytes) -> None:
    """:func:`check_json_depth` of a sender's JSON text, before it is read: no reader's stack
    decides, and the answer names where it nests too deep however deep that is."""
    if not jsontext.nests_within(text, MAX_JSON_DEPTH):  # in C; only then the scan that finds where
        pointer = jsontext.too_deep_in_text(text, MAX_JSON_DEPTH)
        if pointer is not None:
            raise errors.json_too_deep(MAX_JSON_DEPTH, pointer)


def check_stored_member_text(text: str, member: str) -> None:
    """The door's depth check of a command's ``member`` (``/value``, ``/headers``: each one level
    inside its message) on the JSON text a ledger stored before the limit, before it is read: a
    ledger's older commands are answered as the door answers them now, whatever the reader's stack
    (one too deep for it too)."""
    if len(text) <= MAX_VALUE_DEPTH:  # shorter text nests no deeper
        return
    if not jsontext.nests_within(text, MAX_VALUE_DEPTH):  # in C; only then the scan that finds where
        pointer = jsontext.too_deep_in_text(text, MAX_VALUE_DEPTH)
        if pointer is not None:
            raise errors.json_too_deep(MAX_JSON_DEPTH, member + ("" if pointer == "/" else pointer))


def check_pointer(path: str) -> str:
    """``path`` unless it has more than MAX_POINTER_SEGMENTS segments: 400 ``json.pointer.invalid``."""
    segments = path.count("/")
    if segments > MAX_POINTER_SEGMENTS:
        raise errors.pointer_too_long(path, segments, MAX_POINTER_SEGMENTS)
    return path
