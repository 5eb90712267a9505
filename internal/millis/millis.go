// Package millis holds the one duration type of mcpctl's JSON: a
// time.Duration in Go, a number of milliseconds in JSON, so that every
// duration a document carries is a number named ...Ms (the contract in
// ARCHITECTURE.md) and a struct needs no MarshalJSON of its own for it.
package millis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Duration is a time.Duration written in JSON as milliseconds to the
// microsecond: 1.5 for 1.5ms, truncated toward zero below the microsecond
// (1234567ns is 1.234). Name its field ...Ms.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does, so text output is unchanged.
func (d Duration) String() string { return time.Duration(d).String() }

// Ms is d in milliseconds, to the microsecond: the number MarshalJSON writes.
func (d Duration) Ms() float64 { return float64(time.Duration(d).Microseconds()) / 1000 }

// MarshalJSON writes d as a number of milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	// json.Marshal of the float64, so the bytes are encoding/json's float
	// format, as they were when each struct wrote its own ...Ms field.
	return json.Marshal(d.Ms())
}

// UnmarshalJSON reads a number of milliseconds (fractions too); null leaves
// d as it is, as for any JSON number.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("milliseconds: %.40s: want a number such as 1500 or 2.5", b)
	}
	// The float's product, converted as the hand-written readers did, so
	// documents read back as before.
	*d = Duration(f * float64(time.Millisecond))
	return nil
}
