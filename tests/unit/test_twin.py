"""B.10: every twin command kind and every outcome of the fold, one table row each."""

from __future__ import annotations

from typing import Any

import pytest

from ackstore.rules import twin
from ackstore.rules.acks import ABSENT
from ackstore.rules.errors import DittoError

T = "org.acme:lamp"
LAMP = {
    "thingId": T,
    "policyId": "org.acme:policy",
    "definition": "org.acme:lamp:1.0.0",
    "attributes": {"on": True, "location": {"room": "kitchen"}},
    "features": {"power": {"definition": ["org.acme:power:1.0.0"], "properties": {"watts": 40},
                           "desiredProperties": {"watts": 60}}},
}
SAME = object()  # the document is unchanged
GONE = None  # the thing is deleted / absent

# (name, existing document, action, path, value, headers, status, error code, document after, event)
ROWS: list[tuple[str, Any, str, str, Any, dict, int, str | None, Any, str | None]] = [
    ("create thing", GONE, "create", "/", {"attributes": {"a": 1}}, {}, 201, None, {"thingId": T, "attributes": {"a": 1}}, "created"),
    ("create existing thing", LAMP, "create", "/", {}, {}, 409, "things:thing.conflict", SAME, None),
    ("create with another thingId", GONE, "create", "/", {"thingId": "org.acme:other"}, {}, 400, "things:id.notsettable", SAME, None),
    ("create at a sub-path", LAMP, "create", "/attributes", {}, {}, 400, "things.protocol.adapter:unknown.path", SAME, None),
    ("create a thing that is not an object", GONE, "create", "/", [1], {}, 400, "json.invalid", SAME, None),
    ("modify thing that exists", LAMP, "modify", "/", {"attributes": {"b": 2}}, {}, 204, None, {"thingId": T, "attributes": {"b": 2}}, "modified"),
    ("modify missing thing creates it", GONE, "modify", "/", {"attributes": {"b": 2}}, {}, 201, None, {"thingId": T, "attributes": {"b": 2}}, "created"),
    ("modify part of a missing thing", GONE, "modify", "/attributes/on", True, {}, 404, "things:thing.notfound", SAME, None),
    ("merge thing", LAMP, "merge", "/", {"attributes": {"on": None, "new": 1}}, {}, 204, None,
     {**LAMP, "attributes": {"location": {"room": "kitchen"}, "new": 1}}, "merged"),
    ("merge at / on a missing thing creates it without nulls", GONE, "merge", "/", {"attributes": {"a": 1, "b": None}}, {}, 201, None,
     {"thingId": T, "attributes": {"a": 1}}, "created"),
    ("merge creating a thing whose attributes are not an object", GONE, "merge", "/", {"attributes": 5}, {}, 400,
     "json.invalid", SAME, None),
    ("merge at a sub-path of a missing thing", GONE, "merge", "/attributes", {"a": 1}, {}, 404, "things:thing.notfound", SAME, None),
    ("merge at a sub-path", LAMP, "merge", "/attributes/location", {"floor": 2}, {}, 204, None,
     {**LAMP, "attributes": {"on": True, "location": {"room": "kitchen", "floor": 2}}}, "merged"),
    ("merge a non-object at /", LAMP, "merge", "/", 5, {}, 400, "things:merge.invalid", SAME, None),
    ("merge changing the thingId", LAMP, "merge", "/", {"thingId": "org.acme:x"}, {}, 400, "things:id.notsettable", SAME, None),
    ("delete thing", LAMP, "delete", "/", ABSENT, {}, 204, None, GONE, "deleted"),
    ("delete missing thing", GONE, "delete", "/", ABSENT, {}, 404, "things:thing.notfound", SAME, None),
    ("modify attributes", LAMP, "modify", "/attributes", {"x": 1}, {}, 204, None, {**LAMP, "attributes": {"x": 1}}, "modified"),
    ("modify attributes not an object", LAMP, "modify", "/attributes", 3, {}, 400, "json.invalid", SAME, None),
    ("create attributes", {"thingId": T}, "modify", "/attributes", {"x": 1}, {}, 201, None, {"thingId": T, "attributes": {"x": 1}}, "created"),
    ("delete attributes", LAMP, "delete", "/attributes", ABSENT, {}, 204, None, {k: v for k, v in LAMP.items() if k != "attributes"}, "deleted"),
    ("delete missing attributes", {"thingId": T}, "delete", "/attributes", ABSENT, {}, 404, "things:attributes.notfound", SAME, None),
    ("modify attribute", LAMP, "modify", "/attributes/on", False, {}, 204, None, {**LAMP, "attributes": {"on": False, "location": {"room": "kitchen"}}}, "modified"),
    ("create nested attribute", LAMP, "modify", "/attributes/location/floor", 3, {}, 201, None,
     {**LAMP, "attributes": {"on": True, "location": {"room": "kitchen", "floor": 3}}}, "created"),
    ("delete attribute", LAMP, "delete", "/attributes/on", ABSENT, {}, 204, None, {**LAMP, "attributes": {"location": {"room": "kitchen"}}}, "deleted"),
    ("delete missing attribute", LAMP, "delete", "/attributes/nope", ABSENT, {}, 404, "things:attribute.notfound", SAME, None),
    ("attribute pointer with an empty segment", LAMP, "modify", "/attributes//x", 1, {}, 400, "things:attribute.pointerinvalid", SAME, None),
    ("modify definition", LAMP, "modify", "/definition", "org.acme:lamp:2.0.0", {}, 204, None, {**LAMP, "definition": "org.acme:lamp:2.0.0"}, "modified"),
    ("definition must be a string", LAMP, "modify", "/definition", 7, {}, 400, "json.invalid", SAME, None),
    ("delete definition", LAMP, "delete", "/definition", ABSENT, {}, 204, None, {k: v for k, v in LAMP.items() if k != "definition"}, "deleted"),
    ("delete missing definition", {"thingId": T}, "delete", "/definition", ABSENT, {}, 404, "things:definition.notfound", SAME, None),
    ("modify policyId", LAMP, "modify", "/policyId", "org.acme:p2", {}, 204, None, {**LAMP, "policyId": "org.acme:p2"}, "modified"),
    ("a policyId that is no entity id", LAMP, "modify", "/policyId", "not a policy id", {}, 400, "policies:id.invalid",
     SAME, None),
    ("a thing's policyId that is no entity id", GONE, "modify", "/", {"policyId": ""}, {}, 400, "policies:id.invalid",
     SAME, None),
    ("a definition that is no identifier", LAMP, "modify", "/definition", "bad def", {}, 400,
     "things:definition.identifier.invalid", SAME, None),
    ("a definition that is an HTTP URL", LAMP, "modify", "/definition", "https://models.example/lamp.tm.jsonld", {}, 204,
     None, {**LAMP, "definition": "https://models.example/lamp.tm.jsonld"}, "modified"),
    ("a definition merged in that is no identifier", LAMP, "merge", "/", {"definition": "ftp://x/y"}, {}, 400,
     "things:definition.identifier.invalid", SAME, None),
    ("a feature definition that is no identifier", LAMP, "modify", "/features/power/definition", ["bad"], {}, 400,
     "things:definition.identifier.invalid", SAME, None),
    ("a thing's feature definition that is no identifier", GONE, "modify", "/",
     {"features": {"f": {"definition": ["a:b"]}}}, {}, 400, "things:definition.identifier.invalid", SAME, None),
    ("a thing stores Ditto's members only", GONE, "modify", "/", {"attributes": {"a": 1}, "_revision": 9, "_policy": {},
     "_modified": "x", "foo": 1}, {}, 201, None, {"thingId": T, "attributes": {"a": 1}}, "created"),
    ("a merge at / stores Ditto's members only", LAMP, "merge", "/", {"_created": "x", "foo": {"a": 1}}, {}, 204, None,
     LAMP, "merged"),
    ("create policyId", {"thingId": T}, "modify", "/policyId", "org.acme:p2", {}, 201, None, {"thingId": T, "policyId": "org.acme:p2"}, "created"),
    ("modify features", LAMP, "modify", "/features", {"f": {}}, {}, 204, None, {**LAMP, "features": {"f": {}}}, "modified"),
    ("features must hold objects", LAMP, "modify", "/features", {"f": 1}, {}, 400, "json.invalid", SAME, None),
    ("delete missing features", {"thingId": T}, "delete", "/features", ABSENT, {}, 404, "things:features.notfound", SAME, None),
    ("create feature", LAMP, "modify", "/features/dimmer", {"properties": {"level": 1}}, {}, 201, None,
     {**LAMP, "features": {**LAMP["features"], "dimmer": {"properties": {"level": 1}}}}, "created"),
    ("delete feature", LAMP, "delete", "/features/power", ABSENT, {}, 204, None, {**LAMP, "features": {}}, "deleted"),
    ("delete missing feature", LAMP, "delete", "/features/nope", ABSENT, {}, 404, "things:feature.notfound", SAME, None),
    ("modify feature definition", LAMP, "modify", "/features/power/definition", ["org.acme:power:2.0.0"], {}, 204, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "definition": ["org.acme:power:2.0.0"]}}}, "modified"),
    ("feature definition must be strings", LAMP, "modify", "/features/power/definition", [1], {}, 400, "json.invalid", SAME, None),
    ("delete missing feature definition", {**LAMP, "features": {"f": {}}}, "delete", "/features/f/definition", ABSENT, {}, 404,
     "things:feature.definition.notfound", SAME, None),
    ("modify feature properties", LAMP, "modify", "/features/power/properties", {"watts": 5}, {}, 204, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "properties": {"watts": 5}}}}, "modified"),
    ("properties of a missing feature", LAMP, "modify", "/features/nope/properties", {"a": 1}, {}, 404, "things:feature.notfound", SAME, None),
    ("delete missing feature properties", {**LAMP, "features": {"f": {}}}, "delete", "/features/f/properties", ABSENT, {}, 404,
     "things:feature.properties.notfound", SAME, None),
    ("modify feature property", LAMP, "modify", "/features/power/properties/watts", 9, {}, 204, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "properties": {"watts": 9}}}}, "modified"),
    ("create feature property", LAMP, "modify", "/features/power/properties/volts", 230, {}, 201, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "properties": {"watts": 40, "volts": 230}}}}, "created"),
    ("property of a missing feature", LAMP, "modify", "/features/nope/properties/x", 1, {}, 404, "things:feature.notfound", SAME, None),
    ("delete missing feature property", LAMP, "delete", "/features/power/properties/nope", ABSENT, {}, 404,
     "things:feature.property.notfound", SAME, None),
    ("modify desired properties", LAMP, "modify", "/features/power/desiredProperties", {"watts": 1}, {}, 204, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "desiredProperties": {"watts": 1}}}}, "modified"),
    ("modify desired property", LAMP, "modify", "/features/power/desiredProperties/watts", 2, {}, 204, None,
     {**LAMP, "features": {"power": {**LAMP["features"]["power"], "desiredProperties": {"watts": 2}}}}, "modified"),
    ("delete missing desired property", LAMP, "delete", "/features/power/desiredProperties/nope", ABSENT, {}, 404,
     "things:feature.desiredproperty.notfound", SAME, None),
    ("delete missing desired properties", {**LAMP, "features": {"f": {}}}, "delete", "/features/f/desiredProperties", ABSENT, {}, 404,
     "things:feature.desiredproperties.notfound", SAME, None),
    ("unknown path", LAMP, "modify", "/nonsense", 1, {}, 400, "things.protocol.adapter:unknown.path", SAME, None),
    ("empty feature id", LAMP, "modify", "/features//properties", {}, {}, 400, "json.pointer.invalid", SAME, None),
    ("if-match the current revision", LAMP, "modify", "/", {"attributes": {}}, {"if-match": '"rev:3"'}, 204, None,
     {"thingId": T, "attributes": {}}, "modified"),
    ("if-match a revision tag on a sub-resource (it has a hash tag)", LAMP, "modify", "/attributes/on", False,
     {"if-match": '"rev:3"'}, 412, "things:precondition.failed", SAME, None),
    ("if-match a stale revision", LAMP, "modify", "/", {}, {"if-match": '"rev:2"'}, 412, "things:precondition.failed", SAME, None),
    ("if-match * on a missing thing", GONE, "modify", "/", {}, {"if-match": "*"}, 412, "things:precondition.failed", SAME, None),
    ("if-none-match * on an existing thing", LAMP, "modify", "/", {}, {"if-none-match": "*"}, 412, "things:precondition.failed", SAME, None),
    ("if-none-match * on a missing thing", GONE, "modify", "/", {}, {"if-none-match": "*"}, 201, None, {"thingId": T}, "created"),
    ("if-none-match * on a missing attribute", LAMP, "modify", "/attributes/new", 1, {"if-none-match": "*"}, 201, None,
     {**LAMP, "attributes": {**LAMP["attributes"], "new": 1}}, "created"),
    ("if-match * on a missing attribute", LAMP, "modify", "/attributes/new", 1, {"if-match": "*"}, 412, "things:precondition.failed", SAME, None),
    # if-equal (Ditto 3.x IfEqualPreconditionHeader): skip what changes nothing, on a modify or merge
    ("if-equal update applies an equal value", LAMP, "modify", "/attributes/on", True, {"if-equal": "update"}, 204, None,
     LAMP, "modified"),
    ("if-equal skip: an equal modify is 412", LAMP, "modify", "/attributes/on", True, {"if-equal": "skip"}, 412,
     "things:precondition.failed", SAME, None),
    ("if-equal skip: a changing modify applies", LAMP, "modify", "/attributes/on", False, {"if-equal": "skip"}, 204, None,
     {**LAMP, "attributes": {**LAMP["attributes"], "on": False}}, "modified"),
    ("if-equal skip: a boolean is no number", {**LAMP, "attributes": {"n": 1}}, "modify", "/attributes/n", True,
     {"if-equal": "skip"}, 204, None, {**LAMP, "attributes": {"n": True}}, "modified"),
    ("if-equal skip: 1 and 1.0 are equal", {**LAMP, "attributes": {"n": 1}}, "modify", "/attributes/n", 1.0,
     {"if-equal": "skip"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip: members in another order are equal", LAMP, "modify", "/attributes/location", {"room": "kitchen"},
     {"if-equal": "skip"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip: a missing attribute is created", LAMP, "modify", "/attributes/new", 1, {"if-equal": "skip"}, 201,
     None, {**LAMP, "attributes": {**LAMP["attributes"], "new": 1}}, "created"),
    ("if-equal skip: the whole thing, thingId aside", LAMP, "modify", "/", {k: v for k, v in LAMP.items() if k != "thingId"},
     {"if-equal": "skip"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip: a missing thing is created", GONE, "modify", "/", {}, {"if-equal": "skip"}, 201, None,
     {"thingId": T}, "created"),
    ("if-equal skip: an equal merge is 412", LAMP, "merge", "/attributes", {"on": True}, {"if-equal": "skip"}, 412,
     "things:precondition.failed", SAME, None),
    ("if-equal skip: null for a missing member changes nothing", LAMP, "merge", "/attributes", {"gone": None},
     {"if-equal": "skip"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip: null for a member removes it", LAMP, "merge", "/attributes", {"on": None}, {"if-equal": "skip"},
     204, None, {**LAMP, "attributes": {"location": {"room": "kitchen"}}}, "merged"),
    ("if-equal skip: an equal scalar merge is 412", LAMP, "merge", "/features/power/properties/watts", 40,
     {"if-equal": "skip"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip-minimizing-merge: an equal merge is 412", LAMP, "merge", "/", {"attributes": {"on": True}},
     {"if-equal": "skip-minimizing-merge"}, 412, "things:precondition.failed", SAME, None),
    ("if-equal skip-minimizing-merge: what changes is merged", LAMP, "merge", "/attributes",
     {"on": True, "location": {"room": "hall"}}, {"if-equal": "skip-minimizing-merge"}, 204, None,
     {**LAMP, "attributes": {"on": True, "location": {"room": "hall"}}}, "merged"),
    ("if-equal skip-minimizing-merge on a modify applies it (as Ditto)", LAMP, "modify", "/attributes/on", True,
     {"if-equal": "skip-minimizing-merge"}, 204, None, LAMP, "modified"),
    ("if-equal skip on a delete is not read", LAMP, "delete", "/attributes/on", ABSENT, {"if-equal": "skip"}, 204, None,
     {**LAMP, "attributes": {"location": {"room": "kitchen"}}}, "deleted"),
    ("if-equal skip on a create is not read", GONE, "create", "/", {}, {"if-equal": "skip"}, 201, None,
     {"thingId": T}, "created"),
    ("if-equal SKIP is not an option the fold knows (as Ditto: update)", LAMP, "modify", "/attributes/on", True,
     {"if-equal": "SKIP"}, 204, None, LAMP, "modified"),
    # condition (Ditto 3.x ThingConditionValidator): RQL over the thing, before if-match and if-equal
    ("condition holds", LAMP, "modify", "/attributes/on", False, {"condition": 'eq(attributes/location/room,"kitchen")'},
     204, None, {**LAMP, "attributes": {**LAMP["attributes"], "on": False}}, "modified"),
    ("condition fails", LAMP, "modify", "/attributes/on", False, {"condition": "eq(attributes/on,false)"}, 412,
     "things:condition.failed", SAME, None),
    ("condition on a missing property fails", LAMP, "merge", "/attributes", {"x": 1}, {"condition": "eq(attributes/x,1)"},
     412, "things:condition.failed", SAME, None),
    ("condition on _revision, _namespace and thingId", LAMP, "delete", "/attributes/on", ABSENT,
     {"condition": f'and(eq(_revision,3),eq(_namespace,"org.acme"),eq(thingId,"{T}"))'}, 204, None,
     {**LAMP, "attributes": {"location": {"room": "kitchen"}}}, "deleted"),
    ("condition fails before if-match is read", LAMP, "modify", "/", {}, {"condition": "eq(_revision,2)", "if-match": '"rev:2"'},
     412, "things:condition.failed", SAME, None),
    ("condition fails before if-equal is read", LAMP, "modify", "/attributes/on", True,
     {"condition": "exists(attributes/x)", "if-equal": "skip"}, 412, "things:condition.failed", SAME, None),
    ("condition on a create is not read", GONE, "create", "/", {}, {"condition": "eq(attributes/x,1)"}, 201, None,
     {"thingId": T}, "created"),
    ("condition on a modify that creates the thing is not read", GONE, "modify", "/", {},
     {"condition": "eq(attributes/x,1)"}, 201, None, {"thingId": T}, "created"),
    ("condition on a missing thing's attribute: 404 first", GONE, "modify", "/attributes/a", 1,
     {"condition": "eq(attributes/x,1)"}, 404, "things:thing.notfound", SAME, None),
]


@pytest.mark.parametrize(
    "existing, action, path, value, headers, status, code, after, event",
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_command_outcome(existing, action, path, value, headers, status, code, after, event) -> None:
    state = twin.ThingState(T, 3 if existing is not None else 0, existing)
    new_state, outcome = twin.apply(state, twin.Command(1, action, path, value, headers))

    assert outcome.status == status
    assert outcome.event_action == event
    if code is not None:
        assert outcome.payload["error"] == code and outcome.payload["status"] == status
        assert set(outcome.payload) >= {"status", "error", "message", "description"}
        assert new_state == state  # a failed command changes nothing
        return
    assert new_state.document == after
    assert new_state.revision == state.revision + 1
    if status == 201:
        assert outcome.payload == (after if path == "/" else value)  # the created value, echoed
    else:
        assert outcome.payload is ABSENT


@pytest.mark.parametrize("headers, action, code, message", [
    ({"if-equal": "nope"}, "modify", "header.invalid",
     "The value 'nope' of the header 'if-equal' is not a valid enum value of type 'IfEqual'."),
    ({"if-equal": 1}, "merge", "header.invalid",
     "The value '1' of the header 'if-equal' is not a valid enum value of type 'IfEqual'."),
    ({"if-equal": ""}, "create", "header.invalid",
     "The value '' of the header 'if-equal' is not a valid enum value of type 'IfEqual'."),
    ({"condition": "eq(attributes/x"}, "modify", "things:condition.invalid",
     "The specified condition 'eq(attributes/x' is invalid."),
    ({"condition": "and()"}, "delete", "things:condition.invalid", "The specified condition 'and()' is invalid."),
    ({"condition": True}, "merge", "things:condition.invalid", "The specified condition 'true' is invalid."),
])
def test_a_bad_conditional_header_is_400_at_submission(headers: dict, action: str, code: str, message: str) -> None:
    with pytest.raises(DittoError) as raised:
        twin.check_conditional_headers(headers, action)
    assert (raised.value.status, raised.value.error, raised.value.message) == (400, code, message)
    assert raised.value.description


@pytest.mark.parametrize("headers, action", [
    ({"if-equal": option}, action) for option in ("update", "skip", "skip-minimizing-merge", " Skip ", "UPDATE")
    for action in ("create", "modify", "merge", "delete")
] + [({"condition": "garbage("}, "create"), ({"condition": 'eq(attributes/a,"x")'}, "modify"), ({}, "modify")])
def test_a_good_conditional_header_passes_submission(headers: dict, action: str) -> None:
    """Ditto's validator trims and ignores case (the fold then knows only the exact options); a
    create's condition is never read."""
    twin.check_conditional_headers(headers, action)


def test_skip_minimizing_merge_keeps_only_what_changes_in_its_event() -> None:
    """Ditto's own case (ThingsConditionalHeadersValidatorTest): of a patch setting an existing
    attribute to its value, a new attribute and three properties of which one is unchanged, the
    event carries the new attribute and the two properties that change."""
    old = {"thingId": T, "attributes": {"other-existing": 42, "kept": "x"},
           "features": {"some-feature": {"properties": {"existing-prop": {"foo": 23, "bar": False}}}}}
    patch = {"attributes": {"other-existing": 42, "new-attr": {"a": None}},
             "features": {"some-feature": {"properties": {"existing-prop": {"foo": 99, "bar": False, "bum": "lux!"}}}}}
    state, outcome = twin.apply(twin.ThingState(T, 5, old),
                                twin.Command(1, "merge", "/", patch, {"if-equal": "skip-minimizing-merge"}))
    assert (outcome.status, outcome.event_action) == (204, "merged")
    assert outcome.event_value == {"attributes": {"new-attr": {"a": None}},
                                   "features": {"some-feature": {"properties": {"existing-prop": {"foo": 99, "bum": "lux!"}}}}}
    assert state.document == twin.merge_patch(old, patch)  # the same thing either way
    _, plain = twin.apply(twin.ThingState(T, 5, old), twin.Command(1, "merge", "/", patch))
    assert plain.event_value is ABSENT  # any other command's event carries its own value


def test_an_event_carries_the_members_a_thing_stores_not_what_was_sent() -> None:
    sent = {"attributes": {"a": 1}, "_policy": {"entries": {}}, "_revision": 9, "foo": 1}
    for action in ("modify", "merge"):
        _, outcome = twin.apply(twin.ThingState(T, 3, LAMP), twin.Command(1, action, "/", sent))
        assert outcome.event_value == {"attributes": {"a": 1}}
    _, plain = twin.apply(twin.ThingState(T, 3, LAMP), twin.Command(1, "modify", "/", {"attributes": {"a": 1}}))
    assert plain.event_value is ABSENT  # nothing dropped: the event is the command's value


@pytest.mark.parametrize(("action", "path", "value", "code"), [
    ("modify", "/", [1], "json.invalid"),
    ("create", "/", {"policyId": ""}, "policies:id.invalid"),
    ("modify", "/", {"attributes": [1]}, "json.invalid"),
    ("modify", "/", {"definition": "0:0"}, "things:definition.identifier.invalid"),
    ("modify", "/features/f/definition", ["x"], "things:definition.identifier.invalid"),
    ("modify", "/attributes", 5, "json.invalid"),
])
def test_a_value_the_fold_would_refuse_whatever_the_thing_is_is_refused_up_front(action, path, value, code) -> None:
    with pytest.raises(DittoError) as refused:
        twin.check_value(action, path, value)
    assert refused.value.error == code
    _, outcome = twin.apply(twin.ThingState(T, 3, LAMP), twin.Command(1, action, path, value))
    assert outcome.payload["error"] == code or action == "create"  # the fold answers it alike (a create: 409 first)


@pytest.mark.parametrize(("action", "path", "value"), [
    ("modify", "/", {"attributes": {}, "foo": 1}), ("merge", "/", {"attributes": 5}),
    ("modify", "/attributes/x", [1]), ("modify", "/definition", "a:b:1")])
def test_a_value_that_may_apply_passes_up_front(action, path, value) -> None:
    twin.check_value(action, path, value)


def test_the_fold_does_not_mutate_its_input() -> None:
    import copy

    before = copy.deepcopy(LAMP)
    state = twin.ThingState(T, 1, LAMP)
    for path, value in (("/attributes/on", False), ("/features/power/properties/watts", 1), ("/attributes/location/x", 2)):
        state, _ = twin.apply(state, twin.Command(1, "modify", path, value))
    twin.apply(state, twin.Command(2, "delete", "/attributes/on"))
    assert LAMP == before


def test_entity_tags() -> None:
    state = twin.ThingState(T, 7, LAMP)
    assert twin.entity_tag(state) == '"rev:7"'
    tag = twin.entity_tag(state, "/attributes/on")
    assert tag.startswith('"hash:') and tag == twin.entity_tag(twin.ThingState(T, 8, LAMP), "/attributes/on")
    _, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/on", False, {"if-match": tag}))
    assert outcome.status == 204
    _, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/on", False, {"if-match": '"hash:0"'}))
    assert outcome.status == 412


def test_too_large_thing_is_413_and_changes_nothing() -> None:
    state = twin.ThingState(T, 1, {"thingId": T})
    new_state, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/blob", "x" * 200), max_thing_bytes=100)
    assert outcome.status == 413 and outcome.payload["error"] == "things:thing.toolarge"
    assert new_state == state


def test_fold_applies_in_order_and_counts_revisions() -> None:
    commands = [
        twin.Command(1, "create", "/", {}),
        twin.Command(2, "create", "/", {}),  # 409: no revision
        twin.Command(3, "modify", "/attributes/a", 1),
        twin.Command(4, "delete", "/"),
        twin.Command(5, "modify", "/attributes/a", 2),  # 404: deleted
        twin.Command(6, "merge", "/", {"attributes": {"b": 1}}),  # re-created
    ]
    state, outcomes = twin.fold(twin.ThingState(T), commands)
    assert [o.status for o in outcomes] == [201, 409, 201, 204, 404, 201]
    assert state.revision == 4 and state.document == {"thingId": T, "attributes": {"b": 1}}


# --- invariants of the fold (hypothesis) -------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)
_paths = st.sampled_from(
    ["/", "/attributes", "/attributes/a", "/attributes/a/b", "/definition", "/policyId", "/features",
     "/features/f", "/features/f/properties", "/features/f/properties/p", "/features/f/desiredProperties/p",
     "/features/f/definition", "/attributes//x", "/bogus"]
)
_commands = st.lists(
    st.builds(twin.Command, st.integers(1, 10**6), st.sampled_from(["create", "modify", "merge", "delete"]), _paths,
              _json, st.sampled_from([None, {"if-match": "*"}, {"if-none-match": "*"}, {"if-equal": "skip"},
                                      {"if-equal": "skip-minimizing-merge"}, {"condition": "exists(attributes/a)"},
                                      {"condition": "not(exists(attributes/a))", "if-equal": "skip"}])),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(_commands)
def test_fold_invariants(commands: list) -> None:
    start = twin.ThingState(T)
    state, outcomes = twin.fold(start, commands)
    assert state == twin.fold(start, commands)[0]  # deterministic: a re-run computes the same
    assert state.revision == sum(o.applied for o in outcomes)  # one revision per applied command
    for outcome in outcomes:
        assert outcome.status in (201, 204) or 400 <= outcome.status < 500
        assert outcome.applied == (outcome.status < 400)
        if outcome.is_error:
            assert set(outcome.payload) >= {"status", "error", "message", "description"}
    if state.document is not None:
        assert state.document["thingId"] == T


def test_a_long_condition_is_decided_but_not_held() -> None:
    """A sender's conditions are remembered only when short: the fold's memory does not grow by
    what a sender chose (a condition may be as long as the envelope allows)."""
    state = twin.ThingState(T, 3, LAMP)
    long_condition = "or(" + ",".join(f'eq(attributes/x{n},"{n}")' for n in range(200)) + ',exists(attributes/on))'
    before = twin._remembered_condition.cache_info().currsize
    _, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/on", False, {"condition": long_condition}))
    assert outcome.status == 204
    _, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/on", False,
                                                {"condition": long_condition.replace("exists", "not(exists") + ")"}))
    assert outcome.status == 412 and outcome.payload["error"] == "things:condition.failed"
    assert len(long_condition) > twin._MAX_REMEMBERED_CONDITION
    assert twin._remembered_condition.cache_info().currsize == before


# --- the depth limits, and what the fold cannot decide (decisions #115, #116) ----------------------

from ackstore.rules import limits  # noqa: E402
from tests.support.deep_json import nested  # noqa: E402

VALUE_DEPTH, SEGMENTS = limits.MAX_VALUE_DEPTH, limits.MAX_POINTER_SEGMENTS


DEEPEST_PATH = "/attributes" + "/a" * (SEGMENTS - 1)  # as many segments as the door lets through
DEEP_THING = {"thingId": T, "attributes": {"x": nested(600)}}  # as a ledger from before may hold (issue 50, a)

# A path a ledger stored before the limits and the door now refuses is answered as the door answers
# it; at the limits, the fold decides as ever. (name, document, action, path, value, headers, status, code)
LIMIT_ROWS = [
    ("a modify at the deepest path of the deepest value", LAMP, "modify", DEEPEST_PATH, nested(VALUE_DEPTH), {}, 201,
     None),
    ("if-equal skip at the limits, the value there", None, "modify", DEEPEST_PATH, nested(VALUE_DEPTH),
     {"if-equal": "skip"}, 412, "things:precondition.failed"),
    ("a merge at the limits", None, "merge", DEEPEST_PATH, nested(VALUE_DEPTH, key="b"), {}, 204, None),
    ("a path one segment past the limit", LAMP, "modify", DEEPEST_PATH + "/a", 1, {}, 400, "json.pointer.invalid"),
    ("issue 50 (b): a path of 1 200 segments", LAMP, "modify", "/attributes" + "/a" * 1200, 1, {}, 400,
     "json.pointer.invalid"),
    # the fold's JSON equality runs out of stack: what it cannot decide is the command's 500 (the
    # value's depth is answered 400 before, where its stored text is read: tests/unit/test_fold_thing.py)
    ("issue 50 (a): if-equal skip of a 600-deep value equal to the stored one", DEEP_THING, "modify",
     "/attributes/x", nested(600), {"if-equal": "skip"}, 500, "internalerror"),
    ("a delete at a path past the limit", LAMP, "delete", "/attributes" + "/a" * SEGMENTS, ABSENT, {}, 400,
     "json.pointer.invalid"),
]


@pytest.mark.parametrize("existing, action, path, value, headers, status, code", [row[1:] for row in LIMIT_ROWS],
                         ids=[row[0] for row in LIMIT_ROWS])
def test_the_fold_at_and_past_the_limits(existing, action, path, value, headers, status, code) -> None:
    state = twin.ThingState(T, 3, existing)
    if existing is None:  # the thing the first row builds: a value at the deepest path
        state, first = twin.apply(twin.ThingState(T, 3, LAMP), twin.Command(1, "modify", DEEPEST_PATH, nested(VALUE_DEPTH)))
        assert first.status == 201 and limits.MAX_DOCUMENT_DEPTH == _depth(state.document)
    after, outcome = twin.apply(state, twin.Command(2, action, path, value, headers))
    assert outcome.status == status
    if code is not None:
        assert outcome.payload["error"] == code and set(outcome.payload) >= {"status", "error", "message", "description"}
        assert after == state
    else:
        assert _depth(after.document) <= limits.MAX_DOCUMENT_DEPTH


def _depth(document: Any) -> int:
    from ackstore.rules import jsontext

    return jsontext.depth(document)


# A thing a ledger from before holds, nested past Python's stack below /attributes/x.
PAST_THE_STACK = {"thingId": T, "attributes": {"x": nested(5000), "y": 1}}
UNDECIDABLE = [
    ("an entity tag of a value past the stack", "modify", "/attributes/x", 1, {"if-match": '"hash:0"'}),
    ("a document that cannot be written after the change", "merge", "/attributes", {"z": 2}, {}),
    ("if-equal on a value past the stack", "merge", "/attributes", {"x": {"a": {"a": 1}}}, {"if-equal": "skip"}),
]


@pytest.mark.parametrize("action, path, value, headers", [row[1:] for row in UNDECIDABLE],
                         ids=[row[0] for row in UNDECIDABLE])
def test_what_the_fold_cannot_decide_is_that_commands_500_and_the_state_stays(action, path, value, headers) -> None:
    state = twin.ThingState(T, 4, PAST_THE_STACK)
    after, outcome = twin.apply(state, twin.Command(1, action, path, value, headers))
    assert (outcome.status, outcome.event_action) == (500, None)
    assert outcome.payload == {"status": 500, "error": "internalerror",
                               "message": "There was a rare case of an unexpected internal error.",
                               "description": "Please contact the service team or your administrator."}
    assert after is state
    # the thing stays as it was, and a command that replaces it is decided as ever
    after, outcome = twin.apply(after, twin.Command(2, "modify", "/", {"attributes": {"y": 2}}))
    assert outcome.status == 204 and after.document == {"thingId": T, "attributes": {"y": 2}} and after.revision == 5


def test_a_condition_on_a_thing_past_the_stack_is_decided() -> None:
    """The index rows a condition is evaluated over are flattened without recursion: a condition
    that does not hold is 412 however deep the thing (one that holds lets the command go on, to
    the 500 of a document that cannot be written)."""
    state = twin.ThingState(T, 4, PAST_THE_STACK)
    deep_property = "attributes/x" + "/a" * 2000
    for condition in ("eq(attributes/y,2)", f"not(exists({deep_property}))"):
        _, outcome = twin.apply(state, twin.Command(1, "modify", "/attributes/y", 2, {"condition": condition}))
        assert (outcome.status, outcome.payload["error"]) == (412, "things:condition.failed"), condition[:40]


# --- the fold never raises, and answers in Ditto's shape (hypothesis) ------------------------------

def _deep(levels: int, shape: str, key: str, leaf: Any) -> Any:
    value = leaf
    for level in range(levels):
        value = {key: value} if shape == "objects" or (shape == "mixed" and level % 2) else [value]
    return value


_segments = st.sampled_from(["a", "b", "x", "a~1b", "~0", "", "properties"])
# about the limits, about issue 50's depths, and past Python's stack
_levels = st.one_of(st.integers(0, 4), st.integers(97, 101), st.integers(590, 610), st.integers(975, 985),
                    st.integers(1500, 3000))
_deep_values = st.builds(_deep, _levels, st.sampled_from(["objects", "arrays", "mixed"]),
                         st.sampled_from(["a", "b", "x"]), _json)
_wide_values = st.dictionaries(st.sampled_from(["a", "b", "x", "y", "z", "on"]), _json | _deep_values, max_size=6)
_values = st.one_of(_json, _json, _json, _wide_values, _deep_values)  # mostly what the door lets through
_documents = st.none() | st.builds(lambda attributes, deep, extra: {"thingId": T, "attributes": {**attributes, **deep},
                                                                   **extra},
                                   _wide_values, st.fixed_dictionaries({}, optional={"a": _deep_values, "x": _deep_values}),
                                   st.sampled_from([{}, {"features": {"f": {"properties": {"p": 1}}}}]))
_long_paths = st.builds(lambda head, segment, count: head + f"/{segment}" * count,
                        st.sampled_from(["", "/attributes", "/features/f/properties", "/features", "/bogus"]),
                        _segments, st.one_of(st.integers(0, 3), st.integers(97, 101), st.integers(1190, 1210)))
_headers = st.sampled_from([None, {"if-equal": "skip"}, {"if-equal": "skip-minimizing-merge"}, {"if-match": '"hash:0"'},
                            {"if-match": "*"}, {"if-none-match": "*"}, {"condition": 'like(attributes/a,"*a?b*")'},
                            {"condition": "exists(attributes/a)"}, {"condition": "not(eq(attributes/x,1))"}])
_any_commands = st.lists(
    st.builds(twin.Command, st.integers(1, 10**6), st.sampled_from(["create", "modify", "merge", "delete"]),
              st.one_of(_paths, _paths, _long_paths), _values, _headers)
    | st.builds(twin.Command, st.integers(1, 10**6), st.sampled_from(["modify", "merge"]),  # plain, onto what is there
                st.sampled_from(["/attributes/y", "/attributes"]), st.builds(lambda n: {"y": n}, st.integers()), _headers),
    min_size=1, max_size=6,
)


def _past_the_limits(state: twin.ThingState, command: twin.Command) -> bool:
    """Whether the thing or the command's value nests past the limits: only a ledger from before
    them holds such a one, and only there may the fold answer 500 (decisions #116)."""
    return (state.document is not None and _depth(state.document) > limits.MAX_DOCUMENT_DEPTH
            or command.value is not ABSENT and _depth(command.value) > limits.MAX_VALUE_DEPTH)


def _reference(state: twin.ThingState, command: twin.Command) -> tuple[int, str | None] | None:
    """The answer where it is cheap to know ((status, error code)), else None: a path past the
    limit is refused before anything else; a plain write of /attributes/y, without headers."""
    if command.path.count("/") > limits.MAX_POINTER_SEGMENTS:
        return 400, "json.pointer.invalid"
    if command.headers or _past_the_limits(state, command) or command.path not in ("/attributes/y", "/attributes"):
        return None
    if command.action not in ("modify", "merge") or command.path == "/attributes" and not isinstance(command.value, dict):
        return None
    if not state.exists:
        return 404, "things:thing.notfound"
    if command.action == "merge":
        return 204, None
    member, within = ("attributes", state.document) if command.path == "/attributes" else (
        "y", state.document.get("attributes", {}))
    return (204, None) if member in within else (201, None)


@settings(max_examples=200, deadline=None)
@given(document=_documents, commands=_any_commands)
def test_the_fold_answers_in_dittos_shape_and_500_only_past_the_limits(document: Any, commands: list) -> None:
    """Random deep and wide documents, paths and commands, past the limits too (a ledger from
    before may hold them): one outcome each, in Ditto's shape; a failed command changes nothing.
    Within the limits the answer is 2xx or 4xx — the right one where it is cheap to know —, so
    a bug that made a command a 500 would not hide behind the fold's catch-all."""
    state = twin.ThingState(T, 2 if document is not None else 0, document)
    for command in commands:
        after, outcome = twin.apply(state, command)
        reference = _reference(state, command)
        if outcome.applied:
            assert outcome.status in (201, 204) and after.revision == state.revision + 1
        else:
            assert after is state
            assert set(outcome.payload) >= {"status", "error", "message", "description"}
            assert outcome.payload["status"] == outcome.status
            if outcome.status >= 500:
                assert _past_the_limits(state, command), command
                assert outcome.payload["error"] == "internalerror"
            else:
                assert 400 <= outcome.status < 500
        if reference is not None:
            error = outcome.payload["error"] if outcome.is_error else None
            assert (outcome.status, error) == reference, command
        state = after
