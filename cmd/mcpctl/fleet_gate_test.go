package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	builtOnce sync.Once
	builtPath string
	builtErr  error
)

// builtMcpctl is this package built once per test run: the gate execs
// programs, so it is tested as the forced command it is.
func builtMcpctl(t testing.TB) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpctl-gate-test-")
		if err != nil {
			builtErr = err
			return
		}
		builtPath = filepath.Join(dir, "mcpctl")
		out, err := exec.Command("go", "build", "-o", builtPath, ".").CombinedOutput()
		if err != nil {
			builtErr = err
			builtPath = string(out)
		}
	})
	if builtErr != nil {
		t.Fatalf("go build: %v\n%s", builtErr, builtPath)
	}
	return builtPath
}

// recorder is a program the gate may run (an upload of the fleet dir,
// named by its digest) that writes the words it was given to $GATE_RECORD.
const recorder = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$GATE_RECORD\"\n"

// gateEnv is a fleet dir holding the recorder as an upload, and the
// pinned config.
type gateEnv struct {
	mcpctl, dir, config, recorder string
}

func newGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	e := &gateEnv{mcpctl: builtMcpctl(t), dir: t.TempDir(), config: "/etc/mcpctl/mcpctl.json"}
	sum := sha256.Sum256([]byte(recorder))
	e.recorder = filepath.Join(e.dir, "blobs", "sha256-"+hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(e.recorder), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.recorder, []byte(recorder), 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// run runs `mcpctl fleet-agent gate` as sshd runs a forced command, with
// original as SSH_ORIGINAL_COMMAND; ran is what the program it started
// received (nil: nothing ran).
func (e *gateEnv) run(t *testing.T, original string) (code int, stderr string, ran []string) {
	t.Helper()
	record := filepath.Join(t.TempDir(), "record")
	cmd := exec.Command(e.mcpctl, "fleet-agent", "gate", "--fleet-dir", e.dir, "--config", e.config)
	cmd.Env = append(os.Environ(), "SSH_ORIGINAL_COMMAND="+original, "GATE_RECORD="+record)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(record); err == nil {
		ran = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	return code, errb.String(), ran
}

// namesOnlyPinned is the gate's oracle: every spelling of --fleet-dir and
// --config in words (any dash count, "=" or the next word, before or after
// "--") names the pinned value.
func namesOnlyPinned(words []string, fleetDir, config string) error {
	for i, w := range words {
		if !strings.HasPrefix(w, "-") {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimLeft(w, "-"), "=")
		want := map[string]string{"fleet-dir": fleetDir, "config": config}[name]
		if want == "" {
			continue
		}
		if !inline {
			if i+1 >= len(words) {
				return &gateLeak{w, "(nothing)"}
			}
			value = words[i+1]
		}
		if value != want {
			return &gateLeak{w, value}
		}
	}
	return nil
}

type gateLeak struct{ flag, value string }

func (l *gateLeak) Error() string { return l.flag + " names " + l.value }

// TestGateBypassSpellings: every way the agent's parser (Go's flag package
// under urfave/cli) would read another fleet dir or config is refused
// before anything runs, through the real binary as the forced command; a
// command the gate lets through names only the key's fleet dir and config.
func TestGateBypassSpellings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcpctl")
	}
	e := newGateEnv(t)
	hexd := strings.Repeat("a", 64)
	rec, self := e.recorder, e.mcpctl
	other, evil := "/tmp/other-fleet", "/tmp/evil.json"
	cases := []struct {
		name, cmd string
		ok        bool
	}{
		// What the controller sends, and the same in other spellings of
		// the pinned values.
		{"facts", rec + " fleet-agent facts --config " + e.config, true},
		{"upload", rec + " fleet-agent upload --fleet-dir " + e.dir + " --sha256 " + hexd, true},
		{"start", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- --config " + e.config + " --json --no-color canary stop", true},
		{"wait", rec + " fleet-agent wait --fleet-dir " + e.dir + " --id r1 --timeout 20s", true},
		{"pinned values in one word", rec + " fleet-agent upload --fleet-dir=" + e.dir + " -sha256=" + hexd, true},
		{"pinned dir with one dash", rec + " fleet-agent wait -fleet-dir " + e.dir + " -id r1", true},
		{"a step without a config", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- canary stop", true},

		// The bypasses.
		{"upload: single dash", rec + " fleet-agent upload -fleet-dir " + other + " --sha256 " + hexd, false},
		{"upload: single dash =", rec + " fleet-agent upload -fleet-dir=" + other + " --sha256 " + hexd, false},
		{"upload: double dash =", rec + " fleet-agent upload --fleet-dir=" + other + " --sha256 " + hexd, false},
		{"facts: single dash config", rec + " fleet-agent facts -config " + evil, false},
		{"facts: single dash config =", rec + " fleet-agent facts -config=" + evil, false},
		{"facts: double dash config =", rec + " fleet-agent facts --config=" + evil, false},
		{"step: -config= after --", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- -config=" + evil + " rollback", false},
		{"step: -config after --", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- -config " + evil + " rollback", false},
		{"step: --config= after --", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- --config=" + evil + " rollback", false},
		{"step: a global flag after the command", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- canary stop -config " + evil, false},
		{"step: repeated, the last another", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- --config " + e.config + " -config " + evil + " canary stop", false},
		{"wait: repeated, the last another", rec + " fleet-agent wait --fleet-dir " + e.dir + " --id r1 -fleet-dir " + other, false},
		{"upload: repeated =", rec + " fleet-agent upload --fleet-dir " + e.dir + " --sha256 " + hexd + " --fleet-dir=" + other, false},
		{"facts: repeated", rec + " fleet-agent facts --config " + e.config + " -config=" + evil, false},
		{"start: flag after the step", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 canary stop -fleet-dir " + other, false},
		{"abbreviated fleet dir", rec + " fleet-agent upload --fleet " + other + " --sha256 " + hexd, false},
		{"abbreviated config", rec + " fleet-agent facts --conf " + evil, false},
		{"three dashes", rec + " fleet-agent facts ---config " + evil, false},
		{"step: abbreviated config", rec + " fleet-agent start --fleet-dir " + e.dir + " --id r1 -- --conf " + evil + " canary stop", false},

		// The real mcpctl as the program: it must never load another file.
		{"this mcpctl, facts -config=", self + " fleet-agent facts -config=" + evil, false},
		{"this mcpctl, upload -fleet-dir", self + " fleet-agent upload -fleet-dir " + other + " --sha256 " + hexd, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stderr, ran := e.run(t, c.cmd)
			if !c.ok {
				if code != 126 || ran != nil || !strings.Contains(stderr, "refused") {
					t.Fatalf("%q: exit %d, ran %q, stderr %q; want 126, refused, nothing run", c.cmd, code, ran, stderr)
				}
				return
			}
			if code != 0 || ran == nil {
				t.Fatalf("%q: exit %d, ran %q, stderr %q; want it run", c.cmd, code, ran, stderr)
			}
			if err := namesOnlyPinned(ran, e.dir, e.config); err != nil {
				t.Fatalf("%q ran %q: %v", c.cmd, ran, err)
			}
		})
	}
}
