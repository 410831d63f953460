"""Benchmark: Ditto's HTTP API over the ledger (issue 51) — ``ackstore serve`` under load.

    python -m benchmarks.http --requests 20000 --connections 50 --sockets 10 --socket-commands 50000 --held 10000

(a) ``PUT /api/2/things/<id>/attributes/counter`` with ``response-required=false`` over
    ``--connections`` keep-alive connections (no hold: 202 at once, the request stored): requests/s,
    against ``benchmarks.ingest``'s ``submit_many`` of the same twin modifies in batches of 500 in
    the same run (what the door's micro-batching approaches). CPU per request by component, as
    ``benchmarks.broker`` prints it: ``server`` (the ``ackstore serve`` process), ``postgres`` (the
    whole server), ``benchmark`` (this process: the load generator — asyncio over raw sockets, the
    requests prebuilt — kept apart: it is not the door's cost), ``other``; and ``ours`` less the
    load generator: the door's cost a request (issue 51's goal: ≤ 200 µs, ≥ 5 000 requests/s).
(c) Ditto's WebSocket: ``--socket-commands`` twin modifies (``response-required: false``: stored,
    not answered) sent over ``--sockets`` sockets to ``/ws/2``, each as fast as the socket takes
    them: commands/s from the first frame to the last stored, and CPU a command by component, as in
    (a) (issue 51's goal: ≥ 10 000/s over 10 sockets, ≤ 100 µs a command).
(b) ``--held`` requests held at once (``timeout=60s``, one connection each): once all are stored
    the pipeline runs (``ackstore pipeline run``, a subprocess), and every request must be answered
    once, by its decision (201). Printed: the seconds from the pipeline's start to the last answer,
    and the server's peak resident memory (VmHWM; the goal: ≤ 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Sequence

from ackstore.ledger.database import make_engine
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from benchmarks.cpu import CpuWindow, print_profile
from benchmarks.ingest import ackstore_batched, messages
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, postmaster

ACKSTORE = str(Path(sys.executable).parent / "ackstore")
THINGS = 10_000
_RUNNING = re.compile(r"running on http://([^:]+):(\d+)")
ORDER = ["server", "postgres", "benchmark"]


class Door:
    """``ackstore serve`` on a free port, for one database; its log drained."""

    def __init__(self, url: str) -> None:
        # --trusting-database: the benchmark's server asks no password (decisions #134)
        self.process = subprocess.Popen([ACKSTORE, "--database-url", url, "serve", "--listen", "127.0.0.1:0",
                                         "--trusting-database"],
                                        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.address: tuple[str, int] | None = None
        self.log: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + 60
        while self.address is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ackstore serve did not start: " + "".join(self.log))
            time.sleep(0.05)

    def _drain(self) -> None:
        for line in self.process.stderr:  # type: ignore[union-attr]
            self.log.append(line)
            found = _RUNNING.search(line)
            if found:
                self.address = (found.group(1), int(found.group(2)))

    def peak_rss_mib(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(90)


def basic(login: str) -> str:
    """The ``Authorization`` value the load generator sends (the door trusts the server: any password)."""
    return "Basic " + base64.b64encode(f"{login}:bench".encode()).decode()


def request_bytes(path: str, body: bytes, login: str, extra: str = "") -> bytes:
    return (f"PUT {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: {basic(login)}\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> int:
    """One response's status, its body read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    if length:
        await reader.readexactly(int(length.group(1)))
    return status


async def _keep_alive(address: tuple[str, int], requests: list[bytes], statuses: list[int]) -> None:
    reader, writer = await asyncio.open_connection(*address)
    for request in requests:
        writer.write(request)
        statuses.append(await _answer(reader))
    writer.close()


def load(address: tuple[str, int], requests: list[bytes], connections: int) -> tuple[float, list[int]]:
    """Send ``requests`` over ``connections`` keep-alive connections, one after another on each."""
    statuses: list[int] = []

    async def run() -> None:
        await asyncio.gather(*(_keep_alive(address, requests[n::connections], statuses) for n in range(connections)))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started, statuses


def put_requests(count: int, prefix: str, login: str, extra: str) -> list[bytes]:
    return [request_bytes(f"/api/2/things/org.bench:thing-{i % THINGS}/attributes/counter", str(i).encode(), login,
                          f"correlation-id: {prefix}-{i}\r\n{extra}") for i in range(count)]


def socket_load(address: tuple[str, int], url: str, frames: list[str], sockets: int, login: str) -> float:
    """Send ``frames`` over ``sockets`` WebSockets, each as fast as it takes them; the seconds until
    every one is stored (sockets open until then: a socket's frames still being stored when it
    closes are its own to lose, as Ditto's)."""
    from websockets.asyncio.client import connect

    engine = make_engine(url)
    auth = {"authorization": basic(login)}

    def stored() -> int:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT count(*) FROM signals WHERE api = 'websocket'").scalar_one()

    async def one(part: list[str], done: asyncio.Event) -> None:
        async with connect(f"ws://{address[0]}:{address[1]}/ws/2", additional_headers=auth, max_queue=None) as socket:
            for frame in part:
                await socket.send(frame)
            await done.wait()

    async def run() -> float:
        done = asyncio.Event()
        started = time.perf_counter()
        senders = [asyncio.create_task(one(frames[n::sockets], done)) for n in range(sockets)]
        while stored() < len(frames):
            if any(sender.done() and sender.exception() for sender in senders):
                raise next(sender.exception() for sender in senders if sender.done() and sender.exception())
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        done.set()
        await asyncio.gather(*senders)
        return seconds

    try:
        return asyncio.run(run())
    finally:
        engine.dispose()


def socket_frames(count: int, prefix: str) -> list[str]:
    return [json.dumps({"topic": f"org.bench/thing-{i % THINGS}/things/twin/commands/modify",
                        "path": "/attributes/counter", "value": i,
                        "headers": {"correlation-id": f"{prefix}-{i}", "response-required": False}})
            for i in range(count)]


def door_cost(title: str, cpu: CpuWindow, count: int, unit: str, goal_us: int, server_pid: int | None,
              databases: set[str]) -> None:
    """The CPU a ``unit`` by component, and the door's cost: ours less the load generator's."""
    total = print_profile(title, cpu, count, unit, ORDER, server_pid, databases)
    generator = cpu.profile.seconds.get("benchmark", 0.0) / count * 1e6
    print(f"        the door's cost (ours less the load generator): {total - generator:.1f} µs a {unit} "
          f"(goal ≤ {goal_us})")


def held(address: tuple[str, int], url: str, door: Door, count: int, login: str) -> None:
    """``count`` requests held at once; the pipeline run once they are stored; each answered once."""
    engine = make_engine(url)
    requests = [request_bytes(f"/api/2/things/org.bench:held-{i}", b"{}", login,
                              f"correlation-id: held-{i}\r\ntimeout: 60s\r\n") for i in range(count)]
    statuses: list[int] = []
    timings: dict[str, float] = {}

    async def one(request: bytes) -> None:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(request)
        statuses.append(await _answer(reader))
        writer.close()

    async def pipeline_once_stored() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(statuses) < count:  # every one answered: none to wait for
            with engine.connect() as conn:
                stored = conn.exec_driver_sql("SELECT count(*) FROM signals WHERE correlation_id LIKE 'held-%%'").scalar_one()
            if stored >= count:
                break
            await asyncio.sleep(0.5)
        timings["pipeline"] = time.perf_counter()
        process = await asyncio.create_subprocess_exec(ACKSTORE, "--database-url", url, "pipeline", "run",
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await process.wait()

    async def run() -> None:
        await asyncio.gather(*(one(request) for request in requests), pipeline_once_stored())

    asyncio.run(run())
    answered = time.perf_counter()
    engine.dispose()
    by_status = {status: statuses.count(status) for status in sorted(set(statuses))}
    print(f"    {len(statuses)} answers for {count} held requests: {by_status}; the last "
          f"{answered - timings['pipeline']:.1f} s after the pipeline started; the server's peak RSS "
          f"{door.peak_rss_mib():,.0f} MiB")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000, help="requests for (a)")
    parser.add_argument("--connections", type=int, default=50, help="keep-alive connections for (a)")
    parser.add_argument("--held", type=int, default=10_000, help="requests held at once for (b); 0: none")
    parser.add_argument("--sockets", type=int, default=10, help="WebSockets for (c)")
    parser.add_argument("--socket-commands", type=int, default=50_000, help="commands for (c); 0: none")
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER),
                        help="a PostgreSQL URL; the benchmark creates and drops its own databases there")
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:6]
    server_pid = postmaster(args.server)
    login = make_engine(args.server).url.username or "postgres"

    print(f"(a) {args.requests} PUTs, response-required=false, over {args.connections} keep-alive connections")
    with fresh_database(args.server, "http") as url, fresh_database(args.server, "http_ingest") as ingest_url:
        store = AckStore(make_engine(ingest_url), Settings())
        items = messages(args.requests, f"i{run}")
        with CpuWindow({"postgres": [server_pid]}) as ingest_cpu:
            batched = ackstore_batched(store, 500, items)
        store.close()
        door = Door(url)
        try:
            requests = put_requests(args.requests, f"a{run}", login, "response-required: false\r\n")
            with CpuWindow({"postgres": [server_pid], "server": [door.process.pid]}) as cpu:
                seconds, statuses = load(door.address, requests, args.connections)  # type: ignore[arg-type]
            wrong = {status: statuses.count(status) for status in set(statuses) if status != 202}
            print(f"    HTTP PUT:          {seconds:7.2f} s  {args.requests / seconds:10,.0f} requests/s"
                  + (f"  NOT 202: {wrong}" if wrong else ""))
            print(f"    submit_many (500): {batched:7.2f} s  {args.requests / batched:10,.0f} signals/s  "
                  f"(HTTP / submit_many: {seconds / batched:.2f}x)")
            databases = {url.rsplit("/", 1)[1], ingest_url.rsplit("/", 1)[1]}
            door_cost("CPU, HTTP PUT:", cpu, args.requests, "request", 200, server_pid, databases)
            print_profile("CPU, submit_many (500):", ingest_cpu, args.requests, "signal", ["benchmark", "postgres"],
                          server_pid, databases)
            if args.socket_commands:
                print(f"(c) {args.socket_commands} twin modifies, response-required: false, over {args.sockets} "
                      "WebSockets")
                frames = socket_frames(args.socket_commands, f"c{run}")
                with CpuWindow({"postgres": [server_pid], "server": [door.process.pid]}) as socket_cpu:
                    seconds = socket_load(door.address, url, frames, args.sockets, login)  # type: ignore[arg-type]
                print(f"    WebSocket commands: {seconds:7.2f} s  {args.socket_commands / seconds:10,.0f} commands/s")
                door_cost("CPU, WebSocket commands:", socket_cpu, args.socket_commands, "command", 100, server_pid,
                          databases)
            if args.held:
                print(f"(b) {args.held} requests held at once (timeout 60s), then the pipeline")
                held(door.address, url, door, args.held, login)  # type: ignore[arg-type]
        finally:
            door.stop()


if __name__ == "__main__":
    main()
