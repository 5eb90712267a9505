#!/usr/bin/env bash
# Checks the Ansible collection of contrib/ansible offline: the modules'
# Python compiles, every playbook passes ansible-playbook --syntax-check
# (which also loads the role and its argument specs), and ansible-lint
# (production profile) when installed. Without ansible-playbook it says so
# and passes, except under CI=true (scripts/ensure-deps.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
coll=contrib/ansible/ansible_collections/overdeck/mcp

# Byte code goes to a throwaway directory, not beside the modules.
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
PYTHONPYCACHEPREFIX=$cache python3 -m py_compile "$coll"/plugins/modules/*.py

if ! command -v ansible-playbook >/dev/null 2>&1; then
  msg="lint-ansible: no ansible-playbook (scripts/ensure-deps.sh installs ansible-core): playbooks not checked"
  if [ "${CI:-}" = true ]; then echo "$msg (CI=true: failing)" >&2; exit 1; fi
  echo "$msg" >&2
  exit 0
fi
export ANSIBLE_COLLECTIONS_PATH=$PWD/contrib/ansible ANSIBLE_NOCOLOR=1 ANSIBLE_HOME=$cache/home ANSIBLE_LOCAL_TEMP=$cache/tmp
inv=$cache/inventory.yml
printf 'all:\n  children:\n    mcp_backends:\n      hosts:\n        host1:\n' >"$inv"
for p in "$coll"/playbooks/*.yml; do
  name=overdeck.mcp.$(basename "$p" .yml)
  # Quiet when it passes (it warns that the playbook is inside a collection).
  ansible-playbook -i "$inv" --syntax-check "$name" >/dev/null 2>&1 || ansible-playbook -i "$inv" --syntax-check "$name"
done

if command -v ansible-lint >/dev/null 2>&1; then
  (cd "$coll" && ansible-lint --offline --nocolor -q -p)
else
  msg="lint-ansible: no ansible-lint (scripts/ensure-deps.sh installs it): only the syntax checked"
  if [ "${CI:-}" = true ]; then echo "$msg (CI=true: failing)" >&2; exit 1; fi
  echo "$msg" >&2
fi
