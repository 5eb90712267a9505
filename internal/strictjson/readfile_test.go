package strictjson

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFileRefusesWhatIsNotAConfigFile: only a regular file of at most
// MaxFileBytes is read, so a wrong path (a FIFO, a directory, a stream)
// fails at once instead of hanging or eating memory. Both configs load
// through ReadFile; their tests check that once through Load.
func TestReadFileRefusesWhatIsNotAConfigFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A FIFO with a writer that stops at 64 MiB, so a reader without a cap
	// fails this test instead of exhausting memory.
	stream := filepath.Join(dir, "stream")
	if err := syscall.Mkfifo(stream, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(stream, os.O_RDWR, 0) // O_RDWR: no wait for a reader
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	go func() {
		defer w.Close()
		chunk := []byte(strings.Repeat(" ", 64<<10))
		for i := 0; i < 1024; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte("{"+strings.Repeat(" ", 2<<20)+"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.json")
	if err := os.WriteFile(small, []byte(`{"listen":"127.0.0.1:3210"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"FIFO without a writer", fifo, "is a FIFO, want a regular file"},
		{"endless FIFO", stream, "is a FIFO, want a regular file"},
		{"directory", dir, "is a directory, want a regular file"},
		{"character device", "/dev/zero", "is a character device, want a regular file"},
		{"over the size cap", big, "larger than 1048576 bytes"},
		{"regular file", small, ""},
		{"symlink to a regular file", link, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := ReadFile(tc.path); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute): // a hang is the bug; the bound only ends the test
				t.Fatalf("ReadFile(%s) still blocked", tc.path)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ReadFile(%s) = %v", tc.path, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("err = %v, want it to name %s and contain %q", err, tc.path, tc.want)
			}
		})
	}
}

// TestReadAllOfAnEndlessReader: a reader without end is cut at the cap.
func TestReadAllOfAnEndlessReader(t *testing.T) {
	_, err := ReadAll(&endless{t: t})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

// endless is a reader without end; past 64 MiB it fails the test, since a
// bounded reader stops long before.
type endless struct {
	t testing.TB
	n int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n += len(p); e.n > 64<<20 {
		e.t.Errorf("read %d bytes of an endless stream: the read is not bounded", e.n)
		return 0, io.ErrUnexpectedEOF
	}
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
