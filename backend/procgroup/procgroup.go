// Package procgroup runs a command in a process group of its own and ends
// it whole: SIGTERM to the group, SIGKILL after KillGrace, and then the
// descendants that left the group (setsid, job control), found by an
// environment marker every descendant inherits. shell.exec and the jobs'
// supervisor run their commands through it, so both end the same tree the
// same way.
package procgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/internal/procfs"
)

// KillGrace is how long a group has between SIGTERM and SIGKILL.
const KillGrace = 500 * time.Millisecond

// PipeWaitDelay is how long an orphan that escaped the group may hold the
// command's pipes open after the leader exited, before Wait closes them.
const PipeWaitDelay = time.Second

// MarkerVar names the environment variable that marks a command's
// descendants. A value the caller put in the environment is overwritten.
const MarkerVar = "MCP_BACKEND_EXEC"

var (
	selfPID = os.Getpid()
	seq     atomic.Uint64
)

// Group is a started command in its own process group.
type Group struct {
	cmd    *exec.Cmd
	pgid   int
	marker string
	since  int64 // the leader's start time: every descendant starts no earlier
	exited chan struct{}
}

// Start starts cmd as the leader of a new process group, with the marker
// appended to cmd.Env (the complete environment; nil means none). Stdin,
// Stdout, Stderr, Dir and WaitDelay are the caller's (WaitDelay defaults
// to PipeWaitDelay).
func Start(cmd *exec.Cmd) (*Group, error) {
	marker := fmt.Sprintf("%s=%d.%d", MarkerVar, selfPID, seq.Add(1))
	cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], marker)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = PipeWaitDelay
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &Group{cmd: cmd, pgid: cmd.Process.Pid, marker: marker, exited: make(chan struct{})}
	// 0 when unreadable: the sweep then waits for a process of any age.
	if st, ok := procfs.Read(g.pgid); ok {
		g.since = st.StartTicks
	}
	// Closed once the leader has exited, without reaping it: while the
	// leader is an unreaped zombie its pid, and so the group id, cannot be
	// reused, which makes the group kills safe.
	go func() {
		waitExitedNoReap(g.pgid)
		close(g.exited)
	}()
	return g, nil
}

// Pgid is the group's id (the leader's pid).
func (g *Group) Pgid() int { return g.pgid }

// Exited is closed once the leader has exited (not yet reaped).
func (g *Group) Exited() <-chan struct{} { return g.exited }

// Terminate sends the group SIGTERM and waits up to KillGrace for the
// leader to exit.
func (g *Group) Terminate() {
	KillGroup(g.pgid, syscall.SIGTERM)
	t := time.NewTimer(KillGrace)
	defer t.Stop()
	select {
	case <-g.exited:
	case <-t.C:
	}
}

// Finish ends whatever is left: SIGKILL to the group, the marked
// descendants that left it, then waits for the leader and reaps it
// (cmd.ProcessState is set after). left is how many marked processes the
// sweep still found (0 when all are gone).
func (g *Group) Finish() (left int, err error) {
	// Always: descendants may linger after the leader exits.
	KillGroup(g.pgid, syscall.SIGKILL)
	left = killMarked(g.marker, g.since)
	<-g.exited
	return left, g.cmd.Wait()
}

// KillGroup signals every process of group pgid; ESRCH (gone) is fine.
func KillGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return // never signal -1 (everything) or group 1 by accident
	}
	_ = syscall.Kill(-pgid, sig)
}

// waitExitedNoReap blocks until process pid has exited, leaving it a zombie
// for cmd.Wait to reap.
func waitExitedNoReap(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // exited, or ECHILD: nothing left to wait for
		}
	}
}

// killMarkedRounds bounds how often killMarked rescans /proc. A marked
// process can fork between the listing of /proc and its own kill; every
// round kills what the last one missed, and a process that is SIGKILLed
// forks no more, so the rounds run out only under a pid flood.
const killMarkedRounds = 200

// execWindowWait bounds how long killMarked waits for processes that show
// no environment (see killMarked). Leaving execve takes microseconds; only
// a process started without any environment (env -i) that left the group
// makes the wait run out, and then it cannot be told apart anyway.
const execWindowWait = 2 * time.Second

// killMarked SIGKILLs every process whose environment carries marker: the
// command's descendants that escaped its process group. One pass is not
// enough: a marked process may fork after /proc was listed, so the scan
// repeats until two passes in a row find no marked process. A process in
// the middle of execve shows an empty environment until the new program's
// stack is set up, and on a loaded machine it can be preempted there for
// longer than two passes: while a pass finds such a process (a user
// process started no earlier than the command, since, with no
// environment), it does not count as clean. It reads /proc/PID/environ of
// every process, a few milliseconds per pass. It returns how many marked
// processes the last pass still found (0 when all are gone).
func killMarked(marker string, since int64) int {
	needle := []byte(marker + "\x00")
	deadline := time.Now().Add(execWindowWait)
	left, clean := 0, 0
	for rounds := 0; rounds < killMarkedRounds; {
		found, unsure := killMarkedOnce(needle, since)
		left = found
		if found == 0 && unsure > 0 && time.Now().Before(deadline) {
			// Only processes in mid-execve may remain: give them the CPU
			// this loop would take from them, then look again.
			clean = 0
			time.Sleep(time.Millisecond)
			continue
		}
		rounds++
		if found > 0 {
			clean = 0
			continue
		}
		if clean++; clean == 2 {
			return 0
		}
	}
	return left
}

// killMarkedOnce kills the marked processes of one /proc listing and
// returns how many it found, and how many could not be told apart (no
// environment yet, see killMarked). A process already dying (SIGKILLed,
// memory not yet released) is found again: the next round sees it gone.
func killMarkedOnce(needle []byte, since int64) (found, unsure int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == selfPID {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone
		}
		if len(env) == 0 {
			if inExecWindow(pid, since) {
				unsure++
			}
			continue
		}
		if !bytes.Contains(env, needle) {
			continue
		}
		found++
		// Through a pidfd, and the marker read again once it is held: a
		// pid that exited and was reused between the read and the kill is
		// never signalled.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if hasMarker(pid, needle) {
			_ = unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
	return found, unsure
}

// pfKthread is PF_KTHREAD of /proc/PID/stat's flags: a kernel thread.
const pfKthread = 0x00200000

// inExecWindow says whether a process that shows no environment may be a
// process in the middle of execve, started at or after since: a live user
// process, not a kernel thread or a zombie (they show none either).
func inExecWindow(pid int, since int64) bool {
	st, ok := procfs.Read(pid)
	return ok && st.Flags&pfKthread == 0 && st.State != "Z" && st.State != "X" && st.StartTicks >= since
}

func hasMarker(pid int, needle []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && bytes.Contains(b, needle)
}
