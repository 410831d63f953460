"""The deployment in ``docker/``, checked offline (no Docker engine runs here): the compose file
is valid for Debian's ``docker-compose``, every command a service runs exists in this project's
environment, every Airflow setting it sets is a real one, and the Dockerfile copies what exists
and bases on the Airflow and Python versions the project pins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ackstore.cli import build_parser
from tests.support.paths import ROOT

COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
BIN = Path(sys.executable).parent
AIRFLOW_CONFIG = Path(__import__("airflow").__file__).parent / "config_templates" / "config.yml"


def compose_config(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    done = compose_config(AIRFLOW_JWT_SECRET="x" * 64)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def test_the_compose_file_is_valid_and_needs_a_jwt_secret(services: dict[str, Any]) -> None:
    assert set(services) == {
        "postgres", "ledger-migrate", "airflow-migrate", "spark-connect",
        "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
        "rabbitmq", "connector-plant-a",
    }
    refused = compose_config(AIRFLOW_JWT_SECRET="")
    assert refused.returncode != 0 and "AIRFLOW_JWT_SECRET" in refused.stderr


def test_every_command_a_service_runs_exists(services: dict[str, Any]) -> None:
    airflow_help = subprocess.run([str(BIN / "airflow"), "--help"], capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "AIRFLOW_HOME": "/tmp/ackstore-airflow-help"}).stdout
    for name, service in services.items():
        if service.get("image", "").startswith(("postgres:", "rabbitmq:")):
            continue  # the official image's own entrypoint
        command = service["command"]
        executable = command[0]
        assert (BIN / executable).exists(), f"{name}: {executable} is not installed by the project"
        if executable == "airflow":
            assert re.search(rf"^\s+{command[1]}\b", airflow_help, re.MULTILINE), f"{name}: airflow {command[1]}"
        elif executable == "ackstore":
            build_parser().parse_args(command[1:])  # exits (fails the test) on an unknown command
        elif executable == "spark-submit":
            main_class = command[command.index("--class") + 1]
            assert main_class == "org.apache.spark.sql.connect.service.SparkConnectServer"
            jars = Path(__import__("pyspark").__file__).parent / "jars"
            assert list(jars.glob("spark-connect_*.jar")), "the Spark Connect server jar ships with pyspark"
            assert command[command.index("--jars") + 1] == "/usr/share/java/postgresql.jar"
        else:
            pytest.fail(f"{name}: no check for {executable}")


def test_every_airflow_setting_is_a_real_option(services: dict[str, Any]) -> None:
    sections = yaml.safe_load(AIRFLOW_CONFIG.read_text())
    for name, service in services.items():
        for variable in service.get("environment", {}):
            match = re.fullmatch(r"AIRFLOW__([A-Z_]+?)__([A-Z_]+)", variable)
            if match:
                section, option = match.group(1).lower(), match.group(2).lower()
                assert option in sections.get(section, {}).get("options", {}), f"{name}: {variable}"


def test_the_services_reach_each_other_by_name(services: dict[str, Any]) -> None:
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["SPARK_REMOTE"] == "sc://spark-connect:15002"
    assert "@postgres:5432/ackstore" in scheduler["AIRFLOW_CONN_ACKSTORE_LEDGER"]
    assert "@postgres:5432/airflow" in scheduler["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert scheduler["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-api-server:8080/")
    init = (ROOT / "docker" / "postgres-init.sql").read_text()
    assert "CREATE DATABASE ackstore" in init and "CREATE DATABASE airflow" in init


def test_the_dockerfile_copies_what_exists_and_pins_what_the_project_pins() -> None:
    dockerfile = DOCKERFILE.read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY"):
            for source in line.split()[2:-1] if "--chown" in line else line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    base = re.search(r"^FROM apache/airflow:(\S+)-python(\S+)$", dockerfile, re.MULTILINE)
    assert base, "the base is the official Airflow image"
    pinned = re.search(r'"apache-airflow==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert base.group(1) == pinned
    assert base.group(2) == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "openjdk-17-jre-headless" in dockerfile and "libpostgresql-jdbc-java" in dockerfile


def test_the_connector_runs_the_mounted_connection_against_the_broker_service(services: dict[str, Any]) -> None:
    import json

    from ackstore.connectors import config

    connector = services["connector-plant-a"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in connector["volumes"]} if isinstance(
        connector["volumes"][0], str) else {v["target"]: v["source"] for v in connector["volumes"]}
    source = Path(mounted["/etc/ackstore/connection.json"])
    connection = config.parse(json.loads(source.read_text()))
    assert connection.uri.startswith("amqp://ackstore:")  # a user of its own, not guest
    definitions = json.loads((ROOT / "docker" / "rabbitmq-definitions.json").read_text())
    assert {s.queue for s in connection.sources} <= {q["name"] for q in definitions["queues"]}
    assert {t.exchange for t in connection.targets} <= {e["name"] for e in definitions["exchanges"]}


def test_nothing_listens_wider_than_it_must(services: dict[str, Any]) -> None:
    """Spark Connect runs whatever a client sends: it is reached on the compose network only.
    RabbitMQ's ports are this host's only, and guest is neither an administrator nor allowed
    from other hosts (RabbitMQ's default loopback_users is kept)."""
    import json

    assert "ports" not in services["spark-connect"]
    assert all(str(port).startswith("127.0.0.1:") for port in services["rabbitmq"]["ports"])
    assert "loopback_users" not in (ROOT / "docker" / "rabbitmq.conf").read_text()
    definitions = json.loads((ROOT / "docker" / "rabbitmq-definitions.json").read_text())
    assert [user["name"] for user in definitions["users"]] == ["ackstore"]
    assert all("administrator" not in user["tags"] for user in definitions["users"])
