"""A RabbitMQ node a test owns: its own node name, AMQP and distribution ports, database and
logs in a temporary folder, only the plugins it names (``rabbitmq_amqp1_0``: AMQP 1.0 on the
same port) — so that killing it disturbs nothing else.

It runs the machine's ``rabbitmq-server`` (the Debian package, ``scripts/ensure-rabbitmq.sh``)
in the foreground as our child, in a process group of its own: the script starts the Erlang VM
as its child, so the node is stopped by signalling that group (our child's PID), never by name.
It registers with the machine's ``epmd``, which the machine's own node has started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pika

from tests.support.own_postgres import OwnServer, free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # the Debian package's, not the root-only wrapper
CTL = SERVER.with_name("rabbitmqctl")


class _DistPortTaken(Exception):
    """The node's Erlang distribution port was in use when it started."""


class OwnRabbitMQ(OwnServer):
    """``start`` (waits until AMQP answers), ``kill`` (SIGKILL of the whole node, as a crash),
    ``close`` (kill whatever runs, remove the folder)."""

    def __init__(self, plugins: tuple[str, ...] = (), user: str = "guest", password: str = "guest") -> None:
        if not SERVER.exists():
            raise RuntimeError(f"no {SERVER}: run scripts/ensure-rabbitmq.sh")
        self.port, self.dist_port = free_port(), free_port()
        self.user, self.password = user, password  # the node's one user (RabbitMQ's default_user), an administrator
        self.root = Path(tempfile.mkdtemp(prefix="ackstore-own-rabbitmq-"))
        self.node = f"ackstore-test-{self.port}@localhost"
        (self.root / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n"
                                                 f"default_user = {user}\ndefault_pass = {password}\n")
        (self.root / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
        (self.root / "rabbitmq-env.conf").write_text("")  # not the machine's (it names the machine's node)
        self.log = self.root / "server.out"
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://{quote(self.user, safe='')}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/"

    @property
    def amqp10_url(self) -> str:
        """The node's AMQP 1.0 URL (with ``rabbitmq_amqp1_0``: the same port; no virtual host path)."""
        return self.url.rstrip("/")

    def _environment(self) -> dict[str, str]:
        root = str(self.root)
        return {
            **os.environ,
            "HOME": root,  # its Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": f"{root}/rabbitmq-env.conf",
            "RABBITMQ_CONFIG_FILE": f"{root}/rabbitmq.conf",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{root}/enabled_plugins",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": f"{root}/mnesia",
            "RABBITMQ_LOG_BASE": f"{root}/log",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_CRASH_DUMP": f"{root}/erl_crash.dump",  # a node that fails to start writes one: ours, not the checkout's
        }

    def start(self, timeout: float = 120) -> None:
        """Start the node; when its distribution port was taken meanwhile (a free port is only
        free when it is picked: a client's connection may get it as its own port), on another."""
        for _ in range(3):
            try:
                return self._start(timeout)
            except _DistPortTaken:
                self.dist_port = free_port()
        self._start(timeout)

    def _start(self, timeout: float) -> None:
        written = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "a") as out:
            self._process = subprocess.Popen([str(SERVER)], env=self._environment(), stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = self.log.read_text()[written:]
                if "dist_port_already_used" in said:
                    self._wait_for_group_to_end(self._process.pid)
                    self._process = None
                    raise _DistPortTaken(self.dist_port)
                raise RuntimeError(f"rabbitmq-server exited ({self._process.returncode}): {said[-3000:]}")
            if self.answers():
                return
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"rabbitmq-server did not answer on {self.port} in {timeout} s: {self.log.read_text()[-3000:]}")

    def answers(self) -> bool:
        try:
            pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1&socket_timeout=2")).close()
        except pika.exceptions.AMQPError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL to the node's process group: the VM dies between two instructions, as in a crash."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group's id is our child's PID
        except ProcessLookupError:
            pass
        process.wait(timeout=30)
        self._wait_for_group_to_end(process.pid)

    def restart(self) -> None:
        """A crash and a start. The node's metadata log is synced before the kill: under load a queue
        declared seconds before a SIGKILL was lost with the node — it recovered its other queues and
        answered ``not-found`` for that one ever after (docs/stack-notes.md: 1 kill in 12; with the
        sync, none in 24). A real node's queues were declared long before its crash; the sync
        touches no message."""
        self.sync_metadata()
        self.kill()
        self.start()

    def errors(self, most: int = 40) -> str:
        """The node's newest ``[error]`` lines and what it logged on its last start's recovery, for a
        failing test's message."""
        log = self.root / "log" / f"{self.node}.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        said = [line for line in lines if "[error]" in line or "Recovering" in line]
        return "\n".join(said[-most:]) or "(nothing)"

    def sync_metadata(self) -> None:
        """Mnesia's log on the node's disk: the queues declared so far survive a SIGKILL."""
        said = subprocess.run([str(CTL), "-n", self.node, "eval", "mnesia:sync_log()."], env=self._environment(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        if said.returncode != 0 or said.stdout.strip() != "ok":  # eval exits 0 with an {error, …} term too
            raise RuntimeError(f"rabbitmqctl could not sync the node's metadata: {said.stdout}{said.stderr}")

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _wait_for_group_to_end(group: int, timeout: float = 30) -> None:
        """The VM's helpers (erl_child_setup, inet_gethost) are in the group too; wait for all."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
