"""Applying twin commands to a thing document (B.10): the fold the apply_twin job streams.

:func:`apply` takes the thing's current state and one command and returns the new state
and the command's outcome (status, payload, event action). It is pure and deterministic,
so a re-run of the job computes exactly the same states, events and acks. Documents are
treated as immutable: a change copies only the objects along its path.

Nothing a command holds stops the fold: what it cannot decide for one command — an exception of
any kind, such as Python's stack running out in a document stored before the depth limits — is
that command's 500 ``internalerror`` (:data:`UNDECIDED`), the state unchanged (decisions #116);
only a failure of the process (``errors.PROCESS_FAILURES``: the memory running out…) is no
command's, and goes through. Within the limits the fold has the stack it needs, so only input past
them can be a 500, and a re-run answers it alike. A command stored
before the limits that the door now refuses is answered the door's 400 — a path past
``limits.MAX_POINTER_SEGMENTS`` here, a value or headers past ``limits.MAX_VALUE_DEPTH`` where their
stored text is read (``jobs.apply_twin``) —, so no thing grows past ``limits.MAX_DOCUMENT_DEPTH``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping
from urllib.parse import urlsplit

from ackstore.rules import envelopes, errors, fields, jsontext, limits, rql, rql_eval
from ackstore.rules.acks import ABSENT

DEFAULT_MAX_THING_BYTES = 100 * 1024  # Ditto's default thing size limit (B.10)
IF_MATCH, IF_NONE_MATCH = "if-match", "if-none-match"
IF_EQUAL, CONDITION = "if-equal", "condition"
IF_EQUAL_OPTIONS = ("update", "skip", "skip-minimizing-merge")

# Top-level members a client may address, and what they must hold.
_OBJECT_PARTS = {"attributes", "features"}
_STRING_PARTS = {"definition", "policyId"}
_DEFINITION = re.compile(r"[_a-zA-Z0-9\-.]+:[_a-zA-Z0-9\-.]+:[_a-zA-Z0-9\-.]+")


@dataclass(frozen=True)
class ThingState:
    """A thing as stored: ``revision`` 0 means it never existed; ``document`` None: absent."""

    thing_id: str
    revision: int = 0
    document: dict[str, Any] | None = None

    @property
    def exists(self) -> bool:
        return self.document is not None


@dataclass(frozen=True)
class Command:
    """One pending twin command, as stored in ``signals``."""

    signal_id: int
    action: str  # create / modify / merge / delete
    path: str
    value: Any = ABSENT
    headers: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Outcome:
    """What a command did: its response, and the event it produced (None if it failed)."""

    status: int
    payload: Any = ABSENT
    event_action: str | None = None
    event_value: Any = ABSENT  # the value its event carries when not the command's: a minimized merge's

    @property
    def applied(self) -> bool:
        return self.event_action is not None

    @property
    def is_error(self) -> bool:
        return self.status >= 400


@dataclass(frozen=True)
class _Target:
    """The resource a path addresses: where it lives in the document and how to name it."""

    pointer: tuple[str, ...]  # segments from the document root; () is the thing
    kind: str  # thing, attributes, attribute, definition, policyId, features, feature, …
    feature_id: str | None = None
    inner: str | None = None  # the attribute / property pointer, for error messages


def apply(state: ThingState, command: Command, max_thing_bytes: int = DEFAULT_MAX_THING_BYTES) -> tuple[ThingState, Outcome]:
    """Apply one command; a failed command leaves the state unchanged. What cannot be decided is
    the command's 500; it raises only a failure of the process (``errors.PROCESS_FAILURES``, and
    what is no ``Exception``: ``KeyboardInterrupt`` and the like), which is no command's outcome."""
    try:
        return _apply(state, command, max_thing_bytes)
    except errors.DittoError as error:
        return state, Outcome(error.status, error.to_json())
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — one command's, never the pass's (decisions #116)
        return state, UNDECIDED


# The outcome of a command the fold could not decide: 500 internalerror (Ditto's
# DittoInternalErrorException), no event, the state unchanged.
UNDECIDED = Outcome(500, errors.internal_error().to_json())


def fold(state: ThingState, commands: list[Command], max_thing_bytes: int = DEFAULT_MAX_THING_BYTES) -> tuple[ThingState, list[Outcome]]:
    """Apply commands in ingestion order, each onto the result of the previous one."""
    outcomes = []
    for command in commands:
        state, outcome = apply(state, command, max_thing_bytes)
        outcomes.append(outcome)
    return state, outcomes


def entity_tag(state: ThingState, path: str = "/") -> str | None:
    """B.10's ETag of the addressed resource: ``"rev:N"`` for the thing, ``"hash:…"`` below it."""
    target = _resolve(path)
    return _tag(state, target, _get(state.document, target.pointer))


def retrieve(state: ThingState, path: str = "/", condition: str | None = None) -> tuple[Any, str | None]:
    """A twin query's answer (the HTTP API's ``GET``): the addressed resource and its ETag, or
    the 404 Ditto answers (B.10) — the same resolution a command's path gets; 412 when the thing
    does not match the query's ``condition``, as a command's."""
    target = _resolve(path)
    current = _get(state.document, target.pointer)
    if current is ABSENT:
        raise _not_found(state, target)
    if condition is not None:
        _check_condition(state, {CONDITION: condition})
    return current, _tag(state, target, current)


def check_value(action: str, path: str, value: Any) -> None:
    """What of a twin command's value the fold would refuse whatever the thing is — a whole thing
    that is no object, a part of the wrong type, a policyId or definition Ditto's model refuses —
    as the 400 the fold answers, for a front door to answer at once (as Ditto's gateway does)."""
    target = _resolve(path)
    if action in ("create", "modify") and not target.pointer:
        if not isinstance(value, dict):
            raise errors.json_field_invalid("/value", "JSON object of a Thing")
        _check_parts(envelopes.thing_members(value))
    elif action == "modify":
        _check_type(target, value)


def check_if_match(state_tag: str | None, if_match: str | None) -> None:
    """A read's ``If-Match``: 412 when it does not match the resource's ETag, as a write's."""
    if if_match is not None and (state_tag is None or not _tag_matches(if_match, state_tag)):
        raise errors.precondition_failed(IF_MATCH, if_match, state_tag or "")


def not_modified(state_tag: str | None, if_none_match: str | None) -> bool:
    """Whether a read's ``If-None-Match`` matches the resource's ETag: Ditto answers 304 then."""
    return state_tag is not None and if_none_match is not None and _tag_matches(if_none_match, state_tag)


def document_bytes(document: Any) -> int:
    return len(jsontext.dumps(document).encode("utf-8"))


# --- the command kinds ---------------------------------------------------------------------


def _apply(state: ThingState, command: Command, max_thing_bytes: int) -> tuple[ThingState, Outcome]:
    limits.check_pointer(command.path)  # the door's check, for a command stored before it
    target = _resolve(command.path)
    if command.action == "create" and target.pointer:
        raise errors.unknown_path(command.path)
    if target.pointer and not state.exists:
        raise errors.thing_not_found(state.thing_id)
    current = _get(state.document, target.pointer)
    value = command.value
    if not target.pointer and isinstance(value, dict):  # only Ditto's members reach the thing, and its event
        value = envelopes.thing_members(value)
    if command.headers:
        if state.exists and command.action != "create":  # Ditto: a create, or a write that creates, has no condition
            _check_condition(state, command.headers)
        _check_preconditions(state, target, current, command.headers)
        if state.exists and command.action in ("modify", "merge") and value is not ABSENT:
            value = _if_equal(target, current, command.action, value, command.headers.get(IF_EQUAL))
    if command.action == "delete":
        return _delete(state, target, current)
    if value is ABSENT:
        raise errors.json_field_missing("/value")
    if command.action == "merge":
        document, status, action = _merge(state, target, value)
    elif command.action == "create" or (command.action == "modify" and not target.pointer):
        document, status, action = _put_thing(state, value, creating_only=command.action == "create")
    else:
        _check_type(target, value)
        document, status, action = _put_part(state, target, current, value)
    size = document_bytes(document)
    if size > max_thing_bytes:
        raise errors.thing_too_large(size, max_thing_bytes)
    payload = (document if not target.pointer else value) if status == 201 else ABSENT
    event_value = value if value is not command.value else ABSENT
    return ThingState(state.thing_id, state.revision + 1, document), Outcome(status, payload, action, event_value)


def _put_thing(state: ThingState, value: Any, *, creating_only: bool) -> tuple[dict, int, str]:
    if creating_only and state.exists:
        raise errors.thing_conflict(state.thing_id)
    if not isinstance(value, dict):
        raise errors.json_field_invalid("/value", "JSON object of a Thing")
    document = _with_thing_id(state.thing_id, value)
    _check_parts(document)
    if state.exists:
        return document, 204, "modified"
    return document, 201, "created"


def _put_part(state: ThingState, target: _Target, current: Any, value: Any) -> tuple[dict, int, str]:
    if target.feature_id is not None and target.kind != "feature":
        if _get(state.document, target.pointer[:2]) is ABSENT:
            raise errors.thing_part_not_found("feature", state.thing_id, target.feature_id)
    document = _set(state.document, target.pointer, value)
    if current is ABSENT:
        return document, 201, "created"
    return document, 204, "modified"


def _merge(state: ThingState, target: _Target, value: Any) -> tuple[dict, int, str]:
    """RFC 7396 at any path: the patch is the value wrapped in the path's members."""
    patch = value
    for segment in reversed(target.pointer):
        patch = {segment: patch}
    if not isinstance(patch, dict):
        raise errors.merge_invalid()
    if not state.exists:
        created = _with_thing_id(state.thing_id, _without_nulls(patch))
        _check_parts(created)
        return created, 201, "created"
    document = envelopes.thing_members(merge_patch(state.document, patch))
    if document.get("thingId") != state.thing_id:
        raise errors.thing_id_not_settable()
    _check_parts(document)
    return document, 204, "merged"


def _delete(state: ThingState, target: _Target, current: Any) -> tuple[ThingState, Outcome]:
    if not target.pointer:
        if not state.exists:
            raise errors.thing_not_found(state.thing_id)
        return ThingState(state.thing_id, state.revision + 1, None), Outcome(204, ABSENT, "deleted")
    if target.kind == "policyId":
        raise errors.unknown_path("/policyId")
    if current is ABSENT:
        raise _not_found(state, target)
    document = _remove(state.document, target.pointer)
    return ThingState(state.thing_id, state.revision + 1, document), Outcome(204, ABSENT, "deleted")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge member-wise, ``null`` removes a member, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _with_thing_id(thing_id: str, value: dict) -> dict:
    given = value.get("thingId", thing_id)
    if given != thing_id:
        raise errors.thing_id_not_settable()
    return envelopes.thing_members({"thingId": thing_id, **{k: v for k, v in value.items() if k != "thingId"}})


# --- preconditions (B.10: if-match / if-none-match against the resource's ETag) -------------


def _check_preconditions(state: ThingState, target: _Target, current: Any, headers: Mapping[str, Any]) -> None:
    actual = _tag(state, target, current)
    if IF_MATCH in headers:
        expected = str(headers[IF_MATCH])
        if actual is None or not _tag_matches(expected, actual):
            raise errors.precondition_failed(IF_MATCH, expected, actual or "")
    if IF_NONE_MATCH in headers:
        expected = str(headers[IF_NONE_MATCH])
        if actual is not None and _tag_matches(expected, actual):
            raise errors.precondition_failed(IF_NONE_MATCH, expected, actual)


# --- condition and if-equal (Ditto 3.x: ThingConditionValidator, IfEqualPreconditionHeader) ------------


def check_conditional_headers(headers: Mapping[str, Any], action: str) -> None:
    """A twin command's ``if-equal`` and ``condition`` headers as Ditto checks them before the
    command runs: an option it does not know, or RQL that does not parse, is 400 (a create's
    condition is never read)."""
    if IF_EQUAL in headers:
        given = headers[IF_EQUAL]
        shown = given if isinstance(given, str) else errors.shown(given)
        if shown.strip().lower() not in IF_EQUAL_OPTIONS:  # Ditto's validator trims and ignores case
            raise errors.if_equal_invalid(shown)
    if CONDITION in headers and action != "create":
        _condition(headers[CONDITION])


_MAX_REMEMBERED_CONDITION = 1024  # characters: a sender's longer condition is parsed each time, never held


def _condition(given: Any) -> rql.Node:
    if not isinstance(given, str):
        raise errors.condition_invalid(errors.shown(given), "")
    return _remembered_condition(given) if len(given) <= _MAX_REMEMBERED_CONDITION else _parsed_condition(given)


def _parsed_condition(text: str) -> rql.Node:
    try:
        return rql.parse_sent(text)
    except errors.DittoError as error:
        raise errors.condition_invalid(text, error.message) from None


# A condition repeats across commands; one that does not parse raises, and is not remembered.
_remembered_condition = lru_cache(maxsize=1024)(_parsed_condition)


def _check_condition(state: ThingState, headers: Mapping[str, Any]) -> None:
    """412 unless the ``condition`` holds for the thing as Ditto shows it to RQL: its document with
    ``_revision`` and ``_namespace`` (the fold keeps no ``_modified``: a condition on it fails)."""
    if CONDITION not in headers:
        return
    node = _condition(headers[CONDITION])
    shown = {**state.document, **fields.computed(state.thing_id, state.revision, None)}  # type: ignore[arg-type]
    if not rql_eval.matches(node, rql_eval.rows_by_path(shown)):
        raise errors.condition_failed()


def _if_equal(target: _Target, current: Any, action: str, value: Any, option: Any) -> Any:
    """The value to apply under ``if-equal`` (Ditto's IfEqualPreconditionHeader, exact options only):
    ``skip`` on a modify or merge that changes nothing is 412; ``skip-minimizing-merge`` on a merge
    likewise, and otherwise keeps only the patch's members that change something. Ditto applies a
    modify under ``skip-minimizing-merge`` as given, and so does this."""
    if option not in ("skip", "skip-minimizing-merge"):
        return value
    previous, new = _comparable(target, current), _comparable(target, value)
    if action == "merge" and isinstance(new, dict):  # equal: the patch applied changes nothing
        unchanged = isinstance(previous, dict) and json_equal(merge_patch(previous, new), previous)
    else:
        unchanged = previous is not ABSENT and json_equal(previous, new)
    if unchanged and (action == "merge" or option == "skip"):
        raise errors.equal_value_skipped()
    if action == "merge" and option == "skip-minimizing-merge" and previous is not ABSENT:
        changes = _changes(previous, value)
        return value if changes is ABSENT else changes
    return value


def _comparable(target: _Target, value: Any) -> Any:
    """A value as if-equal compares it: at the thing's root, without ``thingId`` and the members
    Ditto never compares (``_``-prefixed: hidden fields, an inline ``_policy``)."""
    if target.pointer or not isinstance(value, dict):
        return value
    return {key: member for key, member in value.items() if key != "thingId" and not key.startswith("_")}


def _changes(old: Any, new: Any) -> Any:
    """The members of patch ``new`` that change ``old`` (Ditto's JsonMergePatch.compute, missing
    members left alone); ABSENT when none does."""
    if json_equal(old, new):
        return ABSENT
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    kept = {}
    for key, member in new.items():
        change = _changes(old[key], member) if key in old else member
        if change is not ABSENT:
            kept[key] = change
    return kept or ABSENT


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: members in any order, numbers by value (1 and 1.0 alike), but a boolean is no
    number (Python's ``True == 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    return type(a) is type(b) and a == b


def _tag(state: ThingState, target: _Target, current: Any) -> str | None:
    if current is ABSENT:
        return None
    if not target.pointer:
        return f'"rev:{state.revision}"'
    return '"hash:' + hashlib.sha256(jsontext.canonical(current).encode("utf-8")).hexdigest()[:16] + '"'


def _tag_matches(header: str, actual: str) -> bool:
    """A comma-separated list of entity tags, or ``*``; weak prefixes and missing quotes tolerated."""
    for tag in (part.strip() for part in header.split(",")):
        if tag == "*":
            return True
        tag = tag[2:] if tag.startswith("W/") else tag
        if (tag if tag.startswith('"') else f'"{tag}"') == actual:
            return True
    return False


# --- paths -----------------------------------------------------------------------------------


@lru_cache(maxsize=4096)  # paths repeat across commands; a bad path raises and is not cached
def _resolve(path: str) -> _Target:
    """Map a Ditto Protocol path to the addressed resource, or raise a 400."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise errors.unknown_path(str(path))
    if path == "/":
        return _Target((), "thing")
    raw = path[1:].split("/")
    segments = tuple(_unescape(s) for s in raw)
    head, rest = segments[0], segments[1:]
    if head == "attributes":
        if not rest:
            return _Target(segments, "attributes")
        if any(s == "" for s in rest):
            raise errors.attribute_pointer_invalid("/" + "/".join(raw[1:]))
        return _Target(segments, "attribute", inner="/" + "/".join(raw[1:]))
    if head in _STRING_PARTS and not rest:
        return _Target(segments, head)
    if head == "features":
        return _feature_target(path, segments, raw)
    raise errors.unknown_path(path)


def _feature_target(path: str, segments: tuple[str, ...], raw: list[str]) -> _Target:
    if len(segments) == 1:
        return _Target(segments, "features")
    feature_id = segments[1]
    if feature_id == "":
        raise errors.json_pointer_invalid(path)
    if len(segments) == 2:
        return _Target(segments, "feature", feature_id)
    part, inner = segments[2], segments[3:]
    if part == "definition" and not inner:
        return _Target(segments, "feature.definition", feature_id)
    if part in ("properties", "desiredProperties"):
        single = "feature.property" if part == "properties" else "feature.desiredProperty"
        if not inner:
            return _Target(segments, f"feature.{part}", feature_id)
        if any(s == "" for s in inner):
            raise errors.json_pointer_invalid(path)
        return _Target(segments, single, feature_id, "/" + "/".join(raw[3:]))
    raise errors.unknown_path(path)


def _check_parts(document: dict) -> None:
    """The top-level parts of a whole thing hold what they must (attributes an object, …)."""
    for part in _OBJECT_PARTS | _STRING_PARTS:
        if part in document:
            _check_type(_resolve("/" + part), document[part])


def _check_type(target: _Target, value: Any) -> None:
    kind = target.kind
    if kind in ("attributes", "features", "feature", "feature.properties", "feature.desiredProperties"):
        if not isinstance(value, dict):
            raise errors.json_field_invalid("/value", "JSON object")
        if kind == "features" and not all(isinstance(f, dict) for f in value.values()):
            raise errors.json_field_invalid("/value", "JSON object of Features")
    elif kind in _STRING_PARTS and not isinstance(value, str):
        raise errors.json_field_invalid("/value", "String")
    elif kind == "feature.definition" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise errors.json_field_invalid("/value", "JSON array of Strings")
    if kind == "policyId" and not envelopes.is_entity_id(value):
        raise errors.policy_id_invalid(value)
    for identifier in _definitions(kind, value):
        if not isinstance(identifier, str) or not _is_definition(identifier):
            raise errors.definition_invalid(identifier if isinstance(identifier, str) else errors.shown(identifier))


def _definitions(kind: str, value: Any) -> list[Any]:
    """The definition identifiers a part's value holds: a thing's, a feature's, each of its features'."""
    if kind == "definition":
        return [value]
    if kind == "feature.definition":
        return list(value)
    features = value.values() if kind == "features" else [value] if kind == "feature" else []
    found = [feature["definition"] for feature in features if "definition" in feature]
    return [identifier for given in found for identifier in (given if isinstance(given, list) else [given])]


def _is_definition(identifier: str) -> bool:
    """Ditto's definition identifier: ``namespace:name:version``, or an HTTP(S) URL."""
    if _DEFINITION.fullmatch(identifier):
        return True
    try:
        url = urlsplit(identifier)
    except ValueError:
        return False
    return url.scheme in ("http", "https") and bool(url.netloc) and identifier.isprintable() and " " not in identifier


def _not_found(state: ThingState, target: _Target) -> errors.DittoError:
    if target.kind == "thing" or not state.exists:  # a part of a thing that does not exist: the thing's 404, as Ditto
        return errors.thing_not_found(state.thing_id)
    return errors.thing_part_not_found(target.kind, state.thing_id, target.feature_id, target.inner)


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def _get(document: Any, pointer: tuple[str, ...]) -> Any:
    node = document
    if node is None:
        return ABSENT
    for segment in pointer:
        if not isinstance(node, dict) or segment not in node:
            return ABSENT
        node = node[segment]
    return node


def _set(document: dict, pointer: tuple[str, ...], value: Any) -> dict:
    """A new document with the member set, creating (or replacing non-object) intermediate
    members, as Ditto does. Only the objects along the path are copied (documents are never
    mutated, so the rest is shared safely)."""
    if not pointer:
        return value
    copied = dict(document)
    child = copied.get(pointer[0])
    copied[pointer[0]] = _set(child if isinstance(child, dict) else {}, pointer[1:], value)
    return copied


def _remove(document: dict, pointer: tuple[str, ...]) -> dict:
    """A new document without the (existing) member at ``pointer``."""
    copied = dict(document)
    if len(pointer) == 1:
        del copied[pointer[0]]
    else:
        copied[pointer[0]] = _remove(copied[pointer[0]], pointer[1:])
    return copied
