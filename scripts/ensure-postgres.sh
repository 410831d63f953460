#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL answers on 127.0.0.1:5432 (the tests use it).
set -euo pipefail

ready() { pg_isready -q -h 127.0.0.1 -p 5432; }

command -v pg_isready >/dev/null || {
    echo "ensure-postgres: PostgreSQL is not installed; installing Debian's postgresql"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}
ready && exit 0

echo "ensure-postgres: starting the local cluster"
for version in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
done
for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
echo "ensure-postgres: PostgreSQL did not come up on 127.0.0.1:5432" >&2
exit 1
