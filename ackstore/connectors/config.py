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

from ackstore.rules import errors, labels, limits, rql

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/"
TOPIC_CHANNELS = {
    "_/_/things/twin/events": "twin",
    "_/_/things/live/commands": "live",
    "_/_/things/live/messages": "live",
}


@dataclass(frozen=True)
class Source:
    queue: str
    includes: tuple[str, ...] = ()  # requested-acks added to every message
    declared_acks: tuple[str, ...] = ()  # labels the connection may acknowledge with (prefixed)


@dataclass(frozen=True)
class Target:
    exchange: str
    routing_key: str
    channels: tuple[str, ...]
    namespaces: tuple[str, ...] | None = None
    filter: str | None = None
    issued_label: str | None = None  # acknowledged from the broker's answer (B.9)


@dataclass(frozen=True)
class ConnectionConfig:
    id: str
    uri: str = DEFAULT_URI
    sources: tuple[Source, ...] = ()
    targets: tuple[Target, ...] = field(default=())

    @property
    def declared_labels(self) -> list[str]:
        """Every label the connection issues: its sources' declared acks and its targets' labels."""
        found: list[str] = []
        for label in [*(l for s in self.sources for l in s.declared_acks), *(t.issued_label for t in self.targets)]:
            if label and label not in found:
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
    uri = document.get("uri", DEFAULT_URI)
    if not isinstance(uri, str) or not uri.startswith(("amqp://", "amqps://")):
        raise errors.connection_config_invalid(f"The connection's 'uri' <{errors.shown(uri)}> is not an AMQP URI.")
    sources = tuple(_source(s, connection_id) for s in _list(document, "sources"))
    targets = tuple(_target(t, connection_id) for t in _list(document, "targets"))
    if not sources and not targets:
        raise errors.connection_config_invalid("The connection has neither sources nor targets.")
    return ConnectionConfig(connection_id, uri, sources, targets)


def simple(connection_id: str, queue: str, includes: Sequence[str], uri: str = DEFAULT_URI) -> ConnectionConfig:
    """One source queue, as ``ackstore connect amqp --queue`` describes it."""
    return parse({"id": connection_id, "uri": uri,
                  "sources": [{"addresses": [queue], "acknowledgementRequests": {"includes": list(includes)}}]})


def _list(document: Mapping[str, Any], name: str) -> list[Any]:
    value = document.get(name, [])
    if not isinstance(value, list):
        raise errors.connection_config_invalid(f"'{name}' must be a JSON array.")
    return value


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise errors.connection_config_invalid(f"{what} must be a JSON array of non-empty strings.")
    return tuple(value)


def _source(document: object, connection_id: str) -> Source:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A source must be a JSON object.")
    addresses = _strings(document.get("addresses"), "A source's 'addresses'")
    if len(addresses) != 1:
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
    return Source(addresses[0], includes, declared)


def _target(document: object, connection_id: str) -> Target:
    if not isinstance(document, Mapping):
        raise errors.connection_config_invalid("A target must be a JSON object.")
    address = document.get("address")
    if not isinstance(address, str) or "/" not in address:
        raise errors.connection_config_invalid(f"A target's 'address' <{errors.shown(address)}> must be 'exchange/routing-key'.")
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
            rql.parse(filter_text)
        except errors.DittoError as error:
            raise errors.connection_config_invalid(f"The target's filter is invalid: {error.message}") from None
    issued = document.get("issuedAcknowledgementLabel")
    issued_label = _declarable(issued, connection_id) if issued is not None else None
    return Target(exchange, routing_key, tuple(channels), namespaces, filter_text, issued_label)


def _declarable(label: object, connection_id: str) -> str:
    """A label the connection issues: with its ``<connection-id>:`` prefix (B.2, B.14 rule 1)."""
    try:
        return labels.validate_declarable(label, connection_id)
    except errors.DittoError as error:
        raise errors.connection_config_invalid(f"The label <{errors.shown(label)}> cannot be declared: {error.message}") from None
