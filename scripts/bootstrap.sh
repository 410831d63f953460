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

# apt_install PACKAGE WHY: a Debian package, with sudo unless we are root.
apt_install() {
    echo "bootstrap: installing Debian's $1 ($2)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
}

jar=/usr/share/java/postgresql.jar
[ -f "$jar" ] || apt_install libpostgresql-jdbc-java "$jar"
# Debian's docker-compose checks docker/compose.yaml offline (tests/system/test_docker.py); no engine runs here.
command -v docker-compose >/dev/null || apt_install docker-compose "to validate docker/compose.yaml"
# Debian's Chromium, headless, looks at the Ledger page inside Airflow's UI (tests/system/test_airflow_running.py).
command -v chromium >/dev/null || apt_install chromium "the browser test of the Ledger page"
# Debian's Prometheus (and promtool): the alert rules' unit tests and the end-to-end test that
# scrapes a real `ackstore metrics` (tests/support/own_prometheus.py starts one of its own per test).
command -v promtool >/dev/null || apt_install prometheus "promtool and a Prometheus for the metrics tests"
# Eclipse Ditto's own JavaScript client, the tests' Ditto application (tests/doors/test_ditto_client.py):
# Debian's Node.js and npm, and the client as tests/support/ditto_client/package-lock.json pins it.
command -v npm >/dev/null || apt_install npm "Node.js and npm for Eclipse Ditto's JavaScript client"
client=tests/support/ditto_client
if [ ! -f "$client/node_modules/.installed" ] || [ "$client/package-lock.json" -nt "$client/node_modules/.installed" ]; then
    echo "bootstrap: installing Eclipse Ditto's JavaScript client into $client/node_modules"
    (cd "$client" && npm ci --no-audit --no-fund --silent) && touch "$client/node_modules/.installed"
fi
