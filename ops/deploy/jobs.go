package deploy

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// JobUnit is one running backend job as systemd shows it: each job is a
// transient unit of its own in units.JobsSlice, which a cutover, a
// rollback and the backend's restarts leave alone.
type JobUnit struct {
	Unit         string    `json:"unit"`
	ActiveState  string    `json:"activeState"`
	InvocationID string    `json:"invocationId"`
	Since        time.Time `json:"since,omitzero"`
}

// JobsReport says what a cutover (or rollback) did to the running jobs:
// none may be stopped by it. StillRunning counts the jobs running before
// that run on in the same invocation; Ended names those that ended
// meanwhile (on their own, or cancelled: a deploy never stops one).
type JobsReport = outcome.Jobs

// JobLister is what listing the jobs reads of systemd.
type JobLister interface {
	ListUnits(ctx context.Context) ([]unitstate.Listed, error)
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
}

// RunningJobs lists the job units that run now.
func RunningJobs(ctx context.Context, sd JobLister) ([]JobUnit, error) {
	ls, err := sd.ListUnits(ctx)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	var out []JobUnit
	for _, l := range ls {
		if !strings.HasPrefix(l.Name, units.JobUnitPrefix) || !strings.HasSuffix(l.Name, ".service") || !jobActive(l.ActiveState) {
			continue
		}
		st, err := sd.Unit(ctx, l.Name)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		if jobActive(st.ActiveState) {
			out = append(out, JobUnit{Unit: l.Name, ActiveState: st.ActiveState, InvocationID: st.InvocationID, Since: st.ActiveEnterTimestamp})
		}
	}
	return out, nil
}

func jobActive(active string) bool {
	return active == "active" || active == "activating" || active == "reloading"
}

// CompareJobs judges the jobs after a deploy step against those before.
func CompareJobs(before, after []JobUnit) *JobsReport {
	now := map[string]string{}
	for _, j := range after {
		now[j.Unit] = j.InvocationID
	}
	r := &JobsReport{RunningBefore: len(before)}
	for _, j := range before {
		if inv, ok := now[j.Unit]; ok && inv == j.InvocationID {
			r.StillRunning++
		} else {
			r.Ended = append(r.Ended, j.Unit)
		}
	}
	return r
}

// noteJobs records the jobs running before the swap, and warns when the
// candidate cannot serve them (a build from before jobs: they run on and
// keep their state, but that build shows none of them).
func (c *cutover) noteJobs(ctx context.Context) {
	js, err := RunningJobs(ctx, c.env.Systemd)
	c.rep.Jobs = &JobsReport{RunningBefore: len(js)}
	if err != nil {
		c.rep.Jobs.Err = err.Error()
		return
	}
	c.jobs = js
	if len(js) > 0 && !servesJobs(ctx, c.opts.Build) {
		c.rep.Warnings = append(c.rep.Warnings, fmt.Sprintf("%d jobs are running and the candidate predates jobs: they run on and keep their output, but it cannot show or cancel them until a build with jobs is back", len(js)))
	}
}

// judgeJobs compares the jobs after the cutover (or its rollback) with
// those before.
func (c *cutover) judgeJobs(ctx context.Context) {
	if c.rep.Jobs == nil || c.rep.Jobs.Err != "" {
		return
	}
	after, err := RunningJobs(context.WithoutCancel(ctx), c.env.Systemd)
	if err != nil {
		c.rep.Jobs.Err = err.Error()
		return
	}
	c.rep.Jobs = CompareJobs(c.jobs, after)
}

// servesJobs reports whether a backend build has the job supervisor.
func servesJobs(ctx context.Context, build string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, build, "job-exec", "--help").Run() == nil
}
