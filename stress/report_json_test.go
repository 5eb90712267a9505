package stress

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
)

// TestDurationsRoundTrip: what a report's JSON writes as ...Ms reads back
// as the duration (the demo renders a report it decoded).
func TestDurationsRoundTrip(t *testing.T) {
	in := Report{Plan: Plan{Duration: millis.Duration(3 * time.Second)}, Thresholds: Thresholds{ControlP99: millis.Duration(1500 * time.Millisecond)}, ShellSleepMs: 500}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Report
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Plan.Duration.D() != 3*time.Second || out.Thresholds.ControlP99.D() != 1500*time.Millisecond {
		t.Fatalf("round trip: plan %s, controlP99 %s\n%s", out.Plan.Duration, out.Thresholds.ControlP99, b)
	}
}
