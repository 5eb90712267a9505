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
)

// Bound cuts s to at most n bytes on a rune boundary.
func Bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// A rune cut in half is dropped, not kept as invalid UTF-8.
	return strings.ToValidUTF8(s[:n], "")
}

// Shape says how a tool's arguments are recorded: each field names the
// argument recorded that way, "" for none. The backend's tool descriptors
// hold one per tool.
type Shape struct {
	Command  string   // cut at CommandBytes, with its length
	Path     string   // as FieldPath
	EnvNames string   // an object whose names are kept, never its values
	Content  string   // its size and sha256, never the bytes
	Encoding string   // the argument saying Content is base64
	PID      string   // as FieldTargetPID
	Signal   string   // as FieldKillSignal
	Unit     string   // as FieldUnit
	Action   string   // as FieldAction
	JobID    string   // as FieldJobID
	Keep     []string // kept as given, in FieldArgs
}

// Arguments turns a tool call's raw arguments into the fields a record
// keeps: what the call acted on, never a secret. Content becomes its size
// and sha256; an environment its variable names; a command is cut at
// CommandBytes. FieldArgs holds the arguments Keep names, as bounded JSON;
// the arguments of a tool without a shape (nil: not one of ours) are kept
// as names only.
func Arguments(shape *Shape, raw json.RawMessage) []Field {
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
		if k != "" {
			_ = json.Unmarshal(in[k], &s)
		}
		return s
	}
	if shape == nil {
		names := make([]string, 0, len(in))
		for k := range in {
			names = append(names, k)
		}
		sort.Strings(names)
		b, _ := json.Marshal(map[string][]string{"names": names})
		add(FieldArgs, Bound(string(b), ArgsBytes))
		return out
	}
	if k := shape.Command; k != "" {
		cmd := str(k)
		add(FieldCommand, Bound(cmd, CommandBytes))
		add(FieldCommandBytes, strconv.Itoa(len(cmd)))
	}
	add(FieldPath, Bound(str(shape.Path), ValueBytes))
	if k := shape.EnvNames; k != "" {
		var env map[string]json.RawMessage
		_ = json.Unmarshal(in[k], &env)
		names := make([]string, 0, len(env))
		for k := range env {
			names = append(names, k)
		}
		sort.Strings(names)
		add(FieldEnvNames, Bound(strings.Join(names, " "), ValueBytes))
	}
	if k := shape.Content; k != "" {
		content := []byte(str(k))
		if str(shape.Encoding) == "base64" {
			if b, err := base64.StdEncoding.DecodeString(string(content)); err == nil {
				content = b
			}
		}
		sum := sha256.Sum256(content)
		add(FieldContentBytes, strconv.Itoa(len(content)))
		add(FieldContentSHA256, hex.EncodeToString(sum[:]))
	}
	if k := shape.PID; k != "" {
		var pid int64
		_ = json.Unmarshal(in[k], &pid)
		if pid != 0 {
			add(FieldTargetPID, strconv.FormatInt(pid, 10))
		}
	}
	if s, ok := in[shape.Signal]; ok && shape.Signal != "" {
		add(FieldKillSignal, Bound(strings.Trim(string(s), `"`), 32))
	}
	add(FieldUnit, Bound(str(shape.Unit), ValueBytes))
	add(FieldAction, Bound(str(shape.Action), 32))
	add(FieldJobID, Bound(str(shape.JobID), 64))
	kept := map[string]json.RawMessage{}
	for _, k := range shape.Keep {
		if v, ok := in[k]; ok {
			kept[k] = v
		}
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
