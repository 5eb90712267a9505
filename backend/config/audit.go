package config

import "fmt"

// Audit configures the audit trail: where records go and how much may
// wait for the sink.
type Audit struct {
	// Sink is auto (the journal when running under systemd with its socket
	// reachable, else the file when one is set, else off), journal, file
	// or off.
	Sink string `json:"sink"`
	// File is the JSON-lines file of the file sink (absolute path).
	File string `json:"file"`
	// FileMaxBytes rotates the file past this size; FileKeep rotated
	// files are kept (FILE.1 newest).
	FileMaxBytes int64 `json:"fileMaxBytes"`
	FileKeep     int   `json:"fileKeep"`
	// BufferRecords bounds the records waiting for the sink; past it a
	// record is dropped, counted (/metrics audit.dropped) and said on the
	// next record written.
	BufferRecords int `json:"bufferRecords"`
	// OnFailure is what happens to calls while records cannot be written
	// (auditd's disk_full_action): continue (count the lost records and
	// go on) or refuse (normal work is refused UNAVAILABLE until a record
	// is written again; control tools still run).
	OnFailure string `json:"onFailure"`
}

// The audit.onFailure choices.
const (
	AuditContinue = "continue"
	AuditRefuse   = "refuse"
)

// The audit sinks.
const (
	AuditAuto    = "auto"
	AuditJournal = "journal"
	AuditFile    = "file"
	AuditOff     = "off"
)

// DefaultAudit is the audit section's default: the journal under systemd.
func DefaultAudit() Audit {
	return Audit{Sink: AuditAuto, FileMaxBytes: 64 << 20, FileKeep: 5, BufferRecords: 8192, OnFailure: AuditContinue}
}

const (
	maxAuditBuffer   = 1 << 20
	maxAuditFileKeep = 100
)

func (a Audit) validate() []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("audit.%s = %v: %s", key, val, want))
	}
	switch a.Sink {
	case AuditAuto, AuditJournal, AuditFile, AuditOff:
	default:
		bad("sink", fmt.Sprintf("%q", a.Sink), `must be "auto", "journal", "file" or "off"`)
	}
	if a.File != "" {
		if err := checkPath(a.File); err != nil {
			bad("file", fmt.Sprintf("%q", a.File), err.Error())
		}
	} else if a.Sink == AuditFile {
		bad("file", `""`, `must be set when audit.sink is "file"`)
	}
	if a.FileMaxBytes < 4096 || a.FileMaxBytes > 1<<40 {
		bad("fileMaxBytes", a.FileMaxBytes, "must be 4096..1099511627776 (4 KiB..1 TiB)")
	}
	if a.FileKeep < 0 || a.FileKeep > maxAuditFileKeep {
		bad("fileKeep", a.FileKeep, fmt.Sprintf("must be 0..%d", maxAuditFileKeep))
	}
	switch a.OnFailure {
	case AuditContinue, AuditRefuse:
	default:
		bad("onFailure", fmt.Sprintf("%q", a.OnFailure), `must be "continue" or "refuse"`)
	}
	if a.BufferRecords < 1 || a.BufferRecords > maxAuditBuffer {
		bad("bufferRecords", a.BufferRecords, fmt.Sprintf("must be 1..%d", maxAuditBuffer))
	}
	return errs
}
