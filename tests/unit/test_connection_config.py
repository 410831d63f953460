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
    assert_invalid(document, problem)


def assert_invalid(document: object, problem: str) -> None:
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
    assert parsed.sources == (config.Source("q", ("twin-persisted",), ("c:done",), ("q",)),)
    assert parsed.targets == (config.Target("ex", "key", ("twin", "live"), ("a", "b"), "eq(attributes/x,1)", "c:sent"),)
    assert parsed.declared_labels == ["c:done", "c:sent"]
    assert parsed.subscriber_id(0) == "c/target-0" and parsed.subscriber_id(None) == "c"
    assert config.simple("c", "q", ["twin-persisted"]).sources == (config.Source("q", ("twin-persisted",), (), ("q",)),)


MQTT_SOURCE = {"addresses": ["devices/#"], "qos": 1}


def mqtt_connection(**changes) -> dict:
    return {"id": "m", "connectionType": "mqtt", "uri": "tcp://127.0.0.1:1883", "sources": [MQTT_SOURCE], **changes}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (mqtt_connection(connectionType="kafka"), "connection type <kafka> is not supported"),
        (mqtt_connection(uri="amqp://x"), "is not an MQTT URI"),
        (mqtt_connection(sources=[{"addresses": ["a"]}]), "needs a 'qos'"),
        (mqtt_connection(sources=[{"addresses": ["a"], "qos": 2}]), "QoS 2 is not supported"),
        (mqtt_connection(sources=[{"addresses": ["a"], "qos": True}]), "'qos' <true> is not supported"),
        (mqtt_connection(sources=[{"addresses": ["a/b#"], "qos": 1}]), "is not an MQTT topic filter"),
        (mqtt_connection(sources=[{"addresses": ["a+/b"], "qos": 1}]), "is not an MQTT topic filter"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "payloadMapping": ["x"]}]), "'payloadMapping' is not supported"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "enforcement": {"input": "x", "filters": ["y"]}}]),
         "enforcement is invalid"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "replyTarget": {"address": "{{ header:other }}"}}]),
         "replyTarget address"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "replyTarget": {"expectedResponseTypes": ["response"]}}]),
         "expectedResponseTypes"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "replyTarget": {"headerMapping": {}}}]),
         "'headerMapping' is not supported"),
        (mqtt_connection(targets=[{"address": "out/#", "topics": ["_/_/things/twin/events"]}]), "no wildcards"),
        (mqtt_connection(targets=[{"address": "out/{{ thing:id }}", "topics": ["_/_/things/twin/events"]}]),
         "no placeholders"),
        (mqtt_connection(targets=[{"address": "out", "topics": ["_/_/things/twin/events"], "qos": 2}]),
         "QoS 2 is not supported"),
        (mqtt_connection(specificConfig=[]), "'specificConfig' must be a JSON object"),
        (mqtt_connection(specificConfig={"lastWillTopic": "x"}), "'lastWillTopic' is not supported"),
        (mqtt_connection(specificConfig={"cleanSession": "maybe"}), "cleanSession"),
        (mqtt_connection(specificConfig={"reconnectForRedeliveryDelay": "0.5s"}), "reconnectForRedeliveryDelay"),
        (mqtt_connection(specificConfig={"keepAlive": 60}), "keepAlive"),
        (mqtt_connection(specificConfig={"receiveMaximum": 0}), "receiveMaximum"),
        (mqtt_connection(specificConfig={"clientId": ""}), "clientId"),
        (mqtt_connection(specificConfig={"clientId": "c", "publisherId": "c"}), "publisherId' must differ"),
        (mqtt_connection(specificConfig={"keepAlive": "100000s"}), "keepAlive"),
        (mqtt_connection(specificConfig={"receiveMaximum": 10}), "is an MQTT 5 setting"),
        (mqtt_connection(specificConfig={"sessionExpiryInterval": 10}), "is an MQTT 5 setting"),
        (mqtt_connection(credentials={"type": "client-cert"}), "'credentials' is not supported"),
        (mqtt_connection(ca="-----BEGIN CERTIFICATE-----"), "'ca' is not supported"),
        (mqtt_connection(mappingDefinitions={}), "'mappingDefinitions' is not supported"),
        (mqtt_connection(clientCount=2), "'clientCount' <2> is not supported"),
        (mqtt_connection(validateCertificates=False), "'validateCertificates' <false> is not supported"),
        (mqtt_connection(uri="mqtt://h:99999"), "malformed"),
        (mqtt_connection(uri="mqtt://h/path"), "no path"),
        (mqtt_connection(sources=[{"addresses": [], "qos": 1}]), "at least one address"),
        (mqtt_connection(sources=[{"addresses": ["$share/g"], "qos": 1}]), "$share/<group>/<topic filter>"),
        (mqtt_connection(sources=[{"addresses": ["$share//a"], "qos": 1}]), "$share/<group>/<topic filter>"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "enforcement": {"input": "{{ header:device-id }}",
                                                                  "filters": ["{{ thing:id }}"]}}]),
         "must be {{ source:address }}"),
        (mqtt_connection(sources=[{**MQTT_SOURCE, "replyTarget": {"address": "replies/#"}}]), "not an MQTT topic name"),
        ({"id": "c", "sources": [{**SOURCE, "replyTarget": {"address": "fixed-queue"}}]}, "not supported on AMQP"),
    ],
)
def test_an_invalid_mqtt_connection_is_a_400_that_names_the_setting(document, problem: str) -> None:
    assert_invalid(document, problem)


def test_a_ditto_shaped_mqtt_connection_with_ditto_defaults() -> None:
    parsed = config.parse({
        "id": "plant-m", "connectionType": "mqtt-5", "uri": "ssl://u:p@broker:8883",
        "sources": [{"addresses": ["$share/ackstore/devices/+/commands", "other/#"], "qos": 1,
                     "authorizationContext": ["ditto:inbound"],
                     "enforcement": {"input": "{{ source:address }}", "filters": ["devices/{{ thing:id }}/commands"]},
                     "replyTarget": {"enabled": False},
                     "acknowledgementRequests": {"includes": ["twin-persisted"]},
                     "declaredAcks": ["{{connection:id}}:checked"]}],
        "targets": [{"address": "events/twin", "topics": ["_/_/things/twin/events"], "qos": 0,
                     "authorizationContext": ["ditto:outbound"], "issuedAcknowledgementLabel": "plant-m:published"}],
        "specificConfig": {"clientId": "c1", "cleanSession": "false", "reconnectForRedelivery": True,
                           "reconnectForRedeliveryDelay": "5s", "separatePublisherClient": True, "keepAlive": "30s"},
    })
    assert parsed.is_mqtt and parsed.connection_type == config.MQTT5
    (source,) = parsed.sources
    assert source.addresses == ("$share/ackstore/devices/+/commands", "other/#") and source.qos == 1
    assert source.reply_target.address_for("replies") is None
    assert parsed.targets[0].topic == "events/twin" and parsed.targets[0].qos == 0
    assert parsed.declared_labels == ["plant-m:checked", "plant-m:published"]
    assert parsed.mqtt == config.MqttSettings(client_id="c1", reconnect_for_redelivery=True,
                                              reconnect_for_redelivery_delay_s=5.0, separate_publisher_client=True,
                                              keep_alive_s=30)
    assert parsed.mqtt.publisher_client_id == "c1p"
    defaults = config.parse({"id": "d", "uri": "mqtt://h", "sources": [MQTT_SOURCE]})
    assert defaults.connection_type == config.MQTT and defaults.mqtt == config.MqttSettings(client_id="d")


def test_the_sample_mqtt_connection_in_the_docs_parses() -> None:
    from pathlib import Path

    from ackstore.rules.errors import parse_json_text

    sample = Path(config.__file__).parent.parent / "samples" / "mqtt-connection.json"
    parsed = config.parse(parse_json_text(sample.read_bytes()))
    assert parsed.is_mqtt and parsed.mqtt.reconnect_for_redelivery and parsed.sources[0].enforcement is not None


AMQP10 = {"id": "c", "connectionType": "amqp-10", "uri": "amqp://user:pass@broker:5672"}
AMQP10_SOURCE = {"addresses": ["telemetry/FOO"]}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({**AMQP10, "uri": "mqtt://broker:1883", "sources": [AMQP10_SOURCE]}, "is not an AMQP URI"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "payloadMapping": []}, "connection setting 'payloadMapping'"),
        ({**AMQP10, "sources": [{**AMQP10_SOURCE, "headerMapping": {}}]}, "source setting 'headerMapping'"),
        ({**AMQP10, "sources": [{**AMQP10_SOURCE, "qos": 1}]}, "source setting 'qos'"),
        ({**AMQP10, "sources": [{"addresses": ["a", "a"]}]}, "one link address twice"),
        ({**AMQP10, "targets": [{"address": "{{ thing:id }}", "topics": ["_/_/things/twin/events"]}]}, "no placeholders"),
        ({**AMQP10, "targets": [{"address": "queue://", "topics": ["_/_/things/twin/events"]}]}, "node's address"),
        ({**AMQP10, "targets": [{"address": "e", "topics": ["_/_/things/twin/events"], "headerMapping": {}}]},
         "target setting 'headerMapping'"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "specificConfig": {"jms.closeTimeout": "5000"}},
         "'jms.closeTimeout' is not supported"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "specificConfig": {"jms.prefetchPolicy.all": "0"}}, "from 1 to 1000000"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "specificConfig": {"jms.prefetchPolicy.all": "lots"}}, "from 1 to 1000000"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "specificConfig": {"ackstore.redeliveryOutcome": "rejected"}},
         "\"modified\" (Ditto's"),
        ({**AMQP10, "sources": [AMQP10_SOURCE], "clientCount": 2}, "'clientCount' <2> is not supported"),
        ({**AMQP10, "sources": [{**AMQP10_SOURCE, "replyTarget": {"address": "{{ header:correlation-id }}"}}]},
         "give a fixed address or"),
    ],
)
def test_an_invalid_amqp10_connection_is_a_400_that_names_the_setting(document, problem: str) -> None:
    with pytest.raises(DittoError) as error:
        config.parse(document)
    assert error.value.status == 400 and problem in error.value.message


def test_the_ditto_documentation_amqp10_connection_parses_as_written() -> None:
    """connectivity-protocol-bindings-amqp10.md's example, as Ditto's documentation writes it."""
    connection = config.parse({
        "id": "hono-example-connection-123",
        "connectionType": "amqp-10",
        "connectionStatus": "open",
        "failoverEnabled": True,
        "uri": "amqps://user:password@hono.eclipse.org:5671",
        "sources": [{"addresses": ["telemetry/FOO"], "authorizationContext": ["ditto:inbound-auth-subject"]}],
        "targets": [{"address": "events/twin", "topics": ["_/_/things/twin/events"],
                     "authorizationContext": ["ditto:outbound-auth-subject"]}],
    })
    assert connection.connection_type == config.AMQP10 and connection.amqp10 == config.Amqp10Settings()
    assert connection.amqp10.credit == 65535 and connection.amqp10.redelivery == "modified"
    assert [s.addresses for s in connection.sources] == [("telemetry/FOO",)]
    assert [(t.topic, t.channels) for t in connection.targets] == [("events/twin", ("twin",))]


@pytest.mark.parametrize(("specific", "credit", "redelivery"), [
    ({}, 65535, "modified"),
    ({"jms.prefetchPolicy.all": "100"}, 100, "modified"),  # Ditto's specificConfig holds strings
    ({"jms.prefetchPolicy.queuePrefetch": 7}, 7, "modified"),
    ({"ackstore.redeliveryOutcome": "released"}, 65535, "released"),
])
def test_an_amqp10_connection_takes_its_credit_and_redelivery_outcome_from_specific_config(
    specific, credit: int, redelivery: str
) -> None:
    connection = config.parse({**AMQP10, "sources": [{"addresses": ["a", "b"]}], "specificConfig": specific})
    assert connection.amqp10 == config.Amqp10Settings(credit, redelivery)
    assert connection.sources[0].addresses == ("a", "b")


def test_the_sample_amqp10_connection_in_the_docs_parses() -> None:
    from pathlib import Path

    from ackstore.rules.errors import parse_json_text

    sample = Path(config.__file__).parent.parent / "samples" / "amqp10-connection.json"
    parsed = config.parse(parse_json_text(sample.read_bytes()))
    assert parsed.amqp10 == config.Amqp10Settings(65535, "released")
    assert parsed.declared_labels == ["plant-h:checked", "plant-h:published"]


def test_the_sample_http_push_connection_in_the_docs_parses() -> None:
    from pathlib import Path

    from ackstore.rules.errors import parse_json_text

    sample = Path(config.__file__).parent.parent / "samples" / "http-push-connection.json"
    parsed = config.parse(parse_json_text(sample.read_bytes()))
    assert parsed.http_push == config.HttpPushSettings(4, 10.0)
    assert [t.issued_label for t in parsed.targets] == ["plant-w:webhook", "live-response"]
    assert parsed.declared_labels == ["plant-w:webhook"], "live-response is built in: never declared"
