"""benchmarks.cpu: CPU time by component, on real processes that burn a known amount of CPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg2
import pytest

from benchmarks.cpu import (ELSEWHERE, OTHER, UNKNOWN, CpuProfile, CpuWindow, ProcStat, backend_database,
                            component_ticks, listener_pid, parse_machine_stat, parse_pid_stat, postgres_parts,
                            postmaster_pid, report_lines)
from tests.conftest import ADMIN_URL

BURN = 0.5  # CPU seconds each burner spends
SLACK = 0.25  # its interpreter's start, clock-tick rounding, a busy machine's scheduling
PYTHON = [sys.executable, "-I", "-S"]  # no site: a quick start, so little besides the burn
# reads "go", burns its CPU seconds, says "done"; with "wait", lives on until its stdin closes
BURNER = """import sys, time
sys.stdin.readline()
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
print("done", flush=True)
if sys.argv[2:] == ["wait"]:
    sys.stdin.readline()
"""
# runs a burner (which reads "go" from the stdin they share), reaps it, says "done", lives on
PARENT = f"""import subprocess, sys
subprocess.run({PYTHON!r} + ["-c", sys.argv[1], sys.argv[2]], stdout=subprocess.DEVNULL)
print("done", flush=True)
sys.stdin.readline()
"""


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*PYTHON, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def go(process: subprocess.Popen) -> None:
    """Start its burn and return when it is done."""
    process.stdin.write("go\n")
    process.stdin.flush()
    assert process.stdout.readline() == "done\n"


def finish(process: subprocess.Popen) -> None:
    process.stdin.close()
    process.wait(timeout=10)


def assert_burn(seconds: float) -> None:
    assert BURN - 0.05 <= seconds <= BURN + SLACK, seconds


def test_a_live_child_burning_is_its_components_not_the_benchmarks() -> None:
    child = spawn(BURNER, str(BURN), "wait")
    try:
        with CpuWindow({"burner": [child.pid]}) as window:
            go(child)
    finally:
        finish(child)
    assert_burn(window.profile.seconds["burner"])
    assert window.profile.seconds["benchmark"] < 0.1


def test_a_grandchild_that_exits_inside_the_window_still_counts_once() -> None:
    parent = spawn(PARENT, BURNER, str(BURN))
    try:
        with CpuWindow({"burner": [parent.pid]}) as window:
            go(parent)  # the burner has been reaped: its time is in its parent's reaped time
    finally:
        finish(parent)
    assert_burn(window.profile.seconds["burner"])


def test_a_child_no_component_claims_is_the_benchmarks_even_once_reaped() -> None:
    with CpuWindow() as window:
        child = spawn(BURNER, str(BURN))
        go(child)
        finish(child)
    assert_burn(window.profile.seconds["benchmark"])


def test_a_process_outside_every_component_is_other(tmp_path: Path) -> None:
    said = tmp_path / "said"
    said.touch()
    with CpuWindow() as window:
        # the shell leaves the burner behind: an orphan, no longer below this process; its
        # stdin is empty, so it burns at once, and says "done" into the file
        subprocess.run(["sh", "-c", f'"$0" -I -S -c "$1" {BURN} </dev/null >"$2" &', sys.executable, BURNER, said],
                       check=True)
        deadline = time.monotonic() + 30
        while said.read_text() != "done\n":
            assert time.monotonic() < deadline, "the orphan never finished"
            time.sleep(0.02)
        time.sleep(0.05)  # its exit
    profile = window.profile
    assert profile.seconds[OTHER] >= BURN - 0.05, profile
    assert profile.seconds["benchmark"] < 0.15, profile
    assert 0 < profile.busy <= profile.capacity
    assert profile.cores == os.cpu_count()
    assert profile.capacity == pytest.approx(profile.wall * profile.cores, rel=0.2)


def test_component_ticks_stop_at_another_components_root() -> None:
    table = {1: ProcStat(0, 5, 0), 10: ProcStat(1, 100, 7), 11: ProcStat(10, 20, 3),
             12: ProcStat(10, 40, 0), 13: ProcStat(12, 1, 0), 20: ProcStat(1, 9, 0)}
    ticks = component_ticks(table, {"benchmark": [10], "spark": [12], "postgres": [20, 99]})
    assert ticks == {"benchmark": 100 + 7 + 20 + 3, "spark": 40 + 1, "postgres": 9}


def test_parse_pid_stat_reads_past_a_command_name_with_parentheses_and_spaces() -> None:
    text = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 12 20 0 3 0 99 0 0\n"
    assert parse_pid_stat(text) == ProcStat(ppid=17, ticks=300, reaped=42)


def test_parse_machine_stat_counts_busy_ticks_and_cores() -> None:
    text = ("cpu  100 5 50 800 40 3 2 7 11 0\ncpu0 50 2 25 400 20 1 1 3 5 0\n"
            "cpu1 50 3 25 400 20 2 1 4 6 0\nintr 1 2 3\nctxt 99\n")
    machine = parse_machine_stat(text)
    assert (machine.busy, machine.total, machine.cores, machine.steal) == (160, 1007, 2, 7)


def test_the_listener_of_a_port_is_the_process_holding_the_socket() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert listener_pid(port) == os.getpid()
    assert listener_pid(port) is None


@pytest.mark.db
def test_the_postmaster_of_the_data_directory_is_the_parent_of_our_backend() -> None:
    connection = psycopg2.connect(ADMIN_URL.replace("+psycopg2", ""))
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('data_directory'), pg_backend_pid()")
            data_directory, backend = cursor.fetchone()
        parent = parse_pid_stat(Path(f"/proc/{backend}/stat").read_text()).ppid  # while the backend lives
    finally:
        connection.close()
    assert postmaster_pid(data_directory) == parent
    assert postmaster_pid("/nonexistent") is None


def test_report_lines_give_µs_per_unit_the_busy_cores_the_ceiling_and_postgres_by_client() -> None:
    profile = CpuProfile(wall=10.0, cores=2, busy=16.0, capacity=20.0,
                         seconds={"benchmark": 2.0, "postgres": 6.0, OTHER: 8.0})
    parts = {"server": 1.0, "benchmark": 2.0, ELSEWHERE: 2.0, "exited": 1.0}
    first, second, third = report_lines(profile, 40_000, "signal", ["postgres", "benchmark", "spark"], parts)
    assert first == "CPU µs per signal: postgres 150.0  benchmark 50.0  other 200.0  ours 150.0"
    assert second == ("machine busy 80% of 2 cores (1.60 busy cores): 2,500 signals/s per busy core; "
                      "ceiling 2 cores / ours = 13,333 signals/s")
    assert third == ("postgres by whom it served, µs per signal: server 25.0  benchmark 50.0  other databases 50.0  "
                     "exited 25.0")
    assert len(report_lines(profile, 40_000, "signal", ["postgres"])) == 2
    shared = CpuProfile(wall=10.0, cores=2, busy=10.0, capacity=20.0, stolen=6.0, seconds=profile.seconds)
    assert report_lines(shared, 40_000, "signal", ["postgres"])[1].endswith(
        "; 30% of the cores' time stolen by the hypervisor")


@pytest.mark.parametrize(("title", "database"), [
    ("postgres: 15/main: postgres bench_ingest_1 127.0.0.1(36478) idle", "bench_ingest_1"),
    ("postgres: alice ledger [local] SELECT", "ledger"),
    ("postgres: 15/main: ann db ::1(5) INSERT waiting", "db"),
    ("postgres: 15/main: checkpointer", None),
    ("postgres: 15/main: autovacuum worker bench_ingest_1", None),
    ("postgres: 15/main: logical replication launcher", None),
])
def test_backend_database_reads_a_backends_title(title: str, database: str | None) -> None:
    assert backend_database(title) == database


@contextmanager
def burning_in_postgres(roots: dict[str, list[int]]) -> Iterator[tuple[CpuWindow, int]]:
    """A window over a query that burns CPU in a backend of database "postgres", over TCP from
    this process; the connection stays open while the caller looks."""
    connection = psycopg2.connect(ADMIN_URL.replace("+psycopg2", ""))
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('data_directory')")
            postmaster = postmaster_pid(cursor.fetchone()[0])
            with CpuWindow({**roots, "postgres": [postmaster]}) as window:
                cursor.execute("SELECT count(*) FROM generate_series(1, 3000000)")
            yield window, postmaster
    finally:
        connection.close()


@pytest.mark.db
def test_postgres_parts_give_a_backend_to_the_component_of_its_client() -> None:
    with burning_in_postgres({}) as (window, postmaster):
        parts = postgres_parts(window, postmaster, {"template1"})  # "benchmark" holds the client's socket
    assert 0.1 <= parts["benchmark"] <= window.profile.seconds["postgres"]
    assert sum(parts.values()) == pytest.approx(window.profile.seconds["postgres"])


@pytest.mark.db
@pytest.mark.parametrize(("databases", "part"), [({"template1"}, ELSEWHERE), ({"postgres"}, UNKNOWN)])
def test_postgres_parts_tell_a_backend_of_another_database_by_its_title(databases: set[str], part: str) -> None:
    with burning_in_postgres({"benchmark": []}) as (window, postmaster):  # no component holds the client's socket
        parts = postgres_parts(window, postmaster, databases)
    # other sessions may be busy on the server too: ours is the 0.1 s at least
    assert 0.1 <= parts[part] <= window.profile.seconds["postgres"]
    assert "benchmark" not in parts
