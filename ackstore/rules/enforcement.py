"""A source's ``enforcement`` (Ditto's ``Enforcement``): a device may only address its own twin.

``input`` names where the device's identity comes from — ``{{ source:address }}`` (the queue or
MQTT topic the message arrived on) or ``{{ header:<name> }}`` (a protocol header: AMQP headers,
MQTT 5 user properties). ``filters`` are templates over the addressed thing — ``{{ thing:id }}``,
``{{ thing:namespace }}``, ``{{ thing:name }}`` — and the message passes when the input equals one
of them with the thing filled in. Otherwise it is refused with Ditto's
``connectivity:connection.id.enforcement.failed`` (400) and never redelivered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ackstore.rules import errors

SOURCE_ADDRESS = "source:address"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z]+:[^}\s]*)\s*\}\}")
_ANY_PLACEHOLDER = re.compile(r"\{\{.*?\}\}")
_THING_PARTS = ("thing:id", "thing:namespace", "thing:name")


@dataclass(frozen=True)
class Enforcement:
    input: str  # "source:address" or "header:<name>" (lower case)
    filters: tuple[str, ...]

    @classmethod
    def parse(cls, input_text: object, filters: tuple[str, ...]) -> Enforcement:
        """From the configuration's text; ``ValueError`` saying what is wrong."""
        if not isinstance(input_text, str):
            raise ValueError("'input' must be {{ source:address }} or {{ header:<name> }}")
        found = _PLACEHOLDER.fullmatch(input_text.strip())
        name = found.group(1) if found else ""
        if name != SOURCE_ADDRESS and not (name.startswith("header:") and len(name) > len("header:")):
            raise ValueError(f"the input <{errors.shown(input_text)}> is not {{{{ source:address }}}} or "
                             "{{ header:<name> }}")
        if not filters:
            raise ValueError("give at least one filter")
        for template in filters:
            if len(_ANY_PLACEHOLDER.findall(template)) != len(_PLACEHOLDER.findall(template)):
                raise ValueError(f"the filter <{errors.shown(template)}> has a placeholder other than "
                                 "{{ thing:id }}, {{ thing:namespace }}, {{ thing:name }} (no functions)")
            for placeholder in _PLACEHOLDER.findall(template):
                if placeholder not in _THING_PARTS:
                    raise ValueError(f"the filter placeholder {{{{ {errors.shown(placeholder)} }}}} is not one of "
                                     "thing:id, thing:namespace, thing:name")
        return cls(name.lower() if name.startswith("header:") else name, filters)

    def input_of(self, address: str, headers: Mapping[str, Any] | None) -> str | None:
        """The identity a message brings: its source address, or the named header's text."""
        if self.input == SOURCE_ADDRESS:
            return address
        wanted = self.input[len("header:"):]
        for name, value in (headers or {}).items():
            if str(name).lower() == wanted and isinstance(value, str):
                return value
        return None

    def allows(self, identity: str | None, thing_id: str) -> bool:
        """Whether a message with this identity may address ``thing_id``."""
        if identity is None:
            return False
        namespace, _, name = thing_id.partition(":")
        values = {"thing:id": thing_id, "thing:namespace": namespace, "thing:name": name}
        return any(_PLACEHOLDER.sub(lambda m: values[m.group(1)], template) == identity for template in self.filters)
