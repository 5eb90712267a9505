#!/usr/bin/env bash
# Installs what the demo and the tests need, only when it is missing: the
# system packages systemd-nspawn (systemd-container), socat, nodejs, npm, zsh,
# openssh-server (sshd for the fleet tests' containers, never started here),
# promtool (prometheus, its service never started), ansible-core and
# ansible-lint (the Ansible collection's test and lint), and the pinned MCP
# clients of testdata/clients (npm ci, again whenever package-lock.json
# changed since the last install).
set -euo pipefail
cd "$(dirname "$0")/.."

# One run at a time on this machine: two checkouts' ./task at once would
# otherwise race for the dpkg lock (the second apt-get failed at once) and
# for policy-rc.d (one run removing it while the other installs). The
# second run waits, then finds installed what the first installed.
exec 9>"${TMPDIR:-/tmp}/mcp-backend-ensure-deps.lock"
flock 9

# install_quietly installs Debian packages with every service start
# forbidden: openssh-server and prometheus would otherwise start their
# daemons on this machine. A policy-rc.d that exits 101 forbids them
# (invoke-rc.d and deb-systemd-invoke obey it); it is removed afterwards, and
# one that was there before is put back.
install_quietly() {
  local policy=/usr/sbin/policy-rc.d saved=""
  if [ -e "$policy" ]; then saved=$(mktemp) && cp -p "$policy" "$saved"; fi
  # shellcheck disable=SC2064
  trap "if [ -n '$saved' ]; then mv -f '$saved' '$policy'; else rm -f '$policy'; fi" EXIT
  printf '#!/bin/sh\n# ensure-deps: no service starts while packages install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  export DEBIAN_FRONTEND=noninteractive
  # Something else on the machine (unattended upgrades) may hold dpkg's
  # lock for a while: wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >&2
  if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
  trap - EXIT
}

missing=()
# go test -race needs cgo, so a C compiler; a fresh Debian has none.
command -v "$(go env CC 2>/dev/null || echo gcc)" >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The completion test runs the generated zsh script in zsh.
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: missing ${missing[*]} and cannot apt-get install here (need root on Debian); the tests needing them will skip (fail under CI=true)" >&2
  else
    echo "ensure-deps: installing ${missing[*]}" >&2
    install_quietly "${missing[@]}"
  fi
fi

# promtool checks the alerting rules of contrib/ in the tests; Debian ships
# it in the prometheus package (installed without starting its server).
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: no promtool and cannot apt-get install prometheus here; the contrib rule check will skip (fail under CI=true)" >&2
  else
    echo "ensure-deps: installing prometheus (for promtool), its service kept from starting" >&2
    install_quietly --no-install-recommends prometheus
    # Not started now, and not at the next boot either.
    if [ -d /run/systemd/system ]; then systemctl disable prometheus.service >/dev/null 2>&1 || true; fi
  fi
fi

# ansible-playbook runs the collection of contrib/ansible against the
# fleet's test containers, and ansible-lint checks it in ./task lint: both
# as Debian 12 ships them (ansible-core 2.14), no recommends (no daemons).
if ! command -v ansible-playbook >/dev/null 2>&1 || ! command -v ansible-lint >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: no ansible-playbook/ansible-lint and cannot apt-get install them here; the Ansible collection test will skip (fail under CI=true)" >&2
  else
    echo "ensure-deps: installing ansible-core and ansible-lint" >&2
    install_quietly --no-install-recommends ansible-core ansible-lint
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
