package deploy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// ServiceFact is one loaded service as the duplicate-supervisor check sees
// it.
type ServiceFact struct {
	Name          string
	ActiveState   string
	UnitFileState string // enabled, static, disabled, ...
	// ActiveTriggers are the active units (timers, paths, sockets) that
	// start it: a oneshot run by a timer is inactive between runs.
	ActiveTriggers []string
	Exec           []unitstate.ExecCommand
	// Err is why its ExecStart could not be read.
	Err error
}

// Supervision is what preflight observed of every loaded service, and what
// production's own units are.
type Supervision struct {
	BackendUnit     string
	CanaryUnit      string
	WatchdogService string
	// CurrentBinary is the binary production runs through current;
	// ReleasesDir holds every release's binary.
	CurrentBinary string
	ReleasesDir   string
	Services      []ServiceFact
	// ListErr is why the units could not be listed at all.
	ListErr error
}

// live reports whether s runs or will run without an operator: active (or
// on its way), started by an active trigger, or enabled at boot.
func (s ServiceFact) live() (bool, string) {
	switch {
	case unitstate.Running(s.ActiveState):
		return true, s.ActiveState
	case len(s.ActiveTriggers) > 0:
		return true, "started by " + strings.Join(s.ActiveTriggers, ", ")
	case s.UnitFileState == "enabled" || s.UnitFileState == "enabled-runtime":
		return true, "enabled at boot"
	}
	return false, ""
}

// tokens are a command's path and arguments, with arguments split on
// whitespace so `sh -c "BINARY serve"` shows its binary too.
func tokens(c unitstate.ExecCommand) []string {
	out := []string{c.Path}
	for _, a := range c.Argv {
		out = append(out, strings.Fields(a)...)
	}
	return out
}

// runsBackend reports the mcp-backend binary a command runs: current's, or
// any release's.
func (s Supervision) runsBackend(c unitstate.ExecCommand) string {
	releases := filepath.Clean(s.ReleasesDir) + "/"
	for _, tok := range tokens(c) {
		tok = filepath.Clean(tok)
		if tok == filepath.Clean(s.CurrentBinary) || (strings.HasPrefix(tok, releases) && filepath.Base(tok) == "mcp-backend") {
			return tok
		}
	}
	return ""
}

// jobSupervisor reports whether a command is the supervisor of one
// backend job (`mcp-backend job-exec --dir DIR`, the main process of a
// job's transient unit): it serves nothing and must survive a cutover.
// Only a direct exec counts; through a shell anything could follow.
func jobSupervisor(c unitstate.ExecCommand) bool {
	return len(c.Argv) >= 2 && filepath.Base(c.Path) == "mcp-backend" && c.Argv[1] == "job-exec"
}

// runsWatchdog reports whether a command runs `mcpctl ... watchdog`.
func runsWatchdog(c unitstate.ExecCommand) bool {
	toks := tokens(c)
	for i, tok := range toks {
		if filepath.Base(tok) == "mcpctl" && slices.Contains(toks[i+1:], "watchdog") {
			return true
		}
	}
	return false
}

// DuplicateSupervisors lists every live service besides production's own
// that would supervise production too: another unit running the backend's
// binary (current's or any release's; only the canary unit may run a
// release), or another unit running `mcpctl watchdog` besides the watchdog
// service. Either would fight the cutover: the old build keeps serving, or a
// second watchdog restarts tunnels the cutover is verifying. A job's
// supervisor (job-exec) runs a release's binary and is none of these.
func DuplicateSupervisors(s Supervision) []string {
	if s.ListErr != nil {
		return []string{fmt.Sprintf("cannot list systemd units to look for a second supervisor: %v", s.ListErr)}
	}
	var out []string
	for _, svc := range s.Services {
		if svc.Name == s.BackendUnit {
			continue
		}
		live, why := svc.live()
		if !live {
			continue
		}
		if svc.Err != nil {
			out = append(out, fmt.Sprintf("%s (%s): cannot read its ExecStart: %v", svc.Name, why, svc.Err))
			continue
		}
		for _, c := range svc.Exec {
			if bin := s.runsBackend(c); bin != "" && svc.Name != s.CanaryUnit && !jobSupervisor(c) {
				out = append(out, fmt.Sprintf("%s (%s) also runs %s: stop and disable it, production is %s", svc.Name, why, bin, s.BackendUnit))
				break
			}
			if runsWatchdog(c) && svc.Name != s.WatchdogService {
				out = append(out, fmt.Sprintf("%s (%s) runs a second watchdog (%s): stop and disable it, the watchdog is %s", svc.Name, why, strings.Join(c.Argv, " "), s.WatchdogService))
				break
			}
		}
	}
	return out
}
