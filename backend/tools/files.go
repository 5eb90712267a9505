package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Content encodings of file.read and file.write.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// FileReadInput is the input of file.read.
type FileReadInput struct {
	Path   string `json:"path" jsonschema:"absolute path of a regular file"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (default 0)"`
	Length *int64 `json:"length,omitempty" jsonschema:"bytes to read (default and maximum: the output limit)"`
}

func (*FileReadInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["offset"].Minimum = new(0.0)
	s.Properties["length"].Minimum = new(0.0)
}

// FileReadResult is the result of file.read. Content is utf-8 text, or
// base64 when the bytes read are not valid UTF-8 or contain NUL.
type FileReadResult struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding" jsonschema:"utf-8 or base64"`
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length" jsonschema:"bytes of the file returned in content"`
	Size     int64  `json:"size" jsonschema:"file size from stat (0 for many /proc files)"`
	EOF      bool   `json:"eof" jsonschema:"true when the read reached the end of the file"`
}

// FileWriteInput is the input of file.write.
type FileWriteInput struct {
	Path          string `json:"path" jsonschema:"absolute path of the file to create or replace"`
	Content       string `json:"content"`
	Encoding      string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode          string `json:"mode,omitempty" jsonschema:"octal permission bits, e.g. 0644 (default); applied exactly, no umask"`
	CreateParents bool   `json:"createParents,omitempty" jsonschema:"create missing parent directories (mode 0755)"`
}

func (*FileWriteInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["encoding"].Enum = []any{encodingUTF8, encodingBase64}
	s.Properties["mode"].Pattern = "^0?[0-7]{3}$"
}

// FileWriteResult is the result of file.write.
type FileWriteResult struct {
	Path         string `json:"path" jsonschema:"the file written (a symlink is followed to its target)"`
	BytesWritten int64  `json:"bytesWritten"`
	Mode         string `json:"mode"`
	Created      bool   `json:"created" jsonschema:"true when no file existed before"`
}

// FileListInput is the input of file.list.
type FileListInput struct {
	Path  string `json:"path" jsonschema:"absolute path of a directory"`
	Limit int    `json:"limit,omitempty" jsonschema:"maximum entries returned (default 1000, at most 10000)"`
}

func (*FileListInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["limit"].Minimum = new(0.0)
	s.Properties["limit"].Maximum = new(float64(maxFileListLimit))
}

// FileEntry is one directory entry of file.list.
type FileEntry struct {
	Name   string `json:"name"`
	Type   string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode" jsonschema:"octal permission bits incl. setuid/setgid/sticky"`
	Mtime  string `json:"mtime" jsonschema:"RFC3339"`
	Target string `json:"target,omitempty" jsonschema:"symlink target"`
}

// FileListResult is the result of file.list, entries sorted by name.
type FileListResult struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Total     int         `json:"total" jsonschema:"entries in the directory"`
	Truncated bool        `json:"truncated" jsonschema:"true when limit cut the list"`
}

// absPath requires an absolute path without NUL and returns it cleaned.
func absPath(field, p string) (string, error) {
	if p == "" {
		return "", toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: must not be empty", field)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: must not contain NUL bytes", field)
	}
	if !filepath.IsAbs(p) {
		return "", toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: must be an absolute path (got %q)", field, p)
	}
	return filepath.Clean(p), nil
}

// fsError maps a filesystem error about argument field to a tool error.
func fsError(field string, err error) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	msg := err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return toolerr.New(mcpwire.CodeNotFound, "argument %q: %s", field, msg)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return toolerr.New(mcpwire.CodePermissionDenied, "argument %q: %s", field, msg)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL):
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: %s", field, msg)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EBUSY),
		errors.Is(err, syscall.ETXTBSY), errors.Is(err, syscall.EAGAIN):
		return toolerr.New(mcpwire.CodeUnavailable, "argument %q: %s", field, msg)
	}
	return toolerr.New(mcpwire.CodeInternal, "argument %q: %s", field, msg)
}

func (t *Tools) fileRead(ctx context.Context, in FileReadInput) (FileReadResult, error) {
	var res FileReadResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	offset, length, err := readRange(in.Offset, in.Length, t.opts.OutputBytes)
	if err != nil {
		return res, err
	}
	return runKernelOp(ctx, t, &t.strandedFiles, mcpwire.ToolFileRead, func(ctx context.Context) (FileReadResult, error) {
		return t.readFile(ctx, p, offset, length)
	})
}

// readFile reads up to length bytes of the regular file p from offset. The
// read never waits for data: the file is opened O_NONBLOCK and kept so
// (raw syscalls, no poller), and a stream with nothing to give (/proc/kmsg)
// answers what it has, or UNAVAILABLE when that is nothing.
func (t *Tools) readFile(ctx context.Context, p string, offset, length int64) (FileReadResult, error) {
	var res FileReadResult
	fd, st, err := openRegular(p, t.opts.Files)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	if offset > 0 {
		if _, err := unix.Seek(fd, offset, io.SeekStart); err != nil {
			return res, fsError("path", &fs.PathError{Op: "seek", Path: p, Err: err})
		}
	}
	// One byte more than asked tells whether the end was reached without
	// trusting st_size (which is 0 for most /proc files).
	buf := make([]byte, length+1)
	n, wouldBlock := 0, false
	for n < len(buf) {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			wouldBlock = true
			break
		}
		if err != nil {
			return res, fsError("path", &fs.PathError{Op: "read", Path: p, Err: err})
		}
		if m == 0 {
			break
		}
		n += m
	}
	if wouldBlock && n == 0 {
		return res, toolerr.New(mcpwire.CodeUnavailable, "argument \"path\": %s has no data to read now, and file.read does not wait for it", p)
	}
	eof := int64(n) <= length && !wouldBlock
	data := buf[:min(int64(n), length)]

	res = FileReadResult{Path: p, Offset: offset, Size: st.Size, EOF: eof, Encoding: encodingUTF8}
	if !eof {
		// A chunk boundary may split a rune: hand back the whole runes and
		// let the next read start at the split rune.
		if k := splitRuneTail(data); k > 0 && k < len(data) && isText(data[:len(data)-k]) {
			data = data[:len(data)-k]
		}
	}
	if isText(data) {
		res.Content = string(data)
		// Control bytes are valid text but encode to six bytes each.
		if budget := t.encodedBudget(); jsonsize.Max(res.Content) > budget {
			res.Content = jsonsize.PrefixWithin(res.Content, budget)
			data = data[:len(res.Content)]
			res.EOF = false
		}
	} else {
		// base64 grows the content by 4/3: keep the encoded text, not just
		// the raw bytes, within the output limit.
		if maxRaw := t.opts.OutputBytes / 4 * 3; int64(len(data)) > maxRaw {
			data = data[:maxRaw]
			res.EOF = false
		}
		res.Encoding = encodingBase64
		res.Content = base64.StdEncoding.EncodeToString(data)
	}
	res.Length = int64(len(data))
	return res, nil
}

// openRegular opens p (symlinks followed) for reading, O_NONBLOCK, and only
// when it is a regular file. The path is resolved with O_PATH, which opens
// nothing: opening a device or FIFO can block or act (a watchdog starts, a
// tape rewinds), so the type is decided by fstat of that handle first, and
// the same inode is then opened through /proc/self/fd. The file policy
// decides on that handle too, before anything is opened for reading.
func openRegular(p string, policy *filepolicy.Policy) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		// A refused place answers as refused, not as "no such file":
		// what exists inside a secret directory is not for probing.
		if err == unix.ENOENT {
			if rerr := checkMissing(policy, p); rerr != nil {
				return -1, st, rerr
			}
		}
		return -1, st, fsError("path", &fs.PathError{Op: "open", Path: p, Err: err})
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, st, fsError("path", &fs.PathError{Op: "stat", Path: p, Err: err})
	}
	if err := checkPolicy(policy, pfd, &st); err != nil {
		return -1, st, err
	}
	if err := requireRegular(p, st.Mode, "file.list"); err != nil {
		return -1, st, err
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, fsError("path", &fs.PathError{Op: "open", Path: p, Err: err})
	}
	return fd, st, nil
}

// requireRegular refuses directories (pointing at the tool that lists them)
// and every special file: FIFOs, devices, sockets.
func requireRegular(p string, mode uint32, dirTool string) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		if dirTool != "" {
			return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is a directory (use %s)", p, dirTool)
		}
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is a directory", p)
	}
	return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a regular file (%s)", p, specialType(mode))
}

// specialType names a non-regular file type.
func specialType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// isText reports whether b can travel as a UTF-8 JSON string unchanged.
func isText(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// splitRuneTail returns how many trailing bytes of b form the incomplete
// start of a multi-byte rune (0 when b ends on a rune boundary).
func splitRuneTail(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if utf8.RuneStart(c) {
			if c >= 0xC0 && !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}

func (t *Tools) fileWrite(ctx context.Context, in FileWriteInput) (FileWriteResult, error) {
	var res FileWriteResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	if p == "/" {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": / is a directory")
	}
	data, err := writeContent(in.Content, in.Encoding)
	if err != nil {
		return res, err
	}
	mode, err := writeMode(in.Mode)
	if err != nil {
		return res, err
	}
	return runKernelOp(ctx, t, &t.strandedFiles, mcpwire.ToolFileWrite, func(context.Context) (FileWriteResult, error) {
		tg, err := resolveWrite(p, in.CreateParents, t.opts.Files)
		if err != nil {
			return res, err
		}
		defer tg.dir.Close()
		if err := tg.checkPolicy(t.opts.Files); err != nil {
			return res, err
		}
		if err := tg.writeAtomic(data, mode); err != nil {
			return res, fsError("path", err)
		}
		return FileWriteResult{Path: tg.path(), BytesWritten: int64(len(data)), Mode: octalMode(mode), Created: !tg.exists}, nil
	})
}

// maxSymlinkHops is how many symlinks file.write follows, as the kernel's
// own limit (ELOOP after 40).
const maxSymlinkHops = 40

// writeTarget is where file.write puts its file: a name in an open
// directory. Every check and the final rename use the directory handle,
// so what was checked is what gets replaced, whatever the path does later.
type writeTarget struct {
	dir     *os.File
	dirPath string
	base    string
	exists  bool // a regular file is there now
}

func (w writeTarget) path() string { return filepath.Join(w.dirPath, w.base) }

// resolveWrite follows symlinks of the last component (writing through a
// link replaces its target; a dangling link creates it) and refuses
// anything at the end that is not a regular file or nothing: FIFOs,
// devices, sockets and directories are never replaced.
func resolveWrite(p string, createParents bool, policy *filepolicy.Policy) (writeTarget, error) {
	for range maxSymlinkHops + 1 {
		dirPath, base := filepath.Dir(p), filepath.Base(p)
		dir, err := openDir(dirPath)
		if errors.Is(err, fs.ErrNotExist) && createParents {
			// Refuse before creating anything: the directories would
			// stay behind a refusal that comes only once they exist.
			if err := checkMissing(policy, dirPath); err != nil {
				return writeTarget{}, err
			}
			if err := os.MkdirAll(dirPath, 0o755); err != nil {
				return writeTarget{}, fsError("path", err)
			}
			dir, err = openDir(dirPath)
		}
		if err != nil {
			return writeTarget{}, fsError("path", err)
		}
		tg := writeTarget{dir: dir, dirPath: dirPath, base: base}
		var st unix.Stat_t
		err = unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == unix.ENOENT:
			return tg, nil
		case err != nil:
			dir.Close()
			return writeTarget{}, fsError("path", &fs.PathError{Op: "stat", Path: p, Err: err})
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			dest, err := readlinkAt(int(dir.Fd()), base)
			dir.Close()
			if err != nil {
				return writeTarget{}, fsError("path", &fs.PathError{Op: "readlink", Path: p, Err: err})
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(dirPath, dest)
			}
			p = filepath.Clean(dest)
			continue
		}
		if err := requireRegular(tg.path(), st.Mode, ""); err != nil {
			dir.Close()
			return writeTarget{}, err
		}
		tg.exists = true
		return tg, nil
	}
	return writeTarget{}, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": more than %d symbolic links to follow", maxSymlinkHops)
}

// openDir opens a directory for the *at calls; O_DIRECTORY refuses
// anything else before it is opened (a FIFO would block the open).
func openDir(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// writeAtomic writes data to a temp file next to p, fsyncs it, renames it
// over p and fsyncs the directory. On failure the temp file is removed and
// p is untouched. Special files at p are refused, as file.write does.
func writeAtomic(p string, data []byte, mode os.FileMode) error {
	tg, err := resolveWrite(p, false, nil)
	if err != nil {
		return err
	}
	defer tg.dir.Close()
	return tg.writeAtomic(data, mode)
}

// writeAtomic writes data to a temp file in the target's directory, fsyncs
// it and moves it into place. An existing file is swapped with the temp
// file in one step (RENAME_EXCHANGE) and what was swapped out is checked
// before it is removed: if a FIFO, device, socket or directory took the
// regular file's place since the check, it is swapped back and the write
// refused. A new name is taken only if it is still free (RENAME_NOREPLACE).
// On failure the temp file is removed and the target is untouched.
func (w writeTarget) writeAtomic(data []byte, mode os.FileMode) (err error) {
	dirfd := int(w.dir.Fd())
	tmp := "." + w.base + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: filepath.Join(w.dirPath, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(w.dirPath, tmp))
	placed := false
	defer func() {
		if err != nil {
			f.Close()
			if !placed {
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil { // exact mode: the temp file is 0600 and umask would apply
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = w.place(dirfd, tmp); err != nil {
		return err
	}
	placed = true
	_ = unix.Fsync(dirfd) // make the rename durable; best effort
	return nil
}

// place moves the finished temp file onto the target name.
func (w writeTarget) place(dirfd int, tmp string) error {
	target := w.path()
	if !w.exists {
		err := unix.Renameat2(dirfd, tmp, dirfd, w.base, unix.RENAME_NOREPLACE)
		switch {
		case err == nil:
			return nil
		case err == unix.EEXIST:
			return toolerr.New(mcpwire.CodeUnavailable, "argument \"path\": %s appeared while it was being written; retry", target)
		case err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP:
			return &fs.PathError{Op: "rename", Path: target, Err: err}
		}
		// The filesystem cannot do it atomically: a plain rename.
		return renameChecked(dirfd, tmp, w.base, target)
	}
	err := unix.Renameat2(dirfd, tmp, dirfd, w.base, unix.RENAME_EXCHANGE)
	switch {
	case err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP:
		return renameChecked(dirfd, tmp, w.base, target)
	case err != nil:
		return &fs.PathError{Op: "rename", Path: target, Err: err}
	}
	// tmp now names what was at the target: a regular file is removed;
	// anything else (or what cannot be checked) goes back in its place.
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return nil
	}
	if err := unix.Renameat2(dirfd, tmp, dirfd, w.base, unix.RENAME_EXCHANGE); err != nil {
		return &fs.PathError{Op: "restore", Path: target, Err: err}
	}
	return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a regular file (%s)", target, specialType(st.Mode))
}

// renameChecked is the fallback of filesystems without renameat2 flags:
// the target is checked once more on the directory handle just before a
// plain rename.
func renameChecked(dirfd int, tmp, base, target string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a regular file (%s)", target, specialType(st.Mode))
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return &fs.PathError{Op: "rename", Path: target, Err: err}
	}
	return nil
}

func (t *Tools) fileList(ctx context.Context, in FileListInput) (FileListResult, error) {
	var res FileListResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	limit, err := checkLimit(in.Limit, defaultFileListLimit, maxFileListLimit)
	if err != nil {
		return res, err
	}
	return runKernelOp(ctx, t, &t.strandedFiles, mcpwire.ToolFileList, func(ctx context.Context) (FileListResult, error) {
		return listDir(ctx, p, limit, t.opts.Files)
	})
}

// listDir lists up to limit entries of directory p.
func listDir(ctx context.Context, p string, limit int, policy *filepolicy.Policy) (FileListResult, error) {
	var res FileListResult
	// O_DIRECTORY: a FIFO or device at p is refused without being opened.
	d, err := openDir(p)
	if errors.Is(err, syscall.ENOTDIR) {
		// A refused file answers as refused, not as "not a directory".
		if pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			var st unix.Stat_t
			err = unix.Fstat(pfd, &st)
			if err == nil {
				err = checkPolicy(policy, pfd, &st)
			}
			unix.Close(pfd)
			if err != nil {
				return res, err
			}
		}
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a directory (use file.read)", p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		if rerr := checkMissing(policy, p); rerr != nil {
			return res, rerr
		}
	}
	if err != nil {
		return res, fsError("path", err)
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return res, fsError("path", &fs.PathError{Op: "stat", Path: p, Err: err})
	}
	if err := checkPolicy(policy, int(d.Fd()), &st); err != nil {
		return res, err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return res, fsError("path", err)
	}
	sort.Strings(names)
	res = FileListResult{Path: p, Entries: make([]FileEntry, 0, min(len(names), limit))}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		// Through the handle the policy checked, not the path, which may
		// name another directory by now.
		full := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + name
		li, err := os.Lstat(full)
		if err != nil {
			continue // vanished since the directory was read
		}
		res.Total++
		if len(res.Entries) >= limit {
			res.Truncated = true
			continue
		}
		e := FileEntry{
			Name:  strings.ToValidUTF8(name, "\uFFFD"),
			Type:  fileType(li.Mode()),
			Size:  li.Size(),
			Mode:  octalMode(li.Mode()),
			Mtime: li.ModTime().UTC().Format(time.RFC3339),
		}
		if li.Mode()&fs.ModeSymlink != 0 {
			if target, err := os.Readlink(full); err == nil {
				e.Target = strings.ToValidUTF8(target, "\uFFFD")
			}
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// octalMode renders the Unix permission bits, setuid/setgid/sticky included.
func octalMode(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// maxStrandedOps bounds the operations the kernel still holds after their
// calls gave up on them, per counter (file tools, process.list: stuck
// normal work must not refuse a control tool). Each holds an OS thread and
// its buffer until the kernel returns; beyond the bound, such calls are
// refused rather than letting stuck reads pile up.
const maxStrandedOps = 16

// runKernelOp runs op, the filesystem work of one call (file tools, the
// /proc scan of process.list), where the call can leave it: most blocking
// is avoided up front (O_NONBLOCK, O_DIRECTORY, special files refused before
// they are opened), but a read can still sleep in the kernel where no signal
// or deadline reaches it (a hung network or FUSE filesystem, a process
// stuck with its memory map locked). When ctx ends or Options.FileTimeout
// passes, the call answers CANCELLED or TIMEOUT at once, and with it
// releases its admission slot; op finishes in the background.
func runKernelOp[R any](ctx context.Context, t *Tools, stranded *atomic.Int64, name string, op func(context.Context) (R, error)) (R, error) {
	var zero R
	if n := stranded.Load(); n >= maxStrandedOps {
		return zero, toolerr.New(mcpwire.CodeUnavailable, "%s: %d earlier operations are still blocked in the kernel; retry later", name, n)
	}
	opCtx, cancel := context.WithTimeout(ctx, t.opts.FileTimeout)
	type result struct {
		r   R
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		r, err := op(opCtx)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-opCtx.Done():
	}
	select {
	case res := <-done: // finished just as the context ended: keep its answer
		return res.r, res.err
	default:
	}
	stranded.Add(1)
	go func() {
		<-done
		stranded.Add(-1)
	}()
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: gave up on the operation (it may still complete): %w", name, err)
	}
	return zero, toolerr.New(mcpwire.CodeTimeout, "%s: the kernel did not answer within %s (the operation may still complete)", name, t.opts.FileTimeout)
}
