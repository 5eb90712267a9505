package mcpwire

// Job states. A job is running until its supervisor records how it ended;
// lost means it was running when its runner went away without a record (a
// reboot under systemd; the backend's own exit without systemd).
const (
	JobRunning     = "running"
	JobExited      = "exited"       // the shell exited; ExitCode says how
	JobKilled      = "killed"       // a signal ended it that the backend did not send
	JobTimeout     = "timeout"      // its timeoutMs ran out: the whole job was killed
	JobOutputLimit = "output_limit" // stdout+stderr passed the job's cap: the whole job was killed
	JobCancelled   = "cancelled"    // job.cancel
	JobLost        = "lost"
)

// Job modes, as system.info reports them.
const (
	JobModeSystemd = "systemd" // each job a transient unit in the jobs slice; jobs outlive the backend
	JobModeProcess = "process" // each job a process group of the backend; jobs end with it
	JobModeOff     = "off"     // no jobs (the canary, or switched off)
)

// Output encodings of a JobChunk.
const (
	EncodingUTF8   = "utf8"   // Data is the bytes as they are (valid UTF-8)
	EncodingBase64 = "base64" // Data is standard base64 of the bytes
)

// JobStatus is the state of one job.
type JobStatus struct {
	ID           string  `json:"id"`
	State        string  `json:"state" jsonschema:"running, exited, killed, timeout, output_limit, cancelled or lost"`
	Done         bool    `json:"done" jsonschema:"true once the job ended (every state but running)"`
	Command      string  `json:"command"`
	ExitCode     *int    `json:"exitCode" jsonschema:"the shell's exit status; null while running or when a signal ended it"`
	Signal       *string `json:"signal" jsonschema:"the signal that ended the shell (e.g. SIGKILL); null otherwise"`
	StartedAt    string  `json:"startedAt" jsonschema:"RFC3339"`
	EndedAt      *string `json:"endedAt" jsonschema:"RFC3339; null while running"`
	DurationMs   int64   `json:"durationMs"`
	StdoutBytes  int64   `json:"stdoutBytes" jsonschema:"bytes of stdout kept so far (job.output offsets run up to this)"`
	StderrBytes  int64   `json:"stderrBytes"`
	OutputLimit  int64   `json:"outputLimit" jsonschema:"cap on stdoutBytes+stderrBytes; the job is killed when it is passed"`
	TimeoutMs    int64   `json:"timeoutMs"`
	Mode         string  `json:"mode" jsonschema:"systemd or process"`
	Unit         string  `json:"unit,omitempty" jsonschema:"the job's transient systemd unit (systemd mode)"`
	Message      string  `json:"message,omitempty" jsonschema:"why it ended, when that needs words"`
	Conversation string  `json:"conversation" jsonschema:"hash of the conversation that started it"`
}

// JobChunk is a piece of one output stream: the bytes [Offset, NextOffset)
// of stdout or stderr, exactly, in the encoding Encoding names.
type JobChunk struct {
	Stream     string `json:"stream" jsonschema:"stdout or stderr"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"nextOffset" jsonschema:"pass as offset to continue"`
	Data       string `json:"data"`
	Encoding   string `json:"encoding" jsonschema:"utf8 (data is the bytes as text) or base64 (the bytes were not valid UTF-8)"`
	Total      int64  `json:"total" jsonschema:"bytes of the stream kept so far"`
	EOF        bool   `json:"eof" jsonschema:"true when the job has ended and nextOffset is the end of the stream"`
}

// JobStartResult is the result of job.start and job.wait: the job's status
// and the first (start) or next (wait) bytes of each stream.
type JobStartResult struct {
	Job    JobStatus `json:"job"`
	Stdout JobChunk  `json:"stdout"`
	Stderr JobChunk  `json:"stderr"`
	// Reused says an earlier start with the same idempotency key made this
	// job (no second one was started).
	Reused bool `json:"reused"`
}

// JobWaitResult is the result of job.wait.
type JobWaitResult struct {
	Job JobStatus `json:"job"`
	// WaitEnded says why the wait returned: done, timeout (waitMs passed,
	// the job still runs), or shutdown (the backend is restarting; the job
	// goes on, wait again).
	WaitEnded string   `json:"waitEnded" jsonschema:"done, timeout or shutdown"`
	Stdout    JobChunk `json:"stdout"`
	Stderr    JobChunk `json:"stderr"`
}

// JobList is the result of job.list: the caller's jobs, newest first.
type JobList struct {
	Jobs  []JobStatus `json:"jobs"`
	Total int         `json:"total"`
}

// JobMetrics is the jobs part of /metrics.
type JobMetrics struct {
	Mode    string `json:"mode"`
	Running int    `json:"running"`
	// Kept counts finished jobs whose status and output are kept.
	Kept int `json:"kept"`
	// Started and Refused count job starts since the process started
	// (a reused idempotency key counts neither).
	Started int64 `json:"started"`
	Refused int64 `json:"refused"`
	// OutputBytes is the output of every kept job on disk.
	OutputBytes int64 `json:"outputBytes"`
}
