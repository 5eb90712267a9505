package tools

import (
	"encoding/base64"
	"os"
	"strconv"
	"time"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// The checks of the tools' numeric and encoded arguments, kept apart from
// the effects so that each can be fuzzed: every number is checked against
// the range of the type the kernel or the runtime takes it in before
// anything uses it.

// checkLimit applies a list limit: 0 means def, otherwise 1..max.
func checkLimit(v, def, max int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > max:
		return 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"limit\": must be 1..%d (got %d)", max, v)
	}
	return v, nil
}

// readRange checks file.read's offset and length; the length defaults to,
// and is capped at, the output limit.
func readRange(offset int64, length *int64, outputBytes int64) (int64, int64, error) {
	if offset < 0 {
		return 0, 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"offset\": must be >= 0 (got %d)", offset)
	}
	n := outputBytes
	if length != nil {
		if *length < 0 {
			return 0, 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"length\": must be >= 0 (got %d)", *length)
		}
		n = min(*length, outputBytes)
	}
	return offset, n, nil
}

// execTimeout turns shell.exec's timeoutMs into a duration: > 0, capped at
// max rather than refused. Compared in milliseconds, since a large
// timeoutMs would overflow time.Duration.
func execTimeout(ms *int64, def, max time.Duration) (time.Duration, error) {
	if ms == nil {
		return min(def, max), nil
	}
	if *ms <= 0 {
		return 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"timeoutMs\": must be > 0 (got %d)", *ms)
	}
	if *ms >= max.Milliseconds() {
		return max, nil
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// writeMode parses file.write's octal permission bits (default 0644);
// setuid, setgid and sticky are refused.
func writeMode(s string) (os.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"mode\": must be octal permission bits 000..777, e.g. \"0644\" (got %q)", s)
	}
	return os.FileMode(m), nil
}

// writeContent decodes file.write's content in its encoding.
func writeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", encodingUTF8:
		return []byte(content), nil
	case encodingBase64:
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"content\": invalid base64: %v", err)
		}
		return data, nil
	}
	return nil, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"encoding\": must be %q or %q (got %q)", encodingUTF8, encodingBase64, encoding)
}
