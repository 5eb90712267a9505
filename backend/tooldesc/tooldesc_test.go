package tooldesc

import (
	"slices"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// The table agrees with the wire contract clients read (the names tools/list
// answers, the class a call is counted under), and each descriptor is whole.
func TestDescriptors(t *testing.T) {
	if got, want := Names(), mcpwire.ToolNames(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want the wire's %v", got, want)
	}
	for _, d := range All() {
		t.Run(d.Name, func(t *testing.T) {
			if d.Class != mcpwire.ClassOf(d.Name) {
				t.Errorf("class %q, the wire says %q", d.Class, mcpwire.ClassOf(d.Name))
			}
			if !slices.Contains([]string{ScopeRead, ScopeWrite, ScopeExec}, d.Scope) {
				t.Errorf("scope %q is not a default scope", d.Scope)
			}
			if d.Sandboxed != (d.Policy == TargetCommand) {
				t.Errorf("sandboxed %v but policy target %d: a command is judged as a command and runs sandboxed", d.Sandboxed, d.Policy)
			}
			if a, ok := Lookup(d.ApprovedAs); d.ApprovedAs != "" && (!ok || a.Policy != d.Policy || a.Scope != d.Scope) {
				t.Errorf("approved as %q: must be a tool judged and granted as this one", d.ApprovedAs)
			}
			if d.ReadOnly && (d.Audit.Content != "" || d.Audit.Command != "" || d.Audit.PID != "") {
				t.Errorf("read-only, yet its arguments change things: %+v", d.Audit)
			}
		})
	}
	if _, ok := Lookup("x.y"); ok || ClassOf("x.y") != mcpwire.ClassNormal {
		t.Error("an unknown tool is known, or not normal")
	}
}
