package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

func TestFileRoundTrip(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name         string
		write        map[string]any
		want         []byte
		wantEncoding string
	}{
		{"text", map[string]any{"content": "héllo\nwörld\n"}, []byte("héllo\nwörld\n"), encodingUTF8},
		{"empty", map[string]any{"content": ""}, []byte{}, encodingUTF8},
		{"binary via base64", map[string]any{"content": base64.StdEncoding.EncodeToString(binary), "encoding": "base64"}, binary, encodingBase64},
		{"text with NUL is binary", map[string]any{"content": "a\x00b"}, []byte("a\x00b"), encodingBase64},
		{"invalid utf-8 is binary", map[string]any{"content": base64.StdEncoding.EncodeToString([]byte("ok\xff")), "encoding": "base64"}, []byte("ok\xff"), encodingBase64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			tc.write["path"] = p
			w := ok[FileWriteResult](t, h, mcpwire.ToolFileWrite, tc.write)
			if w.Path != p || w.BytesWritten != int64(len(tc.want)) || w.Mode != "0644" || !w.Created {
				t.Fatalf("write result %+v", w)
			}
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("on disk %q (%v), want %q", got, err, tc.want)
			}
			r := ok[FileReadResult](t, h, mcpwire.ToolFileRead, map[string]any{"path": p})
			if r.Encoding != tc.wantEncoding || !r.EOF || r.Size != int64(len(tc.want)) || r.Length != int64(len(tc.want)) {
				t.Fatalf("read result %+v", r)
			}
			content := []byte(r.Content)
			if r.Encoding == encodingBase64 {
				content, err = base64.StdEncoding.DecodeString(r.Content)
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(content, tc.want) {
				t.Fatalf("read %q, want %q", content, tc.want)
			}
			onlyEntries(t, dir) // no temp file left behind
		})
	}
}

// onlyEntries fails when dir holds a temp file of file.write.
func onlyEntries(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temp file left behind: %s", e.Name())
		}
	}
}

func TestFileWriteReplacesAndModes(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	ok[FileWriteResult](t, h, mcpwire.ToolFileWrite, map[string]any{"path": p, "content": "old content, longer"})
	tests := []struct {
		mode string
		want fs.FileMode
	}{
		{"0600", 0o600}, {"755", 0o755}, {"0777", 0o777}, {"0000", 0},
	}
	old := syscall.Umask(0o077) // the mode must be exact despite the umask
	defer syscall.Umask(old)
	for _, tc := range tests {
		w := ok[FileWriteResult](t, h, mcpwire.ToolFileWrite, map[string]any{"path": p, "content": "new", "mode": tc.mode})
		if w.Created {
			t.Fatalf("replacing reported created")
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.want {
			t.Fatalf("mode %s: got %o", tc.mode, fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(p); string(b) != "new" {
			t.Fatalf("content %q", b)
		}
	}
	onlyEntries(t, dir)
}

func TestFileWriteParentsAndSymlinks(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b", "c.txt")
	e := fails(t, h, mcpwire.ToolFileWrite, map[string]any{"path": deep, "content": "x"}, mcpwire.CodeNotFound)
	if !strings.Contains(e.Message, "path") {
		t.Fatalf("message %q", e.Message)
	}
	ok[FileWriteResult](t, h, mcpwire.ToolFileWrite, map[string]any{"path": deep, "content": "x", "createParents": true})
	if b, err := os.ReadFile(deep); err != nil || string(b) != "x" {
		t.Fatalf("%q %v", b, err)
	}

	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link")
	os.WriteFile(target, []byte("before"), 0o644)
	os.Symlink("target", link)
	w := ok[FileWriteResult](t, h, mcpwire.ToolFileWrite, map[string]any{"path": link, "content": "after"})
	if w.Path != target {
		t.Fatalf("wrote %s, want the link target %s", w.Path, target)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("link replaced: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "after" {
		t.Fatalf("target %q", b)
	}
}

// A failure after the temp file exists (here: rename onto a non-empty
// directory) removes the temp file and leaves the destination untouched.
func TestWriteAtomicFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "busy")
	os.MkdirAll(filepath.Join(dest, "child"), 0o755)
	if err := writeAtomic(dest, []byte("data"), 0o644); err == nil {
		t.Fatal("rename onto a non-empty directory succeeded")
	}
	onlyEntries(t, dir)
	if fi, err := os.Stat(dest); err != nil || !fi.IsDir() {
		t.Fatalf("destination changed: %v", err)
	}
}

func TestFileReadChunks(t *testing.T) {
	opts := testOptions()
	opts.OutputBytes = 1000
	h := newHarness(t, opts)
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte(strings.Repeat("é", 1000)), 0o644) // 2000 bytes
	bin := filepath.Join(dir, "bin")
	os.WriteFile(bin, bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000), 0o644) // 4000 bytes

	tests := []struct {
		name         string
		args         map[string]any
		wantLen      int64
		wantEOF      bool
		wantEncoding string
	}{
		{"default length is the limit", map[string]any{"path": text}, 1000, false, encodingUTF8},
		{"length capped by the limit", map[string]any{"path": text, "length": 5000}, 1000, false, encodingUTF8},
		{"split rune is left for the next read", map[string]any{"path": text, "length": 3}, 2, false, encodingUTF8},
		{"offset to the end", map[string]any{"path": text, "offset": 1000}, 1000, true, encodingUTF8},
		{"offset past the end", map[string]any{"path": text, "offset": 5000}, 0, true, encodingUTF8},
		{"zero length", map[string]any{"path": text, "length": 0}, 0, false, encodingUTF8},
		{"binary stays within the limit once encoded", map[string]any{"path": bin}, 750, false, encodingBase64},
		{"binary tail", map[string]any{"path": bin, "offset": 3500}, 500, true, encodingBase64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok[FileReadResult](t, h, mcpwire.ToolFileRead, tc.args)
			if r.Length != tc.wantLen || r.EOF != tc.wantEOF || r.Encoding != tc.wantEncoding {
				t.Fatalf("got length %d eof %v encoding %s, want %d %v %s", r.Length, r.EOF, r.Encoding, tc.wantLen, tc.wantEOF, tc.wantEncoding)
			}
			if len(r.Content) > 1000 {
				t.Fatalf("content %d bytes over the limit", len(r.Content))
			}
		})
	}

	// Reading chunk after chunk reassembles the file exactly.
	var got []byte
	for off := int64(0); ; {
		r := ok[FileReadResult](t, h, mcpwire.ToolFileRead, map[string]any{"path": text, "offset": off, "length": 333})
		got = append(got, r.Content...)
		off += r.Length
		if r.EOF {
			break
		}
	}
	if string(got) != strings.Repeat("é", 1000) {
		t.Fatalf("reassembled %d bytes differ", len(got))
	}
}

func TestFileReadProcFile(t *testing.T) {
	h := newHarness(t, testOptions())
	r := ok[FileReadResult](t, h, mcpwire.ToolFileRead, map[string]any{"path": "/proc/self/status"})
	if !r.EOF || !strings.Contains(r.Content, "Pid:") {
		t.Fatalf("got %+v", r)
	}
}

func TestFileErrors(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	tests := []struct {
		name string
		tool string
		args map[string]any
		code mcpwire.Code
		want string
	}{
		{"read relative", mcpwire.ToolFileRead, map[string]any{"path": "etc/passwd"}, mcpwire.CodeInvalidArgument, "path"},
		{"read missing", mcpwire.ToolFileRead, map[string]any{"path": filepath.Join(dir, "nope")}, mcpwire.CodeNotFound, "path"},
		{"read directory", mcpwire.ToolFileRead, map[string]any{"path": dir}, mcpwire.CodeInvalidArgument, "directory"},
		{"read fifo does not hang", mcpwire.ToolFileRead, map[string]any{"path": fifo}, mcpwire.CodeInvalidArgument, "regular"},
		{"read negative offset", mcpwire.ToolFileRead, map[string]any{"path": file, "offset": -1}, mcpwire.CodeInvalidArgument, "offset"},
		{"read missing path", mcpwire.ToolFileRead, map[string]any{}, mcpwire.CodeInvalidArgument, "path"},
		{"read under a file", mcpwire.ToolFileRead, map[string]any{"path": file + "/x"}, mcpwire.CodeInvalidArgument, "path"},
		{"write relative", mcpwire.ToolFileWrite, map[string]any{"path": "x", "content": ""}, mcpwire.CodeInvalidArgument, "path"},
		{"write onto directory", mcpwire.ToolFileWrite, map[string]any{"path": dir, "content": ""}, mcpwire.CodeInvalidArgument, "directory"},
		{"write onto fifo", mcpwire.ToolFileWrite, map[string]any{"path": fifo, "content": ""}, mcpwire.CodeInvalidArgument, "regular"},
		{"write bad base64", mcpwire.ToolFileWrite, map[string]any{"path": file, "content": "***", "encoding": "base64"}, mcpwire.CodeInvalidArgument, "content"},
		{"write bad encoding", mcpwire.ToolFileWrite, map[string]any{"path": file, "content": "", "encoding": "latin1"}, mcpwire.CodeInvalidArgument, "encoding"},
		{"write bad mode", mcpwire.ToolFileWrite, map[string]any{"path": file, "content": "", "mode": "0999"}, mcpwire.CodeInvalidArgument, "mode"},
		{"write setuid mode", mcpwire.ToolFileWrite, map[string]any{"path": file, "content": "", "mode": "4755"}, mcpwire.CodeInvalidArgument, "mode"},
		{"write content missing", mcpwire.ToolFileWrite, map[string]any{"path": file}, mcpwire.CodeInvalidArgument, "content"},
		{"list relative", mcpwire.ToolFileList, map[string]any{"path": "."}, mcpwire.CodeInvalidArgument, "path"},
		{"list missing", mcpwire.ToolFileList, map[string]any{"path": filepath.Join(dir, "nope")}, mcpwire.CodeNotFound, "path"},
		{"list a file", mcpwire.ToolFileList, map[string]any{"path": file}, mcpwire.CodeInvalidArgument, "not a directory"},
		{"list limit too big", mcpwire.ToolFileList, map[string]any{"path": dir, "limit": 10001}, mcpwire.CodeInvalidArgument, "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fails(t, h, tc.tool, tc.args, tc.code)
			if !strings.Contains(e.Message, tc.want) {
				t.Fatalf("message %q does not mention %q", e.Message, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Fatalf("failed writes changed the file: %q", b)
	}
	onlyEntries(t, dir)
}

func TestFsErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		code mcpwire.Code
	}{
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, mcpwire.CodeNotFound},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, mcpwire.CodePermissionDenied},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EPERM}, mcpwire.CodePermissionDenied},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, mcpwire.CodePermissionDenied},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOTDIR}, mcpwire.CodeInvalidArgument},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EISDIR}, mcpwire.CodeInvalidArgument},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, mcpwire.CodeUnavailable},
		{&fs.PathError{Op: "read", Path: "/x", Err: syscall.EIO}, mcpwire.CodeInternal},
		{errors.New("odd"), mcpwire.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			e := toolerr.As(fsError("path", tc.err))
			if e.Code != tc.code || !strings.Contains(e.Message, `"path"`) {
				t.Fatalf("got %s %q, want %s naming the field", e.Code, e.Message, tc.code)
			}
		})
	}
}

func TestFileList(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("12345"), 0o640)
	os.Mkdir(filepath.Join(dir, "a-dir"), 0o755)
	syscall.Chmod(filepath.Join(dir, "a-dir"), 0o1755) // sticky bit
	os.Symlink("b.txt", filepath.Join(dir, "c-link"))
	syscall.Mkfifo(filepath.Join(dir, "d-fifo"), 0o600)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	os.Chtimes(filepath.Join(dir, "b.txt"), mtime, mtime)

	r := ok[FileListResult](t, h, mcpwire.ToolFileList, map[string]any{"path": dir})
	want := []FileEntry{
		{Name: "a-dir", Type: "dir", Mode: "1755"},
		{Name: "b.txt", Type: "file", Size: 5, Mode: "0640", Mtime: "2024-05-06T07:08:09Z"},
		{Name: "c-link", Type: "symlink", Target: "b.txt"},
		{Name: "d-fifo", Type: "other", Mode: "0600"},
	}
	if len(r.Entries) != len(want) || r.Total != len(want) || r.Truncated || r.Path != dir {
		t.Fatalf("got %+v", r)
	}
	for i, w := range want {
		g := r.Entries[i]
		if g.Name != w.Name || g.Type != w.Type || (w.Mode != "" && g.Mode != w.Mode) ||
			(w.Size != 0 && g.Size != w.Size) || (w.Mtime != "" && g.Mtime != w.Mtime) || g.Target != w.Target {
			t.Fatalf("entry %d: got %+v, want %+v", i, g, w)
		}
		if _, err := time.Parse(time.RFC3339, g.Mtime); err != nil {
			t.Fatalf("mtime %q: %v", g.Mtime, err)
		}
	}

	r = ok[FileListResult](t, h, mcpwire.ToolFileList, map[string]any{"path": dir, "limit": 2})
	if len(r.Entries) != 2 || r.Total != 4 || !r.Truncated || r.Entries[1].Name != "b.txt" {
		t.Fatalf("limited: %+v", r)
	}
}

// TestFileReadEncodedBudget: a text file of control bytes is read in chunks
// whose JSON encoding fits the response budget, and reading on from
// offset+length returns the rest.
func TestFileReadEncodedBudget(t *testing.T) {
	opts := testOptions()
	opts.ResponseBytes = 64 << 10
	h := newHarness(t, opts)
	p := tempFile(t, "ctl")
	content := strings.Repeat("\x01\x02\x1b", 20000) // 60000 bytes, ~360 KB encoded
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var offset int64
	for i := 0; i < 100; i++ {
		r := ok[FileReadResult](t, h, mcpwire.ToolFileRead, map[string]any{"path": p, "offset": offset})
		b, _ := json.Marshal(r.Content)
		if len(b) > int(opts.ResponseBytes) {
			t.Fatalf("chunk encodes to %d bytes, budget %d", len(b), opts.ResponseBytes)
		}
		got.WriteString(r.Content)
		offset += r.Length
		if r.EOF {
			break
		}
	}
	if got.String() != content {
		t.Fatalf("read back %d bytes, want %d", got.Len(), len(content))
	}
}

// callHandler runs one tool call through its handler and waits, bounded,
// for the answer: a call stuck in the kernel fails the test instead of
// hanging it.
func callHandler(ctx context.Context, t testing.TB, tl *Tools, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	return startHandler(ctx, t, tl, name, args)(t)
}

// startHandler starts one tool call through its handler and returns how to
// wait (bounded) for its answer.
func startHandler(ctx context.Context, t testing.TB, tl *Tools, name string, args map[string]any) func(testing.TB) *mcp.CallToolResult {
	t.Helper()
	raw, _ := json.Marshal(args)
	h := handlerOf(t, tl, name)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := h(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: name, Arguments: raw}})
		done <- res
	}()
	return func(t testing.TB) *mcp.CallToolResult {
		t.Helper()
		var res *mcp.CallToolResult
		proctest.Eventually(t, name+" to answer", func() bool {
			select {
			case res = <-done:
				return true
			default:
				return false
			}
		})
		return res
	}
}

// TestFileCallsLeaveAStalledFilesystem: a filesystem that never answers (a
// real FUSE mount whose server stalls) holds the kernel side of a file
// operation forever. The calls answer anyway, on timeout and on
// cancellation, so their admission slots are released; the operations left
// in the kernel are bounded, and counted until the kernel lets them go.
func TestFileCallsLeaveAStalledFilesystem(t *testing.T) {
	opts := testOptions()
	opts.FileTimeout = 300 * time.Millisecond
	tl := New(opts)
	defer tl.Close()
	stall := newStallingFS(t)
	normal := tempFile(t, "normal")
	if err := os.WriteFile(normal, []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}

	timeouts := []struct {
		tool string
		args map[string]any
	}{
		{mcpwire.ToolFileRead, map[string]any{"path": stall.dir + "/f"}},
		{mcpwire.ToolFileWrite, map[string]any{"path": stall.dir + "/f", "content": "x"}},
		{mcpwire.ToolFileList, map[string]any{"path": stall.dir}},
	}
	for _, tc := range timeouts {
		t.Run(tc.tool+" times out", func(t *testing.T) {
			wantToolError(t, callHandler(context.Background(), t, tl, tc.tool, tc.args), mcpwire.CodeTimeout)
		})
	}

	t.Run("file.read is cancelled", func(t *testing.T) {
		slow := opts
		slow.FileTimeout = time.Hour // only the cancellation can end it
		tl2 := New(slow)
		defer tl2.Close()
		before := stall.requests.Load()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait := startHandler(ctx, t, tl2, mcpwire.ToolFileRead, map[string]any{"path": stall.dir + "/cancelled"})
		proctest.Eventually(t, "the read to reach the filesystem", func() bool { return stall.requests.Load() > before })
		cancel()
		wantToolError(t, wait(t), mcpwire.CodeCancelled)
	})

	t.Run("operations left in the kernel are bounded", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := tl.strandedFiles.Load(); i < maxStrandedOps; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wantToolError(t, callHandler(context.Background(), t, tl, mcpwire.ToolFileRead, map[string]any{"path": fmt.Sprintf("%s/f%d", stall.dir, i)}), mcpwire.CodeTimeout)
			}()
		}
		wg.Wait()
		if n := tl.strandedFiles.Load(); n != maxStrandedOps {
			t.Fatalf("%d operations counted in the kernel, want %d", n, maxStrandedOps)
		}
		e := wantToolError(t, callHandler(context.Background(), t, tl, mcpwire.ToolFileRead, map[string]any{"path": normal}), mcpwire.CodeUnavailable)
		t.Logf("at the bound: %s", e.Message)
		// Stuck normal work does not refuse a control tool.
		if res := callHandler(context.Background(), t, tl, mcpwire.ToolProcessList, map[string]any{"limit": 1}); res.IsError {
			t.Fatalf("process.list refused while file operations are stuck: %v", res.Content)
		}
	})

	t.Run("released when the kernel lets go", func(t *testing.T) {
		stall.abort()
		proctest.Eventually(t, "no operation left in the kernel", func() bool { return tl.strandedFiles.Load() == 0 })
		res := callHandler(context.Background(), t, tl, mcpwire.ToolFileRead, map[string]any{"path": normal})
		if res.IsError {
			t.Fatalf("read after the abort failed: %v", res.Content)
		}
	})
}

// TestFileWriteNeverReplacesSpecialFiles: a FIFO, a character device and a
// socket are refused whether named directly or through symlinks (relative,
// absolute, chained, dangling-then-swapped), and every node survives as it
// was. Writing through a symlink used to follow it and rename a regular
// file over the device.
func TestFileWriteNeverReplacesSpecialFiles(t *testing.T) {
	h := newHarness(t, testOptions())
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The same device numbers as /dev/null: a real character device node.
	dev := filepath.Join(dir, "null-dev")
	nullRdev := int(unix.Mkdev(1, 3))
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, nullRdev); err != nil {
		t.Fatalf("mknod (needs root): %v", err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	links := map[string]string{
		"to-fifo":     "fifo",
		"to-dev":      dev,
		"to-sock":     "./sock",
		"chain":       "to-dev",
		"chain-twice": "chain",
		"loop-a":      "loop-b",
		"loop-b":      "loop-a",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fifo", "null-dev", "sock", "to-fifo", "to-dev", "to-sock", "chain", "chain-twice", "loop-a"} {
		t.Run(name, func(t *testing.T) {
			want := "regular"
			if strings.HasPrefix(name, "loop") {
				want = "symbolic links"
			}
			e := fails(t, h, mcpwire.ToolFileWrite, map[string]any{"path": filepath.Join(dir, name), "content": "replaced"}, mcpwire.CodeInvalidArgument)
			if !strings.Contains(e.Message, want) {
				t.Fatalf("message %q does not say %q", e.Message, want)
			}
		})
	}

	checks := []struct {
		path string
		mode fs.FileMode
	}{
		{fifo, fs.ModeNamedPipe}, {dev, fs.ModeDevice | fs.ModeCharDevice}, {sock, fs.ModeSocket},
	}
	for _, c := range checks {
		fi, err := os.Lstat(c.path)
		if err != nil || fi.Mode().Type() != c.mode {
			t.Fatalf("%s: %v, type %v: want %v", c.path, err, fi.Mode().Type(), c.mode)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil || st.Rdev != uint64(nullRdev) {
		t.Fatalf("device node changed: rdev %d (%v)", st.Rdev, err)
	}
	for name := range links {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode().Type() != fs.ModeSymlink {
			t.Fatalf("link %s replaced: %v", name, err)
		}
	}
	onlyEntries(t, dir)

	// Reading through the same links is refused too, without blocking on
	// the FIFO or opening the device.
	for _, name := range []string{"to-fifo", "to-dev", "to-sock", "chain-twice"} {
		fails(t, h, mcpwire.ToolFileRead, map[string]any{"path": filepath.Join(dir, name)}, mcpwire.CodeInvalidArgument)
	}
}
