"""Every step on Spark Connect: a real server from the pyspark package, with the JDBC jar.

The test starts ``pyspark/sbin/start-connect-server.sh`` on a free port, runs
``ackstore pipeline run --spark-remote sc://…`` against it, checks the ledger, and stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import pytest

from ackstore.ledger.store import AckStore
from tests.support.ledger import twin_command

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def connect_server(spark_remote: str) -> str:
    """The worker's Spark Connect server (tests/conftest.py), started by jobs.spark.connect_server."""
    return spark_remote


def test_pipeline_run_on_spark_connect(connect_server: str, store: AckStore, database_url: str) -> None:
    both = ["twin-persisted", "search-persisted"]
    store.submit(twin_command("create", path="/", value={"attributes": {"on": True}}, correlation_id="a",
                              requested_acks=both))
    store.submit(twin_command("modify", path="/attributes/on", value=False, correlation_id="b"))
    store.submit(twin_command("modify", thing="org.acme/none", path="/attributes/x", correlation_id="c"))
    env = {**os.environ, "ACKSTORE_DATABASE_URL": database_url, "ACKSTORE_IN_DRIVER_ROWS": "0"}  # every step in Spark
    done = subprocess.run(
        [sys.executable, "-m", "ackstore.cli", "pipeline", "run", "--spark-remote", connect_server],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert store.result("a")["status"] == 200 and set(store.result("a")["body"]) == set(both)
    assert store.result("b") == {"status": 204, "body": None, "headers": {"correlation-id": "b"}}
    assert store.result("c")["body"]["error"] == "things:thing.notfound"
    assert store.search("eq(attributes/on,false)")["items"] == ["org.acme:lamp-1"]


def test_the_connect_server_listens_on_this_machine_only(connect_server: str) -> None:
    """It runs whatever a client sends: bound to 127.0.0.1, like Airflow's API server."""
    import ipaddress

    import psutil

    port = int(connect_server.rsplit(":", 1)[1])
    listening = [ipaddress.ip_address(c.laddr.ip) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    # Java may bind the IPv4-mapped form (::ffff:127.0.0.1); unbound it would be :: (every address).
    assert {str(getattr(ip, "ipv4_mapped", None) or ip) for ip in listening} == {"127.0.0.1"}
