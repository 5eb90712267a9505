package config

import (
	"fmt"
	"time"
)

// Job modes of jobs.mode.
const (
	JobsAuto    = "auto"    // systemd under a unit with a state directory, off under one without (the canary), process outside systemd
	JobsSystemd = "systemd" // transient units in mcp-jobs.slice
	JobsProcess = "process" // process groups of the backend
	JobsOff     = "off"
)

// Jobs configures long-running jobs (job.*).
type Jobs struct {
	Mode string `json:"mode"`
	// StateDir holds the jobs' state; empty: $STATE_DIRECTORY/jobs under
	// systemd, a private temporary directory in process mode.
	StateDir                  string `json:"stateDir"`
	MaxRunning                int    `json:"maxRunning"`
	MaxRunningPerPrincipal    int    `json:"maxRunningPerPrincipal"`
	MaxRunningPerConversation int    `json:"maxRunningPerConversation"`
	MaxKept                   int    `json:"maxKept"`
	KeepForMs                 int64  `json:"keepForMs"`
	OutputBytes               int64  `json:"outputBytes"`
	TotalOutputBytes          int64  `json:"totalOutputBytes"`
	DefaultTimeoutMs          int64  `json:"defaultTimeoutMs"`
	MaxTimeoutMs              int64  `json:"maxTimeoutMs"`
	MemoryMaxBytes            int64  `json:"memoryMaxBytes"`
	TasksMax                  int64  `json:"tasksMax"`
	MaxWaiters                int    `json:"maxWaiters"`
	MaxWaitersPerPrincipal    int    `json:"maxWaitersPerPrincipal"`
}

// DefaultJobs are the jobs defaults: 16 running (8 per principal, 4 per
// conversation), 64 waiters (16 per principal),
// 64 MiB of output each and 2 GiB in all, an hour by default and six at
// most, 2 GiB and 512 tasks per job.
func DefaultJobs() Jobs {
	return Jobs{
		Mode:                      JobsAuto,
		MaxRunning:                16,
		MaxRunningPerPrincipal:    8,
		MaxRunningPerConversation: 4,
		MaxKept:                   200,
		KeepForMs:                 int64(24 * time.Hour / time.Millisecond),
		OutputBytes:               64 << 20,
		TotalOutputBytes:          2 << 30,
		DefaultTimeoutMs:          int64(time.Hour / time.Millisecond),
		MaxTimeoutMs:              int64(6 * time.Hour / time.Millisecond),
		MemoryMaxBytes:            2 << 30,
		TasksMax:                  512,
		MaxWaiters:                64,
		MaxWaitersPerPrincipal:    16,
	}
}

const (
	maxJobTimeoutMs = int64(7 * 24 * time.Hour / time.Millisecond)
	maxJobsKeepMs   = int64(30 * 24 * time.Hour / time.Millisecond)
)

// validate returns one error per bad jobs value.
func (j Jobs) validate() []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("jobs.%s = %v: %s", key, val, want))
	}
	switch j.Mode {
	case JobsAuto, JobsSystemd, JobsProcess, JobsOff:
	default:
		bad("mode", fmt.Sprintf("%q", j.Mode), "must be auto, systemd, process or off")
	}
	if j.StateDir != "" {
		if err := checkPath(j.StateDir); err != nil {
			bad("stateDir", fmt.Sprintf("%q", j.StateDir), err.Error()+", or empty for the unit's state directory")
		}
	}
	ints := []struct {
		key       string
		v, lo, hi int64
	}{
		{"maxRunning", int64(j.MaxRunning), 1, 1024},
		// Above maxRunning (maxWaiters) a per-principal figure means no
		// bound of its own: a config that lowers the cap alone stays valid.
		{"maxRunningPerPrincipal", int64(j.MaxRunningPerPrincipal), 1, 1024},
		{"maxRunningPerConversation", int64(j.MaxRunningPerConversation), 1, int64(max(j.MaxRunning, 1))},
		{"maxKept", int64(j.MaxKept), 1, 100000},
		{"keepForMs", j.KeepForMs, 1000, maxJobsKeepMs},
		{"outputBytes", j.OutputBytes, 1, 1 << 40},
		{"totalOutputBytes", j.TotalOutputBytes, max(j.OutputBytes, 1), 1 << 44},
		{"defaultTimeoutMs", j.DefaultTimeoutMs, 1, max(j.MaxTimeoutMs, 1)},
		{"maxTimeoutMs", j.MaxTimeoutMs, 1, maxJobTimeoutMs},
		{"memoryMaxBytes", j.MemoryMaxBytes, 1 << 20, 1 << 50},
		{"tasksMax", j.TasksMax, 1, 1 << 22},
		{"maxWaiters", int64(j.MaxWaiters), 1, 4096},
		{"maxWaitersPerPrincipal", int64(j.MaxWaitersPerPrincipal), 1, 4096},
	}
	for _, c := range ints {
		if c.v < c.lo || c.v > c.hi {
			bad(c.key, c.v, fmt.Sprintf("must be %d..%d", c.lo, c.hi))
		}
	}
	return errs
}
