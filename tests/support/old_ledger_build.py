"""Build ``tests/support/data/ledger_0006.json``: a ledger written by the old data model's code, with
every kind of signal, attempt, ack and settlement, work pending at every step, and the answers
that code gave for it.

It must run on the code of the old model (commit 5c2bad1 or any commit up to the lean ledger's
migration 0007), not on today's:

    git worktree add /tmp/ackstore-0006 5c2bad1
    mkdir -p /tmp/ackstore-0006/tests/support/data && touch /tmp/ackstore-0006/tests/support/__init__.py
    cp tests/support/old_ledger.py tests/support/old_ledger_build.py /tmp/ackstore-0006/tests/support/
    cp /tmp/ackstore-0006/tests/ledger.py /tmp/ackstore-0006/tests/support/ledger.py   # that commit's helpers
    cd /tmp/ackstore-0006 && /work/main/.venv/bin/python -m tests.support.old_ledger_build
    cp /tmp/ackstore-0006/tests/support/data/ledger_0006.json <this repository>/tests/support/data/

The signals are the ones the suite's own tests make (tests/pipeline/test_settle.py, test_pull.py, …).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from ackstore.ledger import settlements
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.migrate import current_revision, upgrade
from ackstore.ledger.schema import LEDGER_TABLES
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.ledger import ack_message, twin_command
from tests.support.old_ledger import FIXTURE, REVISION, answers, dump

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SOURCE = "amqp-orders"
LABEL = "amqp-orders:audit"


def live_message(correlation_id: str, *, thing: str = "org.acme/lamp-1", subject: str = "ask",
                 **headers: object) -> dict:
    return {
        "topic": f"{thing}/things/live/messages/{subject}",
        "headers": {"correlation-id": correlation_id, "content-type": "text/plain",
                    **{k.replace("_", "-"): v for k, v in headers.items()}},
        "path": f"/outbox/messages/{subject}",
        "value": "hello",
    }


def build(store: AckStore, run) -> None:
    s = store
    assert s.declare("app", ["app:done"]) == {"status": 204}
    assert s.declare("filtering", ["filtering:seen"], filter="eq(attributes/n,-1)") == {"status": 204}
    assert s.declare("responder", [], channels=["live"]) == {"status": 204}
    assert s.declare("audit-service", [LABEL], connection=SOURCE) == {"status": 204}

    # --- the API: every cause of a decision, every ack disposition ------------------------------
    both = ["twin-persisted", "search-persisted"]
    s.submit(twin_command("create", thing="org.acme/t1", path="/", value={"attributes": {"n": 0}},
                          correlation_id="api-create", requested_acks=both))
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/n", value=1, correlation_id="api-custom",
                          requested_acks=["twin-persisted", "app:done"]))
    s.acknowledge("app", ack_message("api-custom", "app:done", 200, value={"ok": 1}, thing="org.acme/t1"))
    s.acknowledge("app", ack_message("api-custom", "app:done", 500, thing="org.acme/t1"))  # duplicate
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/m", value=2, correlation_id="api-unrequested",
                          requested_acks=["twin-persisted"]))
    s.acknowledge("app", ack_message("api-unrequested", "app:done", 200, thing="org.acme/t1"))  # unrequested
    s.submit(twin_command(thing="org.acme/missing", correlation_id="api-error", requested_acks=both))
    s.submit(twin_command(thing="org.acme/t2", path="/", value={}, action="create", correlation_id="api-deadline",
                          requested_acks=["twin-persisted", "app:done"], timeout="1ms"))
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/w", value=3, correlation_id="api-weak",
                          requested_acks=["twin-persisted", "filtering:seen"]))
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/n", value=1, correlation_id="api-same",
                          requested_acks=["search-persisted"]), api="websocket")
    s.submit(twin_command(thing="org.acme/t3", path="/", value={}, action="create", correlation_id="api-accepted",
                          requested_acks=[], response_required=False), api="websocket")
    s.submit(live_message("live-answered", requested_acks=["live-response"], timeout="60s"))
    s.submit(live_message("live-invalid", thing="org.acme/t1", requested_acks=["live-response"], timeout="1s"))
    handed = {m["headers"]["correlation-id"]: m for m in s.pull("responder")}
    invalid, answered = handed["live-invalid"], handed["live-answered"]
    refused = s.respond("responder", {"topic": invalid["topic"].replace("org.acme/t1", "org.acme/t9"), "path": invalid["path"], "status": 200,
                                      "headers": {"correlation-id": "live-invalid"}})
    assert refused["status"] == 400, refused  # kept as invalid
    for status in (200, 500):  # the second response is a duplicate
        assert s.respond("responder", {"topic": answered["topic"], "path": answered["path"], "status": status,
                                       "value": "hi", "headers": {"correlation-id": "live-answered"}}) == {"status": 204}

    # --- a connection: every settlement decision, attempts, carried out or not ------------------
    def conn(message_id: str, thing: str, requested: list[str], **headers: object) -> str:
        envelope = twin_command(thing=thing, path="/", value={"attributes": {"on": True}}, action="create",
                                correlation_id=f"c-{message_id}", requested_acks=requested, **headers)
        answer = s.submit(envelope, api="connectivity", source=SOURCE, source_message_id=message_id)
        assert answer["status"] == 202, answer
        return answer["correlationId"]

    conn("persisted", "org.acme/c1", ["twin-persisted"])
    s.submit(twin_command(thing="org.acme/c-missing", correlation_id="c-reject", requested_acks=["twin-persisted"]),
             api="connectivity", source=SOURCE, source_message_id="reject")
    redeliver = conn("redeliver", "org.acme/c2", ["twin-persisted", LABEL])
    s.acknowledge("audit-service", ack_message(redeliver, LABEL, 503, thing="org.acme/c2"))
    conn("timed-out", "org.acme/c3", ["twin-persisted"], timeout="1ms")
    dead = conn("dead", "org.acme/c7", ["twin-persisted", LABEL])
    s.acknowledge("audit-service", ack_message(dead, LABEL, 500, thing="org.acme/c7"))
    conn("plain", "org.acme/c4", [])
    conn("qos0", "org.acme/c5", [], response_required=False)
    time.sleep(1.1)  # every 1 ms / 1 s deadline has passed
    run("sweep", "validate", "settle")  # c-timed-out: 408 before its change is applied
    run()
    s.acknowledge("app", ack_message("api-deadline", "app:done", 200, thing="org.acme/t2"))  # late
    # the broker gives back what was redelivered: attempt 2 of both, the persisted change carried
    assert s.submit(twin_command(thing="org.acme/c2", path="/", value={"attributes": {"on": True}}, action="create",
                                 correlation_id="c-redeliver"), api="connectivity", source=SOURCE,
                    source_message_id="redeliver")["status"] == 202
    assert s.submit(twin_command(thing="org.acme/c3", path="/", value={"attributes": {"on": True}}, action="create",
                                 correlation_id="c-timed-out"), api="connectivity", source=SOURCE,
                    source_message_id="timed-out")["status"] == 202
    s.acknowledge("audit-service", ack_message(redeliver, LABEL, 200, value="done", thing="org.acme/c2"))
    assert s.submit(twin_command(thing="org.acme/c7", path="/", value={"attributes": {"on": True}}, action="create",
                                 correlation_id="c-dead"), api="connectivity", source=SOURCE,
                    source_message_id="dead")["status"] == 202
    s.acknowledge("audit-service", ack_message(dead, LABEL, 503, thing="org.acme/c7"))  # attempt 2 fails: dead-letter
    pulled = s.pull("app", max=10)
    for message in pulled[:1]:
        s.acknowledge("app", {**ack_message(message["headers"]["correlation-id"], "app:done", 200,
                                            thing="org.acme/t1"),
                              "headers": {"correlation-id": message["headers"]["correlation-id"],
                                          "ack-token": message["headers"]["ack-token"]}})
    run()
    with store.engine.begin() as connection:
        ids = [row[0] for row in connection.exec_driver_sql(
            "SELECT signal_id FROM settlements WHERE carried_out_at IS NULL ORDER BY signal_id LIMIT 3")]
        settlements.record_latest(connection, ids)

    # --- work left at every step ---------------------------------------------------------------
    conn("validated", "org.acme/c6", ["twin-persisted"])  # validated, waiting for its settlement
    run("apply_twin", "index_search", "weak_acks", "sweep", "validate")
    s.submit(twin_command(thing="org.acme/t4", path="/", value={}, action="create", correlation_id="api-decided",
                          requested_acks=["twin-persisted"]))  # decided, not validated yet
    run("apply_twin", "index_search", "weak_acks", "sweep")
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/n", value=5, correlation_id="api-applied",
                          requested_acks=both))  # applied, not indexed
    run("apply_twin")
    s.submit(twin_command(thing="org.acme/t1", path="/attributes/n", value=6, correlation_id="api-received",
                          requested_acks=["twin-persisted", "app:done"]))  # not applied
    s.submit(live_message("live-waiting", requested_acks=["live-response"], timeout="20m"))


def write_fixture(path: Path, revision: str, answers: Callable[[AckStore], dict]) -> None:
    """Build the ledger with this checkout's code, which must be at ``revision``, and write its rows
    and what ``answers`` gives for it to ``path``."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    spark = spark_session("ledger-fixture", cores=2)
    try:
        with scratch_database(SERVER, "old_ledger") as url:
            engine = make_engine(url)
            upgrade(engine)
            assert current_revision(engine) == revision, current_revision(engine)

            def run(*steps: str) -> None:
                settings = PipelineSettings(database_url=url, partitions=2, rules=Settings(max_attempts=2))
                pipeline.run(spark, settings, steps or tuple(pipeline.STEPS))

            store = AckStore(engine, Settings())
            build(store, run)
            data = dump(engine, [table.name for table in LEDGER_TABLES])
            data["answers"] = answers(store)
            engine.dispose()
    finally:
        spark.stop()
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


def main() -> None:
    write_fixture(FIXTURE, REVISION, answers)


if __name__ == "__main__":
    main()
