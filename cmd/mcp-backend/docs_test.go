package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/overdeck/mcp-backend/internal/cliargs"
)

// TestDocsNameRealCommands: every mcp-backend command line the README, ARCHITECTURE.md
// and docs/ quote (shell code blocks, inline code) names commands and flags
// mcp-backend has.
func TestDocsNameRealCommands(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../ARCHITECTURE.md", "../../contrib/ansible/ansible_collections/overdeck/mcp/README.md")
	n, errs := cliargs.CheckDocFiles(newApp(&deps{stdout: io.Discard, stderr: io.Discard}), files)
	for _, err := range errs {
		t.Error(err)
	}
	if n == 0 {
		t.Fatal("no mcp-backend command line found in the docs: is the scan broken?")
	}
	t.Logf("%d command lines checked", n)
}
