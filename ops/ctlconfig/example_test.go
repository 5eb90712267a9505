package ctlconfig

import (
	"path/filepath"
	"testing"
)

// TestExampleConfig: the example mcpctl.json the README points at loads,
// validates and renders units, with both tunnels.
func TestExampleConfig(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "testdata", "examples", "mcpctl.json"), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tunnels) != 2 || c.Tunnels[0].Name != "Overdeck" || c.Tunnels[1].Name != "overdeck-vm" {
		t.Fatalf("tunnels: %+v", c.Tunnels)
	}
	if _, err := c.UnitSpec(); err != nil {
		t.Fatalf("the example does not make units: %v", err)
	}
}
