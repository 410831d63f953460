"""The longest identifiers ackstore accepts, checked before anything reaches the database.

Identifiers are keys of unique indexes, and PostgreSQL refuses an index entry larger than a
third of a page (about 2 700 bytes): a longer one would be a 500 instead of a client error.
Ditto caps them too (an entity id at 256 characters, all headers together at 5 000 bytes).
Sizes are UTF-8 bytes, what the index stores. docs/decisions.md lists them for users.
"""

from __future__ import annotations

from ackstore.rules import errors

MAX_THING_ID_CHARS = 256  # Ditto's namespaced entity ids (<namespace>:<name>)
MAX_CORRELATION_ID_BYTES = 1024
MAX_SUBSCRIBER_ID_BYTES = 256
MAX_CONNECTION_ID_BYTES = 256
MAX_SOURCE_BYTES = 256  # a connection id, or api / cli / what --source names
MAX_MESSAGE_ID_BYTES = 1024  # AMQP's message-id is at most 255 bytes; a CLI's may be longer


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
