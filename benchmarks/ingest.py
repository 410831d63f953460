"""Benchmark: the front door — signals into the ledger, in batches and one at a time.

    python -m benchmarks.ingest --messages 100000 --batch 1000 --single 4000

The signals are what a broker connector stores: Ditto Protocol twin modifies as UTF-8 JSON
bytes requesting ``twin-persisted``, over 10 000 things, each with its own message id.

(a) One process, ``AckStore.submit_many`` in batches of ``--batch``, from one thread and from
    two (each batch its own transaction; Python validates one batch while PostgreSQL stores the
    other): valid signals/s, against the raw-PostgreSQL baselines of the same run — the same
    messages parsed with ``json.loads`` and written into a bare table with the same unique keys,
    one transaction per batch, from one thread: with multi-row INSERTs, and with COPY.
(b) ``AckStore.submit``, one transaction per signal, from 1, 4 and 16 concurrent clients
    (threads, each with its own connection): signals/s, against single-row INSERTs into the
    bare table with the same concurrency.

CPU (``benchmarks.cpu``, from /proc), for submit_many from one thread, for the raw COPY baseline
(the floor) and for 16 submitting clients, over the window of that measurement alone. First line, µs of CPU per signal:
``benchmark`` (this process: the client — parsing, validation, SQLAlchemy, psycopg2),
``postgres`` (the server's postmaster and every child: backends, WAL writer, checkpointer,
autovacuum — the whole server, so another session's queries count there too), ``other`` (the
machine's busy time neither accounts for: other sessions, interrupts) and ``ours`` (benchmark +
postgres, less postgres's live backends of other databases). Second line: the machine's busy
share of its cores, signals/s per busy core, and the ceiling ours implies were it alone on the
machine (cores / ours per signal). Third line: postgres by whom it served — ``benchmark`` (the
backends of this process's connections), ``other databases`` and ``unknown clients`` (live
backends of other sessions), ``server`` (its own processes) and ``exited`` (backends and
autovacuum workers that ended inside the window, everyone's).
"""

from __future__ import annotations

import argparse
import io
import os
import threading
import time
import uuid
from contextlib import nullcontext
from typing import Any, Callable, Sequence

from sqlalchemy import text

from ackstore.ledger.database import database_url, make_engine
from ackstore.ledger.store import AckStore
from ackstore.rules import jsontext
from ackstore.rules.settings import Settings
from benchmarks.cpu import CpuWindow, print_profile
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, postmaster

THINGS = 10_000
CLIENTS = (1, 4, 16)

RAW_TABLE = """
CREATE TABLE raw_signals (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source text NOT NULL, source_message_id text NOT NULL, correlation_id text NOT NULL UNIQUE,
    topic text NOT NULL, path text NOT NULL, value jsonb, headers jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, source_message_id))
"""
RAW_INSERT = """
INSERT INTO raw_signals (source, source_message_id, correlation_id, topic, path, value, headers)
SELECT 'bench', r.message_id, r.correlation_id, r.topic, r.path, r.value, r.headers
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
     AS r(message_id text, correlation_id text, topic text, path text, value jsonb, headers jsonb)
"""


def messages(count: int, prefix: str) -> list[tuple[str, bytes]]:
    """(message id, body) of ``count`` twin modifies, as a broker would deliver them."""
    out = []
    for i in range(count):
        body = {
            "topic": f"org.bench/thing-{i % THINGS}/things/twin/commands/modify",
            "headers": {"correlation-id": f"{prefix}-{i}", "requested-acks": ["twin-persisted"],
                        "content-type": "application/json"},
            "path": "/attributes/counter",
            "value": i,
        }
        out.append((f"{prefix}-m{i}", jsontext.dumps(body).encode()))
    return out


def print_cpu(title: str, window: CpuWindow, count: int, postmaster: int | None, urls: Sequence[str]) -> None:
    """The window's CPU per signal; ``urls``: the benchmark's databases (others' backends are told apart)."""
    databases = {database_url(url).database for url in urls}
    print_profile(title, window, count, "signal", ["benchmark", "postgres"], postmaster, databases)


def _batches(items: Sequence, size: int) -> list[Sequence]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def ackstore_batched(store: AckStore, batch: int, items: list[tuple[str, bytes]], threads: int = 1) -> float:
    chunks = _batches(items, batch)

    def submit(share: Sequence[Sequence[tuple[str, bytes]]]) -> None:
        for chunk in share:
            answers = store.submit_many([body for _, body in chunk], api="connectivity", source="bench",
                                        source_message_ids=[m for m, _ in chunk])
            assert all(answer["status"] == 202 for answer in answers), answers[:3]

    workers = [threading.Thread(target=submit, args=(chunks[n::threads],)) for n in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


def raw_insert(engine: Any, messages: Sequence[tuple[str, bytes]]) -> None:
    """The baseline's write: (message id, body) pairs parsed with a plain JSON decode and
    inserted into the bare table in one transaction."""
    rows = []
    for message_id, body in messages:
        envelope = jsontext.loads(body)
        rows.append({"message_id": message_id, "correlation_id": envelope["headers"]["correlation-id"],
                     "topic": envelope["topic"], "path": envelope["path"], "value": envelope.get("value"),
                     "headers": envelope["headers"]})
    with engine.begin() as conn:
        conn.execute(text(RAW_INSERT), {"rows": jsontext.dumps(rows)})


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def raw_copy(engine: Any, messages: Sequence[tuple[str, bytes]]) -> None:
    """The COPY baseline's write: the same rows as :func:`raw_insert`'s, through COPY's text format."""
    lines = []
    for message_id, body in messages:
        envelope = jsontext.loads(body)
        fields = (message_id, envelope["headers"]["correlation-id"], envelope["topic"], envelope["path"],
                  jsontext.dumps(envelope.get("value")), jsontext.dumps(envelope["headers"]))
        lines.append("bench\t" + "\t".join(field.translate(_COPY_ESCAPES) for field in fields) + "\n")
    with engine.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        cursor.copy_expert("COPY raw_signals (source, source_message_id, correlation_id, topic, path, value, headers) "
                           "FROM STDIN", io.StringIO("".join(lines)))


def raw_engine(url: str, **options: object) -> Any:
    """An engine on ``url`` with the baseline's bare table created."""
    engine = make_engine(url, **options)
    with engine.begin() as conn:
        conn.execute(text(RAW_TABLE))
    return engine


def raw_batched(url: str, batch: int, items: list[tuple[str, bytes]], write: Callable = raw_insert) -> float:
    engine = raw_engine(url)
    started = time.perf_counter()
    for chunk in _batches(items, batch):
        write(engine, chunk)
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def _in_clients(clients: int, items: list[tuple[str, bytes]], submit_one: Callable[[str, bytes], None]) -> float:
    shares = [items[n::clients] for n in range(clients)]

    def client(share: list[tuple[str, bytes]]) -> None:
        for message_id, body in share:
            submit_one(message_id, body)

    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def ackstore_single(url: str, clients: int, items: list[tuple[str, bytes]], cpu: CpuWindow | None = None) -> float:
    """Seconds to submit ``items`` from ``clients`` threads; ``cpu`` is measured over the same
    span (the connections still open at its end, so that their backends are told apart)."""
    engine = make_engine(url, pool_size=clients + 2)
    store = AckStore(engine, Settings())

    def submit_one(message_id: str, body: bytes) -> None:
        answer = store.submit(body, api="connectivity", source="bench", source_message_id=message_id)
        assert answer["status"] == 202, answer

    with cpu or nullcontext():
        seconds = _in_clients(clients, items, submit_one)
    engine.dispose()
    return seconds


def raw_single(url: str, clients: int, items: list[tuple[str, bytes]]) -> float:
    engine = raw_engine(url, pool_size=clients + 2)

    def insert_one(message_id: str, body: bytes) -> None:
        raw_insert(engine, [(message_id, body)])

    seconds = _in_clients(clients, items, insert_one)
    engine.dispose()
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="signals for (a)")
    parser.add_argument("--batch", type=int, default=1000, help="signals per submit_many call in (a)")
    parser.add_argument("--single", type=int, default=4000, help="signals per client count in (b)")
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER),
                        help="a PostgreSQL URL; the benchmark creates and drops its own databases there")
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:6]
    server_pid = postmaster(args.server)
    server = {"postgres": [server_pid]}

    print(f"(a) {args.messages} signals, batches of {args.batch}, one process")
    items = messages(args.messages, f"a{run}")
    with fresh_database(args.server, "ingest_raw") as raw_url, fresh_database(args.server, "ingest") as url, \
            fresh_database(args.server, "ingest2") as url2, fresh_database(args.server, "ingest_copy") as copy_url:
        ours_urls = [raw_url, url, url2, copy_url]
        raw = raw_batched(raw_url, args.batch, items)
        with CpuWindow(server) as copy_cpu:  # the floor: what a bare COPY costs the client and the server
            copied = raw_batched(copy_url, args.batch, items, raw_copy)
        store = AckStore(make_engine(url), Settings())
        with CpuWindow(server) as batched_cpu:
            ours = ackstore_batched(store, args.batch, items)
        store.close()
        store = AckStore(make_engine(url2), Settings())
        two = ackstore_batched(store, args.batch, items, threads=2)
        store.close()
    print(f"    submit_many, 1 thread:  {ours:7.2f} s  {args.messages / ours:10,.0f} signals/s")
    print(f"    submit_many, 2 threads: {two:7.2f} s  {args.messages / two:10,.0f} signals/s")
    print(f"    raw INSERT, 1 thread:   {raw:7.2f} s  {args.messages / raw:10,.0f} rows/s")
    print(f"    raw COPY, 1 thread:     {copied:7.2f} s  {args.messages / copied:10,.0f} rows/s")
    print(f"    ratio submit_many/raw INSERT: {ours / raw:.2f}x (1 thread), {two / raw:.2f}x (2 threads); "
          f"submit_many/raw COPY: {ours / copied:.2f}x (1 thread)")
    print_cpu("CPU, submit_many, 1 thread:", batched_cpu, args.messages, server_pid, ours_urls)
    print_cpu("CPU, raw COPY, 1 thread:", copy_cpu, args.messages, server_pid, ours_urls)

    print(f"(b) {args.single} signals per run, submit one at a time (one transaction each)")
    print("    clients  submit/s   raw/s   ratio")
    for clients in CLIENTS:
        items = messages(args.single, f"b{clients}{run}")
        with fresh_database(args.server, "single_raw") as raw_url, fresh_database(args.server, "single") as url:
            raw = raw_single(raw_url, clients, items)
            single_cpu = CpuWindow(server)
            ours = ackstore_single(url, clients, items, single_cpu)
            single_urls = [raw_url, url]
        print(f"    {clients:7d}  {args.single / ours:8,.0f}  {args.single / raw:6,.0f}  {ours / raw:5.2f}x")
    print_cpu(f"CPU, submit, {clients} clients:", single_cpu, args.single, server_pid, single_urls)


if __name__ == "__main__":
    main()
