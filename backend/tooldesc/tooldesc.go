// Package tooldesc is what each tool of mcp-backend is, in one table: its
// name, admission class, default OAuth scope, whether it only reads, what
// the policy judges of its arguments, whether its command runs in a
// sandbox, how the audit trail records its arguments, and what an approved
// ask runs instead. Everything that treats tools differently reads it here;
// backend/tools binds each descriptor to its handler and refuses to start
// when one lacks the other. Standard library and mcpwire only, so that
// config, policy and the server can all read it.
package tooldesc

import (
	"slices"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Target is what of a call's arguments the policy judges.
type Target int

// The policy targets.
const (
	TargetNone    Target = iota // the tool as a whole
	TargetCommand               // the command (and env) as bash reads it: commands rules
	TargetPath                  // the path, resolved: paths rules
	TargetUnit                  // the unit, as systemd resolves it: units rules
	TargetKill                  // the pid and signal: pids and signals rules
)

// The default OAuth scopes: reading and looking around, changing things,
// and running commands are granted separately.
const (
	ScopeRead  = "mcp:read"
	ScopeWrite = "mcp:write"
	ScopeExec  = "mcp:exec"
)

// Audit says how the audit trail records a call's arguments: each field
// names the argument recorded that way ("" for none). It converts to
// audit.Shape, which the audit package defines without linking backend/.
type Audit struct {
	Command  string   // cut at audit.CommandBytes, with its length
	Path     string   // as MCP_PATH
	EnvNames string   // an object whose names are kept, never its values
	Content  string   // its size and sha256, never the bytes
	Encoding string   // the argument saying Content is base64
	PID      string   // as the target pid (with its start time and comm)
	Signal   string   // as the signal sent
	Unit     string   // as MCP_UNIT
	Action   string   // as MCP_ACTION
	JobID    string   // as MCP_JOB_ID
	Keep     []string // kept as given, in MCP_ARGS
}

// Tool describes one tool. The handler is backend/tools'.
type Tool struct {
	Name  string
	Class mcpwire.Class
	Scope string // the default scope that grants it
	// ReadOnly: annotated read-only; otherwise destructive.
	ReadOnly bool
	Policy   Target
	// Sandboxed: it runs a shell command, in the sandbox profile the
	// policy chose.
	Sandboxed bool
	// ApprovedAs is the tool an approved ask of this one runs as ("": as
	// itself): a shell.exec approved later runs as the job.start of the
	// same arguments, since its caller has stopped waiting.
	ApprovedAs string
	Audit      Audit
	// EndExit: the end record carries the exit code and signal.
	EndExit bool
	// EndJob: the call acts on one job, which the end record names.
	EndJob bool
}

var commandAudit = Audit{Command: "command", Path: "cwd", EnvNames: "env", Keep: []string{"timeoutMs", "waitMs", "memoryMax", "tasksMax"}}

var jobAudit = Audit{JobID: "id", Keep: []string{"stream", "offset", "maxBytes", "waitMs"}}

var fileAudit = Audit{Path: "path", Keep: []string{"offset", "length", "limit"}}

var unitAudit = Audit{Unit: "unit", Action: "action"}

// all is every tool, control tools first (the order of tools/list).
var all = []Tool{
	{Name: mcpwire.ToolSystemInfo, Class: mcpwire.ClassControl, Scope: ScopeRead, ReadOnly: true},
	{Name: mcpwire.ToolProcessList, Class: mcpwire.ClassControl, Scope: ScopeRead, ReadOnly: true,
		Audit: Audit{Keep: []string{"name", "user", "limit"}}},
	{Name: mcpwire.ToolServiceStatus, Class: mcpwire.ClassControl, Scope: ScopeRead, ReadOnly: true, Policy: TargetUnit, Audit: unitAudit},
	{Name: mcpwire.ToolProcessKill, Class: mcpwire.ClassControl, Scope: ScopeWrite, Policy: TargetKill,
		Audit: Audit{PID: "pid", Signal: "signal"}},
	{Name: mcpwire.ToolServiceControl, Class: mcpwire.ClassControl, Scope: ScopeWrite, Policy: TargetUnit, Audit: unitAudit},
	{Name: mcpwire.ToolShellExec, Class: mcpwire.ClassShell, Scope: ScopeExec, Policy: TargetCommand, Sandboxed: true,
		ApprovedAs: mcpwire.ToolJobStart, Audit: commandAudit, EndExit: true},
	{Name: mcpwire.ToolFileRead, Class: mcpwire.ClassNormal, Scope: ScopeRead, ReadOnly: true, Policy: TargetPath, Audit: fileAudit},
	{Name: mcpwire.ToolFileWrite, Class: mcpwire.ClassNormal, Scope: ScopeWrite, Policy: TargetPath,
		Audit: Audit{Path: "path", Content: "content", Encoding: "encoding", Keep: []string{"encoding", "mode", "createParents"}}},
	{Name: mcpwire.ToolFileList, Class: mcpwire.ClassNormal, Scope: ScopeRead, ReadOnly: true, Policy: TargetPath, Audit: fileAudit},
	// Jobs run commands as shell.exec does, and their output is a root
	// command's output: every job tool is exec.
	{Name: mcpwire.ToolJobStart, Class: mcpwire.ClassShell, Scope: ScopeExec, Policy: TargetCommand, Sandboxed: true,
		Audit: commandAudit, EndJob: true},
	{Name: mcpwire.ToolJobStatus, Class: mcpwire.ClassNormal, Scope: ScopeExec, ReadOnly: true, Audit: jobAudit, EndJob: true},
	{Name: mcpwire.ToolJobOutput, Class: mcpwire.ClassNormal, Scope: ScopeExec, ReadOnly: true, Audit: jobAudit, EndJob: true},
	// job.wait holds no slot while it waits (ClassWait).
	{Name: mcpwire.ToolJobWait, Class: mcpwire.ClassWait, Scope: ScopeExec, ReadOnly: true, Audit: jobAudit, EndJob: true},
	{Name: mcpwire.ToolJobCancel, Class: mcpwire.ClassNormal, Scope: ScopeExec, Audit: jobAudit, EndJob: true},
	{Name: mcpwire.ToolJobList, Class: mcpwire.ClassNormal, Scope: ScopeExec, ReadOnly: true},
}

// All returns every descriptor, control tools first.
func All() []Tool { return slices.Clone(all) }

// Names returns every tool name, in the order of All.
func Names() []string {
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = t.Name
	}
	return out
}

// Lookup returns the descriptor of a tool name; false for no tool of ours.
func Lookup(name string) (Tool, bool) {
	for _, t := range all {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// ClassOf is a tool's admission class; unknown tools are normal.
func ClassOf(name string) mcpwire.Class {
	if t, ok := Lookup(name); ok {
		return t.Class
	}
	return mcpwire.ClassNormal
}

// Targeting returns the names of the tools whose policy target is t.
func Targeting(t Target) []string {
	var out []string
	for _, d := range all {
		if d.Policy == t {
			out = append(out, d.Name)
		}
	}
	return out
}

// DefaultScopes maps each default scope to the tools it grants.
func DefaultScopes() map[string][]string {
	out := map[string][]string{}
	for _, t := range all {
		out[t.Scope] = append(out[t.Scope], t.Name)
	}
	return out
}
