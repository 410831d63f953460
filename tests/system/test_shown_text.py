"""Stored text is shown as it was stored, on every surface (issue 24, item 6).

A correlation id, source, label or issuer is whatever a sender's message carries: rich markup
(``[red]x[/red]``, ``[/nope]``), terminal escapes (ESC ``[2J``, OSC 8 links, OSC 52 clipboard
writes), right-to-left overrides, a thousand characters. Written into a real ledger, then read
through ``ackstore show`` and every report (tables and ``--json``) and the Ledger page: each value
is found literally in its shown form (``shown_text.shown``: ``\\x1b``, ``\\u202e``), JSON gives back
the stored text exactly, and no character a terminal or browser acts on reaches the output.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import contextmanager, redirect_stdout
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.ledger.schema import LEDGER_TABLES
from ackstore.ledger.store import AckStore
from ackstore.reporting.registry import REPORTS
from ackstore.reporting.shown_text import UNSHOWN, json_text, shown, unshown
from ackstore.rules import limits
from ackstore.rules.settings import Settings
from ackstore.ui.ledger_page import gather, render
from tests.support.seeded_ledger import Attempt, Signal, ledger, seeded

EXAMPLES = max(5, int(os.environ.get("ACKSTORE_FUZZ_EXAMPLES", 150)) // 10)  # each example reads 20 surfaces
ACTED_ON = {chr(code) for code in UNSHOWN} - {"\n"}  # a line's end is the only one output may hold

HOSTILE = ["[red]x[/red]", "[/nope]", "[b]42[/b]", "[link=http://x]y[/link]", ":smile:", "\x1b[2J", "\x1b[31m",
           "\x1b]8;;http://x\x1b\\", "\x1b]52;c;aGk=\x07", "\x07", "\r", "\n", "\t", "\x08", "\x7f", "\x85", "\x9b",
           "\u202e", "\u202d", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u2028", "<b>&amp;\"'",
           "\\x1b", "植物", "😀", "e\u0301", " ", "%s"]


def _within(value: str, max_bytes: int) -> str:
    """``value`` cut to ``max_bytes`` of UTF-8 (the project's limits), on a character's boundary."""
    return value.encode()[:max_bytes].decode(errors="ignore")


def hostile(max_bytes: int) -> st.SearchStrategy[str]:
    """Text a sender might put in a message: markup, escapes, bidi controls, anything but NUL
    (PostgreSQL's text refuses it), sometimes repeated to the limit."""
    piece = st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                                                        max_size=6))
    short = st.lists(piece, min_size=1, max_size=6).map("".join)
    long = st.tuples(piece.filter(bool), st.integers(1, max_bytes)).map(lambda p: p[0] * p[1])
    return st.one_of(short, short, long).map(lambda value: _within(value, max_bytes))


def _emptied(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in LEDGER_TABLES)} RESTART IDENTITY CASCADE"))


@contextmanager
def _columns(width: int) -> Iterator[None]:
    """The terminal width rich reads (COLUMNS) for the commands run meanwhile."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _ackstore(database_url: str, *args: str) -> str:
    """``ackstore ARGS`` in this process (20 surfaces an example: a subprocess each would take
    minutes); its output, after it exited 0."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["--database-url", database_url, *args]) == 0, args
    return out.getvalue()


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(_strings, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    return set()


class PageText(HTMLParser):
    """What a browser shows of a page: its text and its attributes (but the search box's value,
    which is the text typed), character references resolved."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.feed(html)
        self.text = "".join(self.parts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parts += [value or "" for name, value in attrs if (tag, name) != ("input", "value")]

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _shows(output: str, *values: str) -> None:
    """Each value is in ``output`` in its shown form, and nothing in ``output`` is acted on."""
    for value in values:
        assert shown(value) in output, (value, output[-3000:])
    assert not set(output) & ACTED_ON, sorted(set(output) & ACTED_ON)


# --- the one function ----------------------------------------------------------------------------

def test_shown_writes_each_character_a_terminal_acts_on_as_its_code_point() -> None:
    assert shown("R1 [red]x[/red] [/nope]y") == "R1 [red]x[/red] [/nope]y"  # markup is the renderers' concern
    assert shown("\x1b[2J\x07\r\n\t\x7f\x9b") == "\\x1b[2J\\x07\\x0d\\x0a\\x09\\x7f\\x9b"
    assert shown("src-\u202egnp.exe \u2066\u2069\u200e\u200f\u061c\u2028") == (
        "src-\\u202egnp.exe \\u2066\\u2069\\u200e\\u200f\\u061c\\u2028")
    assert shown("植物 é 😀 \\x1b") == "植物 é 😀 \\x1b"  # printable text, and a backslash, stay themselves
    assert unshown(shown("a\x1b\u202e\n")) == "a\x1b\u202e\n" and unshown("\\x41") == "\\x41"


@given(hostile(2000))
@settings(max_examples=200, deadline=None)
def test_json_keeps_the_stored_text_and_writes_nothing_a_terminal_acts_on(value: str) -> None:
    written = json_text({"id": value, "rows": [value]})
    assert json.loads(written) == {"id": value, "rows": [value]}
    assert not set(written) & ACTED_ON


# --- every surface, on generated text ------------------------------------------------------------

@given(source=hostile(limits.MAX_SOURCE_BYTES - 1), cid=hostile(limits.MAX_CORRELATION_ID_BYTES - 1),
       label=hostile(100), issuer=hostile(limits.MAX_SUBSCRIBER_ID_BYTES))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_surface_shows_hostile_text_literally(engine: Engine, database_url: str, source: str, cid: str,
                                                    label: str, issuer: str) -> None:
    source = "s" + source  # never the API's or the CLI's: a connection, whose signals are settled
    settled, undecided, late = "a" + cid, "b" + cid, "c" + cid
    _emptied(engine)
    now = datetime.now(timezone.utc)
    seeded(engine, now - timedelta(hours=1), ledger(source, settled, undecided, late, label, issuer))
    window = ["--since", "2h", "--until", "now"]
    expected = {"settlement": [source], "audit": [undecided, late, source], "latency": [source],
                "watermarks": [source, settled, undecided, late], "late-acks": [late, label, issuer],
                "labels": [label]}  # a late ack is not an answer: its issuer is in late-acks alone

    with _columns(30_000):  # no value folds: each is found whole
        _shows(_ackstore(database_url, "show", late), late, source, label, issuer)
        for name, values in expected.items():
            _shows(_ackstore(database_url, "report", name, *(window if name != "settlement" else [])), *values)
    with _columns(80):  # folded, but still nothing acted on, and exit 0
        _shows(_ackstore(database_url, "show", late))
        for name in REPORTS:
            _shows(_ackstore(database_url, "report", name, *(window if name != "settlement" else [])))

    state = json.loads(_ackstore(database_url, "show", late, "--json"))
    assert (state["correlation_id"], state["source"]) == (late, source)
    assert {label, f"late, from {issuer}"} <= _strings(state["timeline"])
    for name, values in expected.items():
        written = _ackstore(database_url, "report", name, "--json", *(window if name != "settlement" else []))
        assert set(values) <= _strings(json.loads(written)), name
        assert not set(written) & ACTED_ON

    store = AckStore(engine, Settings())
    page = PageText(render(gather(store, now, late)))
    _shows(page.text, source, settled, undecided, late, label, issuer)
    assert "No signal has" not in page.text
    assert f"from {shown(source)}, message {shown(late)}" in page.text  # its timeline, by its id
    if unshown(shown(late)) == late:  # unless the id also spells a code point out itself (\x1b as text)
        again = PageText(render(gather(store, now, shown(late))))  # the search box resubmitted as it shows it
        assert "No signal has" not in again.text and f"late, from {shown(issuer)}" in again.text


# --- the command line, piped, at 80 columns and at rich's own width ---------------------------------

SOURCE = "src-\u202egnp.exe"
BRACKETS = "R1 [red]x[/red] [/nope]y"  # the issue's: a MarkupError traceback, once
ESC = "e\x1b[2J\u202e"
LINK = "o\x1b]8;;http://x\x1b\\y\x1b]52;c;aGk=\x07"  # an OSC 8 link and an OSC 52 clipboard write
LABEL = "[b]x[/b]"  # once shown as a bold "x"

# What each report shows whole at 80 columns (a value wider than its column folds within it).
AT_80 = {"settlement": [SOURCE], "audit": [BRACKETS, ESC, LINK, SOURCE], "latency": [SOURCE],
         "watermarks": [SOURCE, BRACKETS, ESC], "late-acks": [ESC, LABEL], "labels": [LABEL]}


@pytest.fixture
def hostile_ledger(engine: Engine, database_url: str) -> str:
    signals = [*ledger(SOURCE, "a1", BRACKETS, ESC, LABEL, "app"), Signal(LINK, SOURCE, 40, [Attempt([LABEL], 40, 3000)])]
    for n, signal in enumerate(signals):  # short message ids: the ids themselves are what must fit
        signal.message_id = f"m{n}"
    seeded(engine, datetime.now(timezone.utc) - timedelta(hours=1), signals)
    return database_url


def _piped(database_url: str, columns: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    env.update({"ACKSTORE_DATABASE_URL": database_url, **({"COLUMNS": columns} if columns else {})})
    return subprocess.run([sys.executable, "-m", "ackstore.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("columns", ["80", None], ids=["COLUMNS=80", "piped"])
def test_show_and_every_table_report_print_hostile_ids_literally(hostile_ledger: str, columns: str | None) -> None:
    for cid in (BRACKETS, ESC, LINK):
        done = _piped(hostile_ledger, columns, "show", cid)
        assert done.returncode == 0 and not done.stderr, done.stderr
        _shows(done.stdout, cid, SOURCE)
        assert max(map(len, done.stdout.splitlines())) <= 80
    for name, values in AT_80.items():
        done = _piped(hostile_ledger, columns, "report", name, *(["--since", "2h"] if name != "settlement" else []))
        assert done.returncode == 0 and not done.stderr, (name, done.stderr)
        _shows(done.stdout, *values)
        assert max(map(len, done.stdout.splitlines())) <= 80, (name, done.stdout)
