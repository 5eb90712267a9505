package cliargs

import (
	"strings"
	"testing"
)

func TestCheckDoc(t *testing.T) {
	app := testApp()
	app.Commands[0].ArgsUsage = "ID"
	for _, tc := range []struct {
		name, markdown string
		lines          int
		bad            string // part of the one error wanted; "" for none
	}{
		{"shell block", "```sh\nprog show --keep 3 ID\n```\n", 1, ""},
		{"dollar prompt and sudo", "```console\n$ sudo prog --config c show ID\n```\n", 1, ""},
		{"continued line", "```sh\nprog show \\\n  --keep 3 ID\n```\n", 1, ""},
		{"optional part", "```sh\nprog show [--keep 3] ID\n```\n", 1, ""},
		{"quoted value", "```sh\nprog show --keep '3 4' ID\n```\n", 1, ""},
		{"pipe", "```sh\nprog show ID | grep x\n```\n", 1, ""},
		{"unknown flag in a block", "```sh\nprog show --kep 3 ID\n```\n", 1, "flag --kep"},
		{"unknown command in a block", "```sh\nprog shw ID\n```\n", 1, `"shw"`},
		{"group alone in a block", "```sh\nprog group\n```\n", 1, "needs a subcommand"},
		{"not a shell block", "```\nprog ──► shw\n```\n", 0, ""},
		{"inline group", "run `prog group` first", 1, ""},
		{"inline flag without its value", "see `prog show --keep`", 1, ""},
		{"inline bare name", "`prog` does it", 1, ""},
		{"inline unknown flag", "see `prog show --bogus`", 1, "flag --bogus"},
		{"inline unknown subcommand", "see `prog group lef`", 1, `"lef"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := DocLines(tc.markdown, "prog")
			if len(lines) != tc.lines {
				t.Fatalf("%d lines %+v, want %d", len(lines), lines, tc.lines)
			}
			var errs []string
			for _, l := range lines {
				if err := CheckDoc(app, l); err != nil {
					errs = append(errs, err.Error())
				}
			}
			switch {
			case tc.bad == "" && len(errs) > 0:
				t.Errorf("errors %q, want none", errs)
			case tc.bad != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.bad)):
				t.Errorf("errors %q, want one naming %s", errs, tc.bad)
			}
		})
	}
}
