package admission

import "time"

// Clock is all the time the controller sees: the current instant, the
// queue wait's timer and the re-dispatch when remembered demand lapses.
// Injecting it (WithEventClock) lets a test run the dispatcher on a clock
// it moves by hand, timers included, so shares come out exactly.
type Clock interface {
	Now() time.Time
	// Since is the time elapsed since t. The controller reads the time as
	// Since a start of its own: on the real clock that is one read of the
	// monotonic clock, half what Now costs.
	Since(t time.Time) time.Duration
	// NewTimer returns a timer and the channel it fires on once, after d.
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
	// AfterFunc calls f in its own goroutine (or, on a test clock, when
	// the clock is moved past it) after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending NewTimer or AfterFunc.
type Timer interface {
	// Reset makes the timer fire d from now; it reports whether it was
	// still pending.
	Reset(d time.Duration) bool
	// Stop cancels the timer; it reports whether it was still pending.
	Stop() bool
}

// systemClock is the real clock; now may be replaced (WithClock) while
// the timers stay real.
type systemClock struct{ now func() time.Time }

func (c systemClock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

func (c systemClock) Since(t time.Time) time.Duration {
	if c.now == nil {
		return time.Since(t)
	}
	return c.now().Sub(t)
}

func (systemClock) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
