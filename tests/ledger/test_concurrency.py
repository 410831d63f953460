"""Concurrent writers on the real PostgreSQL: the database's constraints keep the ledger exact."""

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select, text

from ackstore.ledger.schema import acks, signals
from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, twin_command

WRITERS = 8


def test_concurrent_acks_for_one_label_count_exactly_once(store: AckStore) -> None:
    store.declare("auditor", ["org:audit"])
    correlation_id = store.submit(twin_command(requested_acks=["org:audit"]))["correlationId"]
    with ThreadPoolExecutor(WRITERS) as pool:
        answers = list(
            pool.map(lambda i: store.acknowledge("auditor", ack_message(correlation_id, "org:audit", 200 + i)), range(WRITERS))
        )
    assert answers == [{"status": 204}] * WRITERS
    with store.engine.connect() as conn:
        by_disposition = dict(conn.execute(select(acks.c.disposition, func.count()).group_by(acks.c.disposition)).all())
    assert by_disposition == {"counted": 1, "duplicate": WRITERS - 1}


def test_concurrent_retransmissions_store_one_signal(store: AckStore) -> None:
    def submit(_: int) -> dict:
        return store.submit(twin_command(), source="amqp:q", source_message_id="m-42")

    with ThreadPoolExecutor(WRITERS) as pool:
        answers = list(pool.map(submit, range(WRITERS)))
    assert len({answer["correlationId"] for answer in answers}) == 1
    assert all(answer["status"] == 202 for answer in answers)
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(signals)).scalar_one() == 1


def test_concurrent_declarations_of_one_label_have_one_winner(store: AckStore) -> None:
    with ThreadPoolExecutor(WRITERS) as pool:
        answers = list(pool.map(lambda i: store.declare(f"app-{i}", ["contested:label"]), range(WRITERS)))
    assert sorted(answer["status"] for answer in answers) == [204] + [409] * (WRITERS - 1)


def test_submissions_for_one_thing_commit_in_id_order(store: AckStore) -> None:
    """While one submission for a thing is in flight, the next one for that thing waits (so its
    id is larger and it commits later); other things are not held up."""
    import threading
    import time

    with store.engine.connect() as in_flight:  # as the superuser the tests run as: no login may lock a thing itself
        in_flight.execute(text("SELECT lock_things(ARRAY['org.acme:lamp-1'])"))
        done = threading.Event()
        waiting = threading.Thread(target=lambda: (store.submit(twin_command(correlation_id="later")), done.set()))
        waiting.start()
        assert store.submit(twin_command(thing="org.acme/other", correlation_id="other"))["status"] == 202
        time.sleep(0.5)
        assert not done.is_set()  # held behind the in-flight submission of the same thing
        in_flight.rollback()  # the in-flight transaction ends
        waiting.join(10)
    assert done.is_set()
