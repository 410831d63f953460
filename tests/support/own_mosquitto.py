"""A Mosquitto broker a test owns: its own port, persistence file and log in a temporary
folder, so that killing it disturbs nothing else (never the machine's broker on 127.0.0.1:1883).

It runs the machine's ``mosquitto`` (the Debian package, ``scripts/ensure-mosquitto.sh``) in the
foreground as our child, in a process group of its own, with the project's
``docker/mosquitto.conf`` plus this broker's ``listener`` and ``persistence_location`` and any
settings the test overrides. ``stop`` is a clean shutdown (SIGTERM: Mosquitto writes its
persistence file on the way out); ``kill`` is a crash (SIGKILL: only what the last autosave
wrote survives).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from tests.support.own_postgres import OwnChildServer, free_port
from tests.support.paths import ROOT

SERVER = Path("/usr/sbin/mosquitto")
PROJECT_CONFIG = ROOT / "docker" / "mosquitto.conf"

Setting = str | int | bool | list | tuple | None


def configuration(base: str, settings: dict[str, Setting]) -> str:
    """``base`` with each setting in ``settings`` replacing every line of the same key (a list
    gives one line per value, e.g. several ``log_type``; None removes the key: Mosquitto's default)."""
    lines = [line for line in base.splitlines()
             if not (line.split() and not line.lstrip().startswith("#") and line.split()[0] in settings)]
    for key, value in settings.items():
        values = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
        lines += [f"{key} {str(v).lower() if isinstance(v, bool) else v}" for v in values]
    return "\n".join(lines) + "\n"


class OwnMosquitto(OwnChildServer):
    """``start`` (waits until an MQTT client connects), ``stop`` (SIGTERM, a clean shutdown),
    ``kill`` (SIGKILL, as a crash), ``restart``, ``close`` (kill whatever runs, remove the folder).

    ``OwnMosquitto(max_queued_messages=50)`` overrides a setting of the project's configuration."""

    name = "mosquitto"

    def __init__(self, credentials: tuple[str, str] | None = None, **overrides: Setting) -> None:
        if not SERVER.exists():
            raise RuntimeError(f"no {SERVER}: run scripts/ensure-mosquitto.sh")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="ackstore-own-mosquitto-"))
        self.credentials = credentials  # (user, password): the broker takes that user alone, no anonymous client
        if credentials is not None:
            subprocess.run(["mosquitto_passwd", "-b", "-c", str(self.root / "passwords"), *credentials], check=True,
                           capture_output=True, timeout=30)
            overrides = {"allow_anonymous": False, "password_file": str(self.root / "passwords"), **overrides}
        self.config = self.root / "mosquitto.conf"
        self.config.write_text(configuration(PROJECT_CONFIG.read_text(), {
            "listener": f"{self.port} 127.0.0.1",
            "persistence_location": f"{self.root}/",
            **overrides,
        }))
        self.log = self.root / "server.out"
        self.database = self.root / "mosquitto.db"  # Mosquitto's persistence_file default
        if os.geteuid() == 0:  # as root Mosquitto drops to the `mosquitto` user, who must write the folder
            user = pwd.getpwnam("mosquitto")
            for owned in (self.root, *self.root.iterdir()):  # its password file too
                os.chown(owned, user.pw_uid, user.pw_gid)
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.credentials is None:
            return f"mqtt://127.0.0.1:{self.port}"
        user, password = (quote(part, safe="") for part in self.credentials)
        return f"mqtt://{user}:{password}@127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, timeout: float = 30) -> None:
        with open(self.log, "a") as out:
            self._process = subprocess.Popen([str(SERVER), "-c", str(self.config)], stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited ({self._process.returncode}): {self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"mosquitto did not answer on {self.port} in {timeout} s: {self.log_tail()}")

    def answers(self) -> bool:
        """An MQTT 3.1.1 client with a clean session connects (and leaves nothing behind)."""
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"ackstore-probe-{uuid.uuid4().hex[:12]}",
                             protocol=mqtt.MQTTv311, clean_session=True)
        answer: list = []
        client.on_connect = lambda _c, _u, _f, reason, _p: answer.append(reason)
        if self.credentials is not None:
            client.username_pw_set(*self.credentials)
        try:
            client.connect("127.0.0.1", self.port, keepalive=10)
            deadline = time.monotonic() + 2
            while not answer and time.monotonic() < deadline:
                client.loop(timeout=0.05)
            client.disconnect()
        except OSError:
            return False
        finally:
            sock = client.socket()
            if sock is not None:  # a connection that got no CONNACK
                sock.close()
        return bool(answer) and not answer[0].is_failure

    def restart(self, crash: bool = False) -> None:
        """Stop (cleanly, or SIGKILL when ``crash``) and start again on the same port and folder."""
        self.kill() if crash else self.stop()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
