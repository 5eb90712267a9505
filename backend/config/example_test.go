package config

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestExampleConfig: the example config.json the README points at loads and
// validates, so the documentation cannot drift from what serve accepts.
func TestExampleConfig(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "testdata", "examples", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != Default().Concurrency || c.Limits != Default().Limits || c.Jobs != Default().Jobs {
		t.Fatalf("the example's limits differ from the defaults: %+v %+v %+v", c.Concurrency, c.Limits, c.Jobs)
	}
	if c.Auth.OAuth == nil || len(c.Auth.OAuth.Resources) != 2 {
		t.Fatalf("the example's OAuth section did not parse: %+v", c.Auth)
	}
	if !slices.Equal(c.Files.Roots, Default().Files.Roots) || !slices.Equal(c.Files.Deny, Default().Files.Deny) {
		t.Fatalf("the example's files policy differs from the defaults: %+v", c.Files)
	}
	if want, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "examples", "config.json")); c.Path != want {
		t.Fatalf("Load kept the path %q, want %q", c.Path, want)
	}
}
