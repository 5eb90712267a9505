package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
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

func (t *Tools) fileRead(_ context.Context, in FileReadInput) (FileReadResult, error) {
	var res FileReadResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	if in.Offset < 0 {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"offset\": must be >= 0 (got %d)", in.Offset)
	}
	length := t.opts.OutputBytes
	if in.Length != nil {
		if *in.Length < 0 {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"length\": must be >= 0 (got %d)", *in.Length)
		}
		length = min(*in.Length, t.opts.OutputBytes)
	}
	// O_NONBLOCK: opening a FIFO must not hang the call; it is refused below.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return res, fsError("path", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return res, fsError("path", err)
	}
	if fi.IsDir() {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is a directory (use file.list)", p)
	}
	if !fi.Mode().IsRegular() {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a regular file (%s)", p, fileType(fi.Mode()))
	}
	if in.Offset > 0 {
		if _, err := f.Seek(in.Offset, io.SeekStart); err != nil {
			return res, fsError("path", err)
		}
	}
	// One byte more than asked tells whether the end was reached without
	// trusting st_size (which is 0 for most /proc files).
	buf := make([]byte, length+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return res, fsError("path", err)
	}
	eof := int64(n) <= length
	data := buf[:min(int64(n), length)]

	res = FileReadResult{Path: p, Offset: in.Offset, Size: fi.Size(), EOF: eof, Encoding: encodingUTF8}
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

func (t *Tools) fileWrite(_ context.Context, in FileWriteInput) (FileWriteResult, error) {
	var res FileWriteResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	if p == "/" {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": / is a directory")
	}
	var data []byte
	switch in.Encoding {
	case "", encodingUTF8:
		data = []byte(in.Content)
	case encodingBase64:
		data, err = base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"content\": invalid base64: %v", err)
		}
	default:
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"encoding\": must be %q or %q (got %q)", encodingUTF8, encodingBase64, in.Encoding)
	}
	mode := os.FileMode(0o644)
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o777 {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"mode\": must be octal permission bits 000..777, e.g. \"0644\" (got %q)", in.Mode)
		}
		mode = os.FileMode(m)
	}

	// Writing through a symlink replaces its target, not the link.
	created := false
	switch fi, err := os.Lstat(p); {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return res, fsError("path", err)
			}
			// Dangling link: create its target.
			target, err = danglingTarget(p)
			if err != nil {
				return res, fsError("path", err)
			}
			created = true
		}
		p = target
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is a directory", p)
		}
	case err == nil && fi.IsDir():
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is a directory", p)
	case err == nil && !fi.Mode().IsRegular():
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a regular file (%s)", p, fileType(fi.Mode()))
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return res, fsError("path", err)
	}

	dir := filepath.Dir(p)
	if in.CreateParents {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, fsError("path", err)
		}
	}
	if err := writeAtomic(p, data, mode); err != nil {
		return res, fsError("path", err)
	}
	return FileWriteResult{Path: p, BytesWritten: int64(len(data)), Mode: octalMode(mode), Created: created}, nil
}

// danglingTarget resolves the final path a dangling symlink points to.
func danglingTarget(link string) (string, error) {
	dest, err := os.Readlink(link)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(dest) {
		dest = filepath.Join(filepath.Dir(link), dest)
	}
	return filepath.Clean(dest), nil
}

// writeAtomic writes data to a temp file next to p, fsyncs it, renames it
// over p and fsyncs the directory. On failure the temp file is removed and
// p is untouched.
func writeAtomic(p string, data []byte, mode os.FileMode) (err error) {
	dir, base := filepath.Split(p)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil { // exact mode: CreateTemp uses 0600 and umask would apply
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, p); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil { // make the rename durable; best effort
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func (t *Tools) fileList(_ context.Context, in FileListInput) (FileListResult, error) {
	var res FileListResult
	p, err := absPath("path", in.Path)
	if err != nil {
		return res, err
	}
	limit := in.Limit
	switch {
	case limit == 0:
		limit = defaultFileListLimit
	case limit < 0 || limit > maxFileListLimit:
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"limit\": must be 1..%d (got %d)", maxFileListLimit, limit)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return res, fsError("path", err)
	}
	if !fi.IsDir() {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"path\": %s is not a directory (use file.read)", p)
	}
	d, err := os.Open(p)
	if err != nil {
		return res, fsError("path", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return res, fsError("path", err)
	}
	sort.Strings(names)
	res = FileListResult{Path: p, Entries: make([]FileEntry, 0, min(len(names), limit))}
	for _, name := range names {
		full := filepath.Join(p, name)
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
