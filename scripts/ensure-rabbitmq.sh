#!/usr/bin/env bash
# Makes sure the machine's RabbitMQ answers on 127.0.0.1:5672 (the connector tests use it).
set -euo pipefail

ready() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

command -v rabbitmq-server >/dev/null || {
    echo "ensure-rabbitmq: RabbitMQ is not installed; installing Debian's rabbitmq-server"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq rabbitmq-server >/dev/null
}
ready && exit 0

echo "ensure-rabbitmq: starting rabbitmq-server"
rabbitmq-server -detached || true
for _ in $(seq 1 60); do ready && exit 0; sleep 1; done
echo "ensure-rabbitmq: RabbitMQ did not come up on 127.0.0.1:5672" >&2
exit 1
