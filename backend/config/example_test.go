package config

import (
	"path/filepath"
	"testing"
)

// TestExampleConfig: the example config.json the README points at loads and
// validates, so the documentation cannot drift from what serve accepts.
func TestExampleConfig(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "testdata", "examples", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != Default().Concurrency || c.Limits != Default().Limits {
		t.Fatalf("the example's limits differ from the defaults: %+v %+v", c.Concurrency, c.Limits)
	}
	if c.Auth.OAuth == nil || len(c.Auth.OAuth.Resources) != 2 {
		t.Fatalf("the example's OAuth section did not parse: %+v", c.Auth)
	}
}
