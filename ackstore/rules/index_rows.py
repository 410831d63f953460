"""Index rows of a thing document (B.11): one typed row per JSON value below its root.

A thing is indexed as one row per JSON value below its root: the JSON-pointer path (keys
joined by ``/``, as RQL names properties), a per-path ordinal, and the value typed. An
array gives a row for itself and a row per element *at the same path*, so a comparison
matches when any element matches (B.11).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator


def escape_key(key: str) -> str:
    """A member name as a JSON-pointer segment (RFC 6901): ``~`` → ``~0``, ``/`` → ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class IndexRow:
    path: str
    ordinal: int
    value_type: str  # string number boolean null object array
    value_text: str | None = None
    value_number: str | None = None  # decimal text: exact, whatever the JSON number's size
    value_bool: bool | None = None
    empty: bool = False  # null, "", {} or [] (B.12 ``empty``)


# The most a path and a string value may take together in the search index, in UTF-8 bytes:
# PostgreSQL refuses a btree entry over ~2 700 bytes. Ditto's search index has the same kind of
# bound (IndexLengthRestrictionEnforcer.MAX_INDEX_CONTENT_LENGTH): a longer string is indexed
# cut to fit — RQL then compares that prefix —, a path longer than the bound is not indexed.
MAX_INDEX_CONTENT_BYTES = 950


def for_index(rows: Iterable[IndexRow]) -> Iterator[IndexRow]:
    """``rows`` as the search index stores them: within :data:`MAX_INDEX_CONTENT_BYTES`."""
    for row in rows:
        path_bytes = len(row.path.encode("utf-8"))
        if path_bytes > MAX_INDEX_CONTENT_BYTES:
            continue
        if row.value_text is not None and path_bytes + len(row.value_text) * 4 > MAX_INDEX_CONTENT_BYTES:
            budget = MAX_INDEX_CONTENT_BYTES - path_bytes
            cut = row.value_text.encode("utf-8")[:budget].decode("utf-8", "ignore")  # on a character boundary
            if cut != row.value_text:
                row = replace(row, value_text=cut)
        yield row


def flatten(document: dict[str, Any] | None) -> list[IndexRow]:
    """The index rows of one thing document (none for a deleted thing), depth first in member
    order; each path's ordinals in that order. A stack, not recursion: no document is too deep
    to flatten (one a ledger stored before the depth limits may be, decisions #115)."""
    if document is None:
        return []
    ordinals: dict[str, int] = {}
    rows: list[IndexRow] = []
    stack = [(escape_key(key), value) for key, value in reversed(document.items())]
    while stack:
        path, value = stack.pop()
        ordinal = ordinals.get(path, 0)
        ordinals[path] = ordinal + 1
        if isinstance(value, dict):
            rows.append(IndexRow(path, ordinal, "object", empty=not value))
            stack.extend((f"{path}/{escape_key(key)}", member) for key, member in reversed(value.items()))
        elif isinstance(value, list):
            rows.append(IndexRow(path, ordinal, "array", empty=not value))
            stack.extend((path, element) for element in reversed(value))
        elif isinstance(value, bool):
            rows.append(IndexRow(path, ordinal, "boolean", value_bool=value))
        elif isinstance(value, (int, float)):
            rows.append(IndexRow(path, ordinal, "number",
                                 value_number=repr(value) if isinstance(value, float) else str(value)))
        elif isinstance(value, str):
            rows.append(IndexRow(path, ordinal, "string", value_text=value, empty=value == ""))
        else:
            rows.append(IndexRow(path, ordinal, "null", empty=True))
    return rows
