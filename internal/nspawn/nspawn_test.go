package nspawn

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnavailable(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/x", nil }
	missing := func(name string) func(string) (string, error) {
		return func(tool string) (string, error) {
			if tool == name {
				return "", exec.ErrNotFound
			}
			return "/usr/bin/" + tool, nil
		}
	}
	tests := []struct {
		name string
		euid int
		look func(string) (string, error)
		want string
	}{
		{"root with tools", 0, found, ""},
		{"not root", 1000, found, "needs root"},
		{"no nspawn", 0, missing("systemd-nspawn"), "systemd-nspawn not installed"},
		{"no nsenter", 0, missing("nsenter"), "nsenter not installed"},
	}
	for _, tc := range tests {
		got := unavailable(tc.euid, tc.look)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCIEnforced(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		want bool
	}{{"true", true}, {"", false}, {"false", false}, {"1", false}} {
		t.Setenv("CI", tc.ci)
		if got := CIEnforced(); got != tc.want {
			t.Errorf("CI=%q: CIEnforced() = %v, want %v", tc.ci, got, tc.want)
		}
	}
}

func TestBootRefusesHostDirectories(t *testing.T) {
	for _, bind := range []string{"/tmp", "/tmp/", "/etc", "relative/dir"} {
		m, err := Boot(context.Background(), Options{Binds: []string{bind}})
		if err == nil {
			m.Close()
			t.Fatalf("bind %q accepted", bind)
		}
		if !strings.Contains(err.Error(), "bind") {
			t.Errorf("bind %q: error %q does not name the bind", bind, err)
		}
	}
}

func TestBuildBinary(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p, err := BuildBinary(ctx, "./internal/nspawn/nspawntest/testdata/hello", "v9/x", dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != dir {
		t.Errorf("built %s, want it in %s", p, dir)
	}
	out, err := exec.Command(p).Output()
	if err != nil || strings.TrimSpace(string(out)) != "v9/x" {
		t.Fatalf("%s printed %q, %v; want the version stamp", p, out, err)
	}
	if _, err := BuildBinary(ctx, "./no/such/pkg", "v1", dir); err == nil || !strings.Contains(err.Error(), "./no/such/pkg") {
		t.Fatalf("missing package: %v, want an error naming it", err)
	}
}
