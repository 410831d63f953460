"""A PostgreSQL cluster a test owns: its own data folder and port, so that stopping it
(``pg_ctl stop -m immediate``, what a crash or an OOM kill of the postmaster does) disturbs no
other test and no other helper on the machine.

The binaries are the machine's server package's (``/usr/lib/postgresql/<version>/bin``, installed
by ``scripts/ensure-postgres.sh``). PostgreSQL refuses to run as root: when the tests run as root,
the cluster's processes run as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine

SERVER_BINARIES = Path("/usr/lib/postgresql")


def server_bin() -> Path:
    """The newest installed server's ``bin`` folder (the one with ``initdb``)."""
    found = sorted(SERVER_BINARIES.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise RuntimeError(f"no PostgreSQL server under {SERVER_BINARIES}: run scripts/ensure-postgres.sh")
    return found[-1].parent


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a server of the tests' own that is
    restarted on its port finds it still free, because no client connection is ever given a port
    from there as its own (one from the ephemeral range once was, while a RabbitMQ node was down)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(20_000, low), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 20000 and {low}")


class OwnServer:
    """A server a test owns: started when entered, closed on exit or when its start fails."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class OwnChildServer(OwnServer):
    """A server that is a child process of the test's, in a process group of its own, logging to
    ``log``: stopped by its PID (SIGTERM, then SIGKILL to its group), never by name."""

    name = "the server"
    log: Path
    _process: "subprocess.Popen | None" = None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text()[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM and wait (a server saves what it keeps before it exits); SIGKILL to its group
        if it does not end in ``timeout``."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(process)
            raise RuntimeError(f"{self.name} did not stop in {timeout} s: {self.log_tail()}") from None

    def kill(self) -> None:
        """SIGKILL to its process group: the server dies between two instructions, as in a crash."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            self._kill(process)

    @staticmethod
    def _kill(process: "subprocess.Popen") -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group's id is our child's PID
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


class OwnPostgres(OwnServer):
    """One cluster in a temporary folder: ``start``, ``stop_immediately``, ``restart``; ``close``
    stops it by its postmaster's PID whatever state it is in and removes the folder."""

    def __init__(self) -> None:
        self.bin = server_bin()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="ackstore-own-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._user = _cluster_user()
        if self._user is not None:  # the folder is the cluster user's, as initdb requires
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self._pid: int | None = None
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.root}'\n"
                # Only the postmaster is killed here, never the machine: what the OS has been
                # handed survives, so waiting for the disk proves nothing and costs time.
                "fsync = off\nmax_connections = 60\n"
            )

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log))
        self._pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def stop_immediately(self) -> None:
        """``pg_ctl stop -m immediate``: every session ends at once, no checkpoint; the next
        start recovers from the WAL, as after a crash."""
        self._run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", str(self.data))
        self._pid = None

    def restart(self, down_s: float = 0.0) -> None:
        """Stop immediately, stay down ``down_s`` seconds, start again."""
        self.stop_immediately()
        time.sleep(down_s)
        self.start()

    def ensure_running(self) -> None:
        """Start it if a test left it stopped (a failure between a stop and a start)."""
        if not self.is_up():
            self.start()

    def is_up(self) -> bool:
        return subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                              check=False).returncode == 0

    def create_database(self, name: str, template: str | None = None) -> str:
        """An empty database ``name``, or a copy of the database ``template`` (its sessions are
        ended first: a template must have none); its URL. Names are the test's, never input."""
        admin = make_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                if template:
                    conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         "WHERE datname = %(db)s AND pid <> pg_backend_pid()", {"db": template})
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        finally:
            admin.dispose()
        return self.url(name)

    def create_ledger(self, name: str = "ledger") -> str:
        """A database ``name`` migrated to the newest revision (the roles of migration 0006 are
        the cluster's, made here for the first time); its URL."""
        url = self.create_database(name)
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        return url

    def close(self) -> None:
        """SIGQUIT to the postmaster (immediate shutdown; it ends its children), SIGKILL if it is
        still there after 30 s; then the folder goes."""
        pid = self._pid or _postmaster_pid(self.data)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGQUIT)
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._pid = None
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        options: dict[str, Any] = {}
        if self._user is not None:
            options = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        done = subprocess.run([str(self.bin / program), *args], capture_output=True, text=True, timeout=120,
                              cwd=self.root, check=False, **options)
        if done.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed ({done.returncode}): {done.stderr[-3000:]}\n{log}")


def _cluster_user() -> pwd.struct_passwd | None:
    """None when we are not root (the cluster runs as us); else the ``postgres`` user."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam("postgres")


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (not reaped by us: pg_ctl's postmaster is init's child) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
