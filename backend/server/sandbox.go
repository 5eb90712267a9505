package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// sandboxState is the sandbox profiles in use, resolved on this host and
// tried once at start, and the commands started per profile.
type sandboxState struct {
	cfg   sandbox.Config
	specs map[string]*sandbox.Spec // the profiles the defaults and rules name
	calls map[string]*atomic.Int64 // per profile, and none
	exe   string                   // the helper: this binary's sandbox-exec
}

// sandboxExe is the binary whose sandbox-exec sets a profile up: this one.
var sandboxExe = os.Executable

// openSandboxes makes the backend non-dumpable once any command runs in a
// sandbox (commands never read its environment, memory or file
// descriptors through /proc, not even the root ones it starts: they keep
// no CAP_SYS_PTRACE) and resolves the profiles (resolveSandboxes).
func openSandboxes(cfg config.Config, secrets filepolicy.Options, log *slog.Logger) (*sandboxState, error) {
	for _, w := range cfg.SandboxWarnings() {
		log.Warn("sandbox: " + w)
	}
	st, err := resolveSandboxes(cfg, secrets)
	if err != nil || len(st.specs) == 0 {
		return st, err
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("sandbox: make the backend non-dumpable: %w", err)
	}
	log.Info("sandbox: profiles ready", "profiles", slices.Sorted(maps.Keys(st.specs)), "allow", cfg.Sandbox.Allow, "approved", cfg.Sandbox.Approved)
	return st, nil
}

// resolveSandboxes resolves every profile the config uses and starts the
// helper once under each: a profile this host or this process cannot
// enforce (no such user, no privilege to unshare or change credentials,
// no system call filters) refuses the start, naming the key that chose
// it. Nothing runs with less than its profile. Preflight runs it too, so
// check-config refuses what serve would.
func resolveSandboxes(cfg config.Config, secrets filepolicy.Options) (*sandboxState, error) {
	st := &sandboxState{cfg: cfg.Sandbox, specs: map[string]*sandbox.Spec{}, calls: map[string]*atomic.Int64{sandbox.None: {}}}
	used := cfg.Policy.Sandboxes()
	for key, name := range map[string]string{"sandbox.allow": cfg.Sandbox.Allow, "sandbox.approved": cfg.Sandbox.Approved} {
		if k, ok := used[name]; name != sandbox.None && (!ok || key < k) {
			used[name] = key
		}
	}
	if len(used) == 0 {
		return st, nil
	}
	exe, err := sandboxExe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: own executable: %w", err)
	}
	st.exe = exe
	if !sandbox.Supported() {
		return nil, fmt.Errorf("sandbox: this kernel has no system call filters (seccomp): the profiles %s cannot be enforced", strings.Join(keysOf(used), ", "))
	}
	mask := masksOf(cfg, secrets)
	for _, name := range keysOf(used) {
		key := used[name]
		p, _ := cfg.Sandbox.Profile(name)
		spec, err := sandbox.Resolve(name, p, mask)
		if err != nil {
			return nil, fmt.Errorf("%s = %q: this host cannot enforce the profile: %w", key, name, err)
		}
		spec.HidePIDs = []int{os.Getpid()}
		if err := probeSandbox(exe, cfg.Shell.Path, spec); err != nil {
			return nil, fmt.Errorf("%s = %q: this host or process cannot enforce the profile: %w", key, name, err)
		}
		st.specs[name] = spec
		st.calls[name] = &atomic.Int64{}
	}
	return st, nil
}

// probeSandbox runs the shell once under spec: what the helper cannot set up
// here fails now, not on a caller's command.
func probeSandbox(exe, shell string, spec *sandbox.Spec) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := sandbox.Command(exe, spec, []string{shell, "-c", "exit 0"})
	if err != nil {
		return err
	}
	cmd.Env = sandbox.Env(spec, nil)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// masksOf is what every profile covers: the backend's secrets (as the
// file tools refuse them; process memory is closed by PR_SET_DUMPABLE
// instead) and each path a deny rule names.
func masksOf(cfg config.Config, o filepolicy.Options) []string {
	var out []string
	for _, s := range slices.Concat(o.SecretFiles, o.SecretDirs, o.SecretPatterns) {
		if !strings.HasPrefix(s.Path, "/proc/") {
			out = append(out, s.Path)
		}
	}
	deny, _ := cfg.Policy.DenyPaths()
	out = append(out, deny...)
	sort.Strings(out)
	return slices.Compact(out)
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// choose puts the sandbox of a command call in ctx (after the policy): the
// profile its deciding rule names, else the default of how it got to run
// (allowed, or approved after an ask).
func (st *sandboxState) choose(ctx context.Context, tool string) context.Context {
	if d, _ := tooldesc.Lookup(tool); !d.Sandboxed {
		return ctx
	}
	d, note, _ := decisionOf(ctx)
	name := st.cfg.For(d.Sandbox, note.answer != "")
	return sandbox.With(ctx, sandbox.Choice{Name: name, Spec: st.specs[name].ForCommand()})
}

// count counts a command call that starts running.
func (st *sandboxState) count(ctx context.Context) {
	if c, ok := sandbox.From(ctx); ok {
		if n := st.calls[c.Name]; n != nil {
			n.Add(1)
		}
	}
}

func (st *sandboxState) metrics() mcpwire.SandboxMetrics {
	m := mcpwire.SandboxMetrics{Calls: make(map[string]int64, len(st.calls))}
	for k, v := range st.calls {
		m.Calls[k] = v.Load()
	}
	return m
}
