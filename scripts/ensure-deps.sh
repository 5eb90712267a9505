#!/usr/bin/env bash
# Installs the system packages the demo and the real-systemd tests need, only
# when they are missing: systemd-nspawn (systemd-container) and socat.
set -euo pipefail
missing=()
command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
command -v socat >/dev/null 2>&1 || missing+=(socat)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-deps: missing ${missing[*]} and cannot apt-get install here (need root on Debian); real-systemd tests will skip" >&2
  exit 0
fi
echo "ensure-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq "${missing[@]}" >&2
