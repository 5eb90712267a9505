// Package tools holds the MCP tools of mcp-backend: the
// control tools system.info, process.list, service.status, process.kill and
// service.control, the normal tools shell.exec, file.read, file.write and
// file.list, and the job tools (job.start, job.status, job.output,
// job.wait, job.cancel, job.list) over backend/jobs: the handlers of the
// descriptors in backend/tooldesc, bound to them in New. Every tool has
// structured input and output schemas; every failure is a structured
// toolerr result. Admission control, and the recovery of a panic, are not
// done here: the server wraps these tools from outside.
package tools

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/procgroup"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
)

// Defaults used when an Options field is zero.
const (
	defaultOutputBytes    = 4 << 20
	defaultResponseBytes  = 6 << 20
	responseOverhead      = 16 << 10 // what a result adds around its output: fields, flags, envelope
	defaultShellPath      = "/bin/bash"
	defaultTimeout        = 60 * time.Second
	defaultMaxTimeout     = 600 * time.Second
	defaultFileTimeout    = 30 * time.Second
	closeWait             = time.Second // how long Close waits for killed groups to be reaped: drain (2 s) + this stays well inside TimeoutStopSec=5
	serviceJobDeadline    = 60 * time.Second
	defaultDBusTimeout    = 10 * time.Second // a local systemd answers in milliseconds; systemctl waits 25 s
	defaultProcessLimit   = 200
	maxProcessLimit       = 5000
	defaultFileListLimit  = 1000
	maxFileListLimit      = 10000
	maxCmdlineBytes       = 4096
	maxErrorMessageLength = 512
)

// Options configure the tools; zero fields get the documented defaults.
type Options struct {
	OutputBytes    int64         // limits.outputBytes: max stdout+stderr of shell.exec, max content bytes file.read returns
	ResponseBytes  int64         // limits.responseBytes: output is also cut so that its JSON encoding fits this
	ShellPath      string        // shell.path: shell.exec runs ShellPath -c COMMAND
	DefaultTimeout time.Duration // shell.defaultTimeoutMs
	MaxTimeout     time.Duration // shell.maxTimeoutMs (cap on timeoutMs)
	FileTimeout    time.Duration // how long file tools and process.list wait for the kernel before leaving the operation
	Logger         *slog.Logger
	Admission      func() any                                         // snapshot included in system.info under "admission"; may be nil
	SystemdBus     func(ctx context.Context) (*systemd.Client, error) // how service.* connect (ctx bounds the connect); nil = the system bus
	DBusTimeout    time.Duration                                      // bounds each D-Bus step of a call (connect, property reads); default 10 s
	Files          *filepolicy.Policy                                 // what file.read, file.write and file.list may touch; nil = everything
	Jobs           *jobs.Manager                                      // nil: jobs are off (JobsOffReason says why)
	JobsOffReason  string
	JobLimits      jobs.Limits // what the job tools describe and enforce per call
	// SandboxExe is the helper (mcp-backend's sandbox-exec) a command runs
	// through when its call carries a sandbox (sandbox.From).
	SandboxExe string
}

// Tools is the set of tools with their shared state: the registry of running
// command groups that Close kills.
type Tools struct {
	opts    Options
	log     *slog.Logger
	defs    []toolDef
	started time.Time

	mu      sync.Mutex
	closed  bool
	closing chan struct{}    // closed by Close; running shell.exec calls watch it
	groups  map[int]struct{} // process group ids of running commands, not yet reaped
	running sync.WaitGroup   // one per running shell.exec

	// Operations still in the kernel after their calls gave up on them.
	strandedFiles, strandedScans atomic.Int64
	once                         sync.Once
}

// encodedBudget is how many encoded JSON bytes a tool's output may take: a
// result must fit the response budget, and JSON escaping can make output six
// times larger than its raw bytes. Cutting at the source keeps a flood from
// costing tens of megabytes per call before the server trims it.
func (t *Tools) encodedBudget() int {
	return int(t.opts.ResponseBytes - responseOverhead)
}

// New builds the tools. Schemas are derived and resolved once here, so
// Register is cheap enough to call for every server instance.
func New(opts Options) *Tools {
	if opts.OutputBytes <= 0 {
		opts.OutputBytes = defaultOutputBytes
	}
	if opts.ResponseBytes <= 0 {
		opts.ResponseBytes = defaultResponseBytes
	}
	if opts.ShellPath == "" {
		opts.ShellPath = defaultShellPath
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = defaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = defaultMaxTimeout
	}
	if opts.FileTimeout <= 0 {
		opts.FileTimeout = defaultFileTimeout
	}
	if opts.DefaultTimeout > opts.MaxTimeout {
		opts.DefaultTimeout = opts.MaxTimeout
	}
	if opts.SystemdBus == nil {
		opts.SystemdBus = func(ctx context.Context) (*systemd.Client, error) {
			return systemd.Connect(ctx, systemd.Options{})
		}
	}
	if opts.DBusTimeout <= 0 {
		opts.DBusTimeout = defaultDBusTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tools{
		opts:    opts,
		log:     log,
		started: time.Now(),
		closing: make(chan struct{}),
		groups:  make(map[int]struct{}),
	}
	t.defs = bind(tooldesc.All(), map[string]binder{
		mcpwire.ToolSystemInfo:     handle(t, "Host and backend facts: hostname, OS and kernel, uptime, load, memory, CPU count, backend version and build, admission state.", t.systemInfo),
		mcpwire.ToolProcessList:    handle(t, "List processes from /proc with pid, ppid, user, state, command line, RSS and CPU time; filter by name substring and user.", t.processList),
		mcpwire.ToolServiceStatus:  handle(t, "Status of a systemd unit over D-Bus: load/active/sub state, main PID, active since.", t.serviceStatus),
		mcpwire.ToolProcessKill:    handle(t, "Send a signal (default TERM) to a process (pid 2..2147483647). Refuses pid 1, the backend itself, its ancestors and thread ids.", t.processKill),
		mcpwire.ToolServiceControl: handle(t, "Start, stop, restart or reload a systemd unit and wait for the job result.", t.serviceControl),
		mcpwire.ToolShellExec:      handle(t, shellExecDescription(opts), t.shellExec),
		mcpwire.ToolFileRead: handle(t, "Read part of a regular file (absolute path). Text comes back as utf-8, binary content as base64. "+
			"Never waits for data: a stream with nothing to read now (like /proc/kmsg) answers UNAVAILABLE.", t.fileRead),
		mcpwire.ToolFileWrite: handle(t, "Write a regular file atomically (temp file in the same directory, fsync, rename). Absolute path; a symlink is followed to its target; FIFOs, devices and sockets are never replaced; owner, ACLs and xattrs of a replaced file are not preserved.", t.fileWrite),
		mcpwire.ToolFileList:  handle(t, "List a directory (absolute path): name, type, size, mode, mtime of each entry.", t.fileList),
		mcpwire.ToolJobStart:  handle(t, jobStartDescription(opts), t.jobStart),
		mcpwire.ToolJobStatus: handle(t, "Status of a job you started: state (running, exited, killed, timeout, output_limit, cancelled, lost), exit code or signal, times, output bytes so far.", t.jobStatus),
		mcpwire.ToolJobOutput: handle(t, "Read a job's stdout or stderr from a byte offset, in bounded chunks: pass the chunk's nextOffset as offset to continue; eof is true once the job ended and all was read. "+
			"Bytes are exact: data is the text when the chunk is valid UTF-8 (encoding utf8), else base64 (encoding base64).", t.jobOutput),
		mcpwire.ToolJobWait: handle(t, "Wait for a job to end, at most waitMs (default 25000, at most 45000, counted from the request's arrival); returns its status and the output after the offsets given. "+
			"waitEnded says why it returned: done, timeout (still running: call job.wait again) or shutdown (the backend is restarting; the job goes on: call again).", t.jobWait),
		mcpwire.ToolJobCancel: handle(t, "Cancel a job: its whole process tree is killed (SIGTERM, SIGKILL after 2 s); returns its final status.", t.jobCancel),
		mcpwire.ToolJobList:   handle(t, "List your jobs, newest first (running and recently finished).", t.jobList),
	})
	return t
}

// Register adds every tool to s.
func (t *Tools) Register(s *mcp.Server) {
	for _, d := range t.defs {
		s.AddTool(d.tool, d.handler)
	}
}

// Close kills every still-running command group at once (no grace: this is
// shutdown) and waits a bounded time for them to be reaped. Later shell.exec
// calls fail with UNAVAILABLE. Safe to call more than once.
func (t *Tools) Close() {
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		close(t.closing)
		for pgid := range t.groups {
			procgroup.KillGroup(pgid, syscall.SIGKILL)
		}
		t.mu.Unlock()

		done := make(chan struct{})
		go func() { t.running.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait):
			t.log.Warn("tools: command groups still being reaped after close", "wait", closeWait)
		}
	})
}

// selfPID is the backend's own pid, which process.kill refuses.
var selfPID = os.Getpid()
