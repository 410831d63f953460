"""What ingestion's Python takes as a signal — each kind on its channel, with one of its actions —
is ``envelopes.SIGNAL_SHAPES``, the table the CHECK on ``signals`` is written from (issue 50;
tests/ledger/test_migrations.py holds the migrated CHECK to it): ``parse_signal`` accepts exactly
the shapes the table allows."""

from __future__ import annotations

import pytest

from ackstore.rules import envelopes, errors
from ackstore.rules.labels import CHANNELS

ACTIONS = sorted({*envelopes.TWIN_ACTIONS, *envelopes.LIVE_ACTIONS, "bogus", "ask", ""})


def _allowed(kind: str, channel: str, action: str) -> bool:
    shape_channel, actions = envelopes.SIGNAL_SHAPES[kind]  # type: ignore[index]
    return channel == shape_channel and (action in actions if actions is not None else action != "")


def test_the_table_names_every_kind_once() -> None:
    assert tuple(envelopes.SIGNAL_SHAPES) == envelopes.SIGNAL_KINDS


def test_parse_signal_takes_exactly_the_shapes_of_the_table() -> None:
    accepted = set()
    for channel in CHANNELS:
        for criterion in ("commands", "messages"):
            for action in ACTIONS:
                envelope = {"topic": f"org.acme/lamp/things/{channel}/{criterion}/{action}", "path": "/", "value": {}}
                try:
                    signal = envelopes.parse_signal(envelope)
                except errors.DittoError:
                    continue
                accepted.add((signal.kind, signal.channel, signal.action))
    allowed = {(kind, channel, action) for kind in envelopes.SIGNAL_KINDS for channel in CHANNELS for action in ACTIONS
               if _allowed(kind, channel, action)}
    assert accepted == allowed
    assert ("twin-command", "twin", "modify") in accepted and ("live-message", "live", "ask") in accepted  # not vacuous


@pytest.mark.parametrize(("action", "path", "value", "stored"), [
    ("modify", "/", {"attributes": {"a": 1}, "_revision": 7, "_policy": {}, "foo": 1}, {"attributes": {"a": 1}}),
    ("merge", "/", {"_created": "x", "definition": "a:b:1"}, {"definition": "a:b:1"}),
    ("create", "/", {"thingId": "org.acme:x", "policyId": "org.acme:p"}, {"thingId": "org.acme:x", "policyId": "org.acme:p"}),
    ("modify", "/attributes", {"_revision": 7}, {"_revision": 7}),  # an attribute may be named so
])
def test_a_whole_thing_is_stored_in_dittos_words(action: str, path: str, value: dict, stored: dict) -> None:
    """A command's whole thing keeps what Ditto's Thing JSON reads (envelopes.THING_MEMBERS): the
    signal stored, its event and the thing say the same."""
    signal = envelopes.parse_signal({"topic": f"org.acme/x/things/twin/commands/{action}", "path": path,
                                     "value": value, "headers": {}})
    assert signal.value == stored
