#!/usr/bin/env bash
# Makes sure Debian's Mosquitto (/usr/sbin/mosquitto) is installed. It does not start the
# machine's broker: the MQTT tests start brokers of their own (tests/support/own_mosquitto.py) with
# docker/mosquitto.conf, each on a free port with its own persistence folder.
set -euo pipefail

[ -x /usr/sbin/mosquitto ] && exit 0

echo "ensure-mosquitto: Mosquitto is not installed; installing Debian's mosquitto"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mosquitto >/dev/null
[ -x /usr/sbin/mosquitto ] || { echo "ensure-mosquitto: /usr/sbin/mosquitto is still missing" >&2; exit 1; }
