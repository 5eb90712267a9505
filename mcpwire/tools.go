package mcpwire

// The MCP tool names.
const (
	ToolSystemInfo     = "system.info"
	ToolProcessList    = "process.list"
	ToolServiceStatus  = "service.status"
	ToolProcessKill    = "process.kill"
	ToolServiceControl = "service.control"
	ToolShellExec      = "shell.exec"
	ToolFileRead       = "file.read"
	ToolFileWrite      = "file.write"
	ToolFileList       = "file.list"
	ToolJobStart       = "job.start"
	ToolJobStatus      = "job.status"
	ToolJobOutput      = "job.output"
	ToolJobWait        = "job.wait"
	ToolJobCancel      = "job.cancel"
	ToolJobList        = "job.list"
)

// ToolNames returns the tool names, control tools first.
func ToolNames() []string {
	return []string{
		ToolSystemInfo, ToolProcessList, ToolServiceStatus, ToolProcessKill, ToolServiceControl,
		ToolShellExec, ToolFileRead, ToolFileWrite, ToolFileList,
		ToolJobStart, ToolJobStatus, ToolJobOutput, ToolJobWait, ToolJobCancel, ToolJobList,
	}
}

// Class is a tool's admission class.
type Class string

// The admission classes. Control tools may also use the reserved slots, so an
// operator can look and act while normal work has saturated its share; shell
// is a normal tool that also takes a shell slot.
const (
	ClassShell   Class = "shell"
	ClassNormal  Class = "normal"
	ClassControl Class = "control"
	// ClassWait is job.wait: it holds no slot of the controller while it
	// waits (the jobs manager bounds the waiters), so waiting on a job
	// never takes a shell or normal slot from running work.
	ClassWait Class = "wait"
)

// Classes lists the classes in report order.
func Classes() []Class { return []Class{ClassShell, ClassNormal, ClassControl} }

// ClassOf returns the admission class a tool's calls are counted under, as
// clients (the stress) read /metrics; unknown tools are normal. The
// backend's tool descriptors say the same, which their test checks.
func ClassOf(tool string) Class {
	switch tool {
	case ToolSystemInfo, ToolProcessList, ToolServiceStatus, ToolProcessKill, ToolServiceControl:
		return ClassControl
	case ToolShellExec, ToolJobStart:
		return ClassShell
	case ToolJobWait:
		return ClassWait
	}
	return ClassNormal
}

// The _meta keys of a tools/call that name who it is for, as ChatGPT sends
// them: an anonymised conversation and an anonymised user. The server
// shares capacity fairly by them (client-asserted: they split a verified
// caller's share, never add to it).
const (
	MetaSession = "openai/session"
	MetaSubject = "openai/subject"
)
