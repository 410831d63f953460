#!/usr/bin/env bash
# Installs what ackstore needs, idempotently: the virtualenv at .venv/ with the
# locked Python packages, and Debian's PostgreSQL JDBC driver for Spark.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
stamp=.venv/.ackstore-installed

if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "bootstrap: installing Python packages into .venv/ (about a minute on a fresh machine)"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -c constraints.txt -e '.[dev]'
    touch "$stamp"
fi

jar=/usr/share/java/postgresql.jar
if [ ! -f "$jar" ]; then
    echo "bootstrap: installing Debian's libpostgresql-jdbc-java ($jar)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libpostgresql-jdbc-java >/dev/null
fi

# Debian's docker-compose checks docker/compose.yaml offline (tests/test_docker.py); no engine runs here.
if ! command -v docker-compose >/dev/null; then
    echo "bootstrap: installing Debian's docker-compose (to validate docker/compose.yaml)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq docker-compose >/dev/null
fi
