package stress

import (
	"fmt"
	"math"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Profile names a shape of offered load.
type Profile string

// The profiles.
const (
	// Overload offers a constant rate about ten times what the limits allow.
	Overload Profile = "overload"
	// Spike ramps linearly from half the capacity to ten times it.
	Spike Profile = "spike"
	// Soak offers a moderate rate (below capacity) for a long time: the
	// profile for memory growth and leaks.
	Soak Profile = "soak"
)

// Profiles lists the profiles.
var Profiles = []Profile{Overload, Spike, Soak}

// Known says whether p is one of Profiles.
func (p Profile) Known() bool {
	return slices.Contains(Profiles, p)
}

// MaxRate caps any offered rate: the stress must stay a bounded load on the
// machine it runs on.
const MaxRate = 2000.0

// Plan is the offered load of a run.
type Plan struct {
	Profile Profile `json:"profile"`
	// StartRate and EndRate are the offered rates (requests/s) at the start
	// and end; equal for constant profiles.
	StartRate float64 `json:"startRate"`
	EndRate   float64 `json:"endRate"`
	// CapacityRate is the total rate whose shell share exactly fills the
	// shell slots (maxShell / shell sleep).
	CapacityRate float64      `json:"capacityRate"`
	Pacer        vegeta.Pacer `json:"-"`
	// Duration is last: its ...Ms field has always closed the object.
	Duration millis.Duration `json:"durationMs"`
}

// MeanRate is the average offered rate.
func (p Plan) MeanRate() float64 { return (p.StartRate + p.EndRate) / 2 }

// Requests is about how many requests the plan offers.
func (p Plan) Requests() int { return int(math.Round(p.MeanRate() * p.Duration.D().Seconds())) }

// DefaultDuration is each profile's duration when none is given.
func DefaultDuration(p Profile) time.Duration {
	switch p {
	case Spike:
		return 30 * time.Second
	case Soak:
		return 10 * time.Minute
	}
	return 20 * time.Second
}

// PlanFor derives the offered load from the target's limits. rate (req/s)
// overrides the derived rate (the peak rate for spike); 0 derives it.
// duration 0 takes the profile's default.
func PlanFor(p Profile, l mcpwire.Limits, mix Mix, shellSleep, duration time.Duration, rate float64) (Plan, error) {
	if err := mix.Validate(); err != nil {
		return Plan{}, err
	}
	if shellSleep <= 0 {
		return Plan{}, fmt.Errorf("shell sleep %s: must be positive", shellSleep)
	}
	if rate < 0 || rate > MaxRate {
		return Plan{}, fmt.Errorf("rate %g: must be 0 (derive from the limits) up to %g requests/s", rate, MaxRate)
	}
	if duration < 0 {
		return Plan{}, fmt.Errorf("duration %s: must not be negative", duration)
	}
	if duration == 0 {
		duration = DefaultDuration(p)
	}
	capacity := 100.0 // without shell calls: an arbitrary but bounded base
	if share := mix.Share(mcpwire.ClassShell); share > 0 {
		capacity = float64(l.MaxShell) / shellSleep.Seconds() / share
	}
	pl := Plan{Profile: p, Duration: millis.Duration(duration), CapacityRate: capacity}
	switch p {
	case Overload:
		pl.StartRate = pick(rate, 10*capacity)
		pl.EndRate = pl.StartRate
	case Soak:
		pl.StartRate = pick(rate, 0.8*capacity)
		pl.EndRate = pl.StartRate
	case Spike:
		pl.EndRate = pick(rate, 10*capacity)
		pl.StartRate = min(0.5*capacity, pl.EndRate/2)
	default:
		return Plan{}, fmt.Errorf("profile %q: must be one of overload, spike, soak", p)
	}
	pl.StartRate = max(pl.StartRate, 1)
	pl.EndRate = max(pl.EndRate, 1)
	if pl.StartRate == pl.EndRate {
		pl.Pacer = constantPacer(pl.StartRate)
	} else {
		pl.Pacer = vegeta.LinearPacer{
			StartAt: constantPacer(pl.StartRate),
			Slope:   (pl.EndRate - pl.StartRate) / duration.Seconds(),
		}
	}
	return pl, nil
}

// pick returns the override when set, else the derived rate capped at MaxRate.
func pick(override, derived float64) float64 {
	if override > 0 {
		return override
	}
	return min(derived, MaxRate)
}

// constantPacer expresses a fractional rate with vegeta's integer Freq.
func constantPacer(rate float64) vegeta.ConstantPacer {
	return vegeta.ConstantPacer{Freq: int(math.Round(rate * 100)), Per: 100 * time.Second}
}
