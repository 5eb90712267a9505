package server

import (
	"bytes"
	"strconv"
	"testing"
)

// FuzzParseJSONRPC feeds the JSON-RPC framing parsers (HTTP body, stdio
// line, refusal sniffer) arbitrary bytes: none may panic, and an id any of
// them accepts is one the answer echoes exactly.
func FuzzParseJSONRPC(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1e3,"method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","params":{"arguments":{"x":[1,2,{"y":"z"}]},"name":"file.write"},"id":7,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":`, `{`, `[`, `"x"`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, code, _ := parseJSONRPC(b)
		if code == 0 {
			assertEchoable(t, msg.ID)
		}
		id, _, _ := sniffRequest(b)
		assertEchoable(t, id)
		if len(bytes.TrimSpace(b)) > 0 {
			if id, code, _ := checkLine(b); code != 0 {
				assertEchoable(t, id)
			}
		}
	})
}

// assertEchoable: absent, null, a string, or an integer the SDK's float64
// decoding keeps exact.
func assertEchoable(t *testing.T, id []byte) {
	t.Helper()
	id = bytes.TrimSpace(id)
	if len(id) == 0 || string(id) == "null" || id[0] == '"' {
		return
	}
	v, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil || v > maxSafeID || v < -maxSafeID || int64(float64(v)) != v {
		t.Fatalf("accepted id %q does not round-trip", id)
	}
}
