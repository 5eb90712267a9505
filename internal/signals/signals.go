// Package signals is the one parser of a signal as a call names it:
// process.kill sends what it returns and the policy's signals rules
// match what it returns, so a spelling the tool accepts (" KILL", "9 ",
// "sigkill") is the signal a rule on KILL names.
package signals

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Max is the largest signal number accepted (SIGRTMAX on Linux).
const Max = 64

// Parse reads a signal: nil is TERM; a name with or without SIG, in any
// case, with surrounding white space; a number 0..Max as a JSON number or
// a numeric string.
func Parse(v any) (syscall.Signal, error) {
	bad := fmt.Errorf("want a signal name like TERM or SIGKILL, or a number 0..%d (got %v)", Max, v)
	switch s := v.(type) {
	case nil:
		return syscall.SIGTERM, nil
	case json.Number:
		return Parse(string(s))
	case int:
		return Parse(float64(s))
	case float64:
		if s != math.Trunc(s) || s < 0 || s > Max {
			return 0, bad
		}
		return syscall.Signal(int(s)), nil
	case string:
		s = strings.ToUpper(strings.TrimSpace(s))
		if n, err := strconv.Atoi(s); err == nil {
			if n < 0 || n > Max {
				return 0, bad
			}
			return syscall.Signal(n), nil
		}
		if !strings.HasPrefix(s, "SIG") {
			s = "SIG" + s
		}
		if sig := unix.SignalNum(s); sig != 0 {
			return sig, nil
		}
	}
	return 0, bad
}

// Name is sig's name with SIG ("SIGKILL"); "0" for 0 and SIGn for a
// number without a name.
func Name(sig syscall.Signal) string {
	if sig == 0 {
		return "0"
	}
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}
