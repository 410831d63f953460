"""Ditto's field selectors: the ``fields`` of a read or a search, the ``extraFields`` of a
WebSocket stream. ``attributes(model,manufacturer),features/lamp`` selects those JSON pointers —
a key before parentheses prefixes each selector inside them, nested to any depth — and a document
is cut to them, in the selector's order, leaving out what it does not have (Ditto's
``JsonObject.get(JsonFieldSelector)``). Besides the thing's own fields a selector may name
``_revision``, ``_namespace`` and ``_modified``, which Ditto computes for a read.
"""

from __future__ import annotations

from typing import Any, Mapping

from ackstore.rules import errors, limits

Pointer = tuple[str, ...]
MAX_POINTERS = 100  # pointers one selector may name: as many as a path has segments (decisions #115)
REVISION, NAMESPACE, MODIFIED = "_revision", "_namespace", "_modified"


def parse(selector: str) -> tuple[Pointer, ...]:
    """The pointers ``selector`` names, each once, in its order; 400 ``json.fieldselector.invalid``
    for an empty selector, parentheses that do not pair (:func:`split_outside_parentheses` finds
    them) or nest too deep, an empty pointer or too many of them."""
    if not selector or _nesting(selector) > limits.MAX_POINTER_SEGMENTS:
        raise errors.field_selector_invalid(selector)
    found: dict[Pointer, None] = {}
    for text in _flatten(selector, selector):
        limits.check_pointer(text)
        pointer = tuple(segment for segment in text.split("/") if segment)
        if not pointer:
            raise errors.field_selector_invalid(selector)
        found[pointer] = None
        if len(found) > MAX_POINTERS:
            raise errors.field_selector_invalid(selector, f"Select at most {MAX_POINTERS} fields.")
    return tuple(found)


def select(document: Mapping[str, Any], pointers: tuple[Pointer, ...]) -> dict[str, Any]:
    """``document`` cut to ``pointers``: each pointer's value where the document has one, merged
    into one object in the pointers' order."""
    selected: dict[str, Any] = {}
    made: set[int] = set()
    for pointer in pointers:
        value = _get(document, pointer)
        if value is not _ABSENT:
            _put(selected, pointer, value, made)
    return selected


def computed(thing_id: str, revision: int, modified: str | None) -> dict[str, Any]:
    """The fields Ditto computes for a read of a thing (selected only when named)."""
    out: dict[str, Any] = {REVISION: revision, NAMESPACE: thing_id.partition(":")[0]}
    if modified is not None:
        out[MODIFIED] = modified
    return out


def select_thing(document: Mapping[str, Any], pointers: tuple[Pointer, ...], thing_id: str, revision: int,
                 modified: str | None) -> dict[str, Any]:
    """A thing's document cut to ``pointers``, its computed fields among what they may name."""
    return select({**document, **computed(thing_id, revision, modified)}, pointers)


# --- the pieces ---------------------------------------------------------------------------------

_ABSENT = object()


def _flatten(text: str, selector: str) -> list[str]:
    """The pointers of a selector's text: its top-level comma-separated parts, each ``root(inner)``
    expanded to ``root/<each pointer of inner>``."""
    pointers: list[str] = []
    for part in _split_top_level(text, selector):
        if not part:
            raise errors.field_selector_invalid(selector)
        opening = part.find("(")
        if opening < 0:
            if ")" in part:
                raise errors.field_selector_invalid(selector)
            pointers.append(part)
            continue
        if not part.endswith(")"):
            raise errors.field_selector_invalid(selector)
        root = part[:opening].rstrip("/")
        pointers.extend(f"{root}/{inner.lstrip('/')}" for inner in _flatten(part[opening + 1:-1], selector))
    return pointers


def _split_top_level(text: str, selector: str) -> list[str]:
    parts = split_outside_parentheses(text)
    if parts is None:
        raise errors.field_selector_invalid(selector)
    return parts


def split_outside_parentheses(text: str) -> list[str] | None:
    """``text``'s comma-separated parts, stripped, a comma inside parentheses kept in its part (a
    field selector's, a search option's); None when the parentheses do not pair."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return None
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        return None
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _get(document: Any, pointer: Pointer) -> Any:
    for segment in pointer:
        if not isinstance(document, Mapping) or segment not in document:
            return _ABSENT
        document = document[segment]
    return document


def _put(selected: dict[str, Any], pointer: Pointer, value: Any, made: set[int]) -> None:
    """``value`` at ``pointer`` in ``selected``, through objects made here (``made``, by id); a
    pointer below a value selected whole is in it already (the document is never changed)."""
    node = selected
    for segment in pointer[:-1]:
        child = node.get(segment, _ABSENT)
        if child is _ABSENT:
            child = node[segment] = {}
            made.add(id(child))
        elif id(child) not in made:
            return
        node = child
    node[pointer[-1]] = value


def _nesting(selector: str) -> int:
    deepest = depth = 0
    for char in selector:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    return deepest
