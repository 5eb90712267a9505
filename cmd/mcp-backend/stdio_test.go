package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startStdio runs the real binary's stdio with config cfg, and returns it
// with its stdin and stdout; the test's end closes stdin and kills it.
func startStdio(t testing.TB, cfg string) (*exec.Cmd, io.WriteCloser, io.Reader) {
	t.Helper()
	cmd := exec.Command(binary, "stdio", "--config", cfg)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return cmd, in, out
}

// TestStdioMalformedLineKeepsSession: over the real binary's stdio, a
// malformed line and a line with an id that cannot round-trip are each
// answered with a JSON-RPC error, while the session and a call in flight
// go on: the call's result arrives and later calls are served.
func TestStdioMalformedLineKeepsSession(t *testing.T) {
	_, in, out := startStdio(t, writeConfig(t, `{}`))

	type reply struct {
		ID     json.RawMessage `json:"id"`
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	replies := make(chan reply, 16)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var r reply
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				replies <- r
			}
		}
		close(replies)
	}()
	next := func(what string) reply {
		t.Helper()
		select {
		case r, ok := <-replies:
			if !ok {
				t.Fatalf("session ended waiting for %s", what)
			}
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("no reply for %s", what)
		}
		return reply{}
	}
	send := func(line string) {
		t.Helper()
		if _, err := fmt.Fprintln(in, line); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if r := next("initialize"); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	gate := filepath.Join(t.TempDir(), "go")
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"while [ ! -e %s ]; do sleep 0.05; done; echo done"}}}`, gate))

	send(`{"jsonrpc":"2.0","id":3,"method":`)
	if r := next("malformed line"); r.Error == nil || r.Error.Code != -32700 {
		t.Fatalf("malformed line: %+v, want a -32700 error", r)
	}
	send(`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`)
	if r := next("fractional id"); r.Error == nil || r.Error.Code != -32600 {
		t.Fatalf("fractional id: %+v, want a -32600 error", r)
	}
	send(`{"jsonrpc":"2.0","id":` + strings.Repeat("9", 250) + `,"method":"ping"}`)
	if r := next("250-digit id"); r.Error == nil || r.Error.Code != -32600 {
		t.Fatalf("250-digit id: %+v, want a -32600 error", r)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`)
	if r := next("system.info"); string(r.ID) != "4" || r.Result == nil || r.Result.IsError {
		t.Fatalf("system.info after malformed lines: %+v", r)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := next("the call in flight"); string(r.ID) != "2" || r.Result == nil || r.Result.IsError {
		t.Fatalf("call in flight: id %s %+v, want its ok result", r.ID, r)
	}
}
