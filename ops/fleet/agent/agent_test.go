package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/state"
)

func TestParseStep(t *testing.T) {
	for _, ok := range [][]string{
		{"--config", "/c.json", "--json", "--no-color", "canary", "start", "--build", "/b"},
		{"--config", "/c.json", "--json", "cutover", "--build", "/b", "--arm-rollback"},
		{"--json", "stress", "--profile", "overload"},
		{"--config", "/c.json", "rollback", "--snapshot", "s1"},
		{"-config=/c.json", "-json", "canary", "stop"},
		{"canary", "stop"},
	} {
		if _, err := ParseStep(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
	for _, bad := range [][]string{
		{"--config", "/c.json", "install", "--build", "/b"},
		{"--config", "canary", "start"}, // "canary" is the config's value
		{"unit", "install"},
		{"fleet-agent", "start"},
		{"snapshot", "prune"},
		{},
		{"--config", "/a.json", "--config", "/a.json", "canary", "stop"},
		{"--config", "relative.json", "canary", "stop"},
		{"canary", "stop", "--config", "/c.json"},
		{"canary", "stop", "---config=/c.json"},
		{"cutover", "--build", "/b", "-fleet-dir", "/x"},
		{"--log-level", "debug", "canary", "stop"},
	} {
		if s, err := ParseStep(bad); err == nil {
			t.Errorf("%v allowed: %+v", bad, s)
		}
	}
}

// TestWordsRoundTrip: every command decodes from its own words to itself
// (the transport's encoding is what the agent and the gate decode).
func TestWordsRoundTrip(t *testing.T) {
	step, err := ParseStep([]string{"--config", "/etc/mcpctl/mcpctl.json", "--json", "--no-color", "cutover", "--build", "/b", "--arm-rollback"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Command{
		&Facts{Config: "/etc/mcpctl/mcpctl.json"},
		&Upload{FleetDir: "/var/lib/f", SHA256: strings.Repeat("ab", 32)},
		&Start{FleetDir: "/var/lib/f", ID: "r1-a-1-cutover", Step: step},
		&Exec{FleetDir: "/var/lib/f", ID: "r1-a-1-cutover", Step: step},
		&Wait{FleetDir: "/var/lib/f", ID: "r1", Timeout: DefaultWait},
		&Gate{FleetDir: "/var/lib/f", Config: "/etc/mcpctl/mcpctl.json"},
		&Gate{FleetDir: "/var/lib/f"},
	} {
		words := c.Words()
		got, err := Parse(words[1:])
		if err != nil {
			t.Fatalf("%q: %v", words, err)
		}
		if w := got.Words(); !slices.Equal(w, words) {
			t.Errorf("%q decoded and encoded again is %q", words, w)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	hexd := strings.Repeat("a", 64)
	for _, args := range [][]string{
		{},
		{"shell"},
		{"facts"},
		{"facts", "--config", "/a", "--config", "/a"},
		{"facts", "--conf", "/a"},
		{"facts", "--config", "/a", "extra"},
		{"upload", "--fleet-dir", "relative", "--sha256", hexd},
		{"upload", "--fleet-dir", "/f", "--sha256", "ABC"},
		{"upload", "--fleet-dir", "/f", "--fleet-dir", "/f", "--sha256", hexd},
		{"start", "--fleet-dir", "/f", "--id", "r1", "canary", "stop"},
		{"start", "--fleet-dir", "/f", "--id", "r1"},
		{"start", "--fleet-dir", "/f", "--id", "R1", "--", "canary", "stop"},
		{"wait", "--fleet-dir", "/f", "--id", "r1", "--timeout", "0s"},
		{"wait", "--fleet-dir", "/f", "--id", "../x"},
	} {
		if c, err := Parse(args); err == nil {
			t.Errorf("%q parsed: %+v", args, c)
		} else if ue := (*UsageError)(nil); !errors.As(err, &ue) {
			t.Errorf("%q: %v is not a usage error", args, err)
		}
	}
}

// TestGateCheck: the gate's decisions on the command alone (the real
// binary as the forced command is cmd/mcpctl's TestGateBypassSpellings).
func TestGateCheck(t *testing.T) {
	self := "/usr/local/bin/mcpctl"
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	content := []byte("an uploaded mcpctl")
	sum := sha256.Sum256(content)
	blob := filepath.Join(blobs, "sha256-"+hex.EncodeToString(sum[:]))
	if err := os.WriteFile(blob, content, 0o755); err != nil {
		t.Fatal(err)
	}
	liar := filepath.Join(blobs, "sha256-"+strings.Repeat("0", 64))
	if err := os.WriteFile(liar, content, 0o755); err != nil {
		t.Fatal(err)
	}
	const cfg = "/etc/mcpctl/mcpctl.json"
	cases := []struct {
		name, cmd string
		want      string // the argv run, "" when refused
	}{
		{"facts by this mcpctl", self + " fleet-agent facts --config " + cfg, self + " fleet-agent facts --config " + cfg},
		{"a step with the key's config", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config " + cfg + " --json canary stop",
			blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config " + cfg + " --json canary stop"},
		{"a step is given the key's config", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- canary stop",
			blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config " + cfg + " canary stop"},
		{"other spellings, rebuilt", self + " fleet-agent wait -fleet-dir=" + dir + " -id r1 -timeout=5s",
			self + " fleet-agent wait --fleet-dir " + dir + " --id r1 --timeout 5s"},
		{"upload", self + " fleet-agent upload --fleet-dir " + dir + " --sha256 " + strings.Repeat("a", 64),
			self + " fleet-agent upload --fleet-dir " + dir + " --sha256 " + strings.Repeat("a", 64)},
		{"a blob whose content is not its name", liar + " fleet-agent facts --config " + cfg, ""},
		{"a program outside the fleet dir", "/bin/sh fleet-agent facts --config " + cfg, ""},
		{"a shell command", "rm -rf /", ""},
		{"mcpctl outside fleet-agent", self + " cutover --build /b --arm-rollback", ""},
		{"exec is not for the key", self + " fleet-agent exec --fleet-dir " + dir + " --id r1 -- cutover", ""},
		{"gate itself", self + " fleet-agent gate --fleet-dir " + dir, ""},
		{"shell syntax in a word", self + " fleet-agent facts --config " + cfg + ";id", ""},
		{"command substitution", self + " fleet-agent facts --config $(id)", ""},
		{"empty", "", ""},
		{"upload into another dir", self + " fleet-agent upload --fleet-dir /etc --sha256 " + strings.Repeat("a", 64), ""},
		{"wait in another dir", blob + " fleet-agent wait --fleet-dir /tmp --id r1", ""},
		{"another config", self + " fleet-agent facts --config /tmp/evil.json", ""},
		{"a step with another config", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config /tmp/evil.json canary stop", ""},
		{"a flag in one word, another dir", self + " fleet-agent upload --fleet-dir=/etc --sha256 " + strings.Repeat("a", 64), ""},
	}
	g := &Gate{FleetDir: dir, Config: cfg}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			argv, err := g.Check(self, c.cmd)
			got := strings.Join(argv, " ")
			if got != c.want {
				t.Fatalf("Check(%q) = %q, %v; want %q", c.cmd, got, err, c.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "refused: ") {
				t.Fatalf("error %q does not say refused", err)
			}
		})
	}
}

// TestReceive: an upload is kept under its digest only when it has it;
// a cut or changed upload leaves nothing.
func TestReceive(t *testing.T) {
	dir := t.TempDir()
	content := []byte("build bytes")
	sum := sha256.Sum256(content)
	hexd := hex.EncodeToString(sum[:])
	p, err := Receive(&Upload{FleetDir: dir, SHA256: hexd}, bytes.NewReader(content))
	if err != nil || p != filepath.Join(dir, "blobs", "sha256-"+hexd) {
		t.Fatalf("upload = %q, %v", p, err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, content) {
		t.Fatal("blob content differs")
	}
	// Again: the same path, nothing rewritten.
	if p2, err := Receive(&Upload{FleetDir: dir, SHA256: hexd}, bytes.NewReader(content)); err != nil || p2 != p {
		t.Fatalf("second upload = %q, %v", p2, err)
	}
	other := strings.Repeat("1", 64)
	if _, err := Receive(&Upload{FleetDir: dir, SHA256: other}, bytes.NewReader(content[:5])); err == nil || !strings.Contains(err.Error(), "nothing kept") {
		t.Fatalf("a cut upload: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"+other[:8]+"*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, "blobs", ".*"))
	if len(left)+len(hidden) != 0 {
		t.Fatalf("a failed upload left %v %v", left, hidden)
	}
}

func TestBlobPath(t *testing.T) {
	if got := BlobPath("/var/lib/f", "sha256:abc"); got != "/var/lib/f/blobs/sha256-abc" {
		t.Fatal(got)
	}
}

// TestFlockHeld: the facts see the host's lock held without taking it.
func TestFlockHeld(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, state.LockFile)
	if FlockHeld(lock) {
		t.Fatal("held before anyone took it")
	}
	release, err := state.Dir(dir).Lock("cutover --build x")
	if err != nil {
		t.Fatal(err)
	}
	if !FlockHeld(lock) {
		t.Fatal("not seen held while taken")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if FlockHeld(lock) {
		t.Fatal("still held after release")
	}
}
