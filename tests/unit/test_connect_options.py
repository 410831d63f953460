"""``ackstore connect PROTOCOL``'s shared options: parsed alike for every transport, into the
connector's Options, whose fields are the one place of their defaults (issue 51)."""

from __future__ import annotations

import dataclasses

import pytest

from ackstore.cli import build_parser, connector_options
from ackstore.connectors.options import Options

CONSUMING = ("amqp", "mqtt", "amqp10")


@pytest.mark.parametrize("kind", CONSUMING)
def test_each_consuming_transport_takes_the_shared_options_into_its_options(kind: str) -> None:
    args = build_parser().parse_args(["connect", kind, "--connection-id", "c", "--requested-acks", "a:b",
                                      "--batch-size", "7", "--poll", "0.5", "--max-messages", "3", "--once"])
    assert connector_options(args) == dataclasses.replace(Options(), batch_size=7, poll_s=0.5, max_messages=3,
                                                          once=True)
    assert (args.connection_id, args.requested_acks) == ("c", ["a:b"])


@pytest.mark.parametrize("kind", [*CONSUMING, "http-push"])
def test_options_not_given_are_the_connector_s_own_defaults(kind: str) -> None:
    assert connector_options(build_parser().parse_args(["connect", kind])) == Options()


def test_amqp_s_prefetch_is_an_option_of_amqp_alone() -> None:
    parser = build_parser()
    assert connector_options(parser.parse_args(["connect", "amqp", "--prefetch", "9"])).prefetch == 9
    with pytest.raises(SystemExit):
        parser.parse_args(["connect", "mqtt", "--prefetch", "9"])


@pytest.mark.parametrize("option", ["--batch-size", "--poll", "--connection-id", "--max-messages"])
def test_http_push_has_no_option_of_a_consuming_connector(option: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["connect", "http-push", option, "1"])


@pytest.mark.parametrize("kind", CONSUMING)
def test_help_shows_each_default(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["connect", kind, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"messages per ledger transaction (default {Options.batch_size})" in shown
    assert f"seconds between reads of decisions (default {Options.poll_s})" in shown
