"""A connector process's log: every line, whichever library wrote it (pika, paho, proton,
http.client, SQLAlchemy, ackstore's own), without a credential and without a character a
terminal acts on (decisions #120).

:func:`configure` sets up the process's logging (``ackstore connect``) and puts a
:class:`Guarded` filter on each of its handlers: a handler's filter sees every record that reaches
it, from any logger, where a logger's filter would see only that logger's own. The filter writes
the record's message once, masked (:func:`ackstore.rules.credentials.masked`) and escaped, and
masks a traceback's text the same way.
"""

from __future__ import annotations

import logging
from typing import Iterable

from ackstore.rules import credentials, errors

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Guarded(logging.Filter):
    """Mask credentials and escape control characters in every record a handler writes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 — a library's malformed call: its parts, never an error in the caller
            message = f"{record.msg} {record.args!r}"
        record.msg = self.guarded(message)
        record.args = None  # the message is written: a second handler formats it as it is
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.guarded(record.exc_text, keep_newlines=True)
        if record.stack_info:
            record.stack_info = self.guarded(record.stack_info, keep_newlines=True)
        return True

    def guarded(self, text: str, *, keep_newlines: bool = False) -> str:
        return credentials.escaped(credentials.masked(text, self.secrets), keep_newlines=keep_newlines)


def configure(secrets: Iterable[str] = (), level: int = logging.INFO) -> Guarded:
    """The process's logging to stderr, every handler of the root logger guarded; the filter."""
    logging.basicConfig(level=level, format=FORMAT)
    guard = Guarded(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(guard)
    return guard


def secrets_of(uris: Iterable[str | None]) -> list[str]:
    """The secrets the URIs a process connects with would give away in a log line."""
    return [secret for uri in uris if uri for secret in credentials.secrets_of(uri)]


def shown(text: str, limit: int = 100) -> str:
    """Sender-chosen text as a log line may show it: clipped, quoted, and every character a
    terminal acts on (or no UTF-8 can hold) written as its escape (``\\x1b``, ``\\u202e``, ``\\ud800``)."""
    return repr(errors.shown(text, limit))



def described(problem: BaseException) -> str:
    """A failure as a log line may show it: its type and first line (no statement, no values)."""
    cause = getattr(problem, "orig", None) or problem
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first[:200]}" if first else type(cause).__name__

