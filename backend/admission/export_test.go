package admission

import "time"

// WithClock sets the clock service is measured with; timers stay real.
// WithEventClock replaces the timers too.
func WithClock(now func() time.Time) Option {
	return func(c *Controller) { c.clock = systemClock{now: now} }
}

// Shed reports whether an operation of kind k for the anonymous flow would
// be refused at once; see ShedFlow.
func (c *Controller) Shed(k Kind) bool { return c.ShedFlow(k, Flow{}) != nil }
