package server

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// auditGoroutines are the functions of an audit.Log's own goroutines: the
// writer and the refusal aggregator. Server.Close leaves the log open (the
// process's stop record is written after it), so a test that opens one
// must close it; one left running shows up in every timeout dump after.
var auditGoroutines = []string{
	"mcp-backend/audit.(*Log).run(",
	"mcp-backend/audit.(*aggregator).run(",
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedAudit(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d audit log goroutines outlived the tests (a server's Audit() not closed):\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedAudit is the stacks of audit goroutines still running after wait;
// a closed log's goroutines return just after Close does.
func leakedAudit(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, fn := range auditGoroutines {
				if strings.Contains(g, fn) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}
