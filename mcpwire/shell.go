package mcpwire

// ShellResult is the structured result of shell.exec. ExitCode is null when
// the command was killed by a signal (then Signal names it); TimedOut and
// OutputLimited say that the backend killed the command's process group.
type ShellResult struct {
	ExitCode      *int    `json:"exitCode"`
	Signal        *string `json:"signal"`
	Stdout        string  `json:"stdout"`
	Stderr        string  `json:"stderr"`
	TimedOut      bool    `json:"timedOut"`
	OutputLimited bool    `json:"outputLimited"`
	DurationMs    int64   `json:"durationMs"`
}
