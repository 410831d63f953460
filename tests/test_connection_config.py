"""A connection's JSON: what is accepted, and the 400 for each thing that is not."""

from __future__ import annotations

import pytest

from ackstore.connectors import config
from ackstore.rules.errors import DittoError

SOURCE = {"addresses": ["q"]}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "must be a JSON object"),
        ({"sources": [SOURCE]}, "non-empty string 'id'"),
        ({"id": "c", "uri": "http://x", "sources": [SOURCE]}, "is not an AMQP URI"),
        ({"id": "c"}, "neither sources nor targets"),
        ({"id": "c", "sources": {}}, "'sources' must be a JSON array"),
        ({"id": "c", "sources": [{"addresses": ["a", "b"]}]}, "exactly one queue"),
        ({"id": "c", "sources": [{"addresses": [""]}]}, "non-empty strings"),
        ({"id": "c", "sources": [{**SOURCE, "acknowledgementRequests": {"includes": ["a!"]}}]}, "is invalid"),
        ({"id": "c", "sources": [{**SOURCE, "declaredAcks": ["other:done"]}]}, "cannot be declared"),
        ({"id": "c", "sources": [{**SOURCE, "declaredAcks": ["twin-persisted"]}]}, "cannot be declared"),
        ({"id": "c", "targets": [{"address": "no-slash", "topics": ["_/_/things/twin/events"]}]}, "exchange/routing-key"),
        ({"id": "c", "targets": [{"address": "x/y", "topics": ["_/_/things/twin/nope"]}]}, "is not one of"),
        ({"id": "c", "targets": [{"address": "x/y", "topics": ["_/_/things/twin/events?filter=eq(("]}]}, "filter is invalid"),
        ({"id": "c", "targets": [{"address": "x/y", "topics": ["_/_/things/twin/events?namespaces=a",
                                                                 "_/_/things/live/messages?namespaces=b"]}]},
         "same namespaces and filter"),
        ({"id": "c", "targets": [{"address": "x/y", "topics": ["_/_/things/twin/events"],
                                  "issuedAcknowledgementLabel": "c-other:sent"}]}, "cannot be declared"),
    ],
)
def test_an_invalid_connection_is_a_400_that_says_what_is_wrong(document, problem: str) -> None:
    with pytest.raises(DittoError) as raised:
        config.parse(document)
    assert raised.value.status == 400
    assert raised.value.error == "connectivity:connection.configuration.invalid"
    assert problem in raised.value.message


def test_a_connection_with_sources_and_targets() -> None:
    parsed = config.parse({
        "id": "c",
        "sources": [{**SOURCE, "acknowledgementRequests": {"includes": ["twin-persisted"]},
                     "declaredAcks": ["{{connection:id}}:done"]}],
        "targets": [{"address": "ex/key", "topics": ["_/_/things/twin/events?namespaces=a,b&filter=eq(attributes/x,1)",
                                                      "_/_/things/live/messages?namespaces=a,b&filter=eq(attributes/x,1)"],
                     "issuedAcknowledgementLabel": "c:sent"}],
    })
    assert parsed.sources == (config.Source("q", ("twin-persisted",), ("c:done",)),)
    assert parsed.targets == (config.Target("ex", "key", ("twin", "live"), ("a", "b"), "eq(attributes/x,1)", "c:sent"),)
    assert parsed.declared_labels == ["c:done", "c:sent"]
    assert parsed.subscriber_id(0) == "c/target-0" and parsed.subscriber_id(None) == "c"
    assert config.simple("c", "q", ["twin-persisted"]).sources == (config.Source("q", ("twin-persisted",)),)
