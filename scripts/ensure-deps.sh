#!/usr/bin/env bash
# Installs what the demo and the tests need, only when it is missing: the
# system packages systemd-nspawn (systemd-container), socat, nodejs and npm,
# openssh-server (sshd for the fleet tests' containers, never started here),
# and the pinned MCP clients of testdata/clients (npm ci, again whenever
# package-lock.json changed since the last install).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
# go test -race needs cgo, so a C compiler; a fresh Debian has none.
command -v "$(go env CC 2>/dev/null || echo gcc)" >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: missing ${missing[*]} and cannot apt-get install here (need root on Debian); the tests needing them will skip (fail under CI=true)" >&2
  else
    echo "ensure-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # openssh-server is for the fleet tests' containers, which run their own
    # sshd: no service may start on this machine during the install.
    # policy-rc.d exiting 101 forbids every service start; it is removed
    # afterwards unless it was there before.
    own_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d
      own_policy=1
    fi
    trap '[ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
    apt-get install -y -qq "${missing[@]}" >&2
    [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
    own_policy=
    trap - EXIT
  fi
fi

# The clients carry their own Node (>= 22, the conformance suite needs it)
# in node_modules; the system's node and npm only install them.
clients=testdata/clients
stamp=$clients/node_modules/.package-lock.sha256
want=$(sha256sum "$clients/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "ensure-deps: no npm: cannot install $clients; the client conformance tests will skip (fail under CI=true)" >&2
    exit 0
  fi
  echo "ensure-deps: npm ci in $clients" >&2
  (cd "$clients" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" >"$stamp"
fi
