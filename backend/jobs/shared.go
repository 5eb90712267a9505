package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The state directory is the jobs' one source of truth, shared by every
// backend process that opens it: during a cutover or a rollback the two
// slots of production both run (and for a moment both serve) on one
// directory. So a manager never trusts its map to be complete: it scans
// the directory for jobs another process started (and forgets the ones
// another process dropped), a lookup of an id it does not hold reads that
// job's directory, and a start decides its idempotency key and the caps
// over every process's jobs under an flock(2) that every process takes
// (lockFile), keeping it until the new job's spec is on disk.

const (
	// lockFile is the flock every process takes to start a job.
	lockFile = "lock"
	// startingFile marks a job whose runner is being started: nobody may
	// judge it gone (its unit does not exist yet) until it is removed, or
	// until it is older than startGrace (the starting process died).
	startingFile = "starting"
)

// startGrace bounds a start: the runner's check and start are each
// bounded by seconds (D-Bus), so a marker older than this was left by a
// process that died while starting.
const startGrace = time.Minute

// lockDir takes the state directory's start lock; the returned func
// releases it. Each call opens the file afresh, so the lock also excludes
// another goroutine of this process.
func (m *Manager) lockDir() (func(), error) {
	f, err := os.OpenFile(filepath.Join(m.dir, lockFile), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("jobs: open the start lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("jobs: take the start lock: %w", err)
	}
	return func() { f.Close() }, nil // closing the last descriptor releases it
}

// scanLocked brings m.jobs in line with the directory: jobs another
// process started are added, jobs another process dropped (pruned, made
// room for) are forgotten; a job starting here is kept whatever the
// directory holds.
func (m *Manager) scanLocked() {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		m.log.Warn("jobs: scan the state directory", "err", err)
		return
	}
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || !validID(id) {
			continue
		}
		seen[id] = true
		if _, ok := m.jobs[id]; !ok {
			m.loadLocked(id)
		}
	}
	for id, j := range m.jobs {
		if !seen[id] && !j.starting {
			delete(m.jobs, id)
		}
	}
}

// loadLocked adds job id from its directory; nil when there is no such
// job (yet: another process writes its spec last) or it cannot be read.
func (m *Manager) loadLocked(id string) *job {
	if !validID(id) {
		return nil
	}
	d := filepath.Join(m.dir, id)
	spec, _, err := ReadSpec(d)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err == nil && spec.ID != id:
		err = fmt.Errorf("%s names job %q", specFile, spec.ID)
	}
	if err != nil {
		if !m.unreadable[id] {
			m.unreadable[id] = true
			m.log.Warn("jobs: unreadable job left alone", "job", id, "err", err)
		}
		return nil
	}
	j := &job{spec: spec, dir: d}
	m.jobs[id] = j
	return j
}

// startingElsewhere says whether jobDir's runner is being started by a
// process (this one or another) that is still within startGrace.
func startingElsewhere(jobDir string, now time.Time) bool {
	fi, err := os.Stat(filepath.Join(jobDir, startingFile))
	return err == nil && now.Sub(fi.ModTime()) < startGrace
}

// selfProcess names this process (processID).
var selfProcess = sync.OnceValue(func() string { return processID(os.Getpid()) })

// processID names a process for as long as it lives, pid reuse and
// reboots included: the boot's id, the pid and its start time in clock
// ticks since boot (/proc/PID/stat). "" when it cannot be read (no such
// process).
func processID(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// comm, the second field, may hold spaces and parentheses: the fields
	// after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "" // a zombie runs nothing any more
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + strconv.Itoa(pid) + "/" + f[19]
}

// processAlive says whether the process id names (processID) still runs.
func processAlive(id string) bool {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	return processID(pid) == id
}
