package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// commandsRunning counts the processes whose command line is exactly argv.
// The container's processes are the host's too: this is what runs on the
// host, whichever slot started it.
func commandsRunning(argv ...string) int {
	want := strings.Join(argv, "\x00") + "\x00"
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			n++
		}
	}
	return n
}

// sample is a count of commands running at a time.
type sample struct {
	at time.Time
	n  int
}

// outcome is one call's end.
type limitCall struct {
	end  time.Time
	kind mcpclient.Kind
	code string
}

// TestCutoverHoldsTheServiceShellBudget keeps shell.exec saturated through
// both tunnels (24 callers, each command sleeping 3.7 s, a conversation
// each) across a good cutover, a `rollback --last` and a cutover whose
// verification fails, and samples the commands running in the container
// every 200 ms: while two slots run, they hold one budget, so the peak of
// every phase is concurrency.maxShell (8), not twice that. No caller sees a
// transport error, and none OVERLOADED: 24 callers never fill the queue.
// The peaks are logged per phase.
func TestCutoverHoldsTheServiceShellBudget(t *testing.T) {
	const maxShell = 8 // the default concurrency.maxShell the site runs with
	s := newSite(t, 60*time.Second)
	s.Pass(s.Build("v2"))
	wrong := writeWrongVersion(t, s, s.Build("v3"), s.Builds["v1"])
	argv := []string{"sleep", fmt.Sprintf("3.7%03d", os.Getpid()%1000)}
	command := "exec " + strings.Join(argv, " ")

	var mu sync.Mutex
	var samples []sample
	var calls []limitCall
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			n := commandsRunning(argv...)
			mu.Lock()
			samples = append(samples, sample{time.Now(), n})
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	targets := []string{s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL}
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each call its own connection, as a tunnel forwards each
			// client connection.
			c := &mcpclient.Client{HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				r := c.CallToolIn(ctx, targets[i%2], mcpwire.ToolShellExec, map[string]any{"command": command, "timeoutMs": 60000}, fmt.Sprintf("caller-%d", i))
				cancel()
				mu.Lock()
				calls = append(calls, limitCall{time.Now(), r.Kind, r.Code})
				mu.Unlock()
			}
		}()
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()
	peakIn := func(from, to time.Time) (peak, n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range samples {
			if !x.at.Before(from) && x.at.Before(to) {
				peak, n = max(peak, x.n), n+1
			}
		}
		return peak, n
	}
	// Saturated before the first step.
	warm := time.Now()
	for end := warm.Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if p, _ := peakIn(warm, time.Now()); p >= maxShell {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("shell.exec never saturated: %d commands at most", func() int { p, _ := peakIn(warm, time.Now()); return p }())
		}
	}
	type phaseRun struct {
		name       string
		start, end time.Time
	}
	var runs []phaseRun
	for _, st := range []struct {
		name string
		code int
		args []string
	}{
		{"cutover v1->v2", 0, []string{"cutover", "--build", s.Builds["v2"], "--arm-rollback"}},
		{"rollback --last v2->v1", 0, []string{"rollback", "--last"}},
		{"cutover failing verification", 3, []string{"cutover", "--build", wrong, "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e: fails verification"}},
	} {
		start := time.Now()
		code, out := s.Run(st.args...)
		if code != st.code {
			t.Fatalf("%s: exit %d, want %d:\n%s", st.name, code, st.code, out)
		}
		t.Logf("%s: exit %d in %v", st.name, code, time.Since(start).Round(time.Millisecond))
		// A parked slot's last calls and the callers' move to the new one
		// end within a few commands' length: the phase runs until then.
		time.Sleep(8 * time.Second)
		runs = append(runs, phaseRun{st.name, start, time.Now()})
	}
	stopLoad()

	overall := 0
	for _, r := range runs {
		peak, n := peakIn(r.start, r.end)
		overall = max(overall, peak)
		t.Logf("figures: %s: peak of shell commands running %d (%d samples over %v)", r.name, peak, n, r.end.Sub(r.start).Round(time.Millisecond))
		if peak > maxShell {
			t.Errorf("%s: %d shell commands ran at once, want at most concurrency.maxShell %d", r.name, peak, maxShell)
		}
	}
	byOutcome := map[string]int{}
	for _, c := range calls {
		k := string(c.kind)
		if c.code != "" {
			k += " " + c.code
		}
		byOutcome[k]++
	}
	t.Logf("figures: %d calls: %v; peak over the run %d", len(calls), byOutcome, overall)
	for _, c := range calls {
		if c.kind == mcpclient.KindTransport {
			t.Errorf("a call failed in transport at %v", c.end)
		}
		if c.code == string(mcpwire.CodeOverloaded) {
			t.Errorf("a call was refused OVERLOADED at %v with 24 callers: the queue holds 64", c.end)
		}
	}
}
