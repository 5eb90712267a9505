package fleet

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Facts are what a host's agent reports about it (`mcpctl fleet-agent
// facts`), read without changing anything.
type Facts struct {
	// MachineID tells hosts apart: two inventory entries reaching one
	// machine are a mis-wired address or port.
	MachineID string `json:"machineId"`
	// Agent is the version of the mcpctl that answered.
	Agent string `json:"agent"`
	// Version and Digest are production's current release and the sha256
	// of its binary ("" when nothing is installed).
	Version string `json:"version"`
	Digest  string `json:"digest"`
	// Pending is a cutover armed and not yet confirmed.
	Pending *PendingFact `json:"pending,omitempty"`
	// Locked names the mcpctl command holding the host's lock.
	Locked string `json:"locked,omitempty"`
	// DiskFree is the free space in bytes where releases are installed.
	DiskFree uint64 `json:"diskFree"`
	// Healthy: production answers /healthz.
	Healthy   bool   `json:"healthy"`
	HealthErr string `json:"healthError,omitempty"`
	// Backend is production's unit; its InvocationID changes with every
	// restart.
	Backend UnitFact   `json:"backend"`
	Tunnels []UnitFact `json:"tunnels"`
	// Time is the host's clock when it answered.
	Time time.Time `json:"time"`
}

// PendingFact is a host's pending cutover.
type PendingFact struct {
	SnapshotID string    `json:"snapshotId"`
	ToVersion  string    `json:"toVersion"`
	Deadline   time.Time `json:"deadline"`
}

// UnitFact is one unit of a host.
type UnitFact struct {
	Name         string `json:"name"`
	Unit         string `json:"unit"`
	ActiveState  string `json:"activeState"`
	InvocationID string `json:"invocationId"`
}

// On reports whether the host runs the build with digest d, verified: its
// production is on it, healthy, with no cutover pending.
func (f *Facts) On(digest string) bool {
	return f != nil && f.Digest == digest && f.Pending == nil && f.Healthy
}

// Wave is one batch of a rollout; Index counts from 1.
type Wave struct {
	Index int      `json:"index"`
	Hosts []string `json:"hosts"`
}

// Waves cuts hosts (in inventory order) into batches: each size of sizes
// in turn, the last one repeated until every host has a wave.
func Waves(hosts []string, sizes []WaveSize) []Wave {
	var out []Wave
	n := len(hosts)
	for i := 0; len(hosts) > 0; i++ {
		s := sizes[min(i, len(sizes)-1)].Of(n)
		s = min(max(s, 1), len(hosts))
		out = append(out, Wave{Index: len(out) + 1, Hosts: append([]string(nil), hosts[:s]...)})
		hosts = hosts[s:]
	}
	return out
}

// HostPlan is one host in a plan.
type HostPlan struct {
	Host    string `json:"host"`
	Wave    int    `json:"wave"`
	From    string `json:"from"`
	Digest  string `json:"digest"`
	Skip    bool   `json:"skip"`              // already on the build, verified
	Problem string `json:"problem,omitempty"` // why the rollout cannot start
}

// Plan is what a rollout would do; nothing starts while Problems is not
// empty.
type Plan struct {
	Digest   string     `json:"digest"`
	Version  string     `json:"version"`
	Waves    []Wave     `json:"waves"`
	Hosts    []HostPlan `json:"hosts"`
	Problems []string   `json:"problems,omitempty"`
}

// Observed is one host's facts or the error reading them.
type Observed struct {
	Facts *Facts
	Err   error
}

// PlanRollout decides the waves of a rollout of the build (digest, size in
// bytes) from every host's facts. Any host that cannot be read (unreachable,
// unknown or changed host key), has a cutover pending, is locked, lacks
// space, or is the same machine as another entry is a problem: the rollout
// starts nowhere until it is fixed.
func PlanRollout(inv *Inventory, obs map[string]Observed, digest, version string, buildSize int64) *Plan {
	p := &Plan{Digest: digest, Version: version}
	names := make([]string, len(inv.Hosts))
	for i, h := range inv.Hosts {
		names[i] = h.Name
	}
	p.Waves = Waves(names, inv.Rollout.Waves)
	waveOf := map[string]int{}
	for _, w := range p.Waves {
		for _, h := range w.Hosts {
			waveOf[h] = w.Index
		}
	}
	machines := map[string]string{}
	for _, name := range names {
		hp := HostPlan{Host: name, Wave: waveOf[name]}
		o := obs[name]
		switch f := o.Facts; {
		case o.Err != nil:
			hp.Problem = o.Err.Error()
		case f == nil:
			hp.Problem = "no facts"
		default:
			hp.From, hp.Digest = f.Version, f.Digest
			switch {
			case f.MachineID == "":
				hp.Problem = "the host reports no machine-id"
			case machines[f.MachineID] != "":
				hp.Problem = fmt.Sprintf("same machine (machine-id %s) as host %s: a mis-wired address or port", short(f.MachineID), machines[f.MachineID])
			case f.Pending != nil:
				hp.Problem = fmt.Sprintf("a cutover to %s is pending (snapshot %s, deadline %s): let it finish or roll back first", f.Pending.ToVersion, f.Pending.SnapshotID, f.Pending.Deadline.Format(time.RFC3339))
			case f.Locked != "":
				hp.Problem = "locked by " + f.Locked
			case f.On(digest):
				hp.Skip = true
			case f.Version == "":
				hp.Problem = "no production installed (run mcpctl install there first)"
			case !f.Healthy:
				hp.Problem = "production is not healthy: " + f.HealthErr
			case uint64(buildSize)*3 > f.DiskFree:
				hp.Problem = fmt.Sprintf("%d bytes free where releases go; want at least %d (three copies of the build)", f.DiskFree, buildSize*3)
			}
			if f.MachineID != "" && machines[f.MachineID] == "" {
				machines[f.MachineID] = name
			}
		}
		if hp.Problem != "" {
			p.Problems = append(p.Problems, name+": "+hp.Problem)
		}
		p.Hosts = append(p.Hosts, hp)
	}
	return p
}

func short(s string) string {
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Outcome is how one host's part of a rollout ended.
type Outcome string

// Host outcomes. Only Verified counts as success.
const (
	// Verified: the host runs the build, verified by its own cutover.
	Verified Outcome = "verified"
	// Skipped: the host already ran the build, verified.
	Skipped Outcome = "skipped"
	// Refused: the host refused before its production changed (canary,
	// stress or preflight failed); it runs what it ran.
	Refused Outcome = "refused"
	// RolledBack: the cutover failed verification and the host rolled
	// itself back.
	RolledBack Outcome = "rolled-back"
	// Unreachable: the host could not be reached or the step's outcome not
	// read; its own armed rollback decides what it ends on.
	Unreachable Outcome = "unreachable"
	// HumanNeeded: the host's rollback failed (its mcpctl exited 4).
	HumanNeeded Outcome = "human-needed"
	// Reverted: verified earlier in the run, then rolled back by the fleet.
	Reverted Outcome = "reverted"
)

// OK reports whether o is no failure.
func (o Outcome) OK() bool { return o == Verified || o == Skipped }

// Decision is what the rollout does after a wave.
type Decision string

// Decisions after a wave.
const (
	Continue  Decision = "continue"
	RevertRun Decision = "revert"
	HaltRun   Decision = "halt"
)

// DecideWave: a wave whose failures (any outcome but verified or skipped;
// an unreachable host counts; a host not started does not) stay within
// maxFailures lets the next wave start; beyond it, the policy decides.
func DecideWave(r Rollout, outcomes map[string]Outcome) (Decision, int) {
	failed := 0
	for _, o := range outcomes {
		// "" is a host not started: the wave stopped before it.
		if o != "" && !o.OK() {
			failed++
		}
	}
	if failed <= r.MaxFailures {
		return Continue, failed
	}
	if r.OnFailure == Halt {
		return HaltRun, failed
	}
	return RevertRun, failed
}

// RevertTarget is a host the fleet rolls back, to the snapshot this run's
// cutover took there.
type RevertTarget struct {
	Host     string `json:"host"`
	Wave     int    `json:"wave"`
	Snapshot string `json:"snapshot"`
}

// RevertOrder lists the hosts a run cut over (verified, not yet reverted),
// newest wave first, by name within a wave.
func RevertOrder(rs *RunState) []RevertTarget {
	var out []RevertTarget
	for name, h := range rs.Hosts {
		if h.Outcome == Verified && h.Snapshot != "" {
			out = append(out, RevertTarget{Host: name, Wave: h.Wave, Snapshot: h.Snapshot})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Wave != out[j].Wave {
			return out[i].Wave > out[j].Wave
		}
		return out[i].Host < out[j].Host
	})
	return out
}
