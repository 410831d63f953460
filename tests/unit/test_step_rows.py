"""Each step's Python over one row a sender's data fills, as its read query gives the row: a row
that cannot be read (JSON past Python's stack, which only a ledger from before the depth limits
holds) is that row's outcome, never the pass's failure (decisions #116). The pipeline's tests run
the same end to end: tests/pipeline/test_deep_input.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs import index_search, settle, sweep, weak_acks
from tests.support.deep_json import nested_text

PAST_THE_STACK = nested_text(3000)
INTERNAL_ERROR = "internalerror"


def sweep_row(**given: Any) -> dict[str, Any]:
    """A row of jobs/sql/sweep.sql's ``undecided``: a twin command asking for two labels."""
    return {"signal_id": 7, "attempt": 1, "correlation_id": "c", "api": "http", "thing_id": "org.acme:t",
            "path": "/attributes/x", "headers": '{"correlation-id":"c"}', "requested_acks": ["twin-persisted", "app:x"],
            "response_required": True, "timeout_ms": 1000, "deadline_passed": True, "response_status": 204,
            "response_payload": None, "response_is_error": False, "invalid_response": None,
            "acks": '[["twin-persisted",204,null,false,{},false],["app:x",200,{"n":1},true,{},false]]', **given}


@pytest.mark.parametrize("given, status, cause, acks_seen", [
    ({}, 200, "acks", 2),  # readable: decided as ever
    ({"acks": '[["twin-persisted",204,null,false,{},false],["app:x",500,%s,true,{},false]]' % PAST_THE_STACK},
     424, "deadline", 2),
    ({"headers": '{"x":%s}' % PAST_THE_STACK}, 424, "deadline", 2),
    ({"headers": '{"x":%s}' % PAST_THE_STACK, "deadline_passed": False}, None, None, None),  # it waits
    ({"response_is_error": True, "response_status": 404, "response_payload": PAST_THE_STACK}, 500, "error", 2),
])
def test_the_sweep_decides_a_request_it_cannot_read_as_its_cause_allows(given: dict, status: int | None,
                                                                        cause: str | None, acks_seen: int | None) -> None:
    staged = sweep._decision(sweep_row(**given))
    if status is None:
        assert staged == []
        return
    (row,) = staged
    assert (row["status"], row["cause"], row["acks_seen"]) == (status, cause, acks_seen)
    if status != 200:
        body = json.loads(row["body"])
        errors = [body["error"]] if "error" in body else [entry["payload"]["error"] for entry in body.values()]
        assert set(errors) == {INTERNAL_ERROR}


def weak_row(value: str) -> dict[str, Any]:
    """A row of jobs/sql/weak_acks.sql's ``candidates``: a live message, a group with a filter."""
    group = [{"id": "s", "channels": ["live"], "namespaces": None, "filter": "eq(attributes/n,-1)"}]
    return {"signal_id": 3, "attempt": 1, "correlation_id": "c", "kind": "live-message", "thing_id": "org.acme:t",
            "action": "ask", "path": "/inbox/messages/ask", "value": value, "event_action": None, "event_path": None,
            "event_value": None, "label": "org:filtered", "group_members": json.dumps(group)}


def test_a_weak_ack_candidate_that_cannot_be_judged_gets_none() -> None:
    assert len(weak_acks._weak_ack(weak_row('{"n":1}'))) == 1  # filtered out: its weak ack
    assert weak_acks._weak_ack(weak_row(PAST_THE_STACK)) == []


def test_a_thing_whose_document_cannot_be_read_is_indexed_without_rows() -> None:
    thing = {"thing_id": "org.acme:t", "revision": 3, "changed": True, "present": True}
    assert [row["path"] for row in index_search._index_rows({**thing, "document": '{"thingId":"org.acme:t"}'})] == [
        "thingId"]
    assert index_search._index_rows({**thing, "document": '{"x":%s}' % PAST_THE_STACK}) == []


@pytest.mark.parametrize("ack_statuses, attempt, decision", [
    ('{"app:x":500}', 1, "redeliver"),
    ('{"app:x":404}', 1, "reject"),
    ('{"app:x":%s}' % PAST_THE_STACK, 1, "redeliver"),  # a failure that is no Ditto one
    ('{"app:x":%s}' % PAST_THE_STACK, 5, "dead-letter"),  # until the attempts are used up
])
def test_a_result_settle_cannot_read_is_redelivered(ack_statuses: str, attempt: int, decision: str) -> None:
    row = {"signal_id": 1, "attempt": attempt, "api": "connectivity", "source": "amqp-x", "channel": "twin",
           "cause": "acks", "status": 424, "ack_statuses": ack_statuses}
    assert settle.decide_row(row, max_attempts=5) == decision


# --- a failure of the process is no row's outcome ------------------------------------------------------

# Each guard given a row whose reading needs more memory than the process may take (its address
# space capped just above what it holds): the MemoryError is the process's, so the guard lets it
# through and the step fails — recorded as the row's 500, redelivery or empty index, it would be a
# fact no re-run could correct (errors.PROCESS_FAILURES, decisions #116). One process runs them all.
_MEMORY_PROBE = r'''
import json, resource
from ackstore.rules import twin
from jobs import apply_twin, index_search, settle, sweep, weak_acks
from tests.unit.test_step_rows import sweep_row, weak_row

T = "org.acme:t"
BIG = "[" + "1," * 15_000_000 + "1]"  # 30 MB of text, 120 MB of list once read
BIG_THING = '{"thingId":"%s","x":%s}' % (T, BIG)
WIDE = {"thingId": T, "attributes": {str(n): n for n in range(600_000)}}  # a condition makes a row of each
THING = {"thing_id": T, "revision": 3, "changed": True, "present": True, "document": BIG}
RESULT = {"signal_id": 1, "attempt": 1, "api": "connectivity", "source": "amqp-x", "channel": "twin",
          "cause": "acks", "status": 424, "ack_statuses": BIG}
VALUE_ROWS = [(1, T, "modify", "/attributes/x", BIG, "{}", 1, '{"thingId":"%s"}' % T)]
THING_ROWS = [(1, T, "modify", "/attributes/x", "1", "{}", 1, BIG_THING)]
CONDITIONAL = twin.Command(1, "modify", "/attributes/x", 1, {"condition": "exists(attributes/x)"})
CANDIDATE, REQUEST = weak_row(BIG), sweep_row(acks=BIG)
CALLS = {  # every input made before the cap: only the guarded work needs more
    "apply_twin: a command's value": lambda: apply_twin.fold_thing(VALUE_ROWS, 1 << 30, apply_twin._Outcomes()),
    "apply_twin: a thing's document": lambda: apply_twin.fold_thing(THING_ROWS, 1 << 30, apply_twin._Outcomes()),
    "twin.apply: a command": lambda: twin.apply(twin.ThingState(T, 1, WIDE), CONDITIONAL),
    "index_search": lambda: index_search._index_rows(THING),
    "weak_acks": lambda: weak_acks._weak_ack(CANDIDATE),
    "sweep": lambda: sweep._decision(REQUEST),
    "settle": lambda: settle.decide_row(RESULT, 5),
}
held = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (held + 16 * 2 ** 20, resource.RLIM_INFINITY))
got = {}
for name, call in CALLS.items():
    try:
        call()
        got[name] = "answered"
    except MemoryError:
        got[name] = "MemoryError"
print(json.dumps(got))
'''


def test_a_failure_of_the_process_is_let_through_by_every_row_guard() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _MEMORY_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got == dict.fromkeys(got, "MemoryError") and len(got) == 7
