"""AMQP 0.9.1's own rules (ackstore.rules.amqp): a consumed message's key. What it can carry is
tests/connectors/test_unencodable_replies.py, against pika itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules import amqp


def test_a_message_is_keyed_by_its_message_id_else_by_a_digest_of_body_and_correlation_id() -> None:
    assert amqp.message_key("m-1", b"{}", "c") == "m-1"
    digest = amqp.message_key(None, b"{}", "c")
    assert digest.startswith("sha256:") and digest == amqp.message_key("", b"{}", "c")
    assert digest != amqp.message_key(None, b"{}", "d")
    assert digest != amqp.message_key(None, b"{ }", "c")
    assert amqp.message_key(None, b"", "a\x00") != amqp.message_key(None, b"\x00", "a")


@given(st.binary(max_size=64), st.text(max_size=8), st.binary(max_size=64), st.text(max_size=8))
def test_different_bodies_or_correlation_ids_never_share_a_digest(body1, cid1, body2, cid2) -> None:
    same = (body1, cid1) == (body2, cid2)
    assert (amqp.message_key(None, body1, cid1) == amqp.message_key(None, body2, cid2)) == same
