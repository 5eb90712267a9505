#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: one mcpctl command on an mcp-backend host, read as JSON."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mcpctl
short_description: Run one mcpctl command with --json on an mcp-backend host
description:
  - Runs one C(mcpctl) command on the host with C(--json) and turns its JSON
    document and exit code into the task's result, C(changed) and C(failed).
    It never reads mcpctl's human output.
  - Exit codes are mcpctl's (README, "Exit codes of mcpctl") - 0 success,
    1 failed with production as it was, 2 usage or configuration error,
    3 cutover failed verification and rolled back, 4 a human is needed.
  - Before acting it reads the host's facts (C(mcpctl fleet-agent facts),
    what C(mcpctl fleet) plans with). A host whose production runs the
    build's digest, healthy, with no cutover pending, is on the build -
    canary, stress and cutover do nothing there and report no change.
  - Canary, stress, cutover, rollback and revert run as detached steps
    (C(mcpctl fleet-agent start) and C(wait)) - a transient unit on the
    host whose outcome is a file under I(step_dir), so a dropped connection
    or a dead controller cuts no step short, a run started again with the
    same I(run_id) reads the outcome instead of repeating the step, and
    I(command=revert) finds what a run cut over on the host itself.
  - In check mode nothing changes - rollback and revert run
    C(mcpctl rollback --dry-run), the other commands report their plan from
    the facts.
version_added: "1.0.0"
author:
  - overdeck
options:
  command:
    description:
      - C(facts) and C(status) only read (C(fleet-agent facts); C(status)
        returns both the facts and C(status --json)).
      - C(install) runs C(mcpctl install) when no release is installed.
      - C(canary_start), C(stress), C(canary_stop) prove a build as the
        canary.
      - C(cutover) runs C(mcpctl cutover --arm-rollback).
      - C(rollback) runs C(mcpctl rollback --last) or C(--snapshot).
      - C(revert) rolls back what the run I(run_id) cut over on this host,
        to the snapshot its cutover took (nothing when it never cut over
        here or its cutover did not stay).
      - C(runs) lists the runs whose cutover steps this host holds.
    type: str
    required: true
    choices: [facts, status, install, canary_start, stress, canary_stop, cutover, rollback, revert, runs]
  mcpctl:
    description: The mcpctl on the host that runs every command.
    type: path
    default: /usr/local/bin/mcpctl
  mcpctl_sha256:
    description: When set, the sha256 (hex) I(mcpctl) must have; checked before it runs.
    type: str
  config:
    description: The host's C(mcpctl.json).
    type: path
    default: /etc/mcpctl/mcpctl.json
  build:
    description: The mcp-backend build on the host (install, canary_start, cutover).
    type: path
  build_sha256:
    description:
      - The sha256 (hex, or C(sha256:HEX)) of the build; the build file is
        checked against it before it is used, and it decides whether the
        host is already on the build.
    type: str
  version:
    description: The release name; by default what the build's C(--version) prints.
    type: str
  deadline:
    description: C(cutover --deadline); by default the host's C(rollback.deadline).
    type: str
  skip_canary_check:
    description: C(cutover --skip-canary-check REASON); cut over without a canary verdict on record.
    type: str
  stress_profile:
    description: C(stress --profile).
    type: str
    default: overload
    choices: [overload, spike]
  stress_duration:
    description: C(stress --duration).
    type: str
    default: 5s
  stress_shell_sleep:
    description: C(stress --shell-sleep).
    type: str
    default: 2s
  stress_control_p99:
    description: C(stress --control-p99).
    type: str
    default: 5s
  snapshot:
    description: C(rollback --snapshot ID); without it C(rollback) restores C(--last).
    type: str
  run_id:
    description:
      - The run a step belongs to (1-120 of a-z 0-9 _ -); step ids are
        C(RUN-STEP). Required for C(revert); the other steps default to a
        fresh id.
    type: str
  step_dir:
    description: The fleet directory on the host where steps record their outcomes (C(steps/ID.json)).
    type: path
    default: /var/lib/mcpctl-fleet
  step_timeout:
    description: Seconds to wait for one step's outcome.
    type: int
    default: 600
notes:
  - Supports check mode.
  - Needs only the Python standard library on the host.
"""

EXAMPLES = r"""
- name: Read the host's facts
  overdeck.mcp.mcpctl:
    command: facts
    config: /etc/mcpctl/mcpctl.json
  register: facts

- name: Cut over under an armed rollback (no change when already on the build)
  overdeck.mcp.mcpctl:
    command: cutover
    build: /var/lib/mcpctl-fleet/blobs/sha256-0123...
    build_sha256: 0123...
    run_id: a20261203t101500-1234

- name: Roll back what that run cut over here
  overdeck.mcp.mcpctl:
    command: revert
    run_id: a20261203t101500-1234
"""

RETURN = r"""
rc:
  description: mcpctl's exit code (of the step, for a detached step); absent when nothing ran.
  returned: when mcpctl ran
  type: int
outcome:
  description: The exit code's meaning - ok, failed, usage, rolled-back, human-needed; or skipped, planned.
  returned: always
  type: str
result:
  description: mcpctl's --json document (the rollback plan in check mode).
  returned: when mcpctl printed one
  type: dict
error:
  description: mcpctl's --json error object (message, exitCode, next).
  returned: when mcpctl failed with one
  type: dict
facts:
  description: The host's facts before the command (C(fleet-agent facts) - version, digest, pending, healthy, backend, tunnels).
  returned: always except for runs
  type: dict
on_build:
  description: Whether the host was already on the build (its digest, healthy, nothing pending).
  returned: when build_sha256 is given
  type: bool
status:
  description: C(mcpctl status --json) (production, canary, tunnels, rollback, events, jobs).
  returned: for status
  type: dict
step:
  description: The detached step (id, state, exitCode, started, ended, reused - an earlier outcome of the same id, reused only once the host's facts show it still holds).
  returned: for detached steps
  type: dict
superseded:
  description: Earlier attempts of the step that exited 0 but that the host no longer shows (a cutover after a revert or a rollback, a canary of another build under the same run); the step ran again.
  returned: when there were any
  type: list
  elements: str
snapshot:
  description: The snapshot a cutover took (cutover), or the one a revert restores.
  returned: for cutover and revert when known
  type: str
runs:
  description: Runs whose cutover this host holds, oldest first - run, started, exitCode.
  returned: for runs
  type: list
  elements: dict
"""

import calendar
import glob
import hashlib
import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

# mcpctl's exit codes (README, "Exit codes of mcpctl").
OUTCOMES = {
    0: "ok",
    1: "failed",
    2: "usage",
    3: "rolled-back",
    4: "human-needed",
}
MEANINGS = {
    1: "the operation failed; production is as it was",
    2: "usage or configuration error",
    3: "the cutover failed verification and the host rolled back: production runs the previous build",
    4: "the rollback failed: a human is needed (mcpctl rollback status on the host)",
}

RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,119}$")
STEP_FILE_RE = re.compile(r"^(?P<run>[a-z0-9][a-z0-9_-]*?)-cutover(-(?P<n>[0-9]+))?\.json$")


STAMP_RE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def stamp(text):
    """Seconds since the epoch of an RFC 3339 time (Go's, nanoseconds
    included); None sorts first (float("-inf"))."""
    m = STAMP_RE.match(text or "")
    if not m:
        return float("-inf")
    g = [int(x) for x in m.groups()[:6]]
    t = calendar.timegm((g[0], g[1], g[2], g[3], g[4], g[5], 0, 0, 0)) + float(m.group(7) or 0)
    z = m.group(8)
    if z != "Z":
        off = int(z[1:3]) * 3600 + int(z[4:6]) * 60
        t -= off if z[0] == "+" else -off
    return t


def parse_doc(text):
    """mcpctl prints one JSON document on stdout under --json."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else {"value": doc}


def parse_error(stderr):
    """Under --json a failure is {"error":{...}}, the last line of stderr."""
    lines = [l for l in (stderr or "").strip().splitlines() if l.strip()]
    if not lines:
        return None
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return doc["error"]
    return None


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bare_hex(digest):
    d = (digest or "").strip().lower()
    if d.startswith("sha256:"):
        d = d[len("sha256:"):]
    return d


class Mcpctl(object):
    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.res = {"changed": False, "outcome": "skipped"}

    # --- running mcpctl

    def run(self, args):
        """Runs mcpctl ARGS; returns (rc, doc, error)."""
        rc, out, err = self.m.run_command([self.p["mcpctl"]] + args)
        return rc, parse_doc(out), parse_error(err), err

    def ctl_args(self, *args):
        return ["--config", self.p["config"], "--json", "--no-color"] + list(args)

    def fail(self, msg, **kw):
        self.res.update(kw)
        self.m.fail_json(msg=msg, **self.res)

    def done(self, **kw):
        self.res.update(kw)
        self.m.exit_json(**self.res)

    def facts(self):
        rc, doc, err, raw = self.run(["fleet-agent", "facts", "--config", self.p["config"]])
        if rc != 0 or doc is None:
            msg = (err or {}).get("message") or raw.strip() or "no facts"
            self.fail("mcpctl fleet-agent facts: exit %d: %s" % (rc, msg), rc=rc, outcome=OUTCOMES.get(rc, "failed"))
        return doc

    def verify_file(self, path, want, what):
        if not want:
            return
        if not path or not os.path.isfile(path):
            self.fail("%s %s: no such file on the host" % (what, path))
        got = file_sha256(path)
        if got != bare_hex(want):
            self.fail("%s %s has sha256 %s, want %s: refusing to use it" % (what, path, got, bare_hex(want)))

    def build_args(self):
        args = ["--build", self.p["build"]]
        if self.p["version"]:
            args += ["--version", self.p["version"]]
        return args

    # --- detached steps

    def step_file(self, sid):
        return os.path.join(self.p["step_dir"], "steps", sid + ".json")

    def wait(self, sid, deadline):
        while True:
            left = max(1, min(20, int(deadline - time.time())))
            rc, doc, err, raw = self.run(["fleet-agent", "wait", "--fleet-dir", self.p["step_dir"], "--id", sid, "--timeout", "%ds" % left])
            if rc != 0 or doc is None:
                self.fail("mcpctl fleet-agent wait %s: exit %d: %s" % (sid, rc, (err or {}).get("message") or raw.strip()))
            if doc.get("state") != "running" or time.time() >= deadline:
                return doc

    def step(self, name, args, holds=None):
        """Runs mcpctl ARGS as step RUN-NAME, or reads that step's outcome
        when an earlier invocation of the run started it. A step that ended
        in failure is run again under RUN-NAME-2, -3, ..., and so is one
        that succeeded but whose outcome the host no longer shows:
        holds(out, doc) says whether it does (None: any success holds). An
        earlier record is never taken for what the host runs now."""
        base = "%s-%s" % (self.run_id(), name)
        sid, n = base, 1
        deadline = time.time() + self.p["step_timeout"]
        while os.path.exists(self.step_file(sid)):
            out = self.wait(sid, deadline)
            if out.get("exitCode") == 0:
                if holds is None or holds(out, parse_doc(out.get("stdout")) or {}):
                    return self.step_result(sid, out, reused=True)
                self.res.setdefault("superseded", []).append(sid)
            n += 1
            sid = "%s-%d" % (base, n)
        argv = ["fleet-agent", "start", "--fleet-dir", self.p["step_dir"], "--id", sid, "--"] + self.ctl_args(*args)
        rc, _, err, raw = self.run(argv)
        if rc != 0:
            self.fail("mcpctl fleet-agent start %s: exit %d: %s" % (sid, rc, (err or {}).get("message") or raw.strip()), rc=rc, outcome=OUTCOMES.get(rc, "failed"))
        out = self.wait(sid, deadline)
        if out.get("state") == "running":
            self.fail("step %s still running after %ds: it goes on on the host; run again with the same run_id to read its outcome" % (sid, self.p["step_timeout"]),
                      step={"id": sid, "state": "running"})
        if out.get("state") != "done":
            self.fail("step %s: the host never started it (state %s)" % (sid, out.get("state")), step={"id": sid, "state": out.get("state")})
        return self.step_result(sid, out, reused=False)

    def step_result(self, sid, out, reused):
        rc = out.get("exitCode", 1)
        self.res["step"] = {"id": sid, "state": out.get("state"), "exitCode": rc, "started": out.get("started"), "ended": out.get("ended"), "reused": reused}
        return rc, parse_doc(out.get("stdout")), parse_error(out.get("stderr")), reused

    def judge(self, what, rc, doc, err):
        """Maps an exit code to the result: success returns, anything else fails the task."""
        self.res["rc"] = rc
        self.res["outcome"] = OUTCOMES.get(rc, "failed")
        if doc is not None:
            self.res["result"] = doc
        if err is not None:
            self.res["error"] = err
        if rc == 0:
            return
        detail = ""
        if err:
            detail = ": " + err.get("message", "")
            if err.get("next"):
                detail += " (next: %s)" % err["next"]
        elif doc:
            reasons = (doc.get("refusals") or []) + (doc.get("failures") or []) + (doc.get("problems") or [])
            if reasons:
                detail = ": " + "; ".join(reasons)
        # A cutover that rolled back changed production twice: it ran.
        self.res["changed"] = rc in (3, 4)
        self.fail("mcpctl %s: exit %d (%s)%s" % (what, rc, MEANINGS.get(rc, "failed"), detail))

    def run_id(self):
        rid = self.p["run_id"]
        if not rid:
            rid = time.strftime("a%Y%m%dt%H%M%S", time.gmtime()) + "-%d" % os.getpid()
            self.p["run_id"] = rid
        if not RUN_ID_RE.match(rid):
            self.fail("run_id %r: want 1-120 of a-z 0-9 _ - (starting with a letter or digit)" % rid)
        return rid

    # --- commands

    def on_build(self, facts):
        on = self.runs_build(facts)
        self.res["on_build"] = on
        return on

    def runs_build(self, facts):
        want = bare_hex(self.p["build_sha256"])
        return bool(want) and facts.get("digest") == "sha256:" + want and not facts.get("pending") and bool(facts.get("healthy"))

    def need(self, *names):
        for n in names:
            if not self.p[n]:
                self.fail("command %s needs %s" % (self.p["command"], n))

    def cmd_facts(self):
        self.done(facts=self.facts(), outcome="ok")

    def cmd_status(self):
        f = self.facts()
        rc, doc, err, _ = self.run(self.ctl_args("status"))
        self.judge("status", rc, doc, err)
        self.done(facts=f, status=doc)

    def cmd_install(self):
        self.need("build")
        f = self.res["facts"] = self.facts()
        if f.get("version"):
            on = self.on_build(f) if self.p["build_sha256"] else False
            self.done(msg="production exists (%s): install skipped%s" % (f.get("version"), "" if on else "; a new build goes through cutover"))
        if self.m.check_mode:
            self.done(changed=True, outcome="planned", msg="would install %s" % (self.p["version"] or self.p["build"]))
        self.verify_file(self.p["build"], self.p["build_sha256"], "build")
        rc, doc, err, _ = self.run(self.ctl_args("install", *self.build_args()))
        self.res["changed"] = rc == 0
        self.judge("install", rc, doc, err)
        self.done(changed=True)

    def latest_step(self, name):
        """The record of the newest attempt of this run's step NAME, or None."""
        base = "%s-%s" % (self.run_id(), name)
        sid, n, rec = base, 1, None
        while os.path.exists(self.step_file(sid)):
            try:
                with open(self.step_file(sid)) as f:
                    rec = json.load(f)
            except (IOError, OSError, ValueError):
                rec = {}
            n += 1
            sid = "%s-%d" % (base, n)
        return rec

    def of_build(self, out, doc):
        """A step's document names this build."""
        return doc.get("digest") == "sha256:" + bare_hex(self.p["build_sha256"])

    def after_canary(self, out, doc):
        """A step ran after the newest canary of this run had started."""
        c = self.latest_step("canary")
        return c is not None and stamp(out.get("started")) >= stamp(c.get("started"))

    def prove(self, name, args, needs_build, holds):
        f = self.res["facts"] = self.facts()
        if self.on_build(f):
            self.done(msg="already on the build, verified: %s skipped" % name)
        if self.m.check_mode:
            self.done(changed=True, outcome="planned", msg="would run %s" % name)
        if needs_build:
            self.verify_file(self.p["build"], self.p["build_sha256"], "build")
        rc, doc, err, reused = self.step(name, args, holds)
        self.judge(" ".join(args[:2]) if args[0] == "canary" else args[0], rc, doc, err)
        # The canary and stress change no production; they are reported as
        # changes only when they ran now (a verdict recorded).
        self.done(changed=not reused)

    def cmd_canary_start(self):
        self.need("build")
        # Another build under the same run gets a canary of its own.
        self.prove("canary", ["canary", "start"] + self.build_args(), True, self.of_build)

    def cmd_stress(self):
        p = self.p
        self.prove("stress", ["stress", "--profile", p["stress_profile"], "--duration", p["stress_duration"],
                              "--shell-sleep", p["stress_shell_sleep"], "--control-p99", p["stress_control_p99"]], False, self.after_canary)

    def cmd_canary_stop(self):
        if self.m.check_mode:
            self.done(outcome="planned", msg="would stop the canary")
        # A stop recorded before the newest canary started stopped another.
        rc, doc, err, reused = self.step("canary-stop", ["canary", "stop"], self.after_canary)
        self.judge("canary stop", rc, doc, err)
        doc = doc or {}
        self.done(changed=not reused and bool(doc.get("wasActive") or doc.get("unitRemoved") or doc.get("releaseRemoved")))

    def cmd_cutover(self):
        self.need("build", "build_sha256")
        f = self.res["facts"] = self.facts()
        if self.on_build(f):
            self.done(outcome="ok", msg="already on the build (%s), verified: nothing to cut over" % f.get("version"))
        if f.get("pending"):
            pd = f["pending"]
            self.fail("a cutover to %s is pending there (snapshot %s): let it finish or roll back first" % (pd.get("toVersion"), pd.get("snapshotId")), outcome="failed")
        plan = {"from": f.get("version"), "fromDigest": f.get("digest"), "to": self.p["version"] or "(the build's --version)", "toDigest": "sha256:" + bare_hex(self.p["build_sha256"])}
        if self.m.check_mode:
            self.done(changed=True, outcome="planned", plan=plan, msg="would cut over from %s" % (f.get("version") or "nothing"))
        self.verify_file(self.p["build"], self.p["build_sha256"], "build")
        args = ["cutover", "--arm-rollback"] + self.build_args()
        if self.p["deadline"]:
            args += ["--deadline", self.p["deadline"]]
        if self.p["skip_canary_check"]:
            args += ["--skip-canary-check", self.p["skip_canary_check"]]
        # A cutover this run recorded holds only while the host runs the
        # build: after a revert or a rollback, or for another build under
        # the same run, it is run again.
        rc, doc, err, reused = self.step("cutover", args, lambda out, doc: self.runs_build(self.facts()))
        if doc and doc.get("snapshotId"):
            self.res["snapshot"] = doc["snapshotId"]
        self.judge("cutover", rc, doc, err)
        doc = doc or {}
        self.done(changed=not reused, plan=plan, msg="cut over from %s to %s, verified (snapshot %s)%s" % (
            doc.get("fromVersion"), doc.get("toVersion"), doc.get("snapshotId"), " by an earlier invocation of this run" if reused else ""))

    def rollback(self, name, target):
        if self.m.check_mode:
            rc, doc, err, _ = self.run(self.ctl_args("rollback", "--dry-run", *target))
            self.judge("rollback --dry-run", rc, doc, err)
            act = bool((doc or {}).get("act"))
            self.done(changed=act, outcome="planned" if act else "ok")
        rc, doc, err, reused = self.step(name, ["rollback"] + target)
        self.judge("rollback", rc, doc, err)
        self.done(changed=not reused and not (doc or {}).get("noop", False))

    def cmd_rollback(self):
        self.res["facts"] = self.facts()
        target = ["--snapshot", self.p["snapshot"]] if self.p["snapshot"] else ["--last"]
        self.rollback("rollback", target)

    def cutover_attempts(self, run):
        """The step files of run's cutover, in attempt order."""
        out = []
        for p in glob.glob(os.path.join(self.p["step_dir"], "steps", run + "-cutover*.json")):
            m = STEP_FILE_RE.match(os.path.basename(p))
            if m and m.group("run") == run:
                out.append((int(m.group("n") or 1), p))
        return [p for _, p in sorted(out)]

    def cmd_revert(self):
        self.need("run_id")
        run = self.run_id()
        self.res["facts"] = self.facts()
        attempts = self.cutover_attempts(run)
        sid = "%s-cutover" % run
        if attempts:
            sid = os.path.basename(attempts[-1])[:-len(".json")]
        elif not self.cutover_unit_known(sid):
            self.done(outcome="ok", msg="run %s never cut over here: nothing to revert" % run)
        # A cutover still running (its controller died) is waited for: the
        # host decides how it ends.
        out = self.wait(sid, time.time() + self.p["step_timeout"])
        if out.get("state") == "absent":
            self.done(outcome="ok", msg="run %s never cut over here: nothing to revert" % run)
        if out.get("state") != "done":
            self.fail("run %s's cutover (step %s) is still running here" % (run, sid))
        doc = parse_doc(out.get("stdout")) or {}
        if out.get("exitCode") != 0 or not doc.get("snapshotId"):
            self.done(outcome="ok", msg="run %s's cutover here did not stay (exit %s): nothing to revert" % (run, out.get("exitCode")))
        self.res["snapshot"] = doc["snapshotId"]
        self.rollback("revert", ["--snapshot", doc["snapshotId"]])

    def cutover_unit_known(self, sid):
        """Whether the host has (or had) the step's unit, i.e. the step was
        started and has no outcome yet."""
        rc, doc, _, _ = self.run(["fleet-agent", "wait", "--fleet-dir", self.p["step_dir"], "--id", sid, "--timeout", "1s"])
        return rc == 0 and doc is not None and doc.get("state") != "absent"

    def cmd_runs(self):
        runs = {}
        for p in glob.glob(os.path.join(self.p["step_dir"], "steps", "*-cutover*.json")):
            m = STEP_FILE_RE.match(os.path.basename(p))
            if not m:
                continue
            try:
                with open(p) as f:
                    rec = json.load(f)
            except (IOError, OSError, ValueError):
                continue
            r = runs.setdefault(m.group("run"), {"run": m.group("run"), "started": rec.get("started", ""), "exitCode": rec.get("exitCode")})
            r["started"] = min(r["started"], rec.get("started", "")) or rec.get("started", "")
            if int(m.group("n") or 1) >= r.get("_n", 0):
                r["_n"], r["exitCode"] = int(m.group("n") or 1), rec.get("exitCode")
        out = sorted(runs.values(), key=lambda r: r["started"])
        for r in out:
            r.pop("_n", None)
        self.done(outcome="ok", runs=out)


# ARGUMENT_SPEC is what DOCUMENTATION describes (scripts/lint-ansible.sh
# checks that both agree).
ARGUMENT_SPEC = dict(
    command=dict(type="str", required=True, choices=["facts", "status", "install", "canary_start", "stress", "canary_stop", "cutover", "rollback", "revert", "runs"]),
    mcpctl=dict(type="path", default="/usr/local/bin/mcpctl"),
    mcpctl_sha256=dict(type="str"),
    config=dict(type="path", default="/etc/mcpctl/mcpctl.json"),
    build=dict(type="path"),
    build_sha256=dict(type="str"),
    version=dict(type="str"),
    deadline=dict(type="str"),
    skip_canary_check=dict(type="str"),
    stress_profile=dict(type="str", default="overload", choices=["overload", "spike"]),
    stress_duration=dict(type="str", default="5s"),
    stress_shell_sleep=dict(type="str", default="2s"),
    stress_control_p99=dict(type="str", default="5s"),
    snapshot=dict(type="str"),
    run_id=dict(type="str"),
    step_dir=dict(type="path", default="/var/lib/mcpctl-fleet"),
    step_timeout=dict(type="int", default=600),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    c = Mcpctl(module)
    cmd = module.params["command"]
    if module.check_mode and cmd == "install" and not os.path.exists(module.params["mcpctl"]):
        c.done(changed=True, outcome="planned", msg="would upload mcpctl and install %s" % (module.params["version"] or module.params["build"]))
    # In check mode the upload did not happen: what runs is the host's
    # mcpctl as it is, and only its read-only commands.
    if cmd != "runs" and not module.check_mode:
        c.verify_file(module.params["mcpctl"], module.params["mcpctl_sha256"], "mcpctl")
    getattr(c, "cmd_" + cmd)()


if __name__ == "__main__":
    main()
