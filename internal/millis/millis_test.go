package millis

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMarshal(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"zero", 0, "0"},
		{"whole milliseconds", 1500 * time.Millisecond, "1500"},
		{"to the microsecond", 1234567 * time.Nanosecond, "1.234"},
		{"below a microsecond is dropped", 999 * time.Nanosecond, "0"},
		{"truncated, not rounded", 2999999 * time.Nanosecond, "2.999"},
		{"negative", -1500 * time.Microsecond, "-1.5"},
		{"negative truncates toward zero", -1234567 * time.Nanosecond, "-1.234"},
		{"large", 10 * time.Hour, "36000000"},
		{"beyond 1e21 ns uses encoding/json's float form", time.Duration(1<<63 - 1), "9223372036854.775"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(Duration(tc.d))
			if err != nil || string(b) != tc.want {
				t.Fatalf("Marshal(%v) = %s, %v; want %s", tc.d, b, err, tc.want)
			}
		})
	}
}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr string
	}{
		{"zero", "0", 0, ""},
		{"whole milliseconds", "1500", 1500 * time.Millisecond, ""},
		{"a fraction", "2.5", 2500 * time.Microsecond, ""},
		{"negative", "-1.5", -1500 * time.Microsecond, ""},
		{"an exponent", "1e3", time.Second, ""},
		{"below a nanosecond truncates", "0.0000004", 0, ""},
		{"null leaves the value", "null", 7, ""},
		{"a Go duration string", `"5s"`, 0, "want a number"},
		{"a quoted number", `"1500"`, 0, "want a number"},
		{"a bool", "true", 0, "want a number"},
		{"an object", `{"ms":1}`, 0, "want a number"},
		{"out of range", "1e400", 0, "want a number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Duration(7)
			err := json.Unmarshal([]byte(tc.in), &d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Unmarshal(%s) = %v, %v; want an error with %q", tc.in, d, err, tc.wantErr)
				}
				return
			}
			if err != nil || d.D() != tc.want {
				t.Fatalf("Unmarshal(%s) = %v, %v; want %v", tc.in, d, err, tc.want)
			}
		})
	}
}

// TestReadsAsTheHandWrittenReaders: a document reads back to what
// float64(ms) * time.Millisecond gives, even where that is a nanosecond
// short of the written value, so no document reads differently than before.
func TestReadsAsTheHandWrittenReaders(t *testing.T) {
	for _, ms := range []float64{0.001, 1.234, 2.999, 0.3, 1234567.891, -0.7} {
		b, _ := json.Marshal(ms)
		var d Duration
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if want := time.Duration(ms * float64(time.Millisecond)); d.D() != want {
			t.Errorf("%s ms read as %d ns, want %d", b, d, want)
		}
	}
}

// TestInAStruct: a field of the type is a ...Ms number where it stands, and
// reads back; String prints as time.Duration.
func TestInAStruct(t *testing.T) {
	type step struct {
		Name     string   `json:"name"`
		Duration Duration `json:"durationMs"`
	}
	in := step{Name: "swap", Duration: Duration(1500 * time.Microsecond)}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"name":"swap","durationMs":1.5}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var out step
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip = %+v, %v; want %+v", out, err, in)
	}
	if s := in.Duration.String(); s != "1.5ms" {
		t.Fatalf("String = %q, want 1.5ms", s)
	}
	err = json.Unmarshal([]byte(`{"name":"x","durationMs":"2s"}`), &out)
	if err == nil || !strings.Contains(err.Error(), "milliseconds") {
		t.Fatalf("a Go duration string: %v; want an error naming milliseconds", err)
	}
}
