package view

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/deploy"
)

// TestDeployReports: an install that failed and could not be taken back
// asks for a human; a dry-run unit install says what it would do and that
// nothing changed; an applied one what it wrote and that systemd reloaded.
func TestDeployReports(t *testing.T) {
	p := NewPrinter(&bytes.Buffer{}, true)
	install := func(undoOK bool) string {
		var b bytes.Buffer
		Install(&b, p.St, &deploy.InstallReport{Version: "v1", Steps: []deploy.Step{{Name: "release", OK: true}, {Name: "units", Err: "boom"}},
			Undo: []deploy.Step{{Name: "remove release", OK: undoOK}}, UndoOK: undoOK}, errors.New("install failed"))
		return b.String()
	}
	units := func(dry bool) string {
		var b bytes.Buffer
		p.UnitInstall(&b, &deploy.UnitInstallReport{DryRun: dry, UnitDir: "/u", Enabled: []string{"a.socket"},
			Changed: []deploy.UnitChange{{Unit: "a.service", Action: "create", Diff: "+++ a.service\n+[Service]\n"}}})
		return b.String()
	}
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"install undone", install(true), []string{"install v1 FAIL", "FAIL units", "boom", "the host is as it was before install", "error: install failed"}},
		{"install half undone", install(false), []string{"HUMAN NEEDED:", "remove what the failed undo steps name"}},
		{"unit install dry", units(true), []string{"create a.service\n+++ a.service\n+[Service]\n", "dry run: would write 1 unit(s) to /u and daemon-reload", "nothing was changed"}},
		{"unit install", units(false), []string{"1 unit(s) written to /u, 0 unchanged; systemd reloaded", "enabled at boot: a.socket"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !strings.Contains(tc.out, w) {
					t.Errorf("lacks %q:\n%s", w, tc.out)
				}
			}
		})
	}
}
