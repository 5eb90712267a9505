package config

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/admission"
)

// FuzzParseValidate: Parse and Validate never panic on any input, and a
// config Validate accepts is one the program can use: every duration and
// buffer it derives is in range. The seed corpus in testdata/fuzz runs with
// every `go test`; `go test -fuzz FuzzParseValidate` explores further.
func FuzzParseValidate(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"concurrency":{"queueWaitMs":9300000000000}}`))
	f.Add([]byte(`{"limits":{"outputBytes":9223372036854775807,"responseBytes":9223372036854775807}}`))
	f.Add([]byte(`{"listen":"127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		if c.Validate() != nil {
			return
		}
		if err := usable(c); err != nil {
			t.Fatalf("%s validates but %v", data, err)
		}
	})
}

// usable converts a valid config the way serve does and reports the first
// value that overflows or is out of range.
func usable(c Config) error {
	cc := c.Concurrency
	if d := cc.QueueWait(); d <= 0 || d/time.Millisecond != time.Duration(cc.QueueWaitMs) {
		return fmt.Errorf("queueWaitMs %d overflows a duration (%v)", cc.QueueWaitMs, d)
	}
	for _, ms := range []int{c.Shell.DefaultTimeoutMs, c.Shell.MaxTimeoutMs} {
		if d := time.Duration(ms) * time.Millisecond; d <= 0 || d/time.Millisecond != time.Duration(ms) {
			return fmt.Errorf("shell timeout %d ms overflows a duration", ms)
		}
	}
	if err := (admission.Limits{
		MaxActive: cc.MaxActive, ReservedControl: cc.ReservedControl, MaxShell: cc.MaxShell,
		MaxQueue: cc.MaxQueue, QueueWait: cc.QueueWait(),
	}).Validate(); err != nil {
		return err
	}
	l := c.Limits
	// file.read allocates outputBytes+1, a response may grow sixfold by JSON
	// escaping, the request body cap is responseBytes + 1 MiB: all in an int.
	if l.OutputBytes <= 0 || l.ResponseBytes <= 0 || l.OutputBytes > math.MaxInt32 || l.ResponseBytes > math.MaxInt32 ||
		l.ResponseBytes < l.OutputBytes+responseHeadroom {
		return fmt.Errorf("limits %+v out of range", l)
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return err
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || strconv.FormatUint(p, 10) != port {
		return fmt.Errorf("listen port %q", port)
	}
	return nil
}
