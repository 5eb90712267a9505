package jobs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// The supervisor keeps a record it cannot write and writes it once it
// can (here the directory appears only after the first tries, as room
// does once space is freed); a stop of its unit ends the wait.
func TestKeepExitWritesOnceItCan(t *testing.T) {
	code := 7
	e := Exit{State: mcpwire.JobExited, ExitCode: &code}
	for _, c := range []struct {
		name    string
		appear  bool // the directory appears after the first try
		stopped bool // the unit is stopped meanwhile
		wantErr bool
	}{
		{"written at once", false, false, false},
		{"written once room is back", true, false, false},
		{"stopped before room is back", true, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "job")
			if !c.appear {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.stopped {
				cancel()
			} else if c.appear {
				go func() {
					time.Sleep(20 * time.Millisecond)
					_ = os.Mkdir(dir, 0o700)
				}()
			}
			err := keepExit(ctx, dir, e, time.Millisecond, 10*time.Millisecond)
			if (err != nil) != c.wantErr {
				t.Fatalf("keepExit: %v, want error %v", err, c.wantErr)
			}
			if c.wantErr {
				return
			}
			got, ok, err := readExit(dir)
			if err != nil || !ok || got.ExitCode == nil || *got.ExitCode != 7 {
				t.Fatalf("record %+v %v %v, want exit 7", got, ok, err)
			}
		})
	}
}

// A job's reserve is taken when it is written and given back with its
// record.
func TestReserveTakenAndGivenBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	if err := writeSpec(dir, Spec{Version: FormatVersion, ID: "j0123456789abcdef"}, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, reserveFile)); err != nil || fi.Size() != reserveBytes {
		t.Fatalf("reserve after the start: %v %v, want %d bytes", fi, err, reserveBytes)
	}
	if err := WriteExit(dir, Exit{State: mcpwire.JobExited}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, reserveFile)); !os.IsNotExist(err) {
		t.Fatalf("reserve after the record: %v, want it gone", err)
	}
}
