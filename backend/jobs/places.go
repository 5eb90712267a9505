package jobs

import (
	"time"

	"github.com/overdeck/mcp-backend/backend/caller"
)

// Places is the sharing of running jobs and job.wait places (share.go)
// for another kind of place a principal holds: pending approvals. One
// rule for all of them: max-min across principals, then across a
// principal's conversations, the last places kept for principals that
// hold none. Not safe for concurrent use: the caller serialises.
type Places struct{ pl *pool }

// NewPlaces shares capacity places; perPrincipal 0 means no bound of its
// own (the shares still hold); the keys are the config keys refusals name.
func NewPlaces(name, capKey, principalKey, convKey string, capacity, perPrincipal, perConv int) *Places {
	return &Places{pl: newPool(name, capKey, principalKey, convKey, capacity, perPrincipal, perConv)}
}

// Holder is one conversation of a principal holding places.
type Holder struct {
	Principal    caller.Principal
	Conversation string
}

// Admit says whether c may take one more place, given how many each
// holder has: "" when it may, else why not (naming the config key). A
// refusal counts as the caller's demand for a while, so the next free
// place goes to it rather than to whoever holds the most.
func (p *Places) Admit(held map[Holder]int, c caller.Caller, now time.Time) string {
	h := make(map[flow]int, len(held))
	for k, n := range held {
		h[flow{k.Principal.Key(), k.Conversation}] += n
	}
	return p.pl.admit(h, flowOf(c), now)
}
