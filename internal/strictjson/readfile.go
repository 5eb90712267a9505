package strictjson

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxFileBytes bounds a config file. Real ones are a few hundred bytes; the
// cap keeps a wrong path (a device, a log) from costing unbounded memory.
const MaxFileBytes = 1 << 20

// ErrTooLarge is returned for input over MaxFileBytes.
var ErrTooLarge = fmt.Errorf("larger than %d bytes: not a config file", MaxFileBytes)

// ReadAll reads r up to MaxFileBytes and fails beyond it.
func ReadAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, ErrTooLarge
	}
	return b, nil
}

// ReadFile reads a config file: a regular file (after symlinks) of at most
// MaxFileBytes. /dev/zero would otherwise be read forever and a FIFO would
// block the open; O_NONBLOCK makes the open of a FIFO return at once so the
// type check on the opened file can refuse it.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("is %s, want a regular file", kind(fi.Mode()))}
	}
	if fi.Size() > MaxFileBytes {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	b, err := ReadAll(f)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
		}
		return nil, err
	}
	return b, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
