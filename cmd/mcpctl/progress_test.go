package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/stress"
	"github.com/overdeck/mcp-backend/stress/stresstest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStressProgressLines: periodic lines off a terminal, one line updated
// in place (carriage return, erased at the end) on one.
func TestStressProgressLines(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var w lockedBuffer
		p := newStressProgress(&w, tty, 20*time.Second)
		p.every = 20 * time.Millisecond
		p.start()
		p.add(&vegeta.Result{})
		p.add(&vegeta.Result{Error: "overloaded: OVERLOADED queue full", Code: 200})
		p.add(&vegeta.Result{Error: "dial tcp: refused"})
		time.Sleep(100 * time.Millisecond)
		p.finish()
		out := w.String()
		if !strings.Contains(out, "/20s: 3 answered, 1 ok, 1 overloaded, 1 other") {
			t.Fatalf("tty=%v: %q", tty, out)
		}
		if tty != strings.Contains(out, "\r\x1b[K") || tty == strings.Contains(out, "\n") {
			t.Fatalf("tty=%v: wrong form %q", tty, out)
		}
		if tty && !strings.HasSuffix(out, "\r\x1b[K") {
			t.Fatalf("the line is not erased at the end: %q", out)
		}
		for _, l := range strings.FieldsFunc(out, func(r rune) bool { return r == '\r' || r == '\n' }) {
			if n := len([]rune(strings.TrimPrefix(l, "\x1b[K"))); n >= textWidth {
				t.Fatalf("a progress line of %d columns wraps on an 80-column terminal: %q", n, l)
			}
		}
	}
}

// TestStressInterruptedGivesPartialReport: Ctrl-C (the run's context
// cancelled) during the attack prints the report of the calls so far,
// marked INTERRUPTED and failing, records nothing and exits 1. Before, the
// run ended with "context canceled" and no report.
func TestStressInterruptedGivesPartialReport(t *testing.T) {
	if testing.Short() {
		t.Skip("attacks a fake backend")
	}
	for _, asJSON := range []bool{false, true} {
		cfg, stateDir := stressConfigFile(t)
		srv := stresstest.Start(t, stresstest.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		var errb lockedBuffer
		d := &deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
			logger: slog.New(slog.NewTextHandler(&errb, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		args := append([]string{"mcpctl", "--config", cfg, "stress", "--target", srv.URL, "--unit", "",
			"--production", "", "--duration", "30s", "--rate", "50", "--shell-sleep", "300ms"}, notAboutLatency...)
		if asJSON {
			args = append(args, "--json")
		}
		// Interrupt once some calls have been answered.
		go func() {
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				if m, err := stress.NewClient(srv.URL, time.Second).Metrics(context.Background()); err == nil && m.Counters.Accepted+m.Counters.Rejected >= 10 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
		}()
		code := runApp(ctx, newApp(d), args, &errb)
		if code != outcome.Failed || !strings.Contains(errb.String(), "stress interrupted after") {
			t.Fatalf("json=%v: exit %d, stderr %s", asJSON, code, errb.String())
		}
		if asJSON {
			var rep stress.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || !rep.Interrupted || rep.Pass || rep.Requests == 0 {
				t.Fatalf("JSON partial report: %v %+v\n%s", err, rep.Interrupted, out.String())
			}
		} else {
			for _, want := range []string{"INTERRUPTED: partial report", "run.complete", "verdict: FAIL", "not recorded: the run was interrupted"} {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("partial report lacks %q:\n%s", want, out.String())
				}
			}
		}
		if vs, _ := verdictsIn(stateDir); len(vs) != 0 {
			t.Fatalf("an interrupted run recorded %d verdicts", len(vs))
		}
	}
}

func verdictsIn(stateDir string) ([]state.Verdict, error) { return state.Dir(stateDir).Verdicts() }
