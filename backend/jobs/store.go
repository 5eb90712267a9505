package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/randid"
)

// FormatVersion is the version of the on-disk layout: <dir>/v1/<id>/ holds
// spec.json (what to run, written before the job starts), env (its
// environment, NUL-separated), stdout and stderr (the capped output),
// exit.json (how it ended, written by the supervisor after the job's whole
// tree is dead, or by a backend that found the supervisor gone without
// one; read only once the supervisor is known to be gone), cancel (a
// job.cancel was asked), end-told (the audit trail was told of the
// end), exit.reserve (room for exit.json, taken when the job is
// written and given back to write the record: a job that ends while the
// state directory's filesystem is full keeps its result) and starting
// (its runner is being started: written first, removed once it runs).
// <dir>/v1/lock is the flock a start takes (shared.go). A later layout
// gets a new directory; a backend never reads a version it does not know.
const FormatVersion = 1

const (
	specFile    = "spec.json"
	envFile     = "env"
	stdoutFile  = "stdout"
	stderrFile  = "stderr"
	exitFile    = "exit.json"
	cancelFile  = "cancel"
	reserveFile = "exit.reserve"
)

// reserveBytes is the room kept for exit.json and the temporary file it is
// written through: a record is well under a page, and each file takes at
// least one.
const reserveBytes = 16 << 10

// Spec is what a job runs and who owns it.
type Spec struct {
	Version      int    `json:"version"`
	ID           string `json:"id"`
	Owner        string `json:"owner"` // caller.Principal.Key()
	Conversation string `json:"conversation"`
	IdemKey      string `json:"idempotencyKey,omitempty"`
	Command      string `json:"command"`
	Shell        string `json:"shell"`
	Cwd          string `json:"cwd,omitempty"`
	TimeoutMs    int64  `json:"timeoutMs"`
	OutputBytes  int64  `json:"outputBytes"`
	MemoryMax    int64  `json:"memoryMax,omitempty"`
	TasksMax     int64  `json:"tasksMax,omitempty"`
	Mode         string `json:"mode"`
	Unit         string `json:"unit,omitempty"`
	// Process names the backend process whose goroutine supervises a
	// process-mode job (boot id/pid/start time): another process sharing
	// the directory takes the job for running while that one lives.
	Process string    `json:"process,omitempty"`
	Created time.Time `json:"created"`
	// Sandbox is the profile its shell runs in, through the sandbox-exec
	// helper (absent: none).
	Sandbox *sandbox.Spec `json:"sandbox,omitempty"`
}

// Exit is how a job ended.
type Exit struct {
	Version       int       `json:"version"`
	State         string    `json:"state"`
	ExitCode      *int      `json:"exitCode"`
	Signal        *string   `json:"signal"`
	Started       time.Time `json:"started"`
	Ended         time.Time `json:"ended"`
	OutputLimited bool      `json:"outputLimited,omitempty"`
	Message       string    `json:"message,omitempty"`
}

// newID is a job id: 16 random hex digits after "j".
func newID() string { return randid.New('j') }

// validID says whether id has newID's shape: ids come from clients and
// become paths.
func validID(id string) bool { return randid.Valid('j', id) }

// root is the versioned directory of a state dir.
func root(dir string) string { return filepath.Join(dir, fmt.Sprintf("v%d", FormatVersion)) }

// startRoom is the free space a job's start takes: its spec and
// environment, the reserve, and a page for each file and temporary file.
func startRoom(env []string) int64 {
	n := int64(reserveBytes + 6*4096)
	for _, kv := range env {
		n += int64(len(kv)) + 1
	}
	return n
}

func writeSpec(jobDir string, s Spec, env []string) error {
	if err := os.MkdirAll(jobDir, 0o700); err != nil {
		return err
	}
	// The marker goes first: once spec.json is there, the job is seen.
	if err := os.WriteFile(filepath.Join(jobDir, startingFile), nil, 0o600); err != nil {
		return err
	}
	if err := atomicfs.WriteFile(filepath.Join(jobDir, envFile), []byte(strings.Join(env, "\x00")), 0o600); err != nil {
		return err
	}
	// Written, not sparse: its blocks are the job's once it is written.
	if err := os.WriteFile(filepath.Join(jobDir, reserveFile), make([]byte, reserveBytes), 0o600); err != nil {
		return err
	}
	return atomicfs.WriteJSON(filepath.Join(jobDir, specFile), s, 0o600)
}

// ReadSpec reads a job's spec and environment.
func ReadSpec(jobDir string) (Spec, []string, error) {
	var s Spec
	b, err := os.ReadFile(filepath.Join(jobDir, specFile))
	if err != nil {
		return s, nil, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, nil, fmt.Errorf("%s: %w", specFile, err)
	}
	if s.Version != FormatVersion {
		return s, nil, fmt.Errorf("%s: version %d, this build reads %d", specFile, s.Version, FormatVersion)
	}
	eb, err := os.ReadFile(filepath.Join(jobDir, envFile))
	if err != nil {
		return s, nil, err
	}
	var env []string
	if len(eb) > 0 {
		env = strings.Split(string(eb), "\x00")
	}
	return s, env, nil
}

// readExit reads exit.json; ok is false while there is none.
func readExit(jobDir string) (Exit, bool, error) {
	var e Exit
	p := filepath.Join(jobDir, exitFile)
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		return e, false, fmt.Errorf("%s: not a regular file", exitFile)
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, false, fmt.Errorf("%s: %w", exitFile, err)
	}
	return e, true, nil
}

// WriteExit records how a job ended, replacing whatever exit.json holds:
// only the job's supervisor (once the job's whole tree is dead) and a
// backend that found the supervisor gone without a record write it, and a
// file the job put there before is not a record.
func WriteExit(jobDir string, e Exit) error {
	e.Version = FormatVersion
	p := filepath.Join(jobDir, exitFile)
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		// A directory or a link put there is not renamed over.
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	reserve := filepath.Join(jobDir, reserveFile)
	err := atomicfs.WriteJSON(p, e, 0o600)
	if err != nil {
		// A full filesystem: the room kept at the start is given back
		// for the record.
		if os.Remove(reserve) == nil {
			err = atomicfs.WriteJSON(p, e, 0o600)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	_ = os.Remove(reserve)
	return nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
