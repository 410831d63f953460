"""CPU time by component over a measured window, read from /proc (Linux; standard library only).

A component is a set of root processes and their descendants, a subtree stopping where another
component's root begins (the benchmark process's subtree leaves out the Spark JVM and the
connector it started). Its CPU at an instant is, over its live processes, their own time
(utime + stime, every thread) plus what they have reaped (cutime + cstime: the children they
waited for, each with its own reaped children). A child that exits inside the window is no
longer in the table but in its parent's reaped time, so it still counts, and counts once — as
long as the parent is in the same component. A component *root* that exits inside the window
is reaped by its parent outside the component: end the window before stopping one.

``other`` is the whole machine's busy time (/proc/stat) minus every component: other sessions'
work, the kernel's interrupts, and any process no component claims.

A server shared with other sessions counts their work in its component. For PostgreSQL,
:func:`postgres_parts` splits its time by whom each live backend served: a component (the
client's TCP port leads to the process holding the socket), another database (its title names
it: another session's), the server itself; the backends that exited inside the window are in
the postmaster's reaped time, everyone's together.

    with CpuWindow({"postgres": [postmaster]}) as window:
        ...                                   # the measured work
    window.profile.seconds                    # {"benchmark": 1.2, "postgres": 0.8, "other": 0.1}
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping

PROC = Path("/proc")
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
REAP_GRACE_SECONDS = 0.3
BENCHMARK, OTHER = "benchmark", "other"
LISTEN = "0A"  # a socket's state in /proc/net/tcp
# a backend's process title: "postgres: [cluster: ]user database host(port)|[local] activity"
BACKEND_TITLE = re.compile(r"^postgres: (?:.*?: )?(\S+) (\S+) (?:\[local\]|\S+\((\d+)\))(?: |$)")
SERVER, EXITED, ELSEWHERE, UNKNOWN = "server", "exited", "other databases", "unknown clients"


@dataclass(frozen=True)
class ProcStat:
    """What /proc/<pid>/stat says of a process's CPU, in clock ticks."""

    ppid: int
    ticks: int  # utime + stime: its own threads, live and exited
    reaped: int  # cutime + cstime: the children it has waited for, with what they reaped


@dataclass(frozen=True)
class MachineTicks:
    """The first line of /proc/stat, summed: every core's busy and total ticks."""

    busy: int
    total: int
    cores: int
    steal: int = 0  # ticks the hypervisor gave to other machines: neither busy nor idle for us


@dataclass(frozen=True)
class Sample:
    """One look at the machine and the components, at ``wall`` (perf_counter seconds)."""

    wall: float
    machine: MachineTicks
    components: dict[str, int]
    processes: dict[int, ProcStat]


@dataclass(frozen=True)
class CpuProfile:
    """CPU seconds per component over a window, with ``other``; the machine's busy seconds."""

    wall: float
    cores: int
    busy: float  # the machine's busy CPU seconds, every core
    capacity: float  # the machine's CPU seconds, busy or not
    seconds: dict[str, float]
    stolen: float = 0.0  # CPU seconds the hypervisor took for other machines (a shared host)

    @property
    def busy_fraction(self) -> float:
        return self.busy / self.capacity if self.capacity else 0.0

    @property
    def busy_cores(self) -> float:
        return self.busy_fraction * self.cores

    @property
    def ours(self) -> float:
        """The CPU seconds of every component but ``other``: what the measured work cost."""
        return sum(seconds for name, seconds in self.seconds.items() if name != OTHER)


def parse_pid_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat's text as a :class:`ProcStat`."""
    # comm (field 2) may hold spaces and parentheses: the fields after it start past the last ")"
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state) of proc(5): field n is fields[n - 3]
    return ProcStat(ppid=int(fields[1]), ticks=int(fields[11]) + int(fields[12]),
                    reaped=int(fields[13]) + int(fields[14]))


def parse_machine_stat(text: str) -> MachineTicks:
    """/proc/stat's text: busy is user, nice, system, irq and softirq (guest is inside user);
    idle, iowait and steal are the rest of the total."""
    lines = text.splitlines()
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in lines[0].split()[1:9])
    busy = user + nice + system + irq + softirq
    cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return MachineTicks(busy=busy, total=busy + idle + iowait + steal, cores=cores, steal=steal)


def read_processes(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every live process's :class:`ProcStat`, by pid."""
    table = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                table[int(entry.name)] = parse_pid_stat(Path(entry.path, "stat").read_text())
            except (FileNotFoundError, ProcessLookupError):  # it exited while we looked
                continue
    return table


def members(table: Mapping[int, ProcStat], roots: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    """Each component's live processes: its roots' subtrees, a subtree stopping at another
    component's root."""
    roots = {name: list(pids) for name, pids in roots.items()}
    owner = {pid: name for name, pids in roots.items() for pid in pids}
    children: dict[int, list[int]] = defaultdict(list)
    for pid, stat in table.items():
        children[stat.ppid].append(pid)
    found = {}
    for name, pids in roots.items():
        found[name], stack = [], [pid for pid in pids if pid in table]
        while stack:
            pid = stack.pop()
            found[name].append(pid)
            stack.extend(child for child in children[pid] if owner.get(child, name) == name)
    return found


def component_ticks(table: Mapping[int, ProcStat], roots: Mapping[str, Iterable[int]]) -> dict[str, int]:
    """Each component's ticks: own and reaped time of every one of its :func:`members`."""
    return {name: sum(table[pid].ticks + table[pid].reaped for pid in pids)
            for name, pids in members(table, roots).items()}


def sample(roots: Mapping[str, Iterable[int]], proc: Path = PROC) -> Sample:
    """The machine's ticks and each component's, now."""
    wall = time.perf_counter()
    machine = parse_machine_stat(Path(proc, "stat").read_text())
    table = read_processes(proc)
    return Sample(wall=wall, machine=machine, components=component_ticks(table, roots), processes=table)


def live_seconds(start: Sample, stop: Sample, pids: Iterable[int]) -> float:
    """The own CPU seconds inside the window of these processes, live at ``stop`` (from 0 for
    one born inside it): a part of a component, never more than its live processes did."""
    ticks = 0
    for pid in pids:
        if pid in stop.processes:
            before = start.processes.get(pid)
            ticks += stop.processes[pid].ticks - (before.ticks if before else 0)
    return ticks / TICKS_PER_SECOND


def profile(start: Sample, stop: Sample) -> CpuProfile:
    """What happened between two samples, in seconds; ``other`` is the machine's busy time
    that no component accounts for."""
    seconds = {name: (ticks - start.components.get(name, 0)) / TICKS_PER_SECOND
               for name, ticks in stop.components.items()}
    busy = (stop.machine.busy - start.machine.busy) / TICKS_PER_SECOND
    seconds[OTHER] = busy - sum(seconds.values())
    return CpuProfile(wall=stop.wall - start.wall, cores=stop.machine.cores, busy=busy,
                      capacity=(stop.machine.total - start.machine.total) / TICKS_PER_SECOND, seconds=seconds,
                      stolen=(stop.machine.steal - start.machine.steal) / TICKS_PER_SECOND)


class CpuWindow:
    """A measured window: ``with CpuWindow(roots) as window: ...`` then ``window.profile``.
    ``benchmark`` is this process unless ``roots`` says otherwise; :meth:`add` names a root
    started inside the window (it is counted from 0). A root that is None (not found) is left
    out, and a component without roots is not reported: its time is in ``other``."""

    def __init__(self, roots: Mapping[str, Iterable[int | None]] | None = None) -> None:
        self.roots: dict[str, list[int]] = {BENCHMARK: [os.getpid()]}
        for name, pids in (roots or {}).items():
            self.roots[name] = []
            for pid in pids:
                self.add(name, pid)
        self._start: Sample | None = None
        self._stop: Sample | None = None
        self.profile: CpuProfile | None = None
        self.titles: dict[int, str] = {}
        self.members: dict[str, list[int]] = {}
        self.sockets: list[tuple[int, int, str, int]] = []
        self.owners: dict[int, str] = {}

    def add(self, component: str, pid: int | None) -> None:
        if pid is not None:
            self.roots.setdefault(component, []).append(pid)

    def _roots(self) -> dict[str, list[int]]:
        return {name: pids for name, pids in self.roots.items() if pids}

    def start(self) -> CpuWindow:
        self._start = sample(self._roots())
        return self

    def stop(self) -> CpuProfile:
        if self._start is None:
            raise RuntimeError("the window was never started")
        # a child that exited just now is counted once its parent has reaped it: give the parents
        # a moment (a 1 M-command yardstick's backend, closed as its window ended, was once missed:
        # its 35 s showed as other)
        time.sleep(REAP_GRACE_SECONDS)
        self._stop = sample(self._roots())
        self.profile = profile(self._start, self._stop)
        # the roots' children's titles now, while they are alive (a server's backends say their database)
        roots = {pid for pids in self.roots.values() for pid in pids}
        self.titles = {pid: process_title(pid) for pid, stat in self._stop.processes.items() if stat.ppid in roots}
        self.members = members(self._stop.processes, self._roots())
        # and who holds which TCP socket, before the clients close their connections
        self.sockets, self.owners = read_tcp_sockets(), socket_owners(self.members)
        return self.profile

    def live_seconds(self, pids: Iterable[int]) -> float:
        """:func:`live_seconds` over this (stopped) window."""
        return live_seconds(self._start, self._stop, pids)

    def children(self, parent: int) -> dict[int, str]:
        """The children of root ``parent`` when the window stopped, with their titles."""
        return {pid: title for pid, title in self.titles.items() if self._stop.processes[pid].ppid == parent}

    def __enter__(self) -> CpuWindow:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tcp_sockets(text: str) -> list[tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of each socket in /proc/net/tcp or tcp6's text."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
        sockets.append((local, remote, fields[3], int(fields[9])))
    return sockets


def read_tcp_sockets(proc: Path = PROC) -> list[tuple[int, int, str, int]]:
    """:func:`tcp_sockets` of IPv4 and IPv6."""
    sockets = []
    for table in ("tcp", "tcp6"):
        path = Path(proc, "net", table)
        if path.exists():
            sockets += tcp_sockets(path.read_text())
    return sockets


def listener_pid(port: int, proc: Path = PROC) -> int | None:
    """The process that listens on TCP ``port`` here (root sees every process's sockets),
    or None when none it can see does."""
    targets = {f"socket:[{inode}]" for local, _, state, inode in read_tcp_sockets(proc) if local == port and state == LISTEN}
    for entry in os.scandir(proc):
        if entry.name.isdigit() and targets & _fd_targets(Path(entry.path, "fd")):
            return int(entry.name)
    return None


def _fd_targets(fd_dir: Path) -> set[str]:
    try:
        names = os.listdir(fd_dir)
    except OSError:  # not ours to read, or gone
        return set()
    targets = set()
    for name in names:
        try:
            targets.add(os.readlink(fd_dir / name))
        except OSError:
            continue
    return targets


def process_title(pid: int, proc: Path = PROC) -> str:
    """Its command line as ``ps`` shows it (PostgreSQL writes its backends' titles there)."""
    try:
        return Path(proc, str(pid), "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def backend_database(title: str) -> str | None:
    """The database a PostgreSQL backend serves, from its process title; None for the
    server's own processes (checkpointer, WAL writer, autovacuum, ...)."""
    match = BACKEND_TITLE.match(title)
    return match.group(2) if match else None


def backend_client_port(title: str) -> int | None:
    """The client's TCP port of a PostgreSQL backend, from its process title (None: a Unix
    socket, or not a backend)."""
    match = BACKEND_TITLE.match(title)
    return int(match.group(3)) if match and match.group(3) else None


def postmaster_pid(data_directory: str) -> int | None:
    """The postmaster of the cluster in ``data_directory`` (its postmaster.pid's first line),
    or None when the file cannot be read or names no live process."""
    try:
        pid = int(Path(data_directory, "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if Path(PROC, str(pid)).exists() else None


def socket_owners(components: Mapping[str, Iterable[int]]) -> dict[int, str]:
    """Socket inode -> the component whose process holds it."""
    owners = {}
    for name, pids in components.items():
        for pid in pids:
            for target in _fd_targets(Path(PROC, str(pid), "fd")):
                if target.startswith("socket:["):
                    owners[int(target[8:-1])] = name
    return owners


def postgres_parts(window: CpuWindow, postmaster: int | None, databases: Collection[str]) -> dict[str, float]:
    """``postgres``'s CPU seconds in a stopped window, by whom it served: each live backend's
    client component (found by the client's TCP port, the socket's holder), else ``other
    databases`` (a database not in ``databases``: another session's) or ``unknown clients``; the
    server's own processes (``server``: postmaster, checkpointer, WAL writer, ...); and
    ``exited``: the rest — backends and autovacuum workers that ended inside the window."""
    if postmaster is None or "postgres" not in window.profile.seconds:
        return {}
    sockets, owners = window.sockets, window.owners
    server_ports = {local for local, _, state, inode in sockets if state == LISTEN and owners.get(inode) == "postgres"}
    # a client's side of a connection to the server: its port -> the component holding it
    by_port = {local: owners[inode] for local, remote, _, inode in sockets
               if remote in server_ports and owners.get(inode, "postgres") != "postgres"}
    parts: dict[str, float] = defaultdict(float)
    parts[SERVER] = window.live_seconds([postmaster])
    for pid, title in window.children(postmaster).items():
        client = by_port.get(backend_client_port(title))
        database = backend_database(title)
        part = SERVER if database is None else client or (UNKNOWN if database in databases else ELSEWHERE)
        parts[part] += window.live_seconds([pid])
    parts[EXITED] = window.profile.seconds["postgres"] - sum(parts.values())
    return dict(parts)


def ours_per_unit(window: CpuProfile, count: int, postgres: Mapping[str, float] | None = None) -> float:
    """CPU seconds per unit of every component but ``other``, less postgres's backends of other
    databases (:func:`postgres_parts`): what the measured work cost, per unit."""
    return (window.ours - (postgres or {}).get(ELSEWHERE, 0.0)) / count


def report_lines(window: CpuProfile, count: int, unit: str, order: Iterable[str],
                 postgres: Mapping[str, float] | None = None) -> list[str]:
    """µs of CPU per ``unit`` by component (in ``order``, then ``other``) and ours (every
    component but other, less postgres's backends of other databases); the machine's busy share,
    the rate per busy core, and the ceiling were ours alone on every core (cores / ours per unit),
    with the share of the cores' time the hypervisor gave to other machines when there was any;
    then, given :func:`postgres_parts`, postgres's µs per ``unit`` by whom it served."""
    per = {name: seconds / count * 1e6 for name, seconds in window.seconds.items()}
    names = [name for name in order if name in per] + [OTHER]
    ours = ours_per_unit(window, count, postgres)
    rate = count / window.wall
    ceiling = window.cores / ours if ours > 0 else float("inf")
    lines = [
        f"CPU µs per {unit}: " + "  ".join(f"{name} {per[name]:.1f}" for name in names) + f"  ours {ours * 1e6:.1f}",
        f"machine busy {window.busy_fraction:.0%} of {window.cores} cores ({window.busy_cores:.2f} busy cores): "
        f"{rate / window.busy_cores if window.busy_cores else 0:,.0f} {unit}s/s per busy core; "
        f"ceiling {window.cores} cores / ours = {ceiling:,.0f} {unit}s/s"
        + (f"; {window.stolen / window.capacity:.0%} of the cores' time stolen by the hypervisor"
           if window.capacity and window.stolen / window.capacity >= 0.01 else ""),
    ]
    if postgres:
        lines.append("postgres by whom it served, µs per " + unit + ": "
                     + "  ".join(f"{name} {seconds / count * 1e6:.1f}" for name, seconds in postgres.items()))
    return lines


def print_profile(title: str, window: CpuWindow, count: int, unit: str, order: Iterable[str],
                  postmaster: int | None = None, databases: Collection[str] = ()) -> float:
    """:func:`report_lines` of a stopped window under ``title``, indented as the benchmarks print;
    ``databases`` are the benchmark's own on the server of ``postmaster``. Returns ours in µs
    per unit (:func:`ours_per_unit`), for a goal's line."""
    parts = postgres_parts(window, postmaster, databases)
    print(f"    {title}")
    for line in report_lines(window.profile, count, unit, order, parts):
        print(f"        {line}")
    return ours_per_unit(window.profile, count, parts) * 1e6


def peak_rss_mib() -> dict[str, float]:
    """The peak resident memory, MiB, of this process and of the largest child it has waited for
    (a connector subprocess, say): what stays flat whatever the backlog, or does not."""
    import resource

    return {"this process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "largest child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
