// Package hostlayout holds the names the backend and mcpctl agree on on a
// host without linking each other: the jobs' slice and unit prefix, and
// where mcpctl keeps its state by default. Constants only, so the backend
// names them without linking the unit renderer.
package hostlayout

const (
	// JobsSlice holds the backend's jobs, each a transient unit of its own
	// named JobUnitPrefix + the job's id + ".service".
	JobsSlice     = "mcp-jobs.slice"
	JobUnitPrefix = "mcp-job-"
)

const (
	// MCPCtlStateDir is mcpctl's state directory by default (mcpctl.json's
	// stateDir): releases, snapshots, the lock and the deploy's audit.
	MCPCtlStateDir = "/var/lib/mcpctl"
	// MCPCtlFleetDir is where the fleet's host side keeps what a rollout
	// uploads, by default (the inventory's fleetDir).
	MCPCtlFleetDir = "/var/lib/mcpctl-fleet"
)
