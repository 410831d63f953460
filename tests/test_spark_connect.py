"""Every step on Spark Connect: a real server from the pyspark package, with the JDBC jar.

The test starts ``pyspark/sbin/start-connect-server.sh`` on a free port, runs
``ackstore pipeline run --spark-remote sc://…`` against it, checks the ledger, and stops it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pyspark
import pytest

from ackstore.ledger.store import AckStore
from jobs.spark import JDBC_JAR
from tests.ledger import twin_command

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"Spark Connect did not listen on {port} within {seconds}s")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory) -> Iterator[str]:
    port = _free_port()
    work = tmp_path_factory.mktemp("spark-connect")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOG_DIR": str(work),
        "SPARK_PID_DIR": str(work),
        "SPARK_IDENT_STRING": f"ackstore-test-{port}",
        "PYSPARK_PYTHON": sys.executable,  # the server's Python workers need the venv (pyarrow, ackstore)
    }
    env.pop("SPARK_REMOTE", None)
    start = [
        str(SPARK_HOME / "sbin" / "start-connect-server.sh"),
        "--master", "local[2]",
        "--jars", JDBC_JAR,
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
    ]
    subprocess.run(start, env=env, check=True, capture_output=True, timeout=120)
    try:
        _wait_for(port, 120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([str(SPARK_HOME / "sbin" / "stop-connect-server.sh")], env=env, capture_output=True, timeout=120)


def test_pipeline_run_on_spark_connect(connect_server: str, store: AckStore, database_url: str) -> None:
    both = ["twin-persisted", "search-persisted"]
    store.submit(twin_command("create", path="/", value={"attributes": {"on": True}}, correlation_id="a",
                              requested_acks=both))
    store.submit(twin_command("modify", path="/attributes/on", value=False, correlation_id="b"))
    store.submit(twin_command("modify", thing="org.acme/none", path="/attributes/x", correlation_id="c"))
    env = {**os.environ, "ACKSTORE_DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, "-m", "ackstore.cli", "pipeline", "run", "--spark-remote", connect_server],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert store.result("a")["status"] == 200 and set(store.result("a")["body"]) == set(both)
    assert store.result("b") == {"status": 204, "body": None, "headers": {"correlation-id": "b"}}
    assert store.result("c")["body"]["error"] == "things:thing.notfound"
    assert store.search("eq(attributes/on,false)")["items"] == ["org.acme:lamp-1"]
