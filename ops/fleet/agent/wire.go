// Package agent is the host's side of `mcpctl fleet`: the fleet-agent
// commands the controller runs over SSH (facts, upload, start, wait, and
// exec inside a step's unit), the restricted key's gate, and the one
// definition of their arguments.
//
// Each command is a struct. The controller's transport (ops/fleet/sshrun)
// encodes it with Words; mcpctl and the gate decode it with Parse, one flag
// set per command (Go's flag package: one or two dashes, "=" or the next
// word, as urfave/cli reads flags). The gate runs the command rebuilt from
// the parsed values, never the words it was given, so what runs is exactly
// what it checked.
package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/ops/fleet"
)

// UsageError is a malformed command or argument (mcpctl's exit 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// Command is one fleet-agent command with its arguments.
type Command interface {
	// Name is the subcommand: facts, upload, start, exec, wait or gate.
	Name() string
	// Words are the command's canonical words after the program:
	// "fleet-agent", the name, then "--flag value" pairs.
	Words() []string
	define(fs *flag.FlagSet)
	// rest takes the words after the flags (only a step has any).
	rest(args []string, dashed bool) error
	check() error
}

// Facts prints the host's facts; it changes nothing.
type Facts struct {
	// Config is the host's mcpctl.json.
	Config string
}

// Upload keeps stdin as <FleetDir>/blobs/sha256-<SHA256> once its digest
// is SHA256.
type Upload struct {
	FleetDir string
	// SHA256 is the upload's digest, 64 lowercase hex digits.
	SHA256 string
}

// Start starts Step detached, as the transient unit of step ID (nothing
// when it exists).
type Start struct {
	FleetDir, ID string
	Step         Step
}

// Exec runs Step and records its outcome: what a step's unit runs.
type Exec struct {
	FleetDir, ID string
	Step         Step
}

// Wait prints step ID's outcome once it has one, or state running after
// Timeout.
type Wait struct {
	FleetDir, ID string
	Timeout      time.Duration
}

// Gate is a restricted key's forced command: it runs SSH_ORIGINAL_COMMAND
// only when it is a fleet-agent command of FleetDir (and, when set,
// Config).
type Gate struct {
	FleetDir string
	// Config, when set, is the only mcpctl.json the key's commands may
	// name.
	Config string
}

// DefaultWait is how long wait blocks when --timeout is not given.
const DefaultWait = 20 * time.Second

func (*Facts) Name() string  { return "facts" }
func (*Upload) Name() string { return "upload" }
func (*Start) Name() string  { return "start" }
func (*Exec) Name() string   { return "exec" }
func (*Wait) Name() string   { return "wait" }
func (*Gate) Name() string   { return "gate" }

func (c *Facts) Words() []string { return []string{"fleet-agent", "facts", "--config", c.Config} }
func (c *Upload) Words() []string {
	return []string{"fleet-agent", "upload", "--fleet-dir", c.FleetDir, "--sha256", c.SHA256}
}
func (c *Start) Words() []string {
	return append([]string{"fleet-agent", "start", "--fleet-dir", c.FleetDir, "--id", c.ID, "--"}, c.Step.Argv()...)
}
func (c *Exec) Words() []string {
	return append([]string{"fleet-agent", "exec", "--fleet-dir", c.FleetDir, "--id", c.ID, "--"}, c.Step.Argv()...)
}
func (c *Wait) Words() []string {
	return []string{"fleet-agent", "wait", "--fleet-dir", c.FleetDir, "--id", c.ID, "--timeout", c.Timeout.String()}
}
func (c *Gate) Words() []string {
	w := []string{"fleet-agent", "gate", "--fleet-dir", c.FleetDir}
	if c.Config != "" {
		w = append(w, "--config", c.Config)
	}
	return w
}

func (c *Facts) define(fs *flag.FlagSet) {
	fs.Var(&once{p: &c.Config}, "config", "the host's mcpctl.json `FILE`")
}
func (c *Upload) define(fs *flag.FlagSet) {
	fleetDirFlag(fs, &c.FleetDir)
	fs.Var(&once{p: &c.SHA256}, "sha256", "`HEX` digest the upload must have")
}
func (c *Start) define(fs *flag.FlagSet) { fleetDirFlag(fs, &c.FleetDir); idFlag(fs, &c.ID) }
func (c *Exec) define(fs *flag.FlagSet)  { fleetDirFlag(fs, &c.FleetDir); idFlag(fs, &c.ID) }
func (c *Wait) define(fs *flag.FlagSet) {
	fleetDirFlag(fs, &c.FleetDir)
	idFlag(fs, &c.ID)
	c.Timeout = DefaultWait
	fs.Var(&onceDuration{p: &c.Timeout}, "timeout", "wait at most `D`")
}
func (c *Gate) define(fs *flag.FlagSet) {
	fleetDirFlag(fs, &c.FleetDir)
	fs.Var(&once{p: &c.Config}, "config", "when set, the only mcpctl.json `FILE` the key's commands may name")
}

func fleetDirFlag(fs *flag.FlagSet, p *string) {
	fs.Var(&once{p: p}, "fleet-dir", "the fleet's `DIR` on this host (uploads, step outcomes)")
}
func idFlag(fs *flag.FlagSet, p *string) { fs.Var(&once{p: p}, "id", "step `ID`") }

func noRest(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q: it takes flags only", args[0])
	}
	return nil
}

func (*Facts) rest(a []string, _ bool) error  { return noRest(a) }
func (*Upload) rest(a []string, _ bool) error { return noRest(a) }
func (*Wait) rest(a []string, _ bool) error   { return noRest(a) }
func (*Gate) rest(a []string, _ bool) error   { return noRest(a) }
func (c *Start) rest(a []string, dashed bool) error {
	s, err := stepAfterDash(a, dashed)
	c.Step = s
	return err
}
func (c *Exec) rest(a []string, dashed bool) error {
	s, err := stepAfterDash(a, dashed)
	c.Step = s
	return err
}

func stepAfterDash(args []string, dashed bool) (Step, error) {
	if !dashed {
		if len(args) == 0 {
			return Step{}, usagef("no step: want -- and the mcpctl arguments of one of %s", stepList())
		}
		return Step{}, usagef("%q: the step's mcpctl arguments come after --", args[0])
	}
	return ParseStep(args)
}

// stepIDRE: a step id becomes a unit name and file names.
var stepIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,150}$`)

var hexDigestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkFleetDir(d string) error {
	if d == "" {
		return usagef("--fleet-dir is required")
	}
	if err := fleet.CheckRemotePath(d); err != nil {
		return usagef("--fleet-dir %q: %v", d, err)
	}
	return nil
}

func checkID(id string) error {
	if !stepIDRE.MatchString(id) {
		return usagef("--id %q: want 1-151 of a-z 0-9 _ -, starting with a letter or digit", id)
	}
	return nil
}

func (c *Facts) check() error {
	if c.Config == "" {
		return usagef("--config is required")
	}
	return nil
}

func (c *Upload) check() error {
	if err := checkFleetDir(c.FleetDir); err != nil {
		return err
	}
	if !hexDigestRE.MatchString(c.SHA256) {
		return usagef("--sha256 %q: want 64 lowercase hex digits", c.SHA256)
	}
	return nil
}

func (c *Start) check() error { return checkStep(c.FleetDir, c.ID) }
func (c *Exec) check() error  { return checkStep(c.FleetDir, c.ID) }

func checkStep(fleetDir, id string) error {
	if err := checkFleetDir(fleetDir); err != nil {
		return err
	}
	return checkID(id)
}

func (c *Wait) check() error {
	if err := checkStep(c.FleetDir, c.ID); err != nil {
		return err
	}
	if c.Timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", c.Timeout)
	}
	return nil
}

func (c *Gate) check() error {
	if err := checkFleetDir(c.FleetDir); err != nil {
		return err
	}
	if c.Config != "" {
		if err := fleet.CheckRemotePath(c.Config); err != nil {
			return usagef("--config %q: %v", c.Config, err)
		}
	}
	return nil
}

// New is the empty command named name.
func New(name string) (Command, error) {
	switch name {
	case "facts":
		return &Facts{}, nil
	case "upload":
		return &Upload{}, nil
	case "start":
		return &Start{}, nil
	case "exec":
		return &Exec{}, nil
	case "wait":
		return &Wait{}, nil
	case "gate":
		return &Gate{}, nil
	}
	return nil, usagef("fleet-agent %q: want facts, upload, start, exec, wait or gate", name)
}

// Parse decodes args (the subcommand, then its arguments) into its
// command, checked. A flag given twice, an unknown flag (no abbreviations)
// and a stray argument are errors.
func Parse(args []string) (Command, error) {
	if len(args) == 0 {
		return nil, usagef("fleet-agent: want a subcommand: facts, upload, start, exec, wait or gate")
	}
	c, err := New(args[0])
	if err != nil {
		return nil, err
	}
	if err := ParseInto(c, args[1:]); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseInto decodes args (after the subcommand) into c, checked; -h or
// --help is flag.ErrHelp.
func ParseInto(c Command, args []string) error {
	fs := flag.NewFlagSet("fleet-agent "+c.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			var known []string
			fs.VisitAll(func(f *flag.Flag) { known = append(known, "--"+f.Name) })
			return usagef("fleet-agent %s: unknown flag --%s: want %s", c.Name(), strings.TrimLeft(name, "-"), strings.Join(known, ", "))
		}
		return usagef("fleet-agent %s: %v", c.Name(), err)
	}
	rest := fs.Args()
	dashed := len(rest) < len(args) && args[len(args)-len(rest)-1] == "--"
	if err := c.rest(rest, dashed); err != nil {
		return fmt.Errorf("fleet-agent %s: %w", c.Name(), err)
	}
	if err := c.check(); err != nil {
		return fmt.Errorf("fleet-agent %s: %w", c.Name(), err)
	}
	return nil
}

// Usage is the flags of command name, one line each, for --help.
func Usage(name string) string {
	c, err := New(name)
	if err != nil {
		return ""
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c.define(fs)
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "--%s %s  %s\n", f.Name, arg, usage)
	})
	return b.String()
}

// Step is the mcpctl command line a fleet step runs on the host: mcpctl's
// global flags, then one of Steps and its own arguments.
type Step struct {
	// Config is --config, "" when not given.
	Config        string
	JSON, NoColor bool
	// Command is one of Steps.
	Command []string
	// Args are the command's flags and arguments; none names a config or
	// a fleet dir.
	Args []string
}

// Steps are the mcpctl commands a fleet step may run on a host.
var Steps = [][]string{{"canary", "start"}, {"canary", "stop"}, {"stress"}, {"cutover"}, {"rollback"}}

func stepList() string {
	var names []string
	for _, s := range Steps {
		names = append(names, strings.Join(s, " "))
	}
	return strings.Join(names, ", ")
}

// pinnedFlags are the flags no step may give after its command: mcpctl
// reads a global flag anywhere on its command line, and a step's config is
// its --config before the command, checked by the gate.
var pinnedFlags = []string{"config", "fleet-dir"}

// ParseStep decodes a step's mcpctl arguments. The global flags before the
// command are parsed as mcpctl parses them (--config once; --json,
// --no-color); no word after the command may name --config or --fleet-dir
// in any spelling.
func ParseStep(args []string) (Step, error) {
	var s Step
	fs := flag.NewFlagSet("step", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&once{p: &s.Config}, "config", "")
	fs.BoolVar(&s.JSON, "json", false, "")
	fs.BoolVar(&s.NoColor, "no-color", false, "")
	if err := fs.Parse(args); err != nil {
		return Step{}, usagef("step %q: %v (a step takes only --config, --json and --no-color before its command)", strings.Join(args, " "), err)
	}
	rest := fs.Args()
	for _, cmd := range Steps {
		if len(rest) >= len(cmd) && slices.Equal(rest[:len(cmd)], cmd) {
			s.Command, s.Args = slices.Clone(cmd), slices.Clone(rest[len(cmd):])
			break
		}
	}
	if s.Command == nil {
		return Step{}, usagef("step %q: fleet-agent runs only %s", strings.Join(rest, " "), stepList())
	}
	for _, w := range s.Args {
		if name := flagName(w); slices.Contains(pinnedFlags, name) {
			return Step{}, usagef("step word %q: --%s is not a step argument (a step's --config comes once, before its command)", w, name)
		}
	}
	if s.Config != "" && !filepath.IsAbs(s.Config) {
		return Step{}, usagef("step --config %q: want an absolute path", s.Config)
	}
	return s, nil
}

// flagName is the flag a word names however it is spelled ("---config=x"
// names config), "" when it is not a flag.
func flagName(w string) string {
	if len(w) < 2 || w[0] != '-' {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
	return name
}

// Argv is the step's mcpctl arguments, canonical.
func (s Step) Argv() []string {
	var a []string
	if s.Config != "" {
		a = append(a, "--config", s.Config)
	}
	if s.JSON {
		a = append(a, "--json")
	}
	if s.NoColor {
		a = append(a, "--no-color")
	}
	return append(append(a, s.Command...), s.Args...)
}

// once is a string flag that may be given once: a second value is an
// error, never a silent override.
type once struct {
	p   *string
	set bool
}

func (o *once) String() string {
	if o == nil || o.p == nil {
		return ""
	}
	return *o.p
}

func (o *once) Set(v string) error {
	if o.set {
		return errors.New("given more than once")
	}
	o.set, *o.p = true, v
	return nil
}

type onceDuration struct {
	p   *time.Duration
	set bool
}

func (o *onceDuration) String() string {
	if o == nil || o.p == nil {
		return ""
	}
	return o.p.String()
}

func (o *onceDuration) Set(v string) error {
	if o.set {
		return errors.New("given more than once")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want a duration such as 20s")
	}
	o.set, *o.p = true, d
	return nil
}

// wordRE: what a remote command word may hold. The remote sshd hands the
// command line to the user's shell, which splits and interprets it: a word
// of these characters is one word, taken literally, by every shell.
var wordRE = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// CheckWord refuses a remote command word a shell could split or
// interpret.
func CheckWord(w string) error {
	if !wordRE.MatchString(w) {
		return fmt.Errorf("remote argument %q: only letters, digits and _ . / : = @ %% + , - may reach the remote command line", w)
	}
	return nil
}

// BlobPath is where an upload with digest ("sha256:HEX" or HEX) lives in
// a fleet dir.
func BlobPath(fleetDir, digest string) string {
	return filepath.Join(fleetDir, "blobs", "sha256-"+strings.TrimPrefix(digest, "sha256:"))
}
