package cliargs

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

type usageErr struct{ err error }

func (e *usageErr) Error() string { return e.err.Error() }
func (e *usageErr) Unwrap() error { return e.err }

func TestRequiredFlagsTyped(t *testing.T) {
	// Two commands share one required flag: both keep requiring it.
	newApp := func(out *bytes.Buffer) *cli.App {
		shared := &cli.StringFlag{Name: "config", Required: true}
		app := &cli.App{
			Name: "prog", Writer: out, ErrWriter: out,
			ExitErrHandler: func(*cli.Context, error) {},
			Commands: []*cli.Command{
				{Name: "a", Flags: []cli.Flag{shared, &cli.BoolFlag{Name: "sure", Required: true}}, Action: func(*cli.Context) error { return nil }},
				{Name: "b", Flags: []cli.Flag{shared}, Action: func(*cli.Context) error { return nil }},
			},
		}
		Strict(app, func(err error) error { return &usageErr{err} })
		return app
	}
	for _, tc := range []struct {
		name, msg string
		args      []string
		missing   []string
	}{
		{name: "both missing", args: []string{"a"}, missing: []string{"config", "sure"}, msg: `Required flags "config, sure" not set`},
		{name: "one missing", args: []string{"a", "--sure"}, missing: []string{"config"}, msg: `Required flag "config" not set`},
		{name: "shared flag, second command", args: []string{"b"}, missing: []string{"config"}, msg: `Required flag "config" not set`},
		{name: "all given", args: []string{"a", "--config", "c", "--sure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := newApp(&out).Run(append([]string{"prog"}, tc.args...))
			if tc.missing == nil {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var u *usageErr
			var m *MissingFlagsError
			if !errors.As(err, &u) || !errors.As(err, &m) {
				t.Fatalf("err = %#v, want a usage error wrapping *MissingFlagsError", err)
			}
			if !slices.Equal(m.Flags, tc.missing) || err.Error() != tc.msg {
				t.Errorf("missing %q (%q), want %q (%q)", m.Flags, err, tc.missing, tc.msg)
			}
			if out.Len() == 0 {
				t.Error("no help shown, as urfave/cli shows it")
			}
		})
	}
}
