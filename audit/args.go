package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/overdeck/mcp-backend/internal/procfs"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Bound cuts s to at most n bytes on a rune boundary.
func Bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// A rune cut in half is dropped, not kept as invalid UTF-8.
	return strings.ToValidUTF8(s[:n], "")
}

// Arguments turns a tool call's raw arguments into the fields a record
// keeps: what the call acted on, never a secret. file.write's content
// becomes its size and sha256; shell.exec's environment its variable
// names; its command is cut at CommandBytes. FieldArgs holds the rest,
// as bounded JSON; arguments of an unknown tool are kept as names only.
func Arguments(tool string, raw json.RawMessage) []Field {
	var in map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) > 0 && json.Unmarshal(raw, &in) != nil {
		return []Field{{FieldArgs, `"(not a JSON object)"`}}
	}
	var out []Field
	add := func(name, v string) {
		if v != "" {
			out = append(out, Field{name, v})
		}
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(in[k], &s)
		return s
	}
	kept := map[string]json.RawMessage{}
	keep := func(keys ...string) {
		for _, k := range keys {
			if v, ok := in[k]; ok {
				kept[k] = v
			}
		}
	}
	switch tool {
	case mcpwire.ToolShellExec, mcpwire.ToolJobStart:
		cmd := str("command")
		add(FieldCommand, Bound(cmd, CommandBytes))
		add(FieldCommandBytes, strconv.Itoa(len(cmd)))
		add(FieldPath, Bound(str("cwd"), ValueBytes))
		var env map[string]json.RawMessage
		_ = json.Unmarshal(in["env"], &env)
		names := make([]string, 0, len(env))
		for k := range env {
			names = append(names, k)
		}
		sort.Strings(names)
		add(FieldEnvNames, Bound(strings.Join(names, " "), ValueBytes))
		keep("timeoutMs", "waitMs", "memoryMax", "tasksMax")
	case mcpwire.ToolFileWrite:
		add(FieldPath, Bound(str("path"), ValueBytes))
		content := []byte(str("content"))
		if str("encoding") == "base64" {
			if b, err := base64.StdEncoding.DecodeString(string(content)); err == nil {
				content = b
			}
		}
		sum := sha256.Sum256(content)
		add(FieldContentBytes, strconv.Itoa(len(content)))
		add(FieldContentSHA256, hex.EncodeToString(sum[:]))
		keep("encoding", "mode", "createParents")
	case mcpwire.ToolFileRead, mcpwire.ToolFileList:
		add(FieldPath, Bound(str("path"), ValueBytes))
		keep("offset", "length", "limit")
	case mcpwire.ToolProcessKill:
		var pid int64
		_ = json.Unmarshal(in["pid"], &pid)
		if pid != 0 {
			add(FieldTargetPID, strconv.FormatInt(pid, 10))
		}
		if s, ok := in["signal"]; ok {
			add(FieldKillSignal, Bound(strings.Trim(string(s), `"`), 32))
		}
	case mcpwire.ToolServiceStatus, mcpwire.ToolServiceControl:
		add(FieldUnit, Bound(str("unit"), ValueBytes))
		add(FieldAction, Bound(str("action"), 32))
	case mcpwire.ToolProcessList:
		keep("name", "user", "limit")
	case mcpwire.ToolJobStatus, mcpwire.ToolJobOutput, mcpwire.ToolJobWait, mcpwire.ToolJobCancel:
		add(FieldJobID, Bound(str("id"), 64))
		keep("stream", "offset", "maxBytes", "waitMs")
	case mcpwire.ToolSystemInfo, mcpwire.ToolJobList:
	default:
		names := make([]string, 0, len(in))
		for k := range in {
			names = append(names, k)
		}
		sort.Strings(names)
		b, _ := json.Marshal(map[string][]string{"names": names})
		add(FieldArgs, Bound(string(b), ArgsBytes))
		return out
	}
	if len(kept) > 0 {
		b, _ := json.Marshal(kept)
		if len(b) > ArgsBytes {
			b, _ = json.Marshal(map[string]string{"cut": Bound(string(b), ArgsBytes-16)})
		}
		add(FieldArgs, string(b))
	}
	return out
}

// Target is what identifies a process beyond its pid, which the kernel
// reuses: its start time (clock ticks since boot) and command name.
type Target struct {
	Start string
	Comm  string
}

// TargetOf reads /proc/PID/stat; ok is false when there is no such
// process.
func TargetOf(pid string) (Target, bool) {
	if _, err := strconv.ParseUint(pid, 10, 31); err != nil {
		return Target{}, false
	}
	n, _ := strconv.Atoi(pid)
	st, ok := procfs.Read(n)
	if !ok {
		return Target{}, false
	}
	return Target{Start: strconv.FormatInt(st.StartTicks, 10), Comm: st.Comm}, true
}
