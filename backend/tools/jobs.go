package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

const (
	// maxJobWait bounds waitMs of job.start and job.wait, counted from the
	// request's arrival: with the queue wait inside it, the answer comes
	// well before a hosted client's 60 s tool timeout.
	maxJobWait      = 45 * time.Second
	defaultJobWait  = 25 * time.Second
	jobChunkBytes   = 64 << 10 // output carried by job.start and job.wait, per stream
	defaultJobRead  = 256 << 10
	maxJobReadBytes = 1 << 20
)

// JobStartInput is the input of job.start.
type JobStartInput struct {
	Command        string            `json:"command" jsonschema:"shell command, run as SHELL -c COMMAND with stdin /dev/null"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"absolute working directory (default: the backend's)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"variables added to the backend's environment"`
	TimeoutMs      *int64            `json:"timeoutMs,omitempty" jsonschema:"the job is killed after this long; default and maximum: see the tool description"`
	WaitMs         *int64            `json:"waitMs,omitempty" jsonschema:"wait up to this long (0..45000, default 0) for the job to end and return its result directly"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty" jsonschema:"a start retried with the same key returns the same job instead of starting a second (up to 128 bytes)"`
	MemoryMaxBytes *int64            `json:"memoryMaxBytes,omitempty" jsonschema:"memory limit of the job's cgroup, at most the configured one (systemd mode)"`
	TasksMax       *int64            `json:"tasksMax,omitempty" jsonschema:"process and thread limit of the job's cgroup, at most the configured one (systemd mode)"`
}

func (*JobStartInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["command"].MinLength = new(1)
	s.Properties["timeoutMs"].Minimum = new(1.0)
	s.Properties["waitMs"].Minimum = new(0.0)
	s.Properties["waitMs"].Maximum = new(float64(maxJobWait.Milliseconds()))
	s.Properties["idempotencyKey"].MaxLength = new(caller.MaxIDBytes)
	s.Properties["memoryMaxBytes"].Minimum = new(1.0)
	s.Properties["tasksMax"].Minimum = new(1.0)
}

// JobIDInput names one job.
type JobIDInput struct {
	ID string `json:"id" jsonschema:"the job id job.start returned"`
}

// JobOutputInput is the input of job.output.
type JobOutputInput struct {
	ID       string `json:"id" jsonschema:"the job id"`
	Stream   string `json:"stream" jsonschema:"stdout or stderr"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"byte offset to read from (the nextOffset of the last chunk); default 0"`
	MaxBytes int64  `json:"maxBytes,omitempty" jsonschema:"at most this many bytes (default 262144, at most 1048576)"`
}

func (*JobOutputInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["stream"].Enum = []any{jobs.Stdout, jobs.Stderr}
	s.Properties["offset"].Minimum = new(0.0)
	s.Properties["maxBytes"].Minimum = new(0.0)
	s.Properties["maxBytes"].Maximum = new(float64(maxJobReadBytes))
}

// JobWaitInput is the input of job.wait.
type JobWaitInput struct {
	ID           string `json:"id" jsonschema:"the job id"`
	WaitMs       *int64 `json:"waitMs,omitempty" jsonschema:"wait at most this long for the job to end (0..45000, default 25000), counted from the request's arrival"`
	StdoutOffset int64  `json:"stdoutOffset,omitempty" jsonschema:"the result carries stdout from this offset"`
	StderrOffset int64  `json:"stderrOffset,omitempty" jsonschema:"the result carries stderr from this offset"`
}

func (*JobWaitInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["waitMs"].Minimum = new(0.0)
	s.Properties["waitMs"].Maximum = new(float64(maxJobWait.Milliseconds()))
	s.Properties["stdoutOffset"].Minimum = new(0.0)
	s.Properties["stderrOffset"].Minimum = new(0.0)
}

// JobListInput is the (empty) input of job.list.
type JobListInput struct{}

func jobStartDescription(o Options) string {
	l := o.JobLimits
	return fmt.Sprintf("Start a shell command as a background job (%s -c COMMAND, stdin /dev/null; cwd and env as shell.exec) and return its id at once, "+
		"or after up to waitMs if it ends sooner (then with its result). Use it instead of shell.exec for anything that may take longer than about 30 s "+
		"(builds, backups, upgrades, test suites): the job outlives this call, the client's timeout and a backend restart. "+
		"Then poll: call job.wait with the id (returns when the job ends or after waitMs, at most 45 s; repeat while done is false), "+
		"read more output with job.output (pass nextOffset as offset), stop it with job.cancel. "+
		"timeoutMs defaults to %d and may be at most %d; stdout+stderr are kept up to %d bytes (beyond that the job is killed, state output_limit). "+
		"Send an idempotencyKey so that a retried start returns the same job. At most %d jobs run at once, %d per conversation.",
		o.ShellPath, l.DefaultTimeout.Milliseconds(), l.MaxTimeout.Milliseconds(), l.OutputBytes, l.MaxRunning, l.MaxRunningPerConversation)
}

// jobsOff is the error of every job tool where jobs are off.
func (t *Tools) jobsOn() error {
	if t.opts.Jobs == nil {
		return toolerr.New(mcpwire.CodeUnavailable, "jobs are off on this backend (%s)", t.opts.JobsOffReason)
	}
	return nil
}

func callerOf(ctx context.Context) caller.Caller {
	c, _ := caller.From(ctx)
	return c
}

// deadlineFrom is when a wait of waitMs ends: counted from the request's
// arrival, so queueing is part of it.
func deadlineFrom(ctx context.Context, waitMs *int64, def time.Duration) time.Time {
	d := def
	if waitMs != nil {
		d = time.Duration(*waitMs) * time.Millisecond
	}
	return ArrivalOf(ctx).Add(min(d, maxJobWait))
}

func (t *Tools) jobStart(ctx context.Context, in JobStartInput) (mcpwire.JobStartResult, error) {
	var res mcpwire.JobStartResult
	if err := t.jobsOn(); err != nil {
		return res, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"command\": must not be empty")
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"command\": must not contain NUL bytes")
	}
	l := t.opts.JobLimits
	req := jobs.StartRequest{Command: in.Command, Cwd: in.Cwd, IdemKey: in.IdempotencyKey, Timeout: l.DefaultTimeout}
	if v := in.TimeoutMs; v != nil {
		if *v > l.MaxTimeout.Milliseconds() {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"timeoutMs\": %d is more than the maximum %d (jobs.maxTimeoutMs)", *v, l.MaxTimeout.Milliseconds())
		}
		req.Timeout = time.Duration(*v) * time.Millisecond
	}
	if v := in.MemoryMaxBytes; v != nil {
		if *v > l.MemoryMax {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"memoryMaxBytes\": %d is more than the maximum %d (jobs.memoryMax)", *v, l.MemoryMax)
		}
		req.MemoryMax = *v
	}
	if v := in.TasksMax; v != nil {
		if *v > l.TasksMax {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"tasksMax\": %d is more than the maximum %d (jobs.tasksMax)", *v, l.TasksMax)
		}
		req.TasksMax = *v
	}
	env, err := shellEnv(in.Env)
	if err != nil {
		return res, err
	}
	req.Env = env
	if sb, ok := sandbox.From(ctx); ok && sb.Spec != nil {
		// The job starts from the clean environment, in the profile.
		req.Sandbox, req.Env = sb.Spec, sandbox.Env(sb.Spec, in.Env)
	}
	if in.Cwd != "" {
		if err := checkDir("cwd", in.Cwd); err != nil {
			return res, err
		}
	}
	c := callerOf(ctx)
	st, reused, err := t.opts.Jobs.Start(ctx, c, req)
	if err != nil {
		return res, err
	}
	res.Reused = reused
	if !st.Done && in.WaitMs != nil && *in.WaitMs > 0 {
		if w, _, err := t.opts.Jobs.Wait(ctx, c, st.ID, deadlineFrom(ctx, in.WaitMs, 0)); err == nil {
			st = w
		} else if ctx.Err() != nil {
			return res, err
		}
	}
	res.Job = st
	res.Stdout, res.Stderr, err = t.jobChunks(c, st.ID, 0, 0)
	return res, err
}

// jobChunks reads the next bytes of both streams, within half the
// response budget each.
func (t *Tools) jobChunks(c caller.Caller, id string, outOff, errOff int64) (stdout, stderr mcpwire.JobChunk, err error) {
	half := t.encodedBudget() / 2
	if stdout, err = t.opts.Jobs.Output(c, id, jobs.Stdout, outOff, jobChunkBytes, half); err != nil {
		return
	}
	stderr, err = t.opts.Jobs.Output(c, id, jobs.Stderr, errOff, jobChunkBytes, half)
	return
}

func (t *Tools) jobStatus(ctx context.Context, in JobIDInput) (mcpwire.JobStatus, error) {
	if err := t.jobsOn(); err != nil {
		return mcpwire.JobStatus{}, err
	}
	return t.opts.Jobs.Status(callerOf(ctx), in.ID)
}

func (t *Tools) jobOutput(ctx context.Context, in JobOutputInput) (mcpwire.JobChunk, error) {
	if err := t.jobsOn(); err != nil {
		return mcpwire.JobChunk{}, err
	}
	n := in.MaxBytes
	if n <= 0 {
		n = defaultJobRead
	}
	return t.opts.Jobs.Output(callerOf(ctx), in.ID, in.Stream, in.Offset, min(n, maxJobReadBytes), t.encodedBudget())
}

func (t *Tools) jobWait(ctx context.Context, in JobWaitInput) (mcpwire.JobWaitResult, error) {
	var res mcpwire.JobWaitResult
	if err := t.jobsOn(); err != nil {
		return res, err
	}
	c := callerOf(ctx)
	st, why, err := t.opts.Jobs.Wait(ctx, c, in.ID, deadlineFrom(ctx, in.WaitMs, defaultJobWait))
	if err != nil {
		return res, err
	}
	res.Job, res.WaitEnded = st, why
	res.Stdout, res.Stderr, err = t.jobChunks(c, in.ID, in.StdoutOffset, in.StderrOffset)
	return res, err
}

func (t *Tools) jobCancel(ctx context.Context, in JobIDInput) (mcpwire.JobStatus, error) {
	if err := t.jobsOn(); err != nil {
		return mcpwire.JobStatus{}, err
	}
	return t.opts.Jobs.Cancel(ctx, callerOf(ctx), in.ID)
}

func (t *Tools) jobList(ctx context.Context, _ JobListInput) (mcpwire.JobList, error) {
	if err := t.jobsOn(); err != nil {
		return mcpwire.JobList{}, err
	}
	l := t.opts.Jobs.List(callerOf(ctx))
	return mcpwire.JobList{Jobs: l, Total: len(l)}, nil
}

type arrivalKey struct{}

// WithArrival returns ctx carrying when the request arrived: waits that
// promise an answer within a client's timeout count from it.
func WithArrival(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, arrivalKey{}, t)
}

// ArrivalOf is the request's arrival (now when unknown).
func ArrivalOf(ctx context.Context) time.Time {
	if t, ok := ctx.Value(arrivalKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}
