package cliargs

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp() *cli.App {
	return &cli.App{
		Name:  "prog",
		Flags: []cli.Flag{&cli.StringFlag{Name: "config"}, &cli.BoolFlag{Name: "json"}},
		Commands: []*cli.Command{
			{Name: "show", ArgsUsage: "ID", Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}, &cli.IntFlag{Name: "keep"}}, Action: func(*cli.Context) error { return nil }},
			{Name: "group", Subcommands: []*cli.Command{{Name: "leaf", Action: func(*cli.Context) error { return nil }}}},
			{Name: "raw", ArgsUsage: "ARGS", SkipFlagParsing: true, Action: func(*cli.Context) error { return nil }},
		},
	}
}

func TestReorder(t *testing.T) {
	app := testApp()
	for _, tc := range []struct{ in, want string }{
		{"show ID --json", "show --json ID"},
		{"show ID --config c --keep 3", "--config c show --keep 3 ID"},
		{"show --keep=3 ID", "show --keep=3 ID"},
		{"group leaf --config c", "--config c group leaf"},
		{"show ID --bogus", "show --bogus ID"},
		{"show -- --json", "show -- --json"},
		{"--config show show ID", "--config show show ID"},
		{"raw x --config c --json", "raw x --config c --json"},
		{"raw --config c", "raw --config c"},
		{"--json raw -config=c -- x", "--json raw -config=c -- x"},
	} {
		got := strings.Join(Reorder(app, append([]string{"prog"}, strings.Fields(tc.in)...))[1:], " ")
		if got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"cutover", "canary", "snapshot", "status", "stress"}
	for in, want := range map[string]string{"cutvoer": "cutover", "snap": "snapshot", "stauts": "status", "strss": "stress", "zzz": "", "": ""} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	app := testApp()
	for line, ok := range map[string]bool{
		"prog show ID":           true,
		"prog --config F show X": true,
		"prog group leaf":        true,
		"prog group --help":      true,
		"prog":                   false, // names nothing
		"prog group":             false, // a group without flags only prints help
		"prog show --keep":       false, // value missing
		"prog show --nope ID":    false,
		"prog leaf":              false,
		"prog group leaf extra":  false,
		"other show ID":          false,
	} {
		if err := Validate(app, line); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", line, err, ok)
		}
	}
}
