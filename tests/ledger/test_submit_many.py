"""submit_many: one transaction per batch, each envelope answered exactly as submit answers it."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.ledger import array_literals, ingest
from ackstore.ledger.store import AckStore
from ackstore.rules.errors import DittoError
from ackstore.rules.settings import Settings
from tests.support.ledger import empty, twin_command

# The ledger's content that does not depend on the clock: what was stored, in which order.
STORED_ROWS = {
    "signals": "SELECT id, source, source_message_id, correlation_id, api, channel, kind, action, thing_id, "
    "topic, path, value, headers, requested_acks, response_required, timeout_ms, "
    "deadline_at - received_at AS budget FROM signals ORDER BY id",
    "queue_apply": "SELECT signal_id FROM queue_apply ORDER BY 1",
    "queue_decide": "SELECT signal_id, attempt FROM queue_decide ORDER BY 1",
    "deliveries": "SELECT subscriber_id, signal_id, handouts, done_at IS NULL FROM deliveries ORDER BY 1, 2",
}


def stored(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {name: [tuple(row) for row in conn.execute(text(sql))] for name, sql in STORED_ROWS.items()}


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        empty(conn)


def live_message(thing: str = "org.acme/lamp-1", **headers: Any) -> dict[str, Any]:
    return {
        "topic": f"{thing}/things/live/messages/ping",
        "headers": {name.replace("_", "-"): v for name, v in headers.items()},
        "path": "/inbox/messages/ping",
        "value": "hi",
    }


BAD_ENVELOPES = [
    b"{not json",
    b"\xff\xfe",
    {"topic": "org.acme/lamp-1/things/twin/commands/retrieve", "path": "/"},
    {"topic": "nonsense", "path": "/"},
    twin_command(timeout="0", requested_acks=["twin-persisted"]),
    twin_command(requested_acks=["no"]),
    twin_command(timeout="abc"),
]

envelope_strategy = st.one_of(
    st.builds(
        lambda thing, cid, acks, value: twin_command(
            thing=f"org.acme/{thing}", correlation_id=f"c-{cid}", requested_acks=acks, value=value
        ),
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 6),
        st.sampled_from([["twin-persisted"], [], ["twin-persisted", "org:audit"], ["search-persisted"]]),
        st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3)),
    ),
    st.builds(lambda cid: live_message(correlation_id=f"c-{cid}"), st.integers(0, 6)),
    st.sampled_from(BAD_ENVELOPES),
)
message_id_strategy = st.one_of(st.none(), st.sampled_from(["m1", "m2", "m3", "m4"]))
batch_strategy = st.lists(st.tuples(envelope_strategy, message_id_strategy), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=batch_strategy, batch=batch_strategy)
def test_a_batch_answers_and_stores_exactly_what_one_submit_after_another_does(
    store: AckStore, history: list, batch: list
) -> None:
    def run(submit_batch: bool) -> tuple[list[dict[str, Any]], dict]:
        reset(store.engine)
        store.declare("pinger", [], channels=["live"])
        for envelope, message_id in history:
            store.submit(envelope, api="connectivity", source="conn", source_message_id=message_id)
        if submit_batch:
            answers = store.submit_many(
                [e for e, _ in batch], api="connectivity", source="conn", source_message_ids=[m for _, m in batch]
            )
        else:
            answers = [
                store.submit(e, api="connectivity", source="conn", source_message_id=m) for e, m in batch
            ]
        return answers, stored(store.engine)

    one_by_one = run(submit_batch=False)
    batched = run(submit_batch=True)
    assert _without_fresh_ids(batched) == _without_fresh_ids(one_by_one)
    assert [answer["status"] for answer in batched[0]] == expected_statuses(history, batch)
    assert [a.get("correlationId") for a in batched[0]] == expected_correlation_ids(history, batch)


def _model(history: list, batch: list) -> list[tuple[int, str | None]]:
    """A.2.9 and A.3 on their own: (status, correlation id) per envelope of ``batch``."""
    first_answer: dict[str, str] = {}  # message id -> the correlation id it was stored with
    taken: set[str] = set()
    answers = []
    for envelope, message_id in [*history, *batch]:
        try:
            _, request = ingest.validate(envelope, api="connectivity", settings=Settings())
        except DittoError as error:
            answers.append((error.status, None))
            continue
        cid = request.correlation_id
        if message_id is not None and message_id in first_answer:
            answers.append((202, first_answer[message_id]))
        elif cid in taken:
            answers.append((409, None))
        else:
            taken.add(cid)
            if message_id is not None:
                first_answer[message_id] = cid
            answers.append((202, cid))
    return answers[len(history):]


def expected_statuses(history: list, batch: list) -> list[int]:
    return [status for status, _ in _model(history, batch)]


def expected_correlation_ids(history: list, batch: list) -> list[str | None]:
    return [cid for _, cid in _model(history, batch)]


def _without_fresh_ids(outcome: tuple[list[dict[str, Any]], dict]) -> tuple:
    """Message ids made up for envelopes without one differ between runs; nothing else may."""
    answers, rows = outcome
    signals = [
        row if row[2] in {"m1", "m2", "m3", "m4"} else (*row[:2], "<fresh>", *row[3:]) for row in rows["signals"]
    ]
    return answers, {**rows, "signals": signals}


def test_a_batch_with_bad_envelopes_stores_the_good_ones_and_answers_each(store: AckStore) -> None:
    batch = [
        twin_command(correlation_id="good-1"),
        b"{broken",
        twin_command(correlation_id="good-1"),  # clashes with the first: 409
        twin_command(correlation_id="good-2", timeout="0", requested_acks=["twin-persisted"]),
        twin_command(correlation_id="good-3"),
    ]
    answers = store.submit_many(batch, source="conn", source_message_ids=["a", "b", "c", "d", "e"])
    assert [a["status"] for a in answers] == [202, 400, 409, 400, 202]
    assert answers[1]["error"] == "json.invalid"
    assert answers[2]["error"] == "acknowledgement:request.duplicate.correlation-id"
    assert answers[3]["error"] == "header.invalid"
    assert [r[3] for r in stored(store.engine)["signals"]] == ["good-1", "good-3"]


def test_a_message_id_twice_in_one_batch_is_a_retransmission(store: AckStore) -> None:
    answers = store.submit_many(
        [twin_command(correlation_id="first"), twin_command(correlation_id="second")],
        source="conn",
        source_message_ids=["same", "same"],
    )
    assert answers == [{"status": 202, "correlationId": "first"}] * 2
    assert len(stored(store.engine)["signals"]) == 1


def test_the_batch_keeps_each_things_order_in_ids(store: AckStore) -> None:
    batch = [twin_command(thing=f"org.acme/t{i % 3}", correlation_id=f"c{i}", value=i) for i in range(30)]
    store.submit_many(batch)
    rows = stored(store.engine)["signals"]
    assert [row[3] for row in rows] == [f"c{i}" for i in range(30)]


def test_ingest_tells_a_connector_what_to_hold(store: AckStore) -> None:
    stored_now = store.ingest(
        [twin_command(requested_acks=["twin-persisted"]), twin_command(requested_acks=[]), b"nope"],
        api="connectivity",
        source="conn",
        source_message_ids=["q1", "q0", "bad"],
    )
    assert [(s.ok, s.awaits_decision, s.decision) for s in stored_now] == [
        (True, True, None), (True, False, None), (False, False, None)
    ]
    again = store.ingest([twin_command(requested_acks=["twin-persisted"])], api="connectivity",
                         source="conn", source_message_ids=["q1"])
    assert again[0].signal_id == stored_now[0].signal_id and again[0].awaits_decision


def test_a_batch_waits_for_a_single_submission_of_the_same_thing(store: AckStore) -> None:
    """Per-thing ingestion order holds between a batch and a single submission (decisions #19)."""
    from sqlalchemy import text

    with store.engine.connect() as in_flight:  # as the superuser the tests run as: no login may lock a thing itself
        in_flight.begin()
        in_flight.execute(text("SELECT lock_things(ARRAY['org.acme:lamp-1'])"))
        finished = threading.Event()
        worker = threading.Thread(
            target=lambda: (store.submit_many([twin_command(), twin_command(thing="org.acme/other")]), finished.set())
        )
        worker.start()
        assert not finished.wait(0.5), "the batch must wait for the thing's lock"
        in_flight.rollback()
    worker.join(10)
    assert finished.is_set()


def test_a_batch_that_loses_a_race_for_a_key_answers_as_a_retransmission(store: AckStore) -> None:
    """Two submissions of one message id for different things do not wait for each other's
    thing lock; the second waits for the first's uncommitted key, then answers with its answer."""
    with store.engine.connect() as first:
        first.begin()
        ingest.ingest(first, [twin_command(thing="org.acme/x", correlation_id="first")], api="http",
                      source="conn", message_ids=["same"], settings=Settings())
        answers: list = []
        second = threading.Thread(target=lambda: answers.extend(store.submit_many(
            [twin_command(thing="org.acme/y", correlation_id="second")], source="conn", source_message_ids=["same"])))
        second.start()
        second.join(0.5)
        assert second.is_alive(), "the second waits for the first's uncommitted key"
        first.commit()
    second.join(10)
    assert answers == [{"status": 202, "correlationId": "first"}]
    assert [row[3] for row in stored(store.engine)["signals"]] == ["first"]


def test_a_batch_whose_merge_meets_a_key_taken_meanwhile_answers_as_a_retransmission(store: AckStore) -> None:
    """The batch's merge waits for a concurrent submission's uncommitted key; once that commits, a
    savepoint undoes the merge, the next skips the taken key, the other new signal is stored all
    the same and the loser is answered with the first answer."""
    with store.engine.connect() as first:
        first.begin()
        ingest.ingest(first, [twin_command(thing="org.acme/x", correlation_id="first")], api="http",
                      source="conn", message_ids=["same"], settings=Settings())
        answers: list = []
        second = threading.Thread(target=lambda: answers.extend(store.submit_many(
            [twin_command(thing="org.acme/y", correlation_id="second"),
             twin_command(thing="org.acme/z", correlation_id="third")],
            source="conn", source_message_ids=["same", "other"])))
        second.start()
        second.join(0.5)
        assert second.is_alive(), "the merge waits for the first's uncommitted key"
        first.commit()
    second.join(10)
    assert answers == [{"status": 202, "correlationId": "first"}, {"status": 202, "correlationId": "third"}]
    rows = stored(store.engine)
    assert [row[3] for row in rows["signals"]] == ["first", "third"]
    assert len(rows["queue_decide"]) == len(rows["queue_apply"]) == 2


def test_a_copy_cut_off_by_a_lost_connection_is_a_transient_failure(store: AckStore) -> None:
    """A COPY is not a SQLAlchemy statement: its failure must still reach a connector as one, or a
    lost connection would be taken for a message the ledger refuses (decisions #43)."""
    from ackstore.ledger import failures

    with store.engine.connect() as first:
        first.begin()
        first.execute(text("LOCK TABLE stage_signals IN ACCESS EXCLUSIVE MODE"))  # the COPY waits for it
        raised: list[BaseException] = []

        def submit() -> None:
            try:
                store.submit_many([twin_command(thing="org.acme/y"), twin_command(thing="org.acme/z")],
                                  source="conn", source_message_ids=["one", "other"])
            except Exception as error:  # noqa: BLE001 — the test looks at what it is
                raised.append(error)

        second = threading.Thread(target=submit)
        second.start()
        waiting = text("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() "
                       "AND query LIKE '%COPY stage_signals%' AND wait_event_type = 'Lock'")
        with store.engine.connect() as watcher:
            for _ in range(200):
                pid = watcher.execute(waiting).scalar()
                watcher.rollback()
                if pid is not None or not second.is_alive():
                    break
                second.join(0.05)
            assert pid is not None
            watcher.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        first.rollback()
    second.join(10)
    assert len(raised) == 1 and failures.is_transient(raised[0]), raised


def test_a_batch_stores_what_copy_must_escape_exactly_as_submit_does(store: AckStore) -> None:
    """Tabs, newlines, carriage returns and backslashes in every text and JSON field of a signal
    (COPY's text format escapes them) are stored as one submission after another stores them."""
    odd = 'a\tb\nc\rd\\e"f\\\\n\\t é ✓'
    headers = {"x-odd": odd, "x-number": 10 ** 30, "requested-acks": ["twin-persisted", "org:audit"]}
    batch = [twin_command(thing="org.acme/lamp\\1", path=f"/attributes/{odd}", value={"v": odd, "n": [odd, 1.5, None]},
                          correlation_id=f"{odd}-{i}", **headers) for i in range(3)]
    batch.append(twin_command("delete", correlation_id=f"{odd}-no-value"))
    message_ids = [f"{odd}-m{i}" for i in range(len(batch))]

    def run(submit_batch: bool) -> tuple[list, dict]:
        reset(store.engine)
        if submit_batch:
            answers = store.submit_many(batch, api="connectivity", source=odd, source_message_ids=message_ids)
        else:
            answers = [store.submit(e, api="connectivity", source=odd, source_message_id=m)
                       for e, m in zip(batch, message_ids)]
        return answers, stored(store.engine)

    one_by_one = run(submit_batch=False)
    assert [answer["status"] for answer in one_by_one[0]] == [202] * len(batch)
    first = one_by_one[1]["signals"][0]
    assert (first[1], first[2], first[3], first[8], first[10]) == (odd, f"{odd}-m0", f"{odd}-0", "org.acme:lamp\\1",
                                                                   f"/attributes/{odd}")
    assert first[11] == {"v": odd, "n": [odd, 1.5, None]} and first[12]["x-odd"] == odd
    assert run(submit_batch=True) == one_by_one


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.sampled_from(['"', "\\", '\\"', ",", "{}", " ", "NULL", "a b", ""]),
                                 st.text(st.characters(blacklist_characters="\x00"), max_size=8)), max_size=6))
def test_a_text_array_literal_reads_back_as_its_values(engine: Engine, values: list[str]) -> None:
    """The one-parameter array of keys a batch looks up (text_array): PostgreSQL reads every list
    back as it was, on the one-join path (nothing to escape) as on the escaping one."""
    with engine.connect() as conn:
        assert conn.execute(text("SELECT CAST(:values AS text[])"), {"values": array_literals.text_array(values)}).scalar() == values


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8))
def test_a_whole_number_array_literal_reads_back_as_its_values(engine: Engine, values: list[int]) -> None:
    """The one-parameter array of ids a connector records as carried out (int_array)."""
    with engine.connect() as conn:
        literal = array_literals.int_array(values)
        assert conn.execute(text("SELECT CAST(:values AS bigint[])"), {"values": literal}).scalar() == values
