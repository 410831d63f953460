"""apply_twin's fold of one thing's rows, as a Spark task or the driver runs it (decisions #116): a
row stored before the limits and past them is answered the door's 400; a base document that
cannot be read makes every command of its thing a 500 and leaves the thing as it was; the other
things of the batch are folded as ever. Within the limits every row is 2xx or 4xx."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ackstore.rules import limits
from jobs import apply_twin
from tests.support.deep_json import nested_text

T = "org.acme:t"
INTERNAL = {"status": 500, "error": "internalerror", "message": "There was a rare case of an unexpected internal error.",
            "description": "Please contact the service team or your administrator."}


def row(signal_id: int, action: str, path: str, value: str | None, *, thing: str = T, headers: str = "{}",
        revision: int = 1, document: str | None = None) -> tuple:
    """A PENDING_COLUMNS row."""
    base = document if document is not None else json.dumps({"thingId": thing, "attributes": {"a": 0}})
    return (signal_id, thing, action, path, value, headers, revision, base)


def folded(rows: list[tuple]) -> list[dict[str, Any]]:
    out = apply_twin._Outcomes()
    groups: dict[str, list[tuple]] = {}
    for each in rows:
        groups.setdefault(each[1], []).append(each)
    for group in groups.values():
        apply_twin.fold_thing(group, 100 * 1024, out)
    names = [name for name, _ in apply_twin.OUTCOME_COLUMNS]
    return [dict(zip(names, values)) for values in zip(*out.columns)]


def test_rows_past_the_stack_are_their_commands_and_the_things_other_commands_go_on() -> None:
    outcomes = folded([
        row(1, "modify", "/attributes/a", "1"),
        row(2, "modify", "/attributes/b", nested_text(5000)),  # the door's 400, found before it is read
        row(3, "modify", "/attributes/c", "3", headers='{"if-match":' + nested_text(5000) + "}"),  # likewise
        row(4, "modify", "/attributes/d", "4"),
    ])
    assert [(o["status"], o["revision"]) for o in outcomes] == [(204, 2), (400, None), (400, None), (201, 3)]
    refused = [json.loads(outcomes[n]["payload"]) for n in (1, 2)]
    assert [body["error"] for body in refused] == ["json.invalid"] * 2
    assert "at </value/a/a/a" in refused[0]["message"] and "at </headers/if-match/a/a/a" in refused[1]["message"]
    last = outcomes[-1]
    assert last["is_last"] and last["final_revision"] == 3
    assert json.loads(last["final_document"])["attributes"] == {"a": 1, "d": 4}


def test_a_base_document_past_the_stack_fails_its_things_commands_only() -> None:
    deep = '{"thingId":"org.acme:deep","attributes":{"x":' + nested_text(5000) + "}}"
    outcomes = folded([
        row(1, "modify", "/attributes/y", "1", thing="org.acme:deep", document=deep, revision=7),
        row(2, "delete", "/", None, thing="org.acme:deep", document=deep, revision=7),
        row(3, "modify", "/attributes/y", "1", thing="org.acme:good"),
    ])
    deep_rows, good = outcomes[:2], outcomes[2]
    assert [(o["status"], o["is_error"], o["event_action"]) for o in deep_rows] == [(500, True, None)] * 2
    assert deep_rows[-1]["is_last"] and deep_rows[-1]["final_revision"] == 7  # the merge writes no state for it
    assert (good["status"], good["final_revision"]) == (201, 2)


def test_the_door_is_answered_again_for_a_command_stored_before_it() -> None:
    """Issue 50's reproductions as a ledger from before holds them — (a) a modify under if-equal
    skip of the 600-deep value the thing holds, (b) a path of 1 200 segments, (c) a merge 980
    deep —: the door's 400 each, whatever the stack, and the thing's next command applied."""
    holding = '{"thingId":"%s","attributes":{"x":%s}}' % (T, nested_text(600))
    outcomes = folded([
        row(1, "modify", "/attributes/x", nested_text(600), headers='{"if-equal":"skip"}', document=holding),
        row(2, "modify", "/attributes" + "/a" * 1200, "1", document=holding),
        row(3, "merge", "/attributes", '{"y":' + nested_text(980) + "}", document=holding),
        row(4, "modify", "/attributes/z", "true", document=holding),
    ])
    assert [(o["status"], json.loads(o["payload"])["error"] if o["is_error"] else None) for o in outcomes] == [
        (400, "json.invalid"), (400, "json.pointer.invalid"), (400, "json.invalid"), (201, None)]
    assert [json.loads(outcomes[n]["payload"])["message"][:90] for n in (0, 2)] == [
        "The JSON nests objects and arrays deeper than the maximum of 100 levels at </value/a/a/a/a",
        "The JSON nests objects and arrays deeper than the maximum of 100 levels at </value/y/a/a/a"]


def _depth(text: str | None) -> int:
    """Levels of the JSON text the rows below hold (no bracket inside their strings)."""
    deepest = level = 0
    for character in text or "":
        level += character in "{[" or -(character in "}]")
        deepest = max(deepest, level)
    return deepest


PAST_THE_PATH = "/attributes" + "/a" * limits.MAX_POINTER_SEGMENTS
_values = st.one_of(st.sampled_from(["1", '"x"', "null", '{"y":2}', "[1,2]"]),
                    st.builds(nested_text, st.sampled_from([98, 99, 100, 600, 980, 3000])), st.none())
_rows = st.lists(st.tuples(st.sampled_from(["org.acme:a", "org.acme:b"]),
                           st.sampled_from(["create", "modify", "merge", "delete"]),
                           st.sampled_from(["/", "/attributes", "/attributes/a", "/attributes" + "/a" * 99,
                                            PAST_THE_PATH]),
                           _values,
                           st.sampled_from(["{}", '{"if-equal":"skip"}', '{"if-match":' + nested_text(3000) + "}",
                                            '{"x":' + nested_text(98) + "}", '{"x":' + nested_text(99) + "}",
                                            '{"condition":"exists(attributes/a)"}'])),
                 min_size=1, max_size=8)
_bases = st.sampled_from([None, '{"thingId":"%s","attributes":{"a":1}}', '{"thingId":"%s","attributes":{"a":'
                          + nested_text(3000) + "}}", '{"thingId":"%s","attributes":{"a":' + nested_text(99) + "}}"])


def expected(base: str | None, value: str | None, headers: str, path: str) -> tuple[int, str] | None:
    """What the door answers a row past the limits ((status, error); 500 internalerror: a base
    document past them, which cannot be read), None for a row within them."""
    if base is not None and _depth(base) > limits.MAX_DOCUMENT_DEPTH:
        return 500, "internalerror"
    if _depth(value) > limits.MAX_VALUE_DEPTH or _depth(headers) > limits.MAX_VALUE_DEPTH:
        return 400, "json.invalid"
    if path.count("/") > limits.MAX_POINTER_SEGMENTS:
        return 400, "json.pointer.invalid"
    return None


@settings(max_examples=150, deadline=None)
@given(rows=_rows, bases=st.tuples(_bases, _bases))
def test_fold_thing_answers_every_row_and_500_only_past_the_limits(rows: list, bases: tuple) -> None:
    """One outcome row each, in Ditto's shape: past the limits the door's answer (a base document
    past them, which no reader's stack may hold, its thing's 500s); within them 2xx or 4xx —
    never a 500 a bug could hide behind."""
    base_of = {thing: base % thing if base else None for thing, base in zip(("org.acme:a", "org.acme:b"), bases)}
    pending = sorted(
        ((n, thing, action, path, value if action != "delete" else None, headers, 1 if base_of[thing] else 0,
          base_of[thing])
         for n, (thing, action, path, value, headers) in enumerate(rows, 1)),
        key=lambda r: (r[1], r[0]))
    outcomes = folded(pending)
    assert [o["signal_id"] for o in outcomes] == [r[0] for r in pending]  # one row each, in order
    for thing in base_of:
        mine = [o for o in outcomes if o["thing_id"] == thing]
        if not mine:
            continue
        applied = sum(o["event_action"] is not None for o in mine)
        assert mine[-1]["is_last"] and mine[-1]["final_revision"] == mine[0]["base_revision"] + applied
    for (_, _, action, path, value, headers, _, base), outcome in zip(pending, outcomes):
        answer = expected(base, value, headers, path)
        if outcome["is_error"]:
            body = json.loads(outcome["payload"])
            assert body["status"] == outcome["status"] and {"error", "message", "description"} <= set(body)
            assert (answer is None and 400 <= outcome["status"] < 500) or (outcome["status"], body["error"]) == answer
            assert answer != (500, "internalerror") or body == INTERNAL
        else:
            assert answer is None and outcome["status"] in (201, 204)
