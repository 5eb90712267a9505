package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/state"
)

func TestRecoverDelay(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute, 15 * time.Minute}
	for i, w := range want {
		if got := RecoverDelay(i + 1); got != w {
			t.Errorf("after attempt %d: %s, want %s", i+1, got, w)
		}
	}
	if got := RecoverDelay(1000); got != RecoverBackoffMax {
		t.Errorf("after 1000 attempts: %s, want the cap %s", got, RecoverBackoffMax)
	}
}

// TestDecideRecovery plays rounds 30 s apart (the timer's) through the
// decision and the attempts' outcomes: the first attempt in the round that
// finds production failed, each failed attempt's next after a delay that
// doubles, a failure counted once however many rounds see it, and the
// record kept after the recovery until a quiet period ends it.
func TestDecideRecovery(t *testing.T) {
	fail := func(inv string, restarts uint32) *deploy.Outage {
		return &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", Result: "start-limit-hit", NRestarts: restarts, InvocationID: inv},
			{Unit: "mcp-backend.socket", Result: "service-start-limit-hit"}}}
	}
	type round struct {
		o       *deploy.Outage
		ok      bool  // the backend answered
		attempt error // the attempt's result when one is made
		act     bool
	}
	failed := fmt.Errorf("still failing")
	tests := []struct {
		name   string
		rounds []round
		// After the rounds: the record's attempts and starts, or no record.
		attempts, starts int
		none             bool
	}{
		{"healthy: no record", []round{{ok: true}, {ok: true}}, 0, 0, true},
		{"found failed: attempt at once, recovered", []round{{o: fail("a", 5), act: true}, {ok: true}}, 1, 6, false},
		{"failing attempts back off 30 s, 1 min, 2 min", []round{
			{o: fail("a", 5), act: true, attempt: failed}, // t=0, next at 30 s
			{o: fail("b", 5), act: true, attempt: failed}, // t=30 s, next at 90 s
			{o: fail("c", 5)}, // t=60 s
			{o: fail("d", 5), act: true, attempt: failed}, // t=90 s, next at 210 s
			{o: fail("e", 5)}, {o: fail("e", 5)}, {o: fail("e", 5)},
			{o: fail("e", 5), act: true}, // t=210 s
		}, 4, 30, false},
		{"one failure seen by many rounds counts once", []round{{o: fail("a", 5), act: true, attempt: failed}, {o: fail("a", 5), act: true, attempt: failed}, {o: fail("a", 5)}}, 2, 6, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &state.Watchdog{}
			now := time.Unix(1e9, 0)
			for i, r := range tc.rounds {
				act := DecideRecovery(w, now, r.o, r.ok)
				if act != r.act {
					t.Fatalf("round %d (t=%s): act %v, want %v; record %+v", i, time.Duration(i)*30*time.Second, act, r.act, w.Recovery)
				}
				if act {
					Attempted(w.Recovery, now, r.attempt)
				}
				now = now.Add(30 * time.Second)
			}
			if tc.none {
				if w.Recovery != nil {
					t.Fatalf("record %+v, want none", w.Recovery)
				}
				return
			}
			if r := w.Recovery; r == nil || r.Attempts != tc.attempts || r.Starts != tc.starts {
				t.Fatalf("record %+v, want %d attempts and %d starts", r, tc.attempts, tc.starts)
			}
		})
	}
}

// TestRecoveryQuiet: once production answers, the record says when and
// stays (status shows it) until RecoverQuiet passed since the last attempt;
// a crash loop back before then continues the series (a longer wait).
func TestRecoveryQuiet(t *testing.T) {
	o := &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", NRestarts: 5, InvocationID: "a"}}}
	w := &state.Watchdog{}
	t0 := time.Unix(1e9, 0)
	if !DecideRecovery(w, t0, o, false) {
		t.Fatal("no attempt in the round that found production failed")
	}
	Attempted(w.Recovery, t0, nil)
	DecideRecovery(w, t0.Add(30*time.Second), nil, true)
	if w.Recovery == nil || w.Recovery.Recovered.IsZero() {
		t.Fatalf("record %+v, want it recovered", w.Recovery)
	}
	// Back in a crash loop 5 minutes later: the second attempt is due at
	// once (its delay, 30 s, has passed), and counts on.
	o2 := &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", NRestarts: 5, InvocationID: "b"}}}
	if !DecideRecovery(w, t0.Add(5*time.Minute), o2, false) {
		t.Fatal("no attempt for a crash loop back after the delay")
	}
	Attempted(w.Recovery, t0.Add(5*time.Minute), nil)
	if r := w.Recovery; r.Attempts != 2 || r.Starts != 12 || !r.Recovered.Equal(t0.Add(5*time.Minute)) || !r.NextTry.Equal(t0.Add(5*time.Minute+time.Minute)) {
		t.Fatalf("record %+v, want 2 attempts, 12 starts, recovered by the attempt, next try after 1 min", r)
	}
	DecideRecovery(w, t0.Add(6*time.Minute), nil, true)
	DecideRecovery(w, t0.Add(5*time.Minute+RecoverQuiet-time.Second), nil, true)
	if w.Recovery == nil {
		t.Fatal("record gone before the quiet period passed")
	}
	DecideRecovery(w, t0.Add(5*time.Minute+RecoverQuiet), nil, true)
	if w.Recovery != nil {
		t.Fatalf("record %+v after the quiet period, want none", w.Recovery)
	}
}

// fixedProduction is a production whose units stay failed: the attempts
// fail as a build that crashes at once would.
type fixedProduction struct {
	o     *deploy.Outage
	tries int
}

func (p *fixedProduction) Outage(context.Context) (*deploy.Outage, error) { return p.o, nil }

func (p *fixedProduction) Recover(context.Context, map[string]string) (*deploy.RecoverReport, error) {
	p.tries++
	return nil, errors.New("mcp-backend@blue.service not ready")
}

// TestRunRecoversOnItsBackoff: each round is a new process; the record in
// the state directory carries the backoff from one to the next, and a
// failed attempt fails the round.
func TestRunRecoversOnItsBackoff(t *testing.T) {
	cfg := ctlconfig.Default()
	cfg.StateDir = t.TempDir()
	cfg.Tunnels[0].URL, cfg.Tunnels[1].URL = "http://a", "http://b"
	down := func(context.Context, string) error { return errors.New("connection refused") }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &fixedProduction{o: &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", Result: "start-limit-hit", NRestarts: 5, InvocationID: "a"}}}}
	var r restarts
	for round := 1; round <= 3; round++ {
		rep, err := Run(context.Background(), cfg, &r, p, down, log, 3)
		if round == 1 && err == nil {
			t.Fatalf("round 1: the failed attempt did not fail the round: %+v", rep)
		}
		if round > 1 && err != nil {
			t.Fatalf("round %d: %v, want nothing attempted within the backoff", round, err)
		}
		if rep.Recovery == nil || rep.Recovery.Attempts != 1 || rep.Outage == nil {
			t.Fatalf("round %d: report %+v, want the outage and one attempt on record", round, rep)
		}
	}
	if p.tries != 1 || len(r) != 0 {
		t.Fatalf("%d attempts, tunnels restarted %v; want 1 attempt (the next waits %s), no tunnel restarted", p.tries, r, RecoverDelay(1))
	}
	w, err := state.Dir(cfg.StateDir).LoadWatchdog()
	if err != nil || w.Recovery == nil || w.Recovery.LastOutcome != state.OutcomeFailed || w.Recovery.Starts != 6 {
		t.Fatalf("saved record %+v, %v: want the failed attempt and 6 starts", w.Recovery, err)
	}
}
