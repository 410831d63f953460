"""Ditto's field selectors (``fields``, ``extraFields``): parsed as Ditto's JsonFieldSelector parses
them, a document cut to them as Ditto's ``JsonObject.get(JsonFieldSelector)`` cuts it."""

import copy

import pytest
from hypothesis import given, strategies as st

from ackstore.rules import errors, fields

THING = {
    "thingId": "org.acme:lamp-1",
    "policyId": "org.acme:lamp-1",
    "attributes": {"model": "L1", "manufacturer": "ACME", "location": {"room": "hall", "floor": 2}, "off": None},
    "features": {"lamp": {"properties": {"on": True, "level": 7}}, "fan": {"properties": {"rpm": 900}}},
}


@pytest.mark.parametrize(("selector", "pointers"), [
    ("thingId", [("thingId",)]),
    ("/thingId", [("thingId",)]),
    ("attributes/model,thingId", [("attributes", "model"), ("thingId",)]),
    ("attributes(model,manufacturer)", [("attributes", "model"), ("attributes", "manufacturer")]),
    ("features(lamp/properties(on,level),fan)",
     [("features", "lamp", "properties", "on"), ("features", "lamp", "properties", "level"), ("features", "fan")]),
    ("attributes(location/room), thingId", [("attributes", "location", "room"), ("thingId",)]),
    ("thingId,thingId", [("thingId",)]),
    ("_revision,_namespace", [("_revision",), ("_namespace",)]),
])
def test_a_selector_names_its_pointers_in_order(selector, pointers):
    assert list(fields.parse(selector)) == pointers


@pytest.mark.parametrize("selector", [
    "", "attributes(model", "attributes)model(", "attributes(model))(", "a,,b", ",", "attributes()", "a)b",
    "a(b)c", "(" * 101 + "a" + ")" * 101, ",".join(f"f{n}" for n in range(101)), "/" * 3,
])
def test_what_is_no_selector_is_ditto_400(selector):
    with pytest.raises(errors.DittoError) as refused:
        fields.parse(selector)
    assert refused.value.status == 400
    assert refused.value.error in ("json.fieldselector.invalid", "json.pointer.invalid")


@pytest.mark.parametrize(("selector", "selected"), [
    ("thingId", {"thingId": "org.acme:lamp-1"}),
    ("attributes(model,manufacturer)", {"attributes": {"model": "L1", "manufacturer": "ACME"}}),
    ("features/lamp/properties/on,thingId", {"features": {"lamp": {"properties": {"on": True}}},
                                              "thingId": "org.acme:lamp-1"}),
    ("attributes/missing,definition", {}),
    ("attributes/off", {"attributes": {"off": None}}),
    ("attributes/model/deeper", {}),  # below a value that is no object: nothing
    ("attributes/location,attributes/location/room", {"attributes": {"location": {"room": "hall", "floor": 2}}}),
    ("attributes/location/room,attributes/location", {"attributes": {"location": {"room": "hall", "floor": 2}}}),
    ("attributes/off,attributes/off/x", {"attributes": {"off": None}}),
])
def test_a_document_is_cut_to_the_selector(selector, selected):
    assert fields.select(THING, fields.parse(selector)) == selected


def test_the_selection_keeps_the_selectors_order():
    assert list(fields.select(THING, fields.parse("features,thingId,attributes/model"))) == [
        "features", "thingId", "attributes"]


def test_a_thing_read_may_select_what_ditto_computes():
    selected = fields.select_thing(THING, fields.parse("_revision,_namespace,_modified,thingId"), "org.acme:lamp-1",
                                   7, "2026-11-29T00:00:00Z")
    assert selected == {"_revision": 7, "_namespace": "org.acme", "_modified": "2026-11-29T00:00:00Z",
                        "thingId": "org.acme:lamp-1"}
    assert "_revision" not in fields.select_thing(THING, fields.parse("thingId"), "org.acme:lamp-1", 7, None)


_KEYS = st.sampled_from(["a", "b", "c"])
_DOCUMENTS = st.recursive(st.integers() | st.none(), lambda inner: st.dictionaries(_KEYS, inner, max_size=3),
                          max_leaves=12)
_POINTERS = st.lists(st.lists(_KEYS, min_size=1, max_size=4).map(tuple), min_size=1, max_size=6)


@given(_DOCUMENTS.filter(lambda d: isinstance(d, dict)), _POINTERS)
def test_a_selection_is_within_the_document_and_leaves_it_unchanged(document, pointers):
    before = copy.deepcopy(document)
    selected = fields.select(document, tuple(pointers))
    assert document == before
    for pointer in pointers:  # every pointer the document has is in the selection with its value
        value = _walk(document, pointer)
        if value is not _MISSING:
            assert _walk(selected, pointer) == value
    assert _within(selected, document)


@given(_POINTERS)
def test_a_selector_written_out_parses_to_its_pointers(pointers):
    unique = list(dict.fromkeys(pointers))
    assert list(fields.parse(",".join("/".join(p) for p in unique))) == unique


_MISSING = object()


def _walk(document, pointer):
    """The value at ``pointer``, or _MISSING."""
    for segment in pointer:
        if not isinstance(document, dict) or segment not in document:
            return _MISSING
        document = document[segment]
    return document


def _within(selected, document):
    if not isinstance(selected, dict) or selected is document:
        return selected == document
    return isinstance(document, dict) and all(k in document and _within(v, document[k]) for k, v in selected.items())
