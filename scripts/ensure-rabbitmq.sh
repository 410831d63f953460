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
# AMQP 1.0 on the same port, for the demo's AMQP 1.0 connector (the tests start nodes of their own)
amqp10() { rabbitmq-plugins -q is_enabled rabbitmq_amqp1_0 >/dev/null 2>&1 || rabbitmq-plugins -q enable rabbitmq_amqp1_0 >/dev/null || true; }
ready && { amqp10; exit 0; }

echo "ensure-rabbitmq: starting rabbitmq-server"
rabbitmq-server -detached || true
for _ in $(seq 1 60); do ready && { amqp10; exit 0; }; sleep 1; done
echo "ensure-rabbitmq: RabbitMQ did not come up on 127.0.0.1:5672" >&2
exit 1
