// Package state holds what mcpctl keeps in its state directory besides
// snapshots: the lock that serialises mutating commands, the pending-cutover
// marker, canary and stress verdicts, the audit record and the watchdog's
// counters.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// File names inside the state directory.
const (
	LockFile = "lock"
	// LockIntentFile is held shared by every mutating command that waits
	// for the lock or holds it (see Dir.Wanted).
	LockIntentFile = "lock.intent"
	PendingFile    = "pending-cutover.json"
	VerdictsFile   = "verdicts.jsonl"
	AuditFile      = "audit.jsonl"
	WatchdogFile   = "watchdog.json"
)

// Dir is mcpctl's state directory: every record in it is read and written
// through its methods.
type Dir string

func ensureDir(stateDir string) error {
	if stateDir == "" {
		return errors.New("state dir: must not be empty")
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// writeJSON replaces a file in stateDir atomically.
func writeJSON(stateDir, name string, v any) error {
	if err := ensureDir(stateDir); err != nil {
		return err
	}
	return atomicfs.WriteJSON(filepath.Join(stateDir, name), v, 0o644)
}

// readJSON decodes a file in stateDir; absent reports found=false.
func readJSON(stateDir, name string, v any) (found bool, err error) {
	b, err := os.ReadFile(filepath.Join(stateDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("read %s: %w", filepath.Join(stateDir, name), err)
	}
	return true, nil
}

// appendJSON appends v as one JSON line to a file in stateDir.
func appendJSON(stateDir, name string, v any) error {
	if err := ensureDir(stateDir); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", name, err)
	}
	return atomicfs.AppendLine(filepath.Join(stateDir, name), b, 0o644)
}
