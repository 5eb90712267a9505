package tools

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// FuzzToolArguments feeds arbitrary bytes as the arguments of each tool
// through the same decoding its handler uses (schema validation against the
// tool's registered input schema, then the typed input) and then through the
// tool's own argument checks, without running the tool. Whatever comes in,
// nothing panics, every refusal is a structured INVALID_ARGUMENT or
// PERMISSION_DENIED, and every accepted number is within the range of the
// type the kernel or runtime takes it in. The seed corpus is in
// testdata/fuzz/FuzzToolArguments and runs with every `go test`; run longer
// with -fuzz=FuzzToolArguments.
func FuzzToolArguments(f *testing.F) {
	opts := testOptions()
	tl := New(opts)
	f.Cleanup(tl.Close)
	checks := map[string]func(t *testing.T, raw []byte){
		mcpwire.ToolSystemInfo: func(t *testing.T, raw []byte) {
			decodeFor[SystemInfoInput](t, tl, mcpwire.ToolSystemInfo, raw)
		},
		mcpwire.ToolProcessList: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[ProcessListInput](t, tl, mcpwire.ToolProcessList, raw)
			if !ok {
				return
			}
			if limit, err := checkLimit(in.Limit, defaultProcessLimit, maxProcessLimit); refused(t, err) == nil && (limit < 1 || limit > maxProcessLimit) {
				t.Fatalf("limit %d accepted as %d", in.Limit, limit)
			}
		},
		mcpwire.ToolServiceStatus: func(t *testing.T, raw []byte) {
			if in, ok := decodeFor[ServiceStatusInput](t, tl, mcpwire.ToolServiceStatus, raw); ok {
				checkUnit(t, in.Unit)
			}
		},
		mcpwire.ToolServiceControl: func(t *testing.T, raw []byte) {
			if in, ok := decodeFor[ServiceControlInput](t, tl, mcpwire.ToolServiceControl, raw); ok {
				checkUnit(t, in.Unit)
			}
		},
		mcpwire.ToolProcessKill: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[ProcessKillInput](t, tl, mcpwire.ToolProcessKill, raw)
			if !ok {
				return
			}
			if sig, err := parseSignal(in.Signal); refused(t, err) == nil && (sig < 0 || sig > 64) {
				t.Fatalf("signal %v accepted as %d", in.Signal, sig)
			}
			if refused(t, checkPID(in.PID)) == nil && (in.PID < 2 || in.PID > math.MaxInt32 || in.PID == selfPID) {
				t.Fatalf("pid %d accepted", in.PID)
			}
		},
		mcpwire.ToolShellExec: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[ShellExecInput](t, tl, mcpwire.ToolShellExec, raw)
			if !ok {
				return
			}
			d, err := execTimeout(in.TimeoutMs, opts.DefaultTimeout, opts.MaxTimeout)
			if refused(t, err) == nil && (d <= 0 || d > opts.MaxTimeout) {
				t.Fatalf("timeoutMs %v accepted as %s", deref(in.TimeoutMs), d)
			}
			_, err = shellEnv(in.Env)
			refused(t, err)
		},
		mcpwire.ToolFileRead: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[FileReadInput](t, tl, mcpwire.ToolFileRead, raw)
			if !ok {
				return
			}
			checkPath(t, in.Path)
			off, n, err := readRange(in.Offset, in.Length, opts.OutputBytes)
			if refused(t, err) == nil && (off < 0 || n < 0 || n > opts.OutputBytes) {
				t.Fatalf("offset %d length %v accepted as %d, %d", in.Offset, deref(in.Length), off, n)
			}
		},
		mcpwire.ToolFileWrite: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[FileWriteInput](t, tl, mcpwire.ToolFileWrite, raw)
			if !ok {
				return
			}
			checkPath(t, in.Path)
			if m, err := writeMode(in.Mode); refused(t, err) == nil && m&^0o777 != 0 {
				t.Fatalf("mode %q accepted as %o", in.Mode, m)
			}
			_, err := writeContent(in.Content, in.Encoding)
			refused(t, err)
		},
		mcpwire.ToolFileList: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[FileListInput](t, tl, mcpwire.ToolFileList, raw)
			if !ok {
				return
			}
			checkPath(t, in.Path)
			if limit, err := checkLimit(in.Limit, defaultFileListLimit, maxFileListLimit); refused(t, err) == nil && (limit < 1 || limit > maxFileListLimit) {
				t.Fatalf("limit %d accepted as %d", in.Limit, limit)
			}
		},
		mcpwire.ToolJobStart: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[JobStartInput](t, tl, mcpwire.ToolJobStart, raw)
			if !ok {
				return
			}
			if w := in.WaitMs; w != nil && (*w < 0 || *w > maxJobWait.Milliseconds()) {
				t.Fatalf("waitMs %d accepted", *w)
			}
			_, err := shellEnv(in.Env)
			refused(t, err)
		},
		mcpwire.ToolJobStatus: func(t *testing.T, raw []byte) { decodeFor[JobIDInput](t, tl, mcpwire.ToolJobStatus, raw) },
		mcpwire.ToolJobCancel: func(t *testing.T, raw []byte) { decodeFor[JobIDInput](t, tl, mcpwire.ToolJobCancel, raw) },
		mcpwire.ToolJobList:   func(t *testing.T, raw []byte) { decodeFor[JobListInput](t, tl, mcpwire.ToolJobList, raw) },
		mcpwire.ToolJobOutput: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[JobOutputInput](t, tl, mcpwire.ToolJobOutput, raw)
			if ok && (in.Offset < 0 || in.MaxBytes < 0 || in.MaxBytes > maxJobReadBytes) {
				t.Fatalf("offset %d maxBytes %d accepted", in.Offset, in.MaxBytes)
			}
		},
		mcpwire.ToolJobWait: func(t *testing.T, raw []byte) {
			in, ok := decodeFor[JobWaitInput](t, tl, mcpwire.ToolJobWait, raw)
			if ok && (in.WaitMs != nil && (*in.WaitMs < 0 || *in.WaitMs > maxJobWait.Milliseconds()) || in.StdoutOffset < 0 || in.StderrOffset < 0) {
				t.Fatalf("wait %s accepted", raw)
			}
		},
	}
	names := mcpwire.ToolNames()
	if len(checks) != len(names) {
		f.Fatalf("%d tools, %d argument checks", len(names), len(checks))
	}
	f.Fuzz(func(t *testing.T, tool uint8, raw []byte) {
		checks[names[int(tool)%len(names)]](t, raw)
	})
}

// decodeFor decodes raw as the arguments of tool, as its handler does; a
// refusal must be a structured INVALID_ARGUMENT.
func decodeFor[In any](t *testing.T, tl *Tools, tool string, raw []byte) (In, bool) {
	t.Helper()
	var zero In
	var schema *jsonschema.Schema
	for _, d := range tl.defs {
		if d.tool.Name == tool {
			schema = d.tool.InputSchema.(*jsonschema.Schema)
		}
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	in, terr := decodeArgs[In](json.RawMessage(raw), resolved, resolved.Validate(map[string]any{}))
	if terr != nil {
		if terr.Code != mcpwire.CodeInvalidArgument || terr.Message == "" {
			t.Fatalf("%s: decoding %q: %s %q, want a structured INVALID_ARGUMENT", tool, raw, terr.Code, terr.Message)
		}
		return zero, false
	}
	return in, true
}

// refused checks that err, if any, is a structured refusal of an argument.
func refused(t *testing.T, err error) error {
	t.Helper()
	if err == nil {
		return nil
	}
	te := toolerr.As(err)
	if te.Code != mcpwire.CodeInvalidArgument && te.Code != mcpwire.CodePermissionDenied {
		t.Fatalf("argument check answered %s (%q), want INVALID_ARGUMENT or PERMISSION_DENIED", te.Code, te.Message)
	}
	if len(te.Message) > maxErrorMessageLength+8 && !strings.Contains(te.Message, "argument") {
		t.Fatalf("message too long and naming no argument: %.200q", te.Message)
	}
	return err
}

func checkPath(t *testing.T, p string) {
	t.Helper()
	if clean, err := absPath("path", p); refused(t, err) == nil && (!strings.HasPrefix(clean, "/") || strings.IndexByte(clean, 0) >= 0) {
		t.Fatalf("path %q accepted as %q", p, clean)
	}
}

func checkUnit(t *testing.T, unit string) {
	t.Helper()
	if refused(t, validateUnit(unit)) == nil && (len(unit) > 255 || strings.ContainsAny(unit, "/ \n\x00")) {
		t.Fatalf("unit %q accepted", unit)
	}
}
