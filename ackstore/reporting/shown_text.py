"""Stored text as every surface shows it: the terminal's tables, ``ackstore show``, the Ledger page.

A correlation id, a source, a label or an issuer is whatever a sender put in a message. Shown,
every character stands for itself: markup is never parsed (the terminal's cells are rich ``Text``,
the page's Jinja escapes HTML), and each character a terminal or a browser would act on instead
of drawing is written as its code point, ``\\x1b`` or ``\\u202e``. A backslash stays itself: text
that spells ``\\x1b`` out can look like an escaped ESC, but cannot act as one.

JSON keeps the stored text exactly (``json_text``): ``json.loads`` gives back what was stored.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Acted on rather than drawn: every C0 and C1 control and DEL (ESC opens CSI/OSC sequences: clear
# the screen, OSC 8 links, OSC 52 clipboard writes; BEL, CR, TAB and LF move the cursor or break a
# table's row; U+009B is an 8-bit CSI); the bidi controls that reorder the text after them
# (U+202A-U+202E embeddings and overrides, U+2066-U+2069 isolates, the marks U+200E, U+200F,
# U+061C: 'src-\u202egnp.exe' would read 'src-exe.png'); and U+2028/U+2029, which end a line.
UNSHOWN = frozenset([*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                     0x200E, 0x200F, 0x061C, 0x2028, 0x2029])

_VISIBLE = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in UNSHOWN}
# JSON escapes C0 itself (and its indentation's newlines must stay); the rest of UNSHOWN it writes
# raw with ensure_ascii=False, so it is written as a \u escape: the same string once parsed, and
# nothing a terminal acts on when the JSON is printed. Other non-ASCII text stays readable.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in UNSHOWN if code >= 0x20}


def shown(text: str) -> str:
    """``text`` with each character in UNSHOWN written as its code point (``\\x1b``, ``\\u202e``)."""
    return text.translate(_VISIBLE)


_CODE_POINT = re.compile(r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})")


def unshown(text: str) -> str:
    """The stored text ``shown`` wrote: each ``\\x1b`` or ``\\u202e`` of a character in UNSHOWN
    back to that character (a search box takes an id as a table showed it)."""

    def character(match: re.Match[str]) -> str:
        code = int(match.group(1) or match.group(2), 16)
        return chr(code) if code in UNSHOWN else match.group(0)

    return _CODE_POINT.sub(character, text)


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a terminal or a pipe: readable (not ASCII-only), every stored text
    exact once parsed, and no character in UNSHOWN written raw."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str).translate(_JSON_ESCAPES)
