"""A connection's configuration, shaped like a Ditto connection's JSON (sources and targets).

    {
      "id": "plant-a",
      "uri": "amqp://guest:guest@127.0.0.1:5672/",
      "sources": [{"addresses": ["plant-a.commands"],
                   "acknowledgementRequests": {"includes": ["twin-persisted"]},
                   "declaredAcks": ["plant-a:checked"]}],
      "targets": [{"address": "plant-a.events/twin",
                   "topics": ["_/_/things/twin/events?namespaces=org.acme&filter=gt(attributes/n,0)"],
                   "issuedAcknowledgementLabel": "plant-a:published"}]
    }

An MQTT connection (``"connectionType": "mqtt"`` or ``"mqtt-5"``, or a ``mqtt://``, ``mqtts://``,
``tcp://`` or ``ssl://`` URI) has sources with several topic filters and a ``qos``, targets whose
``address`` is a topic, and a ``specificConfig`` (:class:`MqttSettings`); every setting it does not
support is a 400 naming it. A source of either kind may have an ``enforcement`` and a
``replyTarget``.

A target's ``address`` is ``exchange/routing-key`` (Ditto's AMQP 0.9.1 form). Its ``topics``
pick the channels (``_/_/things/twin/events``: twin events; ``_/_/things/live/commands`` or
``…/live/messages``: live signals), with ``namespaces`` and an RQL ``filter`` as query
parameters, the same for every topic of one target. Every target is a subscriber of the
connection's label group (B.3): labels are declared once for the connection, with its prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence
from urllib.parse import parse_qs

from ackstore.rules import credentials, durations, errors, labels, limits, rql
from ackstore.rules import amqp10 as amqp10_rules
from ackstore.rules import http_push as http_push_rules
from ackstore.rules import mqtt as mqtt_rules
from ackstore.rules.enforcement import SOURCE_ADDRESS, Enforcement

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/"
# The most a connection's JSON file may hold (`ackstore connect --config`, read by ackstore.files): a
# connection of a thousand sources and targets is some 300 KiB.
MAX_CONFIG_BYTES = 1024 * 1024
AMQP, AMQP10, MQTT, MQTT5, HTTP_PUSH = "amqp-091", "amqp-10", "mqtt", "mqtt-5", "http-push"  # Ditto's connection types
SCHEMES = {AMQP: ("amqp://", "amqps://"), MQTT: ("mqtt://", "mqtts://", "tcp://", "ssl://"),
           HTTP_PUSH: ("http://", "https://")}
SCHEMES[MQTT5] = SCHEMES[MQTT]
SCHEMES[AMQP10] = SCHEMES[AMQP]
REPLY_TO_PLACEHOLDER = "{{header:reply-to}}"
ANSWERED = ("response", "error")  # what a reply target answers: results and refusals
TOPIC_CHANNELS = {
    "_/_/things/twin/events": "twin",
    "_/_/things/live/commands": "live",
    "_/_/things/live/messages": "live",
}


@dataclass(frozen=True)
class ReplyTarget:
    """Where a source's answers go (Ditto's ``replyTarget``)."""

    enabled: bool = True
    address: str = REPLY_TO_PLACEHOLDER  # the message's reply-to, or a fixed address

    @property
    def is_default(self) -> bool:
        return self.enabled and self.address == REPLY_TO_PLACEHOLDER

    def address_for(self, reply_to: str | None) -> str | None:
        """Where an answer to a message with this reply-to goes; None: nowhere."""
        if not self.enabled:
            return None
        return reply_to if self.address == REPLY_TO_PLACEHOLDER else self.address


@dataclass(frozen=True)
class Source:
    queue: str  # the AMQP queue; its first address (an MQTT topic filter, an AMQP 1.0 link's source)
    includes: tuple[str, ...] = ()  # requested-acks added to every message
    declared_acks: tuple[str, ...] = ()  # labels the connection may acknowledge with (prefixed)
    addresses: tuple[str, ...] = ()  # every address: MQTT topic filters, AMQP 1.0 link sources
    qos: int | None = None  # an MQTT source's subscription QoS
    enforcement: Enforcement | None = None
    reply_target: ReplyTarget = ReplyTarget()


@dataclass(frozen=True)
class Target:
    exchange: str
    routing_key: str
    channels: tuple[str, ...]
    namespaces: tuple[str, ...] | None = None
    filter: str | None = None
    issued_label: str | None = None  # acknowledged from the broker's answer (B.9)
    qos: int | None = None  # an MQTT target's publishing QoS

    @property
    def topic(self) -> str:
        """An MQTT target's topic, an AMQP 1.0 target's address (its whole address)."""
        return f"{self.exchange}/{self.routing_key}" if self.routing_key else self.exchange


@dataclass(frozen=True)
class MqttSettings:
    """An MQTT connection's ``specificConfig``, with Ditto's defaults."""

    client_id: str
    clean_session: bool = False
    reconnect_for_redelivery: bool = False
    reconnect_for_redelivery_delay_s: float = 2.0
    separate_publisher_client: bool = False
    publisher_id: str | None = None
    keep_alive_s: int = 60
    session_expiry_s: int = 7 * 24 * 3600  # MQTT 5: how long the broker keeps the session after a disconnect
    receive_maximum: int = 65535  # MQTT 5: messages the broker may have in flight to us

    @property
    def publisher_client_id(self) -> str:
        return self.publisher_id or f"{self.client_id}p"


@dataclass(frozen=True)
class Amqp10Settings:
    """An AMQP 1.0 connection's ``specificConfig``: Ditto passes it to its Qpid JMS client, whose
    one option that matters here is the prefetch — the link credit, so the in-flight bound."""

    credit: int = 65535  # deliveries a link may hold unsettled (held for a decision): ≤ credit per decision time
    redelivery: str = "modified"  # how "redeliver" is carried out: modified[delivery-failed], or released


@dataclass(frozen=True)
class HttpPushSettings:
    """An HTTP push connection's ``specificConfig``, with Ditto's defaults."""

    parallelism: int = 1  # requests in flight at once
    idle_timeout_s: float = 60.0  # a request unanswered this long issues 408


HTTP_PUSH_SETTINGS = ("parallelism", "idleTimeout")
HTTP_PUSH_TARGET_KEYS = {"address", "topics", "authorizationContext", "issuedAcknowledgementLabel"}
AMQP10_CREDIT_SETTINGS = ("jms.prefetchPolicy.all", "jms.prefetchPolicy.queuePrefetch")
AMQP10_REDELIVERY_SETTING = "ackstore.redeliveryOutcome"
AMQP10_CONNECTION_KEYS = {"id", "name", "connectionType", "connectionStatus", "uri", "sources", "targets",
                          "specificConfig", "failoverEnabled", "clientCount", "validateCertificates", "tags"}
AMQP10_SOURCE_KEYS = {"addresses", "authorizationContext", "enforcement", "replyTarget", "acknowledgementRequests",
                      "declaredAcks"}
AMQP10_TARGET_KEYS = {"address", "topics", "authorizationContext", "issuedAcknowledgementLabel"}
MQTT5_SETTINGS = ("sessionExpiryInterval", "receiveMaximum")
MQTT_SETTINGS = {  # specificConfig's keys: Ditto's, and the two MQTT 5 session settings of ours
    "clientId", "cleanSession", "reconnectForRedelivery", "reconnectForRedeliveryDelay", "separatePublisherClient",
    "publisherId", "keepAlive", "sessionExpiryInterval", "receiveMaximum",
}
MQTT_CONNECTION_KEYS = {"id", "name", "connectionType", "connectionStatus", "uri", "sources", "targets",
                        "specificConfig", "failoverEnabled", "clientCount", "validateCertificates", "tags"}
MQTT_SOURCE_KEYS = {"addresses", "qos", "authorizationContext", "enforcement", "replyTarget", "acknowledgementRequests",
                    "declaredAcks"}
MQTT_TARGET_KEYS = {"address", "topics", "qos", "authorizationContext", "issuedAcknowledgementLabel"}


@dataclass(frozen=True)
class ConnectionConfig:
    id: str
    uri: str = DEFAULT_URI
    sources: tuple[Source, ...] = ()
    targets: tuple[Target, ...] = field(default=())
    connection_type: str = AMQP
    mqtt: MqttSettings | None = None  # an MQTT connection's settings
    amqp10: Amqp10Settings | None = None  # an AMQP 1.0 connection's settings
    http_push: HttpPushSettings | None = None  # an HTTP push connection's settings

    @property
    def is_mqtt(self) -> bool:
        return self.connection_type in (MQTT, MQTT5)

    @property
    def declared_labels(self) -> list[str]:
        """Every label the connection issues: its sources' declared acks and its targets' labels."""
        found: list[str] = []
        for label in [*(l for s in self.sources for l in s.declared_acks), *(t.issued_label for t in self.targets)]:
            if label and label not in found and label != labels.LIVE_RESPONSE:  # built in: never declared
                found.append(label)
        return found

    def subscriber_id(self, target_index: int | None) -> str:
        """The subscriber a target pulls as; ``None``: the connection itself (no targets)."""
        return self.id if target_index is None else f"{self.id}/target-{target_index}"


def parse(document: Mapping[str, Any]) -> ConnectionConfig:
    """A connection from its JSON; 400 ``connectivity:connection.configuration.invalid``."""
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A connection must be a JSON object.")
    connection_id = document.get("id")
    if not isinstance(connection_id, str) or not connection_id:
        raise errors.connection_config_invalid("The connection needs a non-empty string 'id'.")
    if limits.utf8_size(connection_id) > limits.MAX_CONNECTION_ID_BYTES:
        raise errors.connection_config_invalid(
            f"The connection's 'id' is longer than {limits.MAX_CONNECTION_ID_BYTES} bytes.")
    kind = _connection_type(document)
    uri = document.get("uri", DEFAULT_URI)
    if not isinstance(uri, str) or not uri.startswith(SCHEMES[kind]):
        what = "an MQTT URI (mqtt://, mqtts://, tcp:// or ssl://)" if kind in (MQTT, MQTT5) else "an AMQP URI"
        raise errors.connection_config_invalid(
            f"The connection's 'uri' <{errors.shown(credentials.masked(uri))}> is not {what}.")
    if kind in (MQTT, MQTT5):
        _unsupported(document, MQTT_CONNECTION_KEYS, "The MQTT connection")
        _supported_as_default(document)
        mqtt_rules.broker_address(uri)  # a port, no path: what the client will connect to
    elif kind == AMQP10:
        _unsupported(document, AMQP10_CONNECTION_KEYS, "The AMQP 1.0 connection")
        _supported_as_default(document)
    elif kind == HTTP_PUSH:
        _unsupported(document, AMQP10_CONNECTION_KEYS, "The HTTP push connection")
        _supported_as_default(document)
        if document.get("sources"):
            raise errors.connection_config_invalid("An HTTP push connection has no sources: give targets only.")
        try:
            http_push_rules.parse_endpoint(uri)
        except ValueError as problem:
            raise errors.connection_config_invalid(
                f"The connection's 'uri' <{errors.shown(credentials.masked(uri))}> {problem}.") from None
    sources = tuple(_source(s, connection_id, kind) for s in _list(document, "sources"))
    targets = tuple(_target(t, connection_id, kind) for t in _list(document, "targets"))
    if not sources and not targets:
        raise errors.connection_config_invalid("The connection has neither sources nor targets.")
    specific = document.get("specificConfig", {})
    mqtt = _mqtt_settings(specific, connection_id, kind) if kind in (MQTT, MQTT5) else None
    amqp10 = _amqp10_settings(specific) if kind == AMQP10 else None
    http_push = _http_push_settings(specific) if kind == HTTP_PUSH else None
    return ConnectionConfig(connection_id, uri, sources, targets, kind, mqtt, amqp10, http_push)


def _supported_as_default(document: Mapping[str, Any]) -> None:
    """Ditto's connection keys accepted only with the value this connector always has."""
    for key, value in (("clientCount", 1), ("validateCertificates", True)):
        if key in document and document[key] != value:
            raise errors.connection_config_invalid(
                f"The connection setting '{key}' <{errors.shown(document[key])}> is not supported: only {errors.shown(value)}.")


def simple(connection_id: str, queue: str, includes: Sequence[str], uri: str = DEFAULT_URI) -> ConnectionConfig:
    """One source queue, as ``ackstore connect amqp --queue`` describes it."""
    return parse({"id": connection_id, "uri": uri,
                  "sources": [{"addresses": [queue], "acknowledgementRequests": {"includes": list(includes)}}]})


def simple_mqtt(connection_id: str, topics: Sequence[str], includes: Sequence[str], uri: str,
                version: str = MQTT) -> ConnectionConfig:
    """One QoS-1 source of topic filters, as ``ackstore connect mqtt --topic`` describes it."""
    return parse({"id": connection_id, "uri": uri, "connectionType": version,
                  "sources": [{"addresses": list(topics), "qos": 1,
                               "acknowledgementRequests": {"includes": list(includes)}}]})


def simple_amqp10(connection_id: str, addresses: Sequence[str], includes: Sequence[str], uri: str,
                  credit: int | None = None) -> ConnectionConfig:
    """One source of link addresses, as ``ackstore connect amqp10 --address`` describes it."""
    specific = {AMQP10_CREDIT_SETTINGS[0]: str(credit)} if credit is not None else {}
    return parse({"id": connection_id, "uri": uri, "connectionType": AMQP10, "specificConfig": specific,
                  "sources": [{"addresses": list(addresses), "acknowledgementRequests": {"includes": list(includes)}}]})


def _connection_type(document: Mapping[str, Any]) -> str:
    """``connectionType``, or what the URI's scheme implies."""
    kind = document.get("connectionType")
    if kind is None:
        uri = document.get("uri", DEFAULT_URI)
        return MQTT if isinstance(uri, str) and uri.startswith(SCHEMES[MQTT]) else AMQP
    if kind not in SCHEMES:
        raise errors.connection_config_invalid(
            f"The connection type <{errors.shown(kind)}> is not supported: give one of {', '.join(SCHEMES)}.")
    return kind


def _list(document: Mapping[str, Any], name: str) -> list[Any]:
    value = document.get(name, [])
    if not isinstance(value, list):
        raise errors.connection_config_invalid(f"'{name}' must be a JSON array.")
    return value


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise errors.connection_config_invalid(f"{what} must be a JSON array of non-empty strings.")
    return tuple(value)


def _unsupported(document: Mapping[str, Any], known: set[str], what: str) -> None:
    for key in document:
        if key not in known:
            raise errors.connection_config_invalid(f"{what} setting '{errors.shown(key)}' is not supported.")


def _source(document: object, connection_id: str, kind: str) -> Source:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A source must be a JSON object.")
    addresses = _strings(document.get("addresses"), "A source's 'addresses'")
    if not addresses:
        raise errors.connection_config_invalid("A source needs at least one address.")
    qos: int | None = None
    mqtt = kind in (MQTT, MQTT5)
    if mqtt:
        _unsupported(document, MQTT_SOURCE_KEYS, "The MQTT source")
        for topic in addresses:
            _topic_filter(topic)
        qos = _qos(document.get("qos"), "source", required=True)
        _strings(document.get("authorizationContext", ["-"]), "A source's 'authorizationContext'")
    elif kind == AMQP10:
        _unsupported(document, AMQP10_SOURCE_KEYS, "The AMQP 1.0 source")
        _strings(document.get("authorizationContext", ["-"]), "A source's 'authorizationContext'")
        if len(set(addresses)) != len(addresses):
            raise errors.connection_config_invalid("A source's 'addresses' name one link address twice.")
    elif len(addresses) != 1:
        raise errors.connection_config_invalid("A source consumes exactly one queue: give one address.")
    requests = document.get("acknowledgementRequests", {}) or {}
    if not isinstance(requests, Mapping):
        raise errors.connection_config_invalid("A source's 'acknowledgementRequests' must be a JSON object.")
    includes = _strings(requests.get("includes", []), "'acknowledgementRequests.includes'")
    for label in includes:
        if not labels.is_valid_label(label):
            raise errors.connection_config_invalid(f"The requested label <{label}> is invalid.")
    declared = tuple(
        _declarable(label, connection_id) for label in _strings(document.get("declaredAcks", []), "'declaredAcks'")
    )
    enforcement = _enforcement(document["enforcement"]) if "enforcement" in document else None
    if mqtt and enforcement is not None and enforcement.input != SOURCE_ADDRESS:
        raise errors.connection_config_invalid(
            "An MQTT source's enforcement input must be {{ source:address }}: a device sets its own user "
            "properties, so a header proves nothing about it.")
    reply = _reply_target(document.get("replyTarget", {}), kind)
    return Source(addresses[0], includes, declared, addresses, qos, enforcement, reply)


def _topic_filter(topic: str) -> None:
    """An MQTT topic filter: ``#`` only last and alone in its level, ``+`` alone in its level; a
    shared one is ``$share/<group>/<filter>``."""
    if topic.startswith("$share/"):
        _, group, rest = (topic.split("/", 2) + ["", ""])[:3]
        if not group or "+" in group or "#" in group or not rest:
            raise errors.connection_config_invalid(
                f"The source address <{errors.shown(topic)}> is not $share/<group>/<topic filter>.")
        topic = rest
    levels = topic.split("/")
    for n, level in enumerate(levels):
        if ("#" in level and (level != "#" or n != len(levels) - 1)) or ("+" in level and level != "+") \
                or "\x00" in level:
            raise errors.connection_config_invalid(f"The source address <{errors.shown(topic)}> is not an MQTT topic filter.")
    if limits.utf8_size(topic) > 65535:
        raise errors.connection_config_invalid("An MQTT topic filter is longer than 65535 bytes.")


def _qos(value: object, what: str, *, required: bool) -> int | None:
    if value is None and not required:
        return None
    if value is None:
        raise errors.connection_config_invalid(f"The MQTT {what} needs a 'qos': 0 or 1.")
    if value not in (0, 1) or isinstance(value, bool):
        raise errors.connection_config_invalid(
            f"The {what}'s 'qos' <{errors.shown(value)}> is not supported: give 0 or 1 (QoS 2 is not supported).")
    return int(value)  # type: ignore[arg-type]


def _enforcement(document: object) -> Enforcement:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A source's 'enforcement' must be a JSON object.")
    _unsupported(document, {"input", "filters"}, "The enforcement")
    try:
        return Enforcement.parse(document.get("input"), _strings(document.get("filters"), "'enforcement.filters'"))
    except ValueError as problem:
        raise errors.connection_config_invalid(f"The source's enforcement is invalid: {problem}") from None


def _reply_target(document: object, kind: str) -> ReplyTarget:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A source's 'replyTarget' must be a JSON object.")
    _unsupported(document, {"enabled", "address", "expectedResponseTypes"}, "The replyTarget")
    enabled = document.get("enabled", True)
    if not isinstance(enabled, bool):
        raise errors.connection_config_invalid("'replyTarget.enabled' must be true or false.")
    address = document.get("address", REPLY_TO_PLACEHOLDER)
    if not isinstance(address, str) or not address:
        raise errors.connection_config_invalid("'replyTarget.address' must be a non-empty string.")
    if "{{" in address:
        if address.replace(" ", "") != REPLY_TO_PLACEHOLDER:
            raise errors.connection_config_invalid(
                f"The replyTarget address <{errors.shown(address)}> is not supported: give a fixed address or "
                f"{REPLY_TO_PLACEHOLDER}.")
        address = REPLY_TO_PLACEHOLDER
    elif kind == AMQP:
        raise errors.connection_config_invalid(
            f"The replyTarget address <{errors.shown(address)}> is not supported on AMQP: only {REPLY_TO_PLACEHOLDER}.")
    elif kind != AMQP10 and not mqtt_rules.is_topic_name(address):
        raise errors.connection_config_invalid(f"The replyTarget address <{errors.shown(address)}> is not an MQTT topic name.")
    expected = _strings(document.get("expectedResponseTypes", list(ANSWERED)), "'replyTarget.expectedResponseTypes'")
    if not set(ANSWERED) <= set(expected) or not set(expected) <= {*ANSWERED, "nack"}:
        raise errors.connection_config_invalid(
            f"'replyTarget.expectedResponseTypes' <{errors.shown(list(expected))}> is not supported: results and "
            "refusals are both answered, so give [\"response\", \"error\"] (\"nack\" may be added).")
    return ReplyTarget(enabled, address)


def _target(document: object, connection_id: str, kind: str) -> Target:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A target must be a JSON object.")
    address = document.get("address")
    qos: int | None = None
    if kind == AMQP10:
        _unsupported(document, AMQP10_TARGET_KEYS, "The AMQP 1.0 target")
        if not isinstance(address, str) or not amqp10_rules.target_node(address)[0] or "{{" in address:
            raise errors.connection_config_invalid(
                f"An AMQP 1.0 target's 'address' <{errors.shown(address)}> must be a node's address, queue://name or "
                "topic://name (no placeholders).")
        exchange, routing_key = address, ""
    elif kind == HTTP_PUSH:
        _unsupported(document, HTTP_PUSH_TARGET_KEYS, "The HTTP push target")
        try:
            http_push_rules.parse_address(address)
        except ValueError as problem:
            raise errors.connection_config_invalid(f"An HTTP push target's 'address' <{errors.shown(address)}> {problem}.") \
                from None
        exchange, routing_key = str(address), ""
    elif kind in (MQTT, MQTT5):
        _unsupported(document, MQTT_TARGET_KEYS, "The MQTT target")
        if not isinstance(address, str) or not address or "+" in address or "#" in address or "{{" in address:
            raise errors.connection_config_invalid(
                f"An MQTT target's 'address' <{errors.shown(address)}> must be a topic (no wildcards, no placeholders).")
        qos = _qos(document.get("qos", 1), "target", required=True)
        exchange, routing_key = address, ""
    elif not isinstance(address, str) or "/" not in address:
        raise errors.connection_config_invalid(f"A target's 'address' <{errors.shown(address)}> must be 'exchange/routing-key'.")
    else:
        exchange, _, routing_key = address.partition("/")
    channels: list[str] = []
    query: dict[str, list[str]] | None = None
    for topic in _strings(document.get("topics"), "A target's 'topics'"):
        path, _, params = topic.partition("?")
        if path not in TOPIC_CHANNELS:
            raise errors.connection_config_invalid(f"The topic <{path}> is not one of {', '.join(TOPIC_CHANNELS)}.")
        if TOPIC_CHANNELS[path] not in channels:
            channels.append(TOPIC_CHANNELS[path])
        parsed = parse_qs(params)
        if query is not None and parsed != query:
            raise errors.connection_config_invalid("Every topic of one target must have the same namespaces and filter.")
        query = parsed
    query = query or {}
    namespaces = tuple(n for part in query.get("namespaces", []) for n in part.split(",") if n) or None
    filter_text = query.get("filter", [None])[0]
    if filter_text is not None:
        try:
            rql.parse_sent(filter_text)
        except errors.DittoError as error:
            raise errors.connection_config_invalid(f"The target's filter is invalid: {error.message}") from None
    issued = document.get("issuedAcknowledgementLabel")
    if issued == labels.LIVE_RESPONSE and kind == HTTP_PUSH:  # the endpoint's response is the live response
        issued_label: str | None = labels.LIVE_RESPONSE
        if channels != ["live"]:
            raise errors.connection_config_invalid(
                "A target that issues live-response must send live signals only (_/_/things/live/commands or "
                "_/_/things/live/messages).")
    else:
        issued_label = _declarable(issued, connection_id) if issued is not None else None
    return Target(exchange, routing_key, tuple(channels), namespaces, filter_text, issued_label, qos)


def _mqtt_settings(document: object, connection_id: str, kind: str) -> MqttSettings:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("'specificConfig' must be a JSON object.")
    _unsupported(document, MQTT_SETTINGS, "The specificConfig")
    for name in MQTT5_SETTINGS:
        if name in document and kind != MQTT5:
            raise errors.connection_config_invalid(
                f"'specificConfig.{name}' is an MQTT 5 setting: give \"connectionType\": \"{MQTT5}\".")

    def flag(name: str, default: bool) -> bool:
        value = document.get(name, default)
        if isinstance(value, str) and value in ("true", "false"):  # Ditto's specificConfig holds strings
            value = value == "true"
        if not isinstance(value, bool):
            raise errors.connection_config_invalid(f"'specificConfig.{name}' must be true or false.")
        return value

    def seconds(name: str, default: float, minimum: float, maximum: float = float("inf")) -> float:
        value = document.get(name)
        if value is None:
            return default
        try:
            ms = durations.parse_duration_ms(value) if isinstance(value, str) else None
        except errors.DittoError:
            ms = None
        if ms is None or not minimum * 1000 <= ms <= maximum * 1000:
            raise errors.connection_config_invalid(
                f"'specificConfig.{name}' <{errors.shown(value)}> must be a duration from {minimum:g}s to {maximum:g}s, "
                "such as 5s.")
        return ms / 1000

    def number(name: str, default: int, low: int, high: int) -> int:
        value = document.get(name, default)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise errors.connection_config_invalid(f"'specificConfig.{name}' must be a whole number from {low} to {high}.")
        return value

    def client_id(name: str, default: str | None) -> str | None:
        value = document.get(name, default)
        if value is not None and (not isinstance(value, str) or not value or limits.utf8_size(value) > 65535):
            raise errors.connection_config_invalid(f"'specificConfig.{name}' must be a non-empty string.")
        return value

    settings = MqttSettings(
        client_id=client_id("clientId", connection_id) or connection_id,
        clean_session=flag("cleanSession", False),
        reconnect_for_redelivery=flag("reconnectForRedelivery", False),
        reconnect_for_redelivery_delay_s=seconds("reconnectForRedeliveryDelay", 2.0, 1.0),
        separate_publisher_client=flag("separatePublisherClient", False),
        publisher_id=client_id("publisherId", None),
        keep_alive_s=int(seconds("keepAlive", 60.0, 1.0, 65535.0)),
        session_expiry_s=number("sessionExpiryInterval", MqttSettings.session_expiry_s, 0, 2**32 - 1),
        receive_maximum=number("receiveMaximum", MqttSettings.receive_maximum, 1, 65535),
    )
    if settings.publisher_client_id == settings.client_id:  # its clean connect would end the consumer's session
        raise errors.connection_config_invalid("'specificConfig.publisherId' must differ from the client id.")
    return settings


def _amqp10_settings(document: object) -> Amqp10Settings:
    """An AMQP 1.0 connection's ``specificConfig``: the JMS prefetch (the link credit) and how
    "redeliver" is settled; any other JMS option is a 400 naming it."""
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("'specificConfig' must be a JSON object.")
    _unsupported(document, {*AMQP10_CREDIT_SETTINGS, AMQP10_REDELIVERY_SETTING}, "The specificConfig")
    credit = Amqp10Settings.credit
    for name in AMQP10_CREDIT_SETTINGS:
        if name in document:
            value = document[name]
            if isinstance(value, str) and value.isascii() and value.isdigit():  # Ditto's specificConfig holds strings
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1_000_000:
                raise errors.connection_config_invalid(
                    f"'specificConfig.{name}' <{errors.shown(document[name])}> must be a whole number from 1 to 1000000 "
                    "(the link credit: deliveries held unsettled at once).")
            credit = value
    redelivery = document.get(AMQP10_REDELIVERY_SETTING, Amqp10Settings.redelivery)
    if redelivery not in amqp10_rules.REDELIVERY_OUTCOMES:
        raise errors.connection_config_invalid(
            f"'specificConfig.{AMQP10_REDELIVERY_SETTING}' <{errors.shown(redelivery)}> must be \"modified\" (Ditto's: "
            "modified with delivery-failed) or \"released\" (for a broker that does not implement modified, such as "
            "RabbitMQ 3).")
    return Amqp10Settings(credit, redelivery)


def _http_push_settings(document: object) -> HttpPushSettings:
    """An HTTP push connection's ``specificConfig``: ``parallelism`` and ``idleTimeout`` (the
    request timeout), as Ditto names them; any other setting is a 400 naming it."""
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("'specificConfig' must be a JSON object.")
    _unsupported(document, set(HTTP_PUSH_SETTINGS), "The specificConfig")
    parallelism = document.get("parallelism", HttpPushSettings.parallelism)
    if isinstance(parallelism, str) and parallelism.isascii() and parallelism.isdigit():
        parallelism = int(parallelism)
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or not 1 <= parallelism <= 64:
        raise errors.connection_config_invalid(
            f"'specificConfig.parallelism' <{errors.shown(document.get('parallelism'))}> must be a whole number from 1 to 64.")
    timeout_s = HttpPushSettings.idle_timeout_s
    if "idleTimeout" in document:
        value = document["idleTimeout"]
        try:
            ms = durations.parse_duration_ms(value) if isinstance(value, str) else None
        except errors.DittoError:
            ms = None
        if ms is None or not 100 <= ms <= 600_000:
            raise errors.connection_config_invalid(
                f"'specificConfig.idleTimeout' <{errors.shown(value)}> must be a duration from 100ms to 10m, such as 5s.")
        timeout_s = ms / 1000
    return HttpPushSettings(parallelism, timeout_s)


def _declarable(label: object, connection_id: str) -> str:
    """A label the connection issues: with its ``<connection-id>:`` prefix (B.2, B.14 rule 1)."""
    try:
        return labels.validate_declarable(label, connection_id)
    except errors.DittoError as error:
        raise errors.connection_config_invalid(f"The label <{errors.shown(label)}> cannot be declared: {error.message}") from None
