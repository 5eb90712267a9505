package server

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/filepolicy"
)

// mcpctlStateDir is where mcpctl keeps its lock, snapshots, verdicts and
// audit by default (mcpctl.json stateDir); files.deny names another one.
const mcpctlStateDir = "/var/lib/mcpctl"

// mcpctlFleetDir is the fleet's directory on a host by default (the fleet
// inventory's fleetDir): its steps/<id>.json are how a host tells the
// controller a step ran, and blobs/ what it runs; files.deny names
// another one.
const mcpctlFleetDir = "/var/lib/mcpctl-fleet"

// filePolicy is what the file tools may touch: never the backend's own
// secrets (what it reads to authenticate and its state), and only what the
// config's files policy allows. getenv reads the directories systemd
// gives the unit (StateDirectory=, LoadCredential=); jobsDir is the jobs'
// state directory in use ("" when jobs are off), the temporary one of
// process mode included.
func filePolicy(cfg config.Config, getenv func(string) string, jobsDir string) *filepolicy.Policy {
	return filepolicy.New(fileOptions(cfg, getenv, jobsDir))
}

// fileOptions are filePolicy's options: the sandbox masks the same
// secrets in every command's mount namespace.
func fileOptions(cfg config.Config, getenv func(string) string, jobsDir string) filepolicy.Options {
	o := filepolicy.Options{Roots: cfg.Files.Roots, Deny: cfg.Files.Deny}
	if f := cfg.Auth.BearerTokenFile; f != "" {
		o.SecretFiles = append(o.SecretFiles, filepolicy.Secret{Path: f, Rule: "auth.bearerTokenFile"})
	}
	if f := cfg.Audit.File; f != "" {
		// Who did what: no caller may read or rewrite it.
		o.SecretFiles = append(o.SecretFiles, filepolicy.Secret{Path: f, Rule: "audit.file"})
		o.SecretPatterns = append(o.SecretPatterns, filepolicy.Secret{Path: f + ".*", Rule: "audit.file (rotated)"})
	}
	if cfg.Path != "" {
		o.SecretFiles = append(o.SecretFiles, filepolicy.Secret{Path: cfg.Path, Rule: "the config file"})
	}
	for _, env := range []string{"STATE_DIRECTORY", "CREDENTIALS_DIRECTORY"} {
		// systemd separates several directories with colons.
		for _, d := range strings.Split(getenv(env), ":") {
			if filepath.IsAbs(d) {
				o.SecretDirs = append(o.SecretDirs, filepolicy.Secret{Path: filepath.Clean(d), Rule: "$" + env})
			}
		}
	}
	o.SecretDirs = append(o.SecretDirs,
		filepolicy.Secret{Path: mcpctlStateDir, Rule: "the mcpctl state directory"},
		filepolicy.Secret{Path: mcpctlFleetDir, Rule: "the mcpctl fleet directory"})
	for _, d := range []string{cfg.Jobs.StateDir, jobsDir} {
		// Jobs' output and environments (job.output serves them to their
		// owner) and their records, which only supervisors write.
		if d != "" {
			o.SecretDirs = append(o.SecretDirs, filepolicy.Secret{Path: filepath.Clean(d), Rule: "jobs.stateDir"})
		}
	}
	if d := cfg.Policy.Approvals.Dir; d != "" {
		// A model that could write there could approve its own calls.
		o.SecretDirs = append(o.SecretDirs, filepolicy.Secret{Path: filepath.Clean(d), Rule: "policy.approvals.dir"})
	}
	// The backend's memory holds its token; no process's memory is a file
	// for these tools to read.
	for _, p := range []string{"/proc/*/mem", "/proc/*/task/*/mem", "/proc/kcore"} {
		o.SecretPatterns = append(o.SecretPatterns, filepolicy.Secret{Path: p, Rule: "process memory"})
	}
	return o
}

// osGetenv is the environment filePolicy reads in production.
var osGetenv = os.Getenv
