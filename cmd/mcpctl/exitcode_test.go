package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// TestUsageErrorsExit2 runs every command with bad argv: each exits 2 (the
// README's "usage or config error, found before anything changed"), never
// 3 (a completed rollback), and names the nearest valid name where there is
// one. Before, an unknown command or subcommand exited 3 and the hint named
// no command.
func TestUsageErrorsExit2(t *testing.T) {
	type tc struct {
		name string
		args []string
		code int
		want string
	}
	tests := []tc{
		{"unknown command", []string{"cutvoer"}, 2, `unknown command "cutvoer": did you mean "cutover"?`},
		{"unknown global flag", []string{"--bogus"}, 2, "bogus"},
		{"help", []string{"help"}, 0, "USAGE"},
		{"help of a command", []string{"help", "cutover"}, 0, "cutover"},
		{"version", []string{"version"}, 0, "mcpctl version"},
		{"--version", []string{"--version"}, 0, "go:"},
		{"unknown subcommand", []string{"snapshot", "lst"}, 2, `unknown subcommand "lst": did you mean "list"?`},
		{"flag typo", []string{"stress", "--rat", "5"}, 2, "unknown flag --rat: did you mean --rate?"},
		{"bad flag value", []string{"stress", "--rate", "abc"}, 2, `invalid value "abc"`},
		{"bad verify target", []string{"verify", "backnd"}, 2, "want backend, tunnels or all"},
		{"bad log level", []string{"--log-level", "loud", "version"}, 2, `--log-level "loud"`},
		{"log level after the command", []string{"version", "--log-level", "debug"}, 0, "mcpctl version"},
		{"negative lock wait", []string{"--lock-wait", "-1s", "snapshot", "create"}, 2, "--lock-wait -1s: must be 0 or more"},
		{"snapshot help names the socket unit", []string{"snapshot", "--help"}, 0, "its socket unit"},
		{"unit render help names the baked paths", []string{"unit", "render", "--help"}, 0, "this mcpctl's own path"},
	}
	cliargs.Walk(newApp(&deps{getenv: os.Getenv}).Commands, func(path string, c *cli.Command) {
		argv := strings.Fields(path)
		tests = append(tests, tc{path + " unknown flag", append(argv, "--bogus"), 2, "unknown flag --bogus"})
		switch {
		case c.ArgsUsage != "":
			tests = append(tests, tc{path + " too many arguments", append(argv, "a", "b", "c"), 2, ""})
		case len(c.Subcommands) > 0:
			tests = append(tests, tc{path + " unknown subcommand", append(argv, "bogus"), 2, `"bogus"`})
		default:
			// A missing required flag may be named first: still exit 2.
			tests = append(tests, tc{path + " stray argument", append(argv, "extra"), 2, ""})
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errb := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errb, tc.want) {
				t.Fatalf("mcpctl %s: exit %d, want %d and %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), code, tc.code, tc.want, out, errb)
			}
			if code == outcome.Usage && !strings.Contains(errb, "next: run `mcpctl ") {
				t.Fatalf("no next hint: %s", errb)
			}
		})
	}
}

// TestFlagsAnywhere: global and command flags after the command or its
// arguments mean what they mean before them.
func TestFlagsAnywhere(t *testing.T) {
	app := newApp(&deps{getenv: os.Getenv})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"verify", "backend", "--json"}, "verify --json backend"},
		{[]string{"snapshot", "show", "ID", "--json"}, "snapshot show --json ID"},
		{[]string{"snapshot", "show", "--no-color", "ID"}, "--no-color snapshot show ID"},
		{[]string{"snapshot", "list", "--config", "X"}, "--config X snapshot list"},
		{[]string{"snapshot", "list", "--config=X", "--json"}, "--config=X snapshot list --json"},
		{[]string{"rollback", "--snapshot", "status"}, "rollback --snapshot status"},
		{[]string{"stress", "--", "--json"}, "stress -- --json"},
	}
	for _, tc := range tests {
		got := strings.Join(cliargs.Reorder(app, append([]string{"mcpctl"}, tc.args...))[1:], " ")
		if got != tc.want {
			t.Errorf("%v: reordered to %q, want %q", tc.args, got, tc.want)
		}
	}
	// Through the real app: --config after the command is the config read.
	cfg := filepath.Join(t.TempDir(), "absent.json")
	code, _, errb := runCLI(t, "snapshot", "list", "--config", cfg)
	if code != 2 || !strings.Contains(errb, cfg) {
		t.Fatalf("snapshot list --config X: exit %d, %s", code, errb)
	}
	dir := t.TempDir()
	cfg = writeCtlConfig(t, dir)
	code, out, errb := runCLI(t, "snapshot", "list", "--config", cfg, "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("snapshot list --config X --json: exit %d, out %q, err %s", code, out, errb)
	}
}

// writeCtlConfig writes a minimal valid mcpctl.json whose state lives in dir.
func writeCtlConfig(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "mcpctl.json")
	body := `{"stateDir":"` + filepath.Join(dir, "state") + `","install":{"root":"` + filepath.Join(dir, "opt") + `"},"unitDir":"` + filepath.Join(dir, "units") + `"}`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var hintRE = regexp.MustCompile("`(mcpctl [^`]*)`")

// TestNextHintsAreCommands: every command line a hint names ("next: run
// `mcpctl ...`", and every `mcpctl ...` quoted in an error or help text of
// the CLI and the ops packages) parses as a command line of this app. Before,
// a failure of the app itself said "run `mcpctl ` again".
func TestNextHintsAreCommands(t *testing.T) {
	app := newApp(&deps{getenv: os.Getenv})
	check := func(where, text string) {
		t.Helper()
		for _, m := range hintRE.FindAllStringSubmatch(text, -1) {
			if strings.Contains(m[1], "\"") {
				continue // built by concatenation: checked through nextCommand below
			}
			line := strings.NewReplacer("%s", "X", "%d", "1", "%q", "X", "%v", "X", "...", "").Replace(m[1])
			if err := cliargs.Validate(app, line); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	paths := map[string]bool{"": false}
	cliargs.Walk(app.Commands, func(path string, c *cli.Command) { paths[path] = len(c.Subcommands) > 0 && len(c.Flags) == 0 })
	for p, group := range paths {
		msgs := []string{"config: bad", "boom"}
		if group {
			msgs = msgs[1:] // a group reads no config
		}
		for _, code := range []int{outcome.Failed, outcome.Usage, outcome.RolledBack, outcome.RollbackFailed} {
			for _, msg := range msgs {
				next := nextCommand(code, p, msg)
				check("next for "+p, next)
				if p == "status" && strings.Contains(next, "`mcpctl status`") {
					t.Errorf("a failed status suggests status: %s", next)
				}
			}
		}
	}
	// Hints written into messages, across the CLI and what it runs.
	n := 0
	for _, dir := range []string{".", "../../ops"} {
		filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n") {
				// Only string literals: a Go raw string is not a hint.
				if strings.Contains(line, "\"") && hintRE.MatchString(line) {
					n++
					check(p, line)
				}
			}
			return nil
		})
	}
	if n < 5 {
		t.Fatalf("found only %d hints in the sources: the scan is broken", n)
	}
	// A bare rollback only prints its help: no hint may send an operator
	// there expecting a rollback.
	for _, dir := range []string{".", "../../ops"} {
		filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "`mcpctl rollback`") {
				t.Errorf("%s: a hint names a bare `mcpctl rollback`", p)
			}
			return nil
		})
	}
	// The negative control: a hint naming no command is caught.
	if cliargs.Validate(app, "mcpctl ") == nil || cliargs.Validate(app, "mcpctl rollback --snaphot ID") == nil || cliargs.Validate(app, "mcpctl snapshot") == nil {
		t.Fatal("Validate accepts command lines the app refuses")
	}
}

// TestHelpShowsOneDefault: no help line names two defaults (before,
// `snapshot prune --keep` showed "(default: install.keepReleases)
// (default: 0)").
func TestHelpShowsOneDefault(t *testing.T) {
	paths := []string{""}
	cliargs.Walk(newApp(&deps{getenv: os.Getenv}).Commands, func(path string, _ *cli.Command) { paths = append(paths, path) })
	for _, p := range paths {
		code, out, errb := runCLI(t, append(strings.Fields(p), "--help")...)
		if code != 0 {
			t.Fatalf("%s --help: exit %d %s", p, code, errb)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "default") > 1 || strings.Contains(line, "(default: false)") {
				t.Errorf("mcpctl %s --help: %q", p, line)
			}
		}
	}
}

// TestErrorsAsJSON: under --json (anywhere on the line) a failure is one
// JSON object on stderr with the message, the exit code and the next
// command, which parses as a command line (before: plain text).
func TestErrorsAsJSON(t *testing.T) {
	app := newApp(&deps{getenv: os.Getenv})
	for _, args := range [][]string{
		{"--json", "cutvoer"},
		{"stress", "--rat", "5", "--json"},
		{"snapshot", "show", "nope", "--json"},
		{"--config", filepath.Join(t.TempDir(), "absent.json"), "snapshot", "list", "--json"},
	} {
		code, out, errb := runCLI(t, args...)
		var e outcome.Failure
		if err := json.Unmarshal([]byte(errb), &e); err != nil || strings.Count(strings.TrimSpace(errb), "\n") != 0 {
			t.Fatalf("%v: stderr is not one JSON object: %v\n%s", args, err, errb)
		}
		if code != 2 || e.Error.ExitCode != code || e.Error.Message == "" || out != "" {
			t.Fatalf("%v: exit %d, error %+v, stdout %q", args, code, e, out)
		}
		if e.Error.Next != "" {
			if err := cliargs.Validate(app, e.Error.Next); err != nil {
				t.Fatalf("%v: next %v", args, err)
			}
		}
	}
	// Without --json the same failure is text.
	if _, _, errb := runCLI(t, "cutvoer"); !strings.HasPrefix(errb, "mcpctl: unknown command") {
		t.Fatalf("text error: %s", errb)
	}
}
