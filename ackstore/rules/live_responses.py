"""Whether a live response answers the live command or message it names (Ditto's
``CommandAndCommandResponseMatchingValidator``, checked in its order).

A response counts as the signal's answer, and as its ``live-response`` ack, only if

1. its type answers the signal's: a command response of the same action (a ``retrieve``
   response does not answer a ``modify``), or a message response to a message, at the same
   level (the thing's or a feature's inbox);
2. it is for the same thing;
3. for a command, it is about the same resource path.

An error response (status 400 or more) has no type or resource path of its own: only its thing
must match. The message of each mismatch is Ditto's; what a type is called follows the topic
(``live/commands/modify``, ``live/messages``), as ackstore keeps no Java type names.
"""

from __future__ import annotations

from dataclasses import dataclass

from ackstore.rules.envelopes import LiveResponse


@dataclass(frozen=True)
class LiveSignal:
    """What a response is matched against: the stored live command or message."""

    thing_id: str
    kind: str  # live-command | live-message
    action: str  # the command's action, or the message's subject
    path: str


def mismatch(signal: LiveSignal, response: LiveResponse) -> str | None:
    """Why ``response`` does not answer ``signal``, in Ditto's words; ``None`` if it does."""
    is_error = response.status >= 400
    if not is_error and not _related(signal, response):
        return (f"Type of live response <{_response_type(response)}> is not related to type of command "
                f"<{_signal_type(signal)}>.")
    if response.thing_id != signal.thing_id:
        return f"Entity ID of live response <{response.thing_id}> differs from entity ID of command <{signal.thing_id}>."
    if signal.kind == "live-command" and not is_error and response.path != signal.path:
        return f"Resource path of live response <{response.path}> differs from resource path of command <{signal.path}>."
    return None


def _related(signal: LiveSignal, response: LiveResponse) -> bool:
    if signal.kind == "live-command":
        return response.criterion == "commands" and response.action == signal.action
    return response.criterion == "messages" and _message_level(response.path) == _message_level(signal.path)


def _message_level(path: str) -> str:
    """A message to (or from) a feature's box, or the thing's."""
    return "feature" if path.startswith("/features/") else "thing"


def _signal_type(signal: LiveSignal) -> str:
    if signal.kind == "live-command":
        return f"live/commands/{signal.action}"
    return f"live/messages ({_message_level(signal.path)})"


def _response_type(response: LiveResponse) -> str:
    if response.criterion == "commands":
        return f"live/commands/{response.action} response"
    return f"live/messages ({_message_level(response.path)}) response"
