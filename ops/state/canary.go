package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// CanaryFile is the record of the running canary: which release it runs, so
// that canary stop knows what to remove.
const CanaryFile = "canary.json"

// CanaryRecord is <stateDir>/canary.json.
type CanaryRecord struct {
	Version string    `json:"version"`
	Digest  string    `json:"digest"`
	Build   string    `json:"build"`
	Started time.Time `json:"started"`
	Pass    bool      `json:"pass"`
}

// WriteCanary replaces the canary record.
func (d Dir) WriteCanary(r CanaryRecord) error {
	if err := writeJSON(string(d), CanaryFile, r); err != nil {
		return fmt.Errorf("canary record: %w", err)
	}
	return nil
}

// ReadCanary reads the canary record; nil when there is none.
func (d Dir) ReadCanary() (*CanaryRecord, error) {
	var r CanaryRecord
	found, err := readJSON(string(d), CanaryFile, &r)
	if err != nil {
		return nil, fmt.Errorf("canary record: %w", err)
	}
	if !found {
		return nil, nil
	}
	return &r, nil
}

// RemoveCanary removes the canary record; absent is not an error.
func (d Dir) RemoveCanary() error {
	if err := atomicfs.Remove(filepath.Join(string(d), CanaryFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("canary record: %w", err)
	}
	return nil
}
