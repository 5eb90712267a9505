// Package atomicfs holds the crash-safe file primitives the deploy packages
// share: replace a file or a symlink by rename so that a reader (or a crash)
// sees either the old or the new content, never a mix, and append whole lines.
package atomicfs

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// Owner, when set, is applied to a file before it is renamed into place.
// Only root may give a file away, so callers pass nil otherwise.
type Owner struct {
	UID, GID int
}

var seq atomic.Uint64

// tempName is a hidden sibling name: same directory (rename must not cross
// file systems), unique within the process and across processes.
func tempName(path string) string {
	n := seq.Add(1)
	return filepath.Join(filepath.Dir(path),
		"."+filepath.Base(path)+".tmp-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(n, 10)+"-"+strconv.FormatInt(time.Now().UnixNano()%1e6, 36))
}

// SyncDir fsyncs a directory so that a rename or unlink inside it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// WriteFile replaces path with data (temp file in the same directory, fsync,
// rename, directory fsync).
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	_, err := WriteFrom(path, bytes.NewReader(data), perm, nil)
	return err
}

// WriteJSON replaces path with v as indented JSON and a final newline.
func WriteJSON(path string, v any, perm fs.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return WriteFile(path, append(b, '\n'), perm)
}

// WriteFrom replaces path with everything r yields and returns the
// "sha256:<hex>" digest of what was written. perm is applied exactly (umask
// does not apply); owner, when non-nil, is applied before the rename.
func WriteFrom(path string, r io.Reader, perm fs.FileMode, owner *Owner) (string, error) {
	tmp := tempName(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return "", fmt.Errorf("chmod %s: %w", path, err)
	}
	if owner != nil {
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			return "", fmt.Errorf("chown %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("rename into %s: %w", path, err)
	}
	done = true
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// CopyFile copies src to dst atomically with perm and returns the digest of
// the bytes copied (which is what dst now holds).
func CopyFile(dst, src string, perm fs.FileMode, owner *Owner) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy: %w", err)
	}
	defer f.Close()
	return WriteFrom(dst, f, perm, owner)
}

// Symlink points link at target, replacing any existing link by rename so the
// name never disappears: a reader sees the old target or the new one.
func Symlink(target, link string) error {
	tmp := tempName(link)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("symlink %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("swap symlink %s: %w", link, err)
	}
	return SyncDir(filepath.Dir(link))
}

// Remove deletes path durably; a path that is already gone is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove: %w", err)
	}
	return SyncDir(filepath.Dir(path))
}

// AppendLine appends one line (a trailing newline is added) with O_APPEND and
// fsync. If a previous writer died mid-line, the torn tail is terminated
// first so that this record stays parseable on its own line.
func AppendLine(path string, line []byte, perm fs.FileMode) error {
	if bytes.IndexByte(line, '\n') >= 0 {
		return fmt.Errorf("append %s: record contains a newline", filepath.Base(path))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 0, len(line)+2)
	if torn, err := endsMidLine(path); err != nil {
		return err
	} else if torn {
		buf = append(buf, '\n')
	}
	buf = append(append(buf, line...), '\n')
	// One write with O_APPEND: concurrent appenders do not interleave.
	if _, err := f.Write(buf); err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

func endsMidLine(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("append: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("append: %w", err)
	}
	if st.Size() == 0 {
		return false, nil
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], st.Size()-1); err != nil {
		return false, fmt.Errorf("append %s: %w", path, err)
	}
	return b[0] != '\n', nil
}

// ReadLines calls fn with each non-blank line of what AppendLine wrote to
// path, numbered from 1 and without its newline, up to maxLine bytes a line.
// A file that does not exist has no lines. What a torn or unreadable line
// means is the caller's policy: fn returns an error to stop.
func ReadLines(path string, maxLine int, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine)), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	return sc.Err()
}
