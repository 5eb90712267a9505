package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/stress"
)

// stressProgress shows a stress run while it goes (a run is 20 s by
// default, a soak 10 minutes): on a terminal one line updated in place
// every second, otherwise a line every 5 s. It writes to stderr, never to
// the report on stdout, and nothing under --json.
type stressProgress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	total time.Duration
	began time.Time

	sent, ok, overloaded, other atomic.Int64

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func newStressProgress(w io.Writer, tty bool, total time.Duration) *stressProgress {
	every := 5 * time.Second
	if tty {
		every = time.Second
	}
	return &stressProgress{w: w, tty: tty, every: every, total: total, stop: make(chan struct{}), done: make(chan struct{})}
}

// add counts one result; OnResult calls it from the attack's loop.
func (p *stressProgress) add(r *vegeta.Result) { p.addOutcome(stress.OutcomeLabel(r)) }

// addOutcome counts one answered call by its outcome.
func (p *stressProgress) addOutcome(outcome string) {
	p.sent.Add(1)
	switch outcome {
	case "ok":
		p.ok.Add(1)
	case string(stress.OutcomeOverloaded):
		p.overloaded.Add(1)
	default:
		p.other.Add(1)
	}
}

// line is the progress so far. On a terminal it must stay within one
// 80-column row, or the carriage return would rewrite only its last part.
func (p *stressProgress) line() string {
	el := time.Since(p.began).Truncate(time.Second)
	at := fmt.Sprintf("%s/%s", el, p.total)
	if el > p.total {
		at = p.total.String() + " done, draining"
	}
	l := fmt.Sprintf("stress %s: %d answered, %d ok, %d overloaded, %d other",
		at, p.sent.Load(), p.ok.Load(), p.overloaded.Load(), p.other.Load())
	if r := []rune(l); len(r) > textWidth-1 {
		l = string(r[:textWidth-1])
	}
	return l
}

// start prints until finish.
func (p *stressProgress) start() {
	p.began = time.Now()
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				if p.tty {
					fmt.Fprint(p.w, "\r\x1b[K") // the report follows on a clean line
				}
				return
			case <-t.C:
				if p.tty {
					fmt.Fprint(p.w, "\r\x1b[K"+p.line())
				} else {
					fmt.Fprintln(p.w, p.line())
				}
			}
		}
	}()
}

// finish stops the line and clears it on a terminal.
func (p *stressProgress) finish() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}
