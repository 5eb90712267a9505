package jobs

import (
	"fmt"
	"time"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/caller"
)

// Running jobs and job.wait places are shared like fair share's slots:
// max-min across principals first, then across the conversations of a
// principal (admission.Waterfill over their demands). A place is never
// taken back, so the shares decide who may take the next one: a flow's
// demand is what it holds plus one for a start it was refused within
// demandMemory, so a principal that was turned away keeps its share and
// the places that free up go to it, not back to the one that holds the
// most. A principal holds at most perPrincipal places, a conversation at
// most perConversation, and the last reserve places are only for a
// principal that holds none (the operator included): minting
// conversations buys a principal nothing beyond its share.

// demandMemory is how long a refused flow's demand counts.
const demandMemory = 10 * time.Second

// maxRemembered bounds the refused flows remembered at once: beyond it a
// flood of new conversations is refused without being remembered.
const maxRemembered = 1024

// flow is a conversation of a principal.
type flow struct{ principal, conversation string }

func flowOf(c caller.Caller) flow { return flow{c.Principal.Key(), c.Conversation} }

// pool is one kind of place (running jobs, waiters) and its bounds.
type pool struct {
	name                  string // "running jobs", "job.wait calls"
	capKey, principalKey  string // config keys the refusals name
	conversationKey       string // "" when no conversation bound
	cap                   int
	perPrincipal, perConv int
	reserve               int
	refused               map[flow]time.Time // when a flow was last refused
}

func newPool(name, capKey, principalKey, convKey string, capacity, perPrincipal, perConv int) *pool {
	if perPrincipal <= 0 {
		perPrincipal = capacity
	}
	if perConv <= 0 {
		perConv = perPrincipal
	}
	return &pool{name: name, capKey: capKey, principalKey: principalKey, conversationKey: convKey,
		cap: capacity, perPrincipal: min(perPrincipal, capacity), perConv: min(perConv, capacity),
		reserve: reserveOf(capacity), refused: map[flow]time.Time{}}
}

// reserveOf is the places kept for principals that hold none: an eighth,
// at least one when there are two places or more.
func reserveOf(capacity int) int {
	if capacity < 2 {
		return 0
	}
	return max(1, capacity/8)
}

// admit says whether f may take one more place, given what every flow
// holds; "" when it may, else why not (naming the config key). A refusal
// is remembered as demand.
func (pl *pool) admit(held map[flow]int, f flow, now time.Time) string {
	why := pl.decide(held, f, now)
	if why != "" {
		if _, ok := pl.refused[f]; ok || len(pl.refused) < maxRemembered {
			pl.refused[f] = now
		}
	} else {
		delete(pl.refused, f)
	}
	return why
}

func (pl *pool) decide(held map[flow]int, f flow, now time.Time) string {
	for g, t := range pl.refused {
		if now.Sub(t) >= demandMemory {
			delete(pl.refused, g)
		}
	}
	total := 0
	byP := map[string]int{}
	for g, n := range held {
		total += n
		byP[g.principal] += n
	}
	hp, hc := byP[f.principal], held[f]
	switch {
	case total >= pl.cap:
		return fmt.Sprintf("%d %s, the most this backend allows at once (%s)", total, pl.name, pl.capKey)
	case hp >= pl.perPrincipal:
		return fmt.Sprintf("your principal holds %d %s, the most one principal may (%s)", hp, pl.name, pl.principalKey)
	case pl.conversationKey != "" && hc >= pl.perConv:
		return fmt.Sprintf("this conversation holds %d %s, the most one conversation may (%s)", hc, pl.name, pl.conversationKey)
	}
	if hp > 0 {
		if total >= pl.cap-pl.reserve {
			return fmt.Sprintf("%d %s; the last %d places are kept for principals that hold none (%s)", total, pl.name, pl.reserve, pl.capKey)
		}
		// Principals' shares of the places, over their demands.
		demand := map[string]int{}
		for g, n := range held {
			demand[g.principal] += n
		}
		for g := range pl.refused {
			if g.principal != f.principal {
				demand[g.principal]++
			}
		}
		demand[f.principal] = hp + 1
		share := shareOf(pl.cap-pl.reserve, demand, f.principal, pl.perPrincipal)
		if float64(hp) >= share {
			return fmt.Sprintf("your principal holds %d %s, its fair share (%.1f) while other principals want places (%s)", hp, pl.name, share, pl.capKey)
		}
	}
	if hc > 0 {
		// The conversation's share of its principal's places.
		demand := map[string]int{}
		for g, n := range held {
			if g.principal == f.principal {
				demand[g.conversation] += n
			}
		}
		for g := range pl.refused {
			if g.principal == f.principal && g != f {
				demand[g.conversation]++
			}
		}
		demand[f.conversation] = hc + 1
		share := shareOf(min(pl.perPrincipal, pl.cap-pl.reserve), demand, f.conversation, pl.perConv)
		if float64(hc) >= share {
			return fmt.Sprintf("this conversation holds %d %s, its fair share (%.1f) of its principal's while its other conversations want places", hc, pl.name, share)
		}
	}
	return ""
}

// shareOf is who's max-min share of capacity among demands, each capped
// at limit.
func shareOf(capacity int, demand map[string]int, who string, limit int) float64 {
	keys := make([]string, 0, len(demand))
	ds := make([]int, 0, len(demand))
	at := 0
	for k, d := range demand {
		if k == who {
			at = len(keys)
		}
		keys = append(keys, k)
		ds = append(ds, min(d, limit))
	}
	return admission.Waterfill(float64(capacity), ds)[at]
}
