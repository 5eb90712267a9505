package agent

import (
	"slices"
	"strings"
	"testing"
)

const (
	fuzzSelf     = "/usr/local/bin/mcpctl"
	fuzzFleetDir = "/var/lib/mcpctl-fleet"
	fuzzConfig   = "/etc/mcpctl/mcpctl.json"
)

// FuzzGate: whatever original command a restricted key sends, the command
// the gate runs names only the key's fleet dir and config, in any spelling
// a flag parser could read (one or more dashes, "=" or the next word,
// before or after "--"), runs this mcpctl, and is the canonical encoding
// of what it parsed (decoding it again gives the same words).
func FuzzGate(f *testing.F) {
	hexd := strings.Repeat("a", 64)
	for _, s := range []string{
		fuzzSelf + " fleet-agent facts --config " + fuzzConfig,
		fuzzSelf + " fleet-agent upload --fleet-dir " + fuzzFleetDir + " --sha256 " + hexd,
		fuzzSelf + " fleet-agent start --fleet-dir " + fuzzFleetDir + " --id r1 -- --config " + fuzzConfig + " --json --no-color canary start --build /b --version v1",
		fuzzSelf + " fleet-agent wait --fleet-dir " + fuzzFleetDir + " --id r1 --timeout 20s",
		fuzzSelf + " fleet-agent upload -fleet-dir /tmp/x --sha256 " + hexd,
		fuzzSelf + " fleet-agent upload -fleet-dir=/tmp/x --sha256 " + hexd,
		fuzzSelf + " fleet-agent facts -config /tmp/evil.json",
		fuzzSelf + " fleet-agent start --fleet-dir " + fuzzFleetDir + " --id r1 -- -config=/tmp/evil.json rollback",
		fuzzSelf + " fleet-agent start --fleet-dir " + fuzzFleetDir + " --id r1 -- canary stop -config /tmp/evil.json",
		fuzzSelf + " fleet-agent wait --fleet-dir " + fuzzFleetDir + " --id r1 -fleet-dir /tmp/x",
		fuzzSelf + " fleet-agent facts --conf /tmp/evil.json",
		fuzzSelf + " fleet-agent start --fleet-dir " + fuzzFleetDir + " --id r1 -- --config " + fuzzConfig + " -- --config=/tmp/e canary stop",
	} {
		f.Add(s)
	}
	g := &Gate{FleetDir: fuzzFleetDir, Config: fuzzConfig}
	f.Fuzz(func(t *testing.T, original string) {
		argv, err := g.Check(fuzzSelf, original)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "refused: ") {
				t.Fatalf("error %q does not say refused", err)
			}
			return
		}
		if len(argv) < 3 || argv[0] != fuzzSelf || argv[1] != "fleet-agent" {
			t.Fatalf("%q ran %q", original, argv)
		}
		if !slices.Contains([]string{"facts", "upload", "start", "wait"}, argv[2]) {
			t.Fatalf("%q ran fleet-agent %s", original, argv[2])
		}
		if err := namesOnly(argv, fuzzFleetDir, fuzzConfig); err != "" {
			t.Fatalf("%q ran %q: %s", original, argv, err)
		}
		again, perr := Parse(argv[2:])
		if perr != nil {
			t.Fatalf("%q ran %q, which does not parse: %v", original, argv, perr)
		}
		if w := again.Words(); !slices.Equal(w, argv[1:]) {
			t.Fatalf("%q ran %q, which parses to %q", original, argv, w)
		}
	})
}

// namesOnly is the oracle, independent of the parser: every word spelling
// --fleet-dir or --config names the pinned value.
func namesOnly(words []string, fleetDir, config string) string {
	for i, w := range words {
		if len(w) < 2 || w[0] != '-' {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimLeft(w, "-"), "=")
		want := map[string]string{"fleet-dir": fleetDir, "config": config}[name]
		if want == "" {
			continue
		}
		if !inline {
			if i+1 >= len(words) {
				return w + " names nothing"
			}
			value = words[i+1]
		}
		if value != want {
			return w + " names " + value
		}
	}
	return ""
}
