package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shell is the path of a shell the test runs, skipping without it (failing
// under CI=true: scripts/ensure-deps.sh installs zsh).
func shell(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (scripts/ensure-deps.sh installs it)", name)
		}
		t.Skipf("%s not found; scripts/ensure-deps.sh installs it", name)
	}
	return p
}

// TestCompletion sources the generated scripts in real bash and zsh and
// completes command lines: commands, subcommands, a command's flags, and
// no command where a value flag's argument stands.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	for _, sh := range []string{"bash", "zsh"} {
		code, script, errb := runCLI(t, "completion", sh)
		if code != 0 {
			t.Fatalf("completion %s: exit %d %s", sh, code, errb)
		}
		file := filepath.Join(dir, "mcpctl."+sh)
		if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			line []string // the words, the last one being completed
			want []string
			not  []string
		}{
			{[]string{"mcpctl", "snap"}, []string{"snapshot"}, []string{"status"}},
			{[]string{"mcpctl", "snapshot", ""}, []string{"create", "list", "show", "prune"}, []string{"cutover"}},
			{[]string{"mcpctl", "snapshot", "prune", "--"}, []string{"--keep", "--all", "--dry-run", "--json"}, []string{"--build"}},
			{[]string{"mcpctl", "--config", "x.json", "rollback", "--"}, []string{"--snapshot", "--last", "--dry-run"}, nil},
			{[]string{"mcpctl", "--config", "unit", "stress", "--ra"}, []string{"--rate"}, []string{"--mcpctl"}},
		} {
			var prog string
			words := make([]string, len(tc.line))
			for i, w := range tc.line {
				words[i] = "'" + w + "'"
			}
			switch sh {
			case "bash":
				prog = "source " + file + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
					strconv.Itoa(len(tc.line)-1) + "; _mcpctl; printf '%s\\n' \"${COMPREPLY[@]}\""
			case "zsh":
				// Outside completion, words and CURRENT are plain
				// parameters and compadd is stood in for by a function.
				prog = "compdef() { :; }; compadd() { [[ $1 == -- ]] && shift; print -l -- \"$@\"; }; _files() { :; }; source " + file +
					"; words=(" + strings.Join(words, " ") + "); CURRENT=" + strconv.Itoa(len(tc.line)) + "; _mcpctl"
			}
			out, err := exec.Command(shell(t, sh), "-c", prog).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", sh, tc.line, err, out)
			}
			got := strings.Fields(string(out))
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("%s %v: %v lacks %s", sh, tc.line, got, w)
				}
			}
			for _, w := range tc.not {
				if slices.Contains(got, w) {
					t.Errorf("%s %v: %v offers %s", sh, tc.line, got, w)
				}
			}
		}
	}
	if code, _, errb := runCLI(t, "completion", "fish"); code != 2 || !strings.Contains(errb, "want bash or zsh") {
		t.Fatalf("completion fish: exit %d %s", code, errb)
	}
}

// TestManPage: the generated man page is roff naming every command.
func TestManPage(t *testing.T) {
	code, out, errb := runCLI(t, "man")
	if code != 0 || !strings.HasPrefix(out, ".nh\n.TH mcpctl 1") {
		t.Fatalf("man: exit %d %s\n%.200s", code, errb, out)
	}
	for _, c := range []string{"cutover", "rollback", "snapshot", "prune", "stress", "completion"} {
		if !strings.Contains(out, c) {
			t.Errorf("man page lacks %s", c)
		}
	}
}

// TestConfigPrintsEffective: mcpctl config prints the config with every
// default filled in, and what it prints loads back as the same config.
func TestConfigPrintsEffective(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "mcpctl.json")
	if err := os.WriteFile(conf, []byte(`{"install":{"keepReleases":3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errb := runCLI(t, "config", "--config", conf)
	if code != 0 || !strings.Contains(out, `"keepReleases": 3`) || !strings.Contains(out, `"socketBacklog": 512`) || !strings.Contains(out, `"deadline": "2m0s"`) && !strings.Contains(out, `"deadline": "120s"`) {
		t.Fatalf("config: exit %d %s\n%s", code, errb, out)
	}
	again := filepath.Join(dir, "again.json")
	if err := os.WriteFile(again, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out2, errb := runCLI(t, "config", "--config", again); code != 0 || out2 != out {
		t.Fatalf("the printed config does not load back the same: exit %d %s\n%s", code, errb, out2)
	}
}
