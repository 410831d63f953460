"""A credential as text may show it: never (decisions #120).

A connector's broker or endpoint URI carries its password (``amqp://user:password@host``), and
every library it hands the URI to may print it: proton logs ``Connecting to Url('amqp://u:p@…')``
on every connect. So every line a connector process logs, whoever wrote it, goes through
:func:`masked` (``ackstore.connectors.logs`` installs it on the process's log handlers):

* the password of any URL in the text, ``scheme://user:password@``, becomes ``***`` — the URL
  stays readable, its user and host shown;
* a bearer token a URL's query gives (``access_token=…``, RFC 6750 2.3, as the front door takes
  it from a browser) becomes ``***``;
* each secret the process knows (:func:`secrets_of`: its URI's password, raw and decoded, and the
  HTTP basic credentials it sends), wherever it stands, becomes ``***`` — a password of fewer than
  :data:`MIN_MASKED` characters only where a URL holds it, lest every such word of a line be
  hidden (say so to whoever chose it).

:func:`escaped` writes the characters a terminal acts on as their escapes (``\\x1b``), so that no
line a sender's text reaches can forge another line or move the cursor.
"""

from __future__ import annotations

import base64
import re
from typing import Iterable
from urllib.parse import unquote, urlsplit

MASK = "***"
MIN_MASKED = 4
# A URL's userinfo with a password: the password runs to the last "@" before the host (an
# unencoded "@" in it is the password's, as urlsplit reads it), never across a space, a quote or a "/".
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^ \t\r\n/?#@:'\"<>]*:)[^ \t\r\n/'\"<>]*@")
_ACCESS_TOKEN = re.compile(r"([?&;]access_token=)[^&#; \t\r\n'\"<>]+")


def secrets_of(uri: str) -> list[str]:
    """What in a log line would give ``uri``'s credentials away: its password as written and as
    decoded, and the HTTP basic credentials made of them (base64 of ``user:password``)."""
    try:
        parts = urlsplit(uri)
        username, password = parts.username, parts.password
    except ValueError:  # no URL a client could use: its userinfo as written is all there is
        username, password = None, None
    if password is None:
        return []
    decoded = unquote(password)
    basic = base64.b64encode(f"{unquote(username or '')}:{decoded}".encode("utf-8", "surrogatepass")).decode()
    return sorted({password, decoded, basic} - {""}, key=len, reverse=True)


def masked(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the password of every URL in it, and each of ``secrets`` (as long as
    :data:`MIN_MASKED` at least), replaced by ``***``."""
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda match: f"{match.group(1)}{MASK}@", text)
    if "access_token=" in text:
        text = _ACCESS_TOKEN.sub(lambda match: f"{match.group(1)}{MASK}", text)
    for secret in secrets:
        if len(secret) >= MIN_MASKED and secret in text:
            text = text.replace(secret, MASK)
    return text


def escaped(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character that is not printable (controls, bidi and line separators,
    lone surrogates) written as Python writes it in a string's repr (``\\x1b``, ``\\u202e``);
    ``keep_newlines``: a traceback's line ends stay."""
    if text.isprintable():
        return text
    return "".join(_escape(character, keep_newlines) for character in text)


def _escape(character: str, keep_newlines: bool) -> str:
    if character.isprintable() or keep_newlines and character == "\n":
        return character
    return repr(character)[1:-1]  # "\\n", "\\x1b", "\\u202e", "\\ud800": never a quote, it is printable
