package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/stress"
)

// bounceJournald stops journald and starts it again inside the container:
// a stop discards the log streams journald keeps, so every service's
// stdout and stderr is a closed socket afterwards.
func (s *site) bounceJournald(ctx context.Context) {
	s.T.Helper()
	for _, a := range []string{"stop", "start"} {
		if out, err := s.M.Exec(ctx, "systemctl", a, "systemd-journald.service"); err != nil {
			s.T.Fatalf("systemctl %s systemd-journald: %v\n%s", a, err, out)
		}
	}
}

// longCall starts a shell.exec that runs for secs seconds on production
// and returns where its outcome arrives: nil when it answered ok.
func (s *site) longCall(ctx context.Context, secs string) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, code, err := (&verify.Client{}).CallTool(ctx, s.Backend, "shell.exec", map[string]any{"command": "sleep " + secs + "; echo drained", "timeoutMs": 30000})
		if err == nil && code != "" {
			err = fmt.Errorf("tool error %s", code)
		}
		res <- err
	}()
	// Settle, not an assertion: a call that reached the socket only after
	// the step began is served by the next process, and passes all the same.
	time.Sleep(300 * time.Millisecond)
	return res
}

// TestJournaldRestartUnderLoad is the backend's side of a journald
// restart: with its stdout and stderr streams closed by journald's stop,
// the serving process goes on, and its next log lines (the shutdown of a
// restart, the handoff of a cutover) neither kill it nor stop its drain.
// Under a steady 10 calls/s through both tunnels, after each bounce of
// journald: a restart of the serving slot with a call of 1.2 s in flight,
// then a cutover with one of 4 s in flight. No caller may see a failure, the
// old slot parks as usual, the cutover reports no warning, and the lines
// logged after the bounce reach the journal through its socket.
func TestJournaldRestartUnderLoad(t *testing.T) {
	s := newSite(t, 60*time.Second)
	s.Pass(s.Builds["v2"])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	type outcome struct {
		rep *stress.SteadyReport
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := stress.RunSteady(context.Background(), stress.SteadyConfig{
			Targets: []string{s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL}, Rate: 10, Duration: 10 * time.Minute, Stop: stop,
		})
		done <- outcome{rep, err}
	}()
	stopped := false
	stopLoad := func() outcome {
		if !stopped {
			close(stop)
			stopped = true
		}
		return <-done
	}
	defer func() {
		if !stopped {
			stopLoad()
		}
	}()
	time.Sleep(2 * time.Second) // the load flows before the first bounce

	// A restart of the serving slot: SIGTERM, "shutting down", the drain.
	unit0, pid0, _ := s.Prod()
	s.bounceJournald(ctx)
	// Within the 2 s a stop drains for (a handoff's is 10 s).
	long := s.longCall(ctx, "1.2")
	if out, err := s.M.Exec(ctx, "systemctl", "restart", unit0); err != nil {
		t.Fatalf("restart %s: %v\n%s", unit0, err, out)
	}
	if err := <-long; err != nil {
		t.Errorf("the call in flight across the restart: %v, want it drained", err)
	}
	s.WaitHTTP(s.Backend+"/readyz", 30*time.Second)
	unit1, pid1, _ := s.Prod()
	if unit1 != unit0 || pid1 == pid0 {
		t.Fatalf("after the restart production is %s pid %d, want %s in a new process (was pid %d)", unit1, pid1, unit0, pid0)
	}
	// The old process logged its shutdown after the bounce: through the
	// journal's socket, not the closed stream.
	s.journalHas(ctx, unit0, pid0, "shutting down")

	// A cutover: SIGUSR2, "handing off", the drain, parked.
	s.bounceJournald(ctx)
	long = s.longCall(ctx, "4")
	code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
	if code != 0 {
		t.Fatalf("cutover: exit %d:\n%s", code, out)
	}
	t.Logf("cutover:\n%s", out)
	if err := <-long; err != nil {
		t.Errorf("the call in flight across the handoff: %v, want it drained", err)
	}
	if !strings.Contains(out, `msg="handed off" unit=`+unit0+` state=parked`) {
		t.Errorf("%s did not hand off and park:\n%s", unit0, out)
	}
	if strings.Contains(out, "did not park") {
		t.Errorf("the cutover warns of a handoff that did not park:\n%s", out)
	}
	if v := s.Version(); v != "v2" {
		t.Errorf("production runs %s after the cutover, want v2", v)
	}
	s.journalHas(ctx, unit0, pid1, "handed off; parked")

	o := stopLoad()
	if o.err != nil {
		t.Fatal(o.err)
	}
	tot := o.rep.Total
	t.Logf("figures: %d calls: %d ok, %d transport, %d HTTP, %d JSON-RPC, %d tool errors %v; wait p99 %.0f ms, max %.0f ms",
		tot.Calls, tot.OK, tot.Transport, tot.HTTP, tot.JSONRPC, tot.Tool, tot.ToolByCode, tot.Wait.P99Ms, tot.Wait.MaxMs)
	if !tot.Clean() || tot.Tool > 0 {
		t.Errorf("callers saw %d transport, %d HTTP, %d JSON-RPC failures, %d unreadable replies and tool errors %v; want none",
			tot.Transport, tot.HTTP, tot.JSONRPC, tot.BadReply, tot.ToolByCode)
	}
	s.assertNoRollbackArmed()
}

// journalHas fails the test unless the journal holds a line of unit's
// process pid containing msg.
func (s *site) journalHas(ctx context.Context, unit string, pid uint32, msg string) {
	s.T.Helper()
	var out string
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		out, _ = s.M.Exec(ctx, "journalctl", "--no-pager", "-o", "json", "-u", unit, fmt.Sprintf("_PID=%d", pid))
		for _, l := range strings.Split(out, "\n") {
			var e struct {
				Message any `json:"MESSAGE"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && strings.Contains(fmt.Sprint(e.Message), msg) {
				return
			}
		}
	}
	s.T.Errorf("the journal of %s holds no line %q from pid %d:\n%s", unit, msg, pid, out)
}
