package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
)

func TestDecide(t *testing.T) {
	down := errors.New("down")
	type round struct {
		backend error
		a, b    error
		restart []string
	}
	tests := []struct {
		name   string
		rounds []round
	}{
		{"healthy restarts nothing", []round{{}, {}, {}, {}}},
		{"two blips restart nothing", []round{{a: down}, {a: down}, {}, {a: down}, {a: down}}},
		{"third failure restarts that tunnel only", []round{{a: down}, {a: down}, {a: down, restart: []string{"a"}}}},
		{"backend down counts nothing", []round{{backend: down, a: down, b: down}, {backend: down, a: down, b: down}, {backend: down, a: down, b: down}, {backend: down, a: down, b: down}}},
		{"backend down neither counts nor forgives", []round{{a: down}, {a: down}, {backend: down, a: down}, {a: down, restart: []string{"a"}}}},
		{"after a restart a fresh streak", []round{{a: down}, {a: down}, {a: down, restart: []string{"a"}}, {a: down}, {a: down}, {a: down, restart: []string{"a"}}}},
		{"both", []round{{a: down, b: down}, {a: down, b: down}, {a: down, b: down, restart: []string{"a", "b"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &state.Watchdog{}
			now := time.Unix(1e9, 0)
			for i, r := range tc.rounds {
				got := Decide(w, now, 3, r.backend, map[string]error{"a": r.a, "b": r.b})
				slices.Sort(got)
				if fmt.Sprint(got) != fmt.Sprint(r.restart) {
					t.Fatalf("round %d: restart %v, want %v", i, got, r.restart)
				}
				for _, n := range got {
					w.Tunnel(n).Restarted(now)
				}
			}
		})
	}
}

type restarts []string

func (r *restarts) Restart(_ context.Context, unit string) error { *r = append(*r, unit); return nil }

// Run keeps its counters in the state dir across runs (each timer run is a
// new process) and steps aside while another command holds the lock.
func TestRunAcrossProcesses(t *testing.T) {
	cfg := ctlconfig.Default()
	cfg.StateDir = t.TempDir()
	cfg.Tunnels[0].URL, cfg.Tunnels[1].URL = "http://a", "http://b"
	probe := func(_ context.Context, url string) error {
		if url == "http://a" {
			return errors.New("connection refused")
		}
		return nil
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var r restarts
	for i := 0; i < 3; i++ {
		if _, err := Run(context.Background(), cfg, &r, nil, probe, log, 3); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(r) != fmt.Sprint([]string{cfg.Tunnels[0].Unit}) {
		t.Fatalf("restarts = %v, want only %s", r, cfg.Tunnels[0].Unit)
	}
	release, err := state.Dir(cfg.StateDir).Lock("cutover")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for i := 0; i < 5; i++ {
		rep, err := Run(context.Background(), cfg, &r, nil, probe, log, 3)
		if err != nil || rep.Skipped == "" {
			t.Fatalf("run under a held lock: %+v, %v", rep, err)
		}
	}
	if len(r) != 1 {
		t.Fatalf("restarted under a held lock: %v", r)
	}
}
