package audit

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Field is one name and value of a record.
type Field struct{ Name, Value string }

// Record is one audit record: an event, a human-readable message and its
// fields in the order they were added.
type Record struct {
	Time    time.Time
	Event   string
	Message string
	Fields  []Field

	written chan struct{} // closed once the sink took or refused it (EmitWritten)
	// lost, when set, is called if the record is lost (the buffer full,
	// or the sink refused it): a refusal record hands its counts back.
	lost func()
}

// Add appends a field; empty values are left out, so absent means unknown.
func (r *Record) Add(name, value string) {
	if value != "" {
		r.Fields = append(r.Fields, Field{name, value})
	}
}

// bound keeps every value of r within FieldBytes and its message within
// MessageBytes, copying the fields only when one is cut.
func bound(r *Record) {
	r.Message = Bound(r.Message, MessageBytes)
	for i, f := range r.Fields {
		if len(f.Value) > FieldBytes {
			fs := slices.Clone(r.Fields)
			for j := i; j < len(fs); j++ {
				fs[j].Value = Bound(fs[j].Value, FieldBytes)
			}
			r.Fields = fs
			return
		}
	}
}

// AddInt appends an integer field.
func (r *Record) AddInt(name string, v int64) { r.Add(name, strconv.FormatInt(v, 10)) }

// Get returns the value of the named field, "" when absent.
func (r *Record) Get(name string) string {
	for _, f := range r.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// Sink writes records somewhere durable. Write is called from one
// goroutine at a time.
type Sink interface {
	Write(Record) error
	Close() error
}

// Options configure a Log.
type Options struct {
	Sink Sink
	// Buffer is how many records may wait for the sink; past it a record is
	// dropped and counted. DefaultBuffer when 0.
	Buffer int
	// Identifier is SYSLOG_IDENTIFIER (the program).
	Identifier string
	// Window is the refusal aggregation window; time.Second when 0.
	Window time.Duration
}

// DefaultBuffer is the default number of records waiting for the sink:
// about two seconds of the backend's calls at full load.
const DefaultBuffer = 8192

// Log hands records to a sink from a goroutine of its own through a
// bounded buffer: Emit never blocks. A nil *Log discards everything.
type Log struct {
	sink  Sink
	ident string
	ch    chan Record

	dropped    atomic.Int64 // records lost since start (buffer full or sink failed)
	unreported atomic.Int64 // lost and not yet said on a record that succeeded
	written    atomic.Int64
	stalled    atomic.Bool // an EmitWritten wait ran out; no one waits until the buffer drains
	failing    atomic.Bool // the last record was lost; cleared by the next one the sink takes

	agg *aggregator

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// New starts a Log over o.Sink.
func New(o Options) *Log {
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Window <= 0 {
		o.Window = time.Second
	}
	l := &Log{sink: o.Sink, ident: o.Identifier, ch: make(chan Record, o.Buffer), stop: make(chan struct{}), done: make(chan struct{})}
	l.agg = newAggregator(l, o.Window)
	go l.run()
	return l
}

// Emit queues r for the sink, or drops and counts it when the buffer is
// full. It never blocks.
func (l *Log) Emit(r Record) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	bound(&r)
	select {
	case l.ch <- r:
	default:
		if r.lost != nil {
			r.lost()
		}
		l.lost(1)
	}
}

// EmitWritten queues r like Emit and, when nothing is waiting ahead of
// it, waits at most wait until the sink has it: a start record reaches
// the journal before the tool acts, so a command that kills the process
// still leaves it. Behind a backlog (a journal slower than the calls) it
// does not wait, since its record would wait for the backlog; a sink that
// took longer than wait is not waited for again until the buffer has
// drained. So a slow journal costs at most one call at most wait.
func (l *Log) EmitWritten(r Record, wait time.Duration) {
	if l == nil {
		return
	}
	if l.stalled.Load() || len(l.ch) > 0 {
		l.Emit(r)
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	bound(&r)
	done := make(chan struct{})
	r.written = done
	select {
	case l.ch <- r:
	default:
		l.lost(1)
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		l.stalled.Store(true)
	}
}

func (l *Log) lost(n int64) {
	l.dropped.Add(n)
	l.unreported.Add(n)
	l.failing.Store(true)
}

// Failing reports whether records cannot be written now: the last one was
// lost (the buffer full, or the sink refused it) and none has been written
// since. The next record the sink takes clears it.
func (l *Log) Failing() bool {
	if l == nil {
		return false
	}
	return l.failing.Load()
}

// Dropped is the number of records lost since the Log started.
func (l *Log) Dropped() int64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

// Written is the number of records the sink took.
func (l *Log) Written() int64 {
	if l == nil {
		return 0
	}
	return l.written.Load()
}

// Pending is the number of records waiting for the sink.
func (l *Log) Pending() int {
	if l == nil {
		return 0
	}
	return len(l.ch)
}

func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case r := <-l.ch:
			l.write(r)
		case <-l.stop:
			for {
				select {
				case r := <-l.ch:
					l.write(r)
				default:
					return
				}
			}
		}
	}
}

func (l *Log) write(r Record) {
	defer func() {
		if len(l.ch) == 0 {
			l.stalled.Store(false)
		}
		if r.written != nil {
			close(r.written)
		}
	}()
	n := l.unreported.Swap(0)
	if n > 0 {
		r.AddInt(FieldLost, n)
	}
	if err := l.sink.Write(complete(l.ident, r)); err != nil {
		l.unreported.Add(n)
		if r.lost != nil {
			r.lost()
		}
		l.lost(1)
		return
	}
	l.written.Add(1)
	l.failing.Store(false)
}

// complete adds the fields every record carries.
func complete(ident string, r Record) Record {
	head := []Field{{FieldMessageID, MessageID(r.Event)}, {FieldEvent, r.Event}}
	if ident != "" {
		head = append(head, Field{FieldIdentifier, ident})
	}
	r.Fields = append(head, r.Fields...)
	return r
}

// Close flushes the refusal aggregates and the buffer into the sink,
// waiting at most wait for a sink that does not take them (a stopped
// journal), then closes the sink. Records emitted after Close are lost.
func (l *Log) Close(wait time.Duration) error {
	if l == nil {
		return nil
	}
	var err error
	l.stopOnce.Do(func() {
		l.agg.close()
		close(l.stop)
		select {
		case <-l.done:
			err = l.sink.Close()
		case <-time.After(wait):
			// The writer is stuck in the sink; leave it, the process ends.
		}
	})
	return err
}
