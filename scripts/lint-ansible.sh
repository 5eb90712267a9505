#!/usr/bin/env bash
# Checks the Ansible collection of contrib/ansible offline: the modules'
# Python compiles and their documentation agrees with their options, every
# playbook passes ansible-playbook --syntax-check
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
# Each module's DOCUMENTATION, EXAMPLES and RETURN parse, and its options
# are exactly its ARGUMENT_SPEC (names, types, defaults, choices, required):
# what ansible-test's validate-modules checks, which needs the network
# (PyYAML comes with ansible-core).
PYTHONPYCACHEPREFIX=$cache python3 - "$coll"/plugins/modules/*.py <<'PY'
import ast, sys, yaml
bad = 0
for path in sys.argv[1:]:
    tree = ast.parse(open(path).read(), path)
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                if isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "dict":
                    consts[node.targets[0].id] = {k.arg: ast.literal_eval(k.value) if not isinstance(k.value, ast.Call)
                                                  else {kk.arg: ast.literal_eval(kk.value) for kk in k.value.keywords}
                                                  for k in node.value.keywords}
    for block in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        if block not in consts:
            print("%s: no %s" % (path, block)); bad += 1
            continue
        yaml.safe_load(consts[block])
    doc = yaml.safe_load(consts.get("DOCUMENTATION", "{}")).get("options", {})
    spec = consts.get("ARGUMENT_SPEC", {})
    for name in sorted(set(doc) | set(spec)):
        d, s = doc.get(name), spec.get(name)
        if d is None or s is None:
            print("%s: option %s is only in %s" % (path, name, "DOCUMENTATION" if s is None else "ARGUMENT_SPEC")); bad += 1
            continue
        for key in ("type", "default", "choices", "required"):
            dv, sv = d.get(key), s.get(key)
            if key == "required":
                dv, sv = bool(dv), bool(sv)
            if dv != sv:
                print("%s: option %s: %s is %r in DOCUMENTATION, %r in ARGUMENT_SPEC" % (path, name, key, dv, sv)); bad += 1
sys.exit(1 if bad else 0)
PY

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
