package mcpwire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestRoundTrip decodes each pinned JSON shape strictly (an unknown field is
// an error) and encodes it again: the bytes must come back unchanged, so
// every field the backend sends has its place here, under its exact name and
// in its order.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		into any
		json string
	}{
		{"metrics", &Metrics{}, `{"limits":{"maxActive":48,"reservedControl":8,"maxNonControl":40,"maxShell":8,"maxQueue":64,"queueWaitMs":30000},` +
			`"active":{"total":4,"control":1,"nonControl":3,"shell":2},"queued":{"total":3,"control":1,"nonControl":2},` +
			`"peak":{"active":9,"nonControl":7,"shell":5,"queued":6},"counters":{"accepted":11,"completed":10,"rejected":12,"timedOut":13,"cancelled":14,"preempted":5,"displaced":2}}`},
		{"shell result", &ShellResult{}, `{"exitCode":0,"signal":null,"stdout":"a\n","stderr":"","timedOut":false,"outputLimited":true,"durationMs":12}`},
		{"shell result killed", &ShellResult{}, `{"exitCode":null,"signal":"SIGKILL","stdout":"","stderr":"","timedOut":true,"outputLimited":false,"durationMs":100}`},
		{"error envelope", &ErrorEnvelope{}, `{"error":{"code":"OVERLOADED","message":"backend overloaded","retryable":true}}`},
		{"overloaded with scope", &ErrorEnvelope{}, `{"error":{"code":"OVERLOADED","message":"backend overloaded","retryable":true,"scope":"principal","retryAfterMs":800}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec := json.NewDecoder(bytes.NewReader([]byte(tc.json)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tc.into); err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := json.Marshal(tc.into)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.json {
				t.Fatalf("round trip changed the JSON:\ngot:  %s\nwant: %s", got, tc.json)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	want := map[string]Class{
		ToolSystemInfo: ClassControl, ToolProcessList: ClassControl, ToolServiceStatus: ClassControl,
		ToolProcessKill: ClassControl, ToolServiceControl: ClassControl,
		ToolShellExec: ClassShell, ToolFileRead: ClassNormal, ToolFileWrite: ClassNormal, ToolFileList: ClassNormal,
		ToolJobStart: ClassShell, ToolJobWait: ClassWait, ToolJobStatus: ClassNormal, ToolJobOutput: ClassNormal,
		ToolJobCancel: ClassNormal, ToolJobList: ClassNormal,
		"unknown.tool": ClassNormal,
	}
	for tool, w := range want {
		if got := ClassOf(tool); got != w {
			t.Errorf("ClassOf(%q) = %s, want %s", tool, got, w)
		}
	}
	if n := len(ToolNames()); n != 15 {
		t.Fatalf("ToolNames has %d names, want 15", n)
	}
}

func TestCounters(t *testing.T) {
	before := Counters{Accepted: 10, Completed: 9, Rejected: 1, TimedOut: 2, Cancelled: 3}
	after := Counters{Accepted: 15, Completed: 15, Rejected: 4, TimedOut: 2, Cancelled: 5}
	d := after.Sub(before)
	if d != (Counters{Accepted: 5, Completed: 6, Rejected: 3, TimedOut: 0, Cancelled: 2}) {
		t.Fatalf("Sub = %+v", d)
	}
	if got := d.Seen(); got != 10 {
		t.Fatalf("Seen = %d, want 10 (accepted+rejected+timedOut+cancelled)", got)
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []Code{CodeInvalidArgument, CodeNotFound, CodePermissionDenied, CodeTimeout, CodeOutputLimit, CodeUnavailable, CodeInternal, CodeOverloaded, CodeCancelled} {
		want := c == CodeOverloaded || c == CodeUnavailable || c == CodeTimeout
		if c.Retryable() != want {
			t.Errorf("%s.Retryable() = %v, want %v", c, c.Retryable(), want)
		}
	}
}
