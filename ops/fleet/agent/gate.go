package agent

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// Check decides a restricted key's original command: one of the
// fleet-agent commands facts, upload, start or wait, run by self (this
// mcpctl) or by an upload of the key's fleet dir whose content has the
// digest its name says, every word a plain word, naming the key's fleet
// dir and (when pinned) its config only. It returns the argv to run:
// the program, then the command rebuilt from the values it parsed.
func (g *Gate) Check(self, original string) ([]string, error) {
	words := strings.Fields(original)
	if len(words) < 3 || words[1] != "fleet-agent" {
		return nil, fmt.Errorf("refused: %q is not a fleet-agent command", original)
	}
	for _, w := range words {
		if err := CheckWord(w); err != nil {
			return nil, fmt.Errorf("refused: %w", err)
		}
	}
	switch words[2] {
	case "facts", "upload", "start", "wait":
	default:
		return nil, fmt.Errorf("refused: fleet-agent %s is not allowed over a restricted key (facts, upload, start, wait are)", words[2])
	}
	cmd, err := Parse(words[2:])
	if err != nil {
		return nil, fmt.Errorf("refused: %w", err)
	}
	if err := g.pin(cmd); err != nil {
		return nil, fmt.Errorf("refused: %w", err)
	}
	if err := g.checkProgram(self, words[0]); err != nil {
		return nil, fmt.Errorf("refused: %w", err)
	}
	return append([]string{words[0]}, cmd.Words()...), nil
}

// pin holds cmd to the key's fleet dir and config; a step that names no
// config is given the key's.
func (g *Gate) pin(cmd Command) error {
	dir := func(d string) error {
		if d != g.FleetDir {
			return fmt.Errorf("--fleet-dir %s is not this key's %s", d, g.FleetDir)
		}
		return nil
	}
	config := func(what, c string) error {
		if g.Config != "" && c != g.Config {
			return fmt.Errorf("%s %s is not this key's %s", what, c, g.Config)
		}
		return nil
	}
	switch c := cmd.(type) {
	case *Facts:
		return config("--config", c.Config)
	case *Upload:
		return dir(c.FleetDir)
	case *Wait:
		return dir(c.FleetDir)
	case *Start:
		if err := dir(c.FleetDir); err != nil {
			return err
		}
		if c.Step.Config == "" {
			c.Step.Config = g.Config
		}
		return config("the step's --config", c.Step.Config)
	}
	return fmt.Errorf("fleet-agent %s is not allowed over a restricted key", cmd.Name())
}

// checkProgram accepts self, or an upload of the key's fleet dir whose
// content has the digest its name says.
func (g *Gate) checkProgram(self, prog string) error {
	if prog == self {
		return nil
	}
	dir, name := filepath.Split(prog)
	hexd, ok := strings.CutPrefix(name, "sha256-")
	if filepath.Clean(dir) != filepath.Join(g.FleetDir, "blobs") || !ok || !hexDigestRE.MatchString(hexd) {
		return fmt.Errorf("%s is neither this mcpctl nor an upload of %s", prog, g.FleetDir)
	}
	if d, err := buildinfo.FileDigest(prog); err != nil || d != "sha256:"+hexd {
		return fmt.Errorf("%s does not have the digest its name says", prog)
	}
	return nil
}
