package stress_test

import (
	"strings"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/stress"
)

func TestParseMix(t *testing.T) {
	tests := []struct {
		name, in string
		want     stress.Mix
		err      string
	}{
		{"the default", "5:3:2", stress.Mix{Shell: 5, Normal: 3, Control: 2}, ""},
		{"two weights", "1:2", stress.Mix{}, "want SHELL:NORMAL:CONTROL"},
		{"not a number", "1:x:2", stress.Mix{}, `weight "x" is not a whole number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stress.ParseMix(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestProfileKnown(t *testing.T) {
	tests := []struct {
		p    stress.Profile
		want bool
	}{
		{stress.Overload, true}, {stress.Spike, true}, {stress.Soak, true},
		// Steady runs apart from Run (RunSteady), so it is no profile of Run's.
		{stress.Steady, false}, {"flood", false}, {"", false},
	}
	for _, tc := range tests {
		t.Run(string(tc.p), func(t *testing.T) {
			if got := tc.p.Known(); got != tc.want {
				t.Fatalf("%q.Known() = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestSameHostPort(t *testing.T) {
	tests := []struct {
		name, base, listen string
		want               bool
	}{
		{"the same", "http://127.0.0.1:3210", "127.0.0.1:3210", true},
		{"localhost is loopback", "http://localhost:3210/", "127.0.0.1:3210", true},
		{"another port", "http://127.0.0.1:3211", "127.0.0.1:3210", false},
		{"another host", "http://127.0.0.2:3210", "127.0.0.1:3210", false},
		{"no port", "http://127.0.0.1", "127.0.0.1:3210", false},
		{"not a URL", "http://[::1", "[::1]:3210", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stress.SameHostPort(tc.base, tc.listen); got != tc.want {
				t.Fatalf("SameHostPort(%q, %q) = %v, want %v", tc.base, tc.listen, got, tc.want)
			}
		})
	}
}

func TestOutcomeLabel(t *testing.T) {
	tests := []struct {
		name string
		r    vegeta.Result
		want string
	}{
		{"ok", vegeta.Result{Code: 200}, "ok"},
		{"a classified outcome", vegeta.Result{Code: 200, Error: "overloaded: scope server"}, "overloaded"},
		{"vegeta's error, no answer", vegeta.Result{Error: "dial tcp: connection refused"}, "transport_error"},
		{"vegeta's error with a status", vegeta.Result{Code: 502, Error: "502 Bad Gateway"}, "http_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stress.OutcomeLabel(&tc.r); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
