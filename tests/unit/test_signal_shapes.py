"""What ingestion's Python takes as a signal — each kind on its channel, with one of its actions —
is ``envelopes.SIGNAL_SHAPES``, the table the CHECK on ``signals`` is written from (issue 50;
tests/ledger/test_migrations.py holds the migrated CHECK to it): ``parse_signal`` accepts exactly
the shapes the table allows."""

from __future__ import annotations

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
