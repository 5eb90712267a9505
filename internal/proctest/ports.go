package proctest

import (
	"strconv"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/loopport"
)

// FreePort returns a loopback port that was free a moment ago, outside the
// kernel's ephemeral range, and reserved for this test until it ends (see
// loopport for why a port from "127.0.0.1:0" is not good enough).
func FreePort(t testing.TB) int {
	t.Helper()
	p, release, err := loopport.Reserve(loopport.Dir(), time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return p
}

// FreeAddr returns "127.0.0.1:PORT" for a port FreePort reserved.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}
