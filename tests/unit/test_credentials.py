"""No credential in a log line (decisions #120): the password of any URL a line holds, and each
secret the process knows, masked; what a terminal acts on escaped — for every line a connector
process logs, whichever library wrote it (``ackstore.connectors.logs``)."""

from __future__ import annotations

import base64
import logging

import pytest
from hypothesis import given, settings, strategies as st

from ackstore.connectors import logs
from ackstore.rules import credentials, limits

SECRET = "S3cr3t-p@ss/w0rd"


@pytest.mark.parametrize(("line", "shown"), [
    ("Connecting to Url('amqp://u:S3cr3t@127.0.0.1:1')...", "Connecting to Url('amqp://u:***@127.0.0.1:1')..."),
    ("amqp://guest:guest@127.0.0.1:5672/ and mqtt://a:b@h:1883", "amqp://guest:***@127.0.0.1:5672/ and mqtt://a:***@h:1883"),
    ("http://user:p%40ss@host/base", "http://user:***@host/base"),
    ("amqps://u:p@ss@host:5671", "amqps://u:***@host:5671"),  # an unencoded "@": the last one ends the password
    ('url="amqp://u:pw@h"', 'url="amqp://u:***@h"'),
    ('"WebSocket /ws/2?declared-acks=a&access_token=eyJ.x-y.z_0" [accepted]',
     '"WebSocket /ws/2?declared-acks=a&access_token=***" [accepted]'),
    ("GET /api/2/things?access_token=t0k3n&filter=x", "GET /api/2/things?access_token=***&filter=x"),
    ("amqp://user@host:5672 has no password", "amqp://user@host:5672 has no password"),
    ("http://host:80/a:b@c", "http://host:80/a:b@c"),  # a path's "@" is no userinfo
    ("no URL at all: a:b@c", "no URL at all: a:b@c"),
])
def test_every_urls_password_is_masked_and_the_rest_of_the_line_kept(line: str, shown: str) -> None:
    assert credentials.masked(line) == shown


def test_a_known_secret_is_masked_wherever_it_stands_raw_decoded_or_as_basic_credentials() -> None:
    uri = "http://user:S3cr3t-p%40ss%2Fw0rd@host:8080"
    secrets = credentials.secrets_of(uri)
    basic = base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert set(secrets) == {"S3cr3t-p%40ss%2Fw0rd", SECRET, basic}
    line = f"auth failed for {SECRET}; header Basic {basic}; raw S3cr3t-p%40ss%2Fw0rd"
    masked = credentials.masked(line, secrets)
    assert SECRET not in masked and basic not in masked and "S3cr3t" not in masked
    assert credentials.secrets_of("amqp://host:5672") == [] and credentials.secrets_of("http://[::1") == []


def test_a_short_password_is_masked_only_where_a_url_holds_it() -> None:
    secrets = credentials.secrets_of("amqp://u:abc@h")
    assert credentials.masked("amqp://u:abc@h: abc", secrets) == "amqp://u:***@h: abc"


@settings(max_examples=300, deadline=None)
@given(user=st.text(st.characters(blacklist_characters=":@/?#[] \t\r\n'\"<>%"), max_size=8),
       password=st.text(st.characters(blacklist_characters="@/ \t\r\n'\"<>%"), min_size=1, max_size=20).filter(
           lambda password: password != credentials.MASK),  # the mask itself masked is the mask
       before=st.text(max_size=20), after=st.text(max_size=20))
def test_a_password_in_a_url_never_survives_a_line(user: str, password: str, before: str, after: str) -> None:
    uri = f"amqp://{user}:{password}@host:5672"
    masked = credentials.masked(f"{before} {uri} {after}", credentials.secrets_of(uri))
    assert f":{password}@" not in masked


@pytest.mark.parametrize(("text", "shown"), [
    ("plain text", "plain text"), ("a\x1b[2Jb", "a\\x1b[2Jb"), ("line\nforged line", "line\\nforged line"),
    ("src-\u202egnp.exe", "src-\\u202egnp.exe"), ("\ud800", "\\ud800"), ("tab\there", "tab\\there"), ("é☃", "é☃"),
])
def test_what_a_terminal_acts_on_is_escaped(text: str, shown: str) -> None:
    assert credentials.escaped(text) == shown
    assert credentials.escaped("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"


def test_storable_text_writes_what_postgresql_refuses_as_its_escape_and_keeps_the_rest() -> None:
    assert limits.storable("id-\x00-\ud800-é") == "id-\\x00-\\ud800-é"
    assert limits.storable("kept \x1b as it is") == "kept \x1b as it is"


def test_the_log_filter_guards_every_record_a_handler_writes_from_any_logger(caplog) -> None:
    caplog.set_level(logging.INFO)
    guard = logs.Guarded(credentials.secrets_of("amqp://u:S3cr3t-long@h"))
    caplog.handler.addFilter(guard)
    try:
        logging.getLogger("proton").info("Connecting to %r...", "Url('amqp://u:S3cr3t-long@h')")
        logging.getLogger("pika.adapters").warning("sender said %s", "x\x1b]52;c;bad\x07\nINFO forged")
        logging.getLogger("paho").warning("a malformed call %d", "amqp://u:S3cr3t-long@h")  # raises nothing
        try:
            raise ValueError("password S3cr3t-long refused")
        except ValueError:
            logging.getLogger("ackstore.connector").exception("failed\r\nagain")
    finally:
        caplog.handler.removeFilter(guard)
    text = caplog.text
    assert "S3cr3t-long" not in text and "amqp://u:***@h" in text
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\\nINFO forged" in text
    assert "password *** refused" in text and "Traceback (most recent call last):\n" in text
    assert "a malformed call %d ('amqp://u:***@h',)" in text


def test_a_database_url_is_shown_by_one_rule() -> None:
    """Issue 50's review: a database URL shown to people is DatabaseUrl's (``redacted``, which knows
    libpq's forms: a ``password=`` option, key=value pairs, an unencoded "/" or "@" in a password);
    the demo printed SQLAlchemy's own rendering. No code renders one by another rule."""
    from tests.support.paths import ROOT

    others = [str(path.relative_to(ROOT)) for folder in ("ackstore", "jobs", "dags", "auditor")
              for path in (ROOT / folder).rglob("*.py") if "hide_password=True" in path.read_text()]
    assert others == []

