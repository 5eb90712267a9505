// Package notify is the approval notifier that mcp-approvals-notify.service
// runs (`mcpctl approvals notify`) and its part of unit install.
//
// The service runs whenever the approvals directory changes (its .path unit),
// at boot and a minute after each run (its .timer). Each run, under a lock of
// its own (never the deploy lock: a cutover must not hold notifications
// back), runs approvals.notify once for each pending approval that has no
// marker yet, the approval's JSON on stdin, and writes the marker
// (atomically) only after the command succeeded. So each approval is
// notified once whichever backend made it, across a crash of the notifier
// or a reboot; a command that fails or outlives approvals.notify.timeout
// is tried again, at most approvals.notify.retries times in all runs
// together (the attempts are counted beside the markers), and gives up
// logged. It runs outside the backend: nothing it does slows a call.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// Run is one run of the notifier over st: under the lock of the markers
// directory (<stateDir>/approvals-notified), it notifies every pending
// approval not notified yet. It returns how many approvals it gave up on
// or left for the next run; nothing happens when approvals.notify is not
// configured.
func Run(ctx context.Context, log *slog.Logger, cfg ctlconfig.Notify, stateDir string, st *approvals.Store) (int, error) {
	if !cfg.Configured() {
		log.Info("approvals notify: approvals.notify is not configured; nothing to do")
		return 0, nil
	}
	marks := filepath.Join(stateDir, "approvals-notified")
	if err := os.MkdirAll(marks, 0o700); err != nil {
		return 0, fmt.Errorf("approvals notify: %w", err)
	}
	unlock, err := flockFile(ctx, filepath.Join(marks, ".lock"))
	if err != nil {
		return 0, fmt.Errorf("approvals notify: %w", err)
	}
	defer unlock()
	nt := &notifier{log: log, cfg: cfg, marks: marks, store: st, deadline: time.Now().Add(ctlconfig.NotifyRunFor), done: map[string]bool{}}
	return nt.run(ctx)
}

// notification is what the command reads on stdin: the approval, whole,
// and the commands that decide it.
type notification struct {
	mcpwire.Approval
	Approve string `json:"approve"`
	Deny    string `json:"deny"`
	Show    string `json:"show"`
}

// notifyMark is a marker: the approval was notified (OK), or given up.
type notifyMark struct {
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
	OK       bool      `json:"ok"`
}

type notifier struct {
	log      *slog.Logger
	cfg      ctlconfig.Notify
	marks    string
	store    *approvals.Store
	deadline time.Time
	done     map[string]bool // notified or given up in this run
}

// toNotify is the plan of one pass: the pending approvals without a
// marker, oldest first, and the markers of approvals gone from the store.
func toNotify(list []approvals.Record, marked map[string]bool) (todo []approvals.Record, stale []string) {
	in := map[string]bool{}
	for _, r := range list {
		in[r.ID] = true
		if r.Status == mcpwire.ApprovalPending && !marked[r.ID] {
			todo = append(todo, r)
		}
	}
	for id := range marked {
		if !in[id] {
			stale = append(stale, id)
		}
	}
	return todo, stale
}

// run notifies until a pass finds nothing new to do (an approval made
// during the run is notified by it), retrying failures after a growing
// pause. It returns how many approvals it gave up on or left for the
// next run.
func (nt *notifier) run(ctx context.Context) (int, error) {
	gaveUp := 0
	for {
		list, err := nt.store.List()
		if err != nil {
			return 0, err
		}
		marked := nt.marked()
		// Once a run: a marker that cannot be written must not make the
		// next pass notify again.
		for id := range nt.done {
			marked[id] = true
		}
		todo, stale := toNotify(list, marked)
		for _, id := range stale {
			if nt.done[id] {
				continue
			}
			_ = os.Remove(filepath.Join(nt.marks, id))
			_ = os.Remove(filepath.Join(nt.marks, id+".attempts"))
		}
		if len(todo) == 0 {
			return gaveUp, nil
		}
		left := 0
		wait := time.Duration(0)
		for _, r := range todo {
			if ctx.Err() != nil || time.Now().After(nt.deadline) {
				return gaveUp + len(todo), nil // the next run goes on
			}
			switch res, k := nt.notify(ctx, r); res {
			case notifyRetry:
				left++
				wait = max(wait, ctlconfig.NotifyBackoff*time.Duration(k))
			case notifyGaveUp:
				gaveUp++
			}
		}
		if left > 0 {
			if time.Now().Add(wait).After(nt.deadline) {
				return gaveUp + left, nil
			}
			select {
			case <-ctx.Done():
				return gaveUp + left, nil
			case <-time.After(wait):
			}
		}
	}
}

// marked are the approvals with a marker (notified or given up).
func (nt *notifier) marked() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(nt.marks)
	for _, e := range ents {
		if approvals.ValidID(e.Name()) {
			out[e.Name()] = true
		}
	}
	return out
}

// Outcomes of one attempt.
const (
	notifyOK = iota
	notifyRetry
	notifyGaveUp
)

// notify makes one attempt for r (the k-th in all).
func (nt *notifier) notify(ctx context.Context, r approvals.Record) (res, k int) {
	attemptsFile := filepath.Join(nt.marks, r.ID+".attempts")
	b, _ := os.ReadFile(attemptsFile)
	k, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	k++
	// Counted before the command runs: a crash mid-attempt uses one up.
	if err := atomicfs.WriteFile(attemptsFile, []byte(strconv.Itoa(k)+"\n"), 0o600); err != nil {
		nt.log.Error("approvals notify: cannot count the attempt", "approval", r.ID, "err", err)
		return notifyRetry, k
	}
	start := time.Now()
	out, err := nt.exec(ctx, r)
	took := time.Since(start).Round(time.Millisecond)
	if err == nil {
		nt.done[r.ID] = true
		nt.mark(r.ID, notifyMark{At: time.Now().UTC(), Attempts: k, OK: true})
		nt.log.Info("approvals notify: notified", "approval", r.ID, "tool", r.Tool, "attempt", k, "took", took.String())
		return notifyOK, k
	}
	if k > nt.cfg.Retries {
		nt.done[r.ID] = true
		nt.mark(r.ID, notifyMark{At: time.Now().UTC(), Attempts: k})
		nt.log.Error("approvals notify: gave up: the notifier failed every attempt; the approval still waits (mcpctl approvals list)",
			"approval", r.ID, "attempts", k, "err", err, "output", out)
		return notifyGaveUp, k
	}
	nt.log.Warn("approvals notify: the notifier failed; trying again", "approval", r.ID, "attempt", k, "of", nt.cfg.Retries+1,
		"took", took.String(), "err", err, "output", out)
	return notifyRetry, k
}

func (nt *notifier) mark(id string, m notifyMark) {
	b, _ := json.Marshal(m)
	if err := atomicfs.WriteFile(filepath.Join(nt.marks, id), append(b, '\n'), 0o600); err != nil {
		nt.log.Error("approvals notify: cannot write the marker: the approval may be notified again", "approval", id, "err", err)
	}
}

// notifyOutput bounds what of the command's output is logged.
const notifyOutput = 2048

// exec runs the command once with r's JSON on stdin, bounded by the
// timeout: the command and everything it started (its process group) is
// killed when it outlives it.
func (nt *notifier) exec(ctx context.Context, r approvals.Record) (string, error) {
	payload, err := json.Marshal(notification{Approval: r.Approval,
		Approve: "mcpctl approvals approve " + r.ID, Deny: "mcpctl approvals deny " + r.ID, Show: "mcpctl approvals show " + r.ID})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, nt.cfg.Timeout.D())
	defer cancel()
	cmd := exec.CommandContext(ctx, nt.cfg.Command, nt.cfg.Args...)
	cmd.Stdin = bytes.NewReader(append(payload, '\n'))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	text := out.String()
	if len(text) > notifyOutput {
		text = text[:notifyOutput] + "…"
	}
	if ctx.Err() == context.DeadlineExceeded {
		return text, fmt.Errorf("timed out after %s (approvals.notify.timeout)", nt.cfg.Timeout)
	}
	if cmd.Process != nil {
		// Whatever the command left in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return text, err
}

// flockFile takes an exclusive lock on path, waiting for it (the service's
// TimeoutStartSec bounds the wait).
func flockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Install is unit install's part for the notifier: with
// approvals.notify configured, the store's notifier marker (the backend's
// NEEDS_APPROVAL then says the operator is notified) and the path unit
// and timer started now, not only at the next boot; without it, the marker
// removed (units once installed stay, and their runs do nothing).
func Install(ctx context.Context, cfg *ctlconfig.Config, sd interface {
	Start(context.Context, string) error
}) (bool, error) {
	st, err := approvals.Open(cfg.ApprovalsDir(), nil)
	if err != nil {
		return false, err
	}
	if !cfg.Approvals.Notify.Configured() {
		return false, st.SetNotifier("")
	}
	if err := st.SetNotifier(cfg.Approvals.Notify.Command); err != nil {
		return false, fmt.Errorf("unit install: units installed but %w", err)
	}
	for _, u := range []string{units.NotifyPath, units.NotifyTimer} {
		if err := sd.Start(ctx, u); err != nil {
			return false, fmt.Errorf("unit install: units installed but start %s: %w", u, err)
		}
	}
	return true, nil
}
