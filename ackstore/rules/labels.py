"""Acknowledgement labels: syntax, the built-in labels, and who may use which (B.1–B.3)."""

from __future__ import annotations

import re
from typing import Literal, get_args

from ackstore.rules import errors

TWIN_PERSISTED = "twin-persisted"
LIVE_RESPONSE = "live-response"
SEARCH_PERSISTED = "search-persisted"
BUILTIN_LABELS: frozenset[str] = frozenset({TWIN_PERSISTED, LIVE_RESPONSE, SEARCH_PERSISTED})

Channel = Literal["twin", "live"]
CHANNELS: tuple[Channel, ...] = get_args(Channel)

# The built-in labels that apply to each channel; the others are dropped silently (B.1).
CHANNEL_BUILTINS: dict[str, frozenset[str]] = {
    "twin": frozenset({TWIN_PERSISTED, SEARCH_PERSISTED}),
    "live": frozenset({LIVE_RESPONSE}),
}

# B.2, full match: an optional placeholder prefix, then 3..165 label characters.
LABEL_PATTERN = re.compile(r"(\{\{\s*[a-z]+:[a-z]+\s*}}:)?[a-zA-Z0-9\-_:]{3,165}")
CONNECTION_ID_PLACEHOLDER = re.compile(r"\{\{\s*connection:id\s*}}")
_ANY_PLACEHOLDER = re.compile(r"\{\{\s*[a-z]+:[a-z]+\s*}}")


def is_valid_label(label: object) -> bool:
    return isinstance(label, str) and LABEL_PATTERN.fullmatch(label) is not None


def validate_label(label: object) -> str:
    """Return ``label`` if it matches B.2's regex, else raise 400 ``acknowledgement:label.invalid``."""
    if not is_valid_label(label):
        raise errors.label_invalid(label if isinstance(label, str) else errors.shown(label))
    return label  # type: ignore[return-value]


def is_builtin(label: str) -> bool:
    return label in BUILTIN_LABELS


def foreign_builtins(channel: Channel) -> frozenset[str]:
    """Built-in labels that belong to the other channel and are dropped without an error."""
    return _FOREIGN_BUILTINS[channel]


_FOREIGN_BUILTINS = {channel: BUILTIN_LABELS - own for channel, own in CHANNEL_BUILTINS.items()}


def validate_issuable(label: object) -> str:
    """A label a subscriber may issue (or declare): valid syntax and not built-in."""
    if isinstance(label, str) and is_builtin(label):
        raise errors.label_forbidden(label)
    return validate_label(label)


def resolve_connection_label(label: str, connection_id: str) -> str:
    """Resolve ``{{connection:id}}`` and enforce the ``<connection-id>:`` prefix (B.2)."""
    validate_label(label)
    resolved = CONNECTION_ID_PLACEHOLDER.sub(lambda _: connection_id, label)  # the id as text, not a template
    if not resolved.startswith(connection_id + ":") or not is_valid_label(resolved):
        raise errors.label_invalid(resolved, errors.CONNECTION_LABEL_DESCRIPTION)
    return resolved


def validate_declarable(label: object, connection_id: str | None) -> str:
    """The label as stored for a declaration: issuable, and prefixed for a connection."""
    validate_issuable(label)
    assert isinstance(label, str)
    if connection_id is not None:
        return resolve_connection_label(label, connection_id)
    if _ANY_PLACEHOLDER.search(label):
        # Only a connection can resolve a placeholder; a literal '{{…}}' could never be issued.
        raise errors.label_invalid(
            label, "Placeholders such as {{connection:id}} can only be used in the labels of a connection."
        )
    return label
