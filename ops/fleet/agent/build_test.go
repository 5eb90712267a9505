package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/deploy"
)

// buildFile writes a fake build in a temp dir and returns its path.
func buildFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mcp-backend")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckBuild(t *testing.T) {
	build := buildFile(t)
	tests := []struct {
		name, path, version string
		wantErr             string // a prefix of the usage error, "" for none
	}{
		{"a build and a version", build, "v2", ""},
		{"no such file", filepath.Join(filepath.Dir(build), "nope"), "v2", `--build "given": not a regular file (stat `},
		{"a directory", filepath.Dir(build), "v2", `--build "given": not a regular file (<nil>)`},
		{"no version", build, "", `--version "": version: must not be empty`},
		{"a version no release may have", build, "../v2", `--version "../v2": version "../v2": must be`},
		{"a version a shell would split", build, "v 2", `--version "v 2": `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := CheckBuild(tc.path, "given", tc.version)
			if tc.wantErr != "" {
				var de *deploy.Error
				if b != nil || !errors.As(err, &de) || de.Code != deploy.CodeUsage || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("CheckBuild = %+v, %v; want a usage error %q", b, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			digest, err := buildinfo.FileDigest(build)
			if err != nil {
				t.Fatal(err)
			}
			if *b != (Build{Path: build, Digest: digest, Version: "v2", Size: 18}) {
				t.Fatalf("CheckBuild = %+v", b)
			}
		})
	}
}
