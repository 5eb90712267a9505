package deploy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
)

func TestStartStandbyTriesAnotherPortOnlyWhenItsWasTaken(t *testing.T) {
	bind := errors.New("exited before ready")
	tests := []struct {
		name string
		// fails[i]: the i-th start fails; taken[i]: its port is then held
		// by somebody else.
		fails, taken []bool
		wantStarts   int
		wantErr      bool
	}{
		{name: "starts at once", fails: []bool{false}, wantStarts: 1},
		{name: "port taken, then started", fails: []bool{true, false}, taken: []bool{true}, wantStarts: 2},
		{name: "a bad build is not retried", fails: []bool{true}, taken: []bool{false}, wantStarts: 1, wantErr: true},
		{name: "port taken every time: bounded", fails: []bool{true, true, true, true}, taken: []bool{true, true, true, true}, wantStarts: standbyTries, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			var picked, started, checked []string
			pick := func() (string, error) {
				n++
				a := fmt.Sprintf("127.0.0.1:%d", 40000+n)
				picked = append(picked, a)
				return a, nil
			}
			start := func(addr string) error {
				started = append(started, addr)
				if tc.fails[len(started)-1] {
					return bind
				}
				return nil
			}
			taken := func(addr string) bool {
				checked = append(checked, addr)
				return tc.taken[len(checked)-1]
			}
			addr, err := startStandby(pick, start, taken, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if len(started) != tc.wantStarts {
				t.Fatalf("started %d times (%v), want %d", len(started), started, tc.wantStarts)
			}
			if !slices.Equal(started, picked) {
				t.Fatalf("started on %v, want each start on a fresh pick %v", started, picked)
			}
			if addr != started[len(started)-1] {
				t.Fatalf("addr %q, want the last tried %q", addr, started[len(started)-1])
			}
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, bind)) {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestStartStandbyPickFails(t *testing.T) {
	noPort := errors.New("no port")
	_, err := startStandby(func() (string, error) { return "", noPort },
		func(string) error { t.Fatal("started without an address"); return nil },
		func(string) bool { return false }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, noPort) {
		t.Fatalf("err %v, want %v", err, noPort)
	}
}
