package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 14, 15, 0, 0, time.UTC)

// onlyFiles asserts dir holds exactly names: atomic writes leave no temps.
func onlyFiles(t testing.TB, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

func TestPendingMarker(t *testing.T) {
	dir := t.TempDir()
	if p, err := Dir(dir).ReadPending(); p != nil || err != nil {
		t.Fatalf("ReadPending on empty dir = %+v, %v; want nil, nil", p, err)
	}
	nonce, err := NewNonce()
	if err != nil || len(nonce) != 32 {
		t.Fatalf("NewNonce = %q, %v", nonce, err)
	}
	if other, _ := NewNonce(); other == nonce {
		t.Fatal("two nonces are equal")
	}
	want := &Pending{
		SnapshotID: "20261202T141500Z-a1b2c3", Nonce: nonce, FromVersion: "v1", ToVersion: "v2",
		ArmedAt: t0, Deadline: t0.Add(120 * time.Second),
		TimerUnit: "mcpctl-rollback.timer", ServiceUnit: "mcpctl-rollback.service",
	}
	if err := Dir(dir).WritePending(want); err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, dir, PendingFile)
	got, err := Dir(dir).ReadPending()
	if err != nil {
		t.Fatal(err)
	}
	if *got != *want {
		t.Fatalf("ReadPending = %+v, want %+v", got, want)
	}
	if r := got.Remaining(t0.Add(20 * time.Second)); r != 100*time.Second {
		t.Fatalf("Remaining = %v", r)
	}

	tests := []struct {
		name    string
		nonce   string
		wantErr error
	}{
		{"matching", nonce, nil},
		{"stale", strings.Repeat("0", 32), ErrStaleNonce},
		{"empty never matches", "", ErrStaleNonce},
		{"prefix is not a match", nonce[:16], ErrStaleNonce},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Dir(dir).CheckNonce(tc.nonce)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("CheckNonce = %v, want %v", err, tc.wantErr)
			}
			if err == nil && p.SnapshotID != want.SnapshotID {
				t.Fatalf("CheckNonce returned %+v", p)
			}
			if got.Matches(tc.nonce) != (tc.wantErr == nil) {
				t.Fatalf("Matches(%q) disagrees with CheckNonce", tc.nonce)
			}
		})
	}

	// A stale nonce must not clear a newer cutover's marker.
	if err := Dir(dir).ClearPendingIf("ffffffffffffffffffffffffffffffff"); !errors.Is(err, ErrStaleNonce) {
		t.Fatalf("Dir(stale).ClearPendingIf() = %v", err)
	}
	if p, _ := Dir(dir).ReadPending(); p == nil {
		t.Fatal("a stale nonce cleared the marker")
	}
	if err := Dir(dir).ClearPendingIf(nonce); err != nil {
		t.Fatal(err)
	}
	if p, err := Dir(dir).ReadPending(); p != nil || err != nil {
		t.Fatalf("marker still there after clear: %+v, %v", p, err)
	}
	if err := Dir(dir).ClearPending(); err != nil {
		t.Fatalf("clearing an absent marker: %v", err)
	}
	if _, err := Dir(dir).CheckNonce(nonce); !errors.Is(err, ErrStaleNonce) {
		t.Fatalf("CheckNonce with nothing pending = %v", err)
	}
}

func TestPendingValidation(t *testing.T) {
	ok := Pending{SnapshotID: "s", Nonce: strings.Repeat("a", 32), Deadline: t0}
	tests := []struct {
		name   string
		mutate func(*Pending)
		field  string
	}{
		{"no snapshot", func(p *Pending) { p.SnapshotID = "" }, "snapshotId"},
		{"short nonce", func(p *Pending) { p.Nonce = "abc" }, "nonce"},
		{"no deadline", func(p *Pending) { p.Deadline = time.Time{} }, "deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.mutate(&p)
			dir := t.TempDir()
			err := Dir(dir).WritePending(&p)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("WritePending = %v, want an error naming %s", err, tc.field)
			}
			onlyFiles(t, dir)
		})
	}
}

func TestPendingCorruptIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, PendingFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Corrupt must not read as "nothing pending": that would skip a rollback.
	if p, err := Dir(dir).ReadPending(); err == nil {
		t.Fatalf("ReadPending of a corrupt marker = %+v, nil", p)
	}
}

func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

func TestPassingFor(t *testing.T) {
	a, b := digest('a'), digest('b')
	v := func(kind, d string, pass bool, min int) Verdict {
		return Verdict{Kind: kind, Digest: d, Pass: pass, Time: t0.Add(time.Duration(min) * time.Minute)}
	}
	tests := []struct {
		name               string
		records            []Verdict
		wantCanary, wantSt bool
	}{
		{"nothing recorded", nil, false, false},
		{"canary only", []Verdict{v(KindCanary, a, true, 1)}, true, false},
		{"both pass", []Verdict{v(KindCanary, a, true, 1), v(KindStress, a, true, 2)}, true, true},
		{"newer failure revokes", []Verdict{v(KindCanary, a, true, 1), v(KindStress, a, true, 2), v(KindStress, a, false, 3)}, true, false},
		{"newer pass after failure", []Verdict{v(KindCanary, a, false, 1), v(KindCanary, a, true, 2), v(KindStress, a, true, 3)}, true, true},
		{"newest by time, not by line", []Verdict{v(KindStress, a, false, 9), v(KindStress, a, true, 2), v(KindCanary, a, true, 1)}, true, false},
		{"another build's passes do not count", []Verdict{v(KindCanary, b, true, 1), v(KindStress, b, true, 2)}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, r := range tc.records {
				if err := Dir(dir).RecordVerdict(r); err != nil {
					t.Fatal(err)
				}
			}
			c, s, err := Dir(dir).PassingFor(a)
			if err != nil {
				t.Fatal(err)
			}
			if c != tc.wantCanary || s != tc.wantSt {
				t.Fatalf("PassingFor = canary %v stress %v, want %v %v", c, s, tc.wantCanary, tc.wantSt)
			}
		})
	}
}

func TestRecordVerdictValidation(t *testing.T) {
	tests := []struct {
		name  string
		v     Verdict
		field string
	}{
		{"bad kind", Verdict{Kind: "smoke", Digest: digest('a')}, "kind"},
		{"bare hex", Verdict{Kind: KindCanary, Digest: strings.Repeat("a", 64)}, "digest"},
		{"upper hex", Verdict{Kind: KindCanary, Digest: "sha256:" + strings.Repeat("A", 64)}, "digest"},
		{"empty digest", Verdict{Kind: KindStress}, "digest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Dir(dir).RecordVerdict(tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("RecordVerdict = %v, want an error naming %s", err, tc.field)
			}
			onlyFiles(t, dir)
		})
	}
	if _, _, err := Dir(t.TempDir()).PassingFor("nope"); err == nil {
		t.Fatal("PassingFor accepted a malformed digest")
	}
}

func TestVerdictTornLineSkipped(t *testing.T) {
	dir := t.TempDir()
	if err := Dir(dir).RecordVerdict(Verdict{Kind: KindCanary, Digest: digest('a'), Pass: true, Time: t0}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, VerdictsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"stress","digest":"sha256:aaaa`)
	f.Close()
	if err := Dir(dir).RecordVerdict(Verdict{Kind: KindStress, Digest: digest('a'), Pass: true, Time: t0}); err != nil {
		t.Fatal(err)
	}
	all, err := Dir(dir).Verdicts()
	if err != nil || len(all) != 2 {
		t.Fatalf("Verdicts = %d records, %v; want 2 (torn one skipped)", len(all), err)
	}
	if c, s, _ := Dir(dir).PassingFor(digest('a')); !c || !s {
		t.Fatalf("PassingFor = %v %v after a torn line", c, s)
	}
}

func TestAuditTail(t *testing.T) {
	tests := []struct {
		name  string
		total int
		n     int
		want  int
	}{
		{"none", 0, 5, 0},
		{"fewer than asked", 3, 10, 3},
		{"last few", 10, 4, 4},
		{"zero asked", 10, 0, 0},
		// About 200 bytes a line: several 64 KiB chunks.
		{"across chunks", 2000, 1500, 1500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range tc.total {
				e := Event{Time: t0.Add(time.Duration(i) * time.Second), Action: ActionCutover,
					FromVersion: "v1", ToVersion: "v2", Outcome: OutcomeOK, Reason: fmt.Sprintf("event %d", i),
					Details: map[string]string{"pad": strings.Repeat("x", 60)}}
				if err := Dir(dir).Audit(e); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Dir(dir).Tail(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("Tail returned %d events, want %d", len(got), tc.want)
			}
			for i, e := range got {
				if want := fmt.Sprintf("event %d", tc.total-tc.want+i); e.Reason != want || e.PID != os.Getpid() {
					t.Fatalf("event %d = %q (pid %d), want %q, oldest first", i, e.Reason, e.PID, want)
				}
			}
		})
	}
}

func TestAuditTornAndEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := Dir(dir).Audit(Event{}); err == nil {
		t.Fatal("an event without action was accepted")
	}
	if err := Dir(dir).Audit(Event{Action: ActionArmed, Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, AuditFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"action":"cut`)
	f.Close()
	if err := Dir(dir).Audit(Event{Action: ActionDisarmed, Reason: "second"}); err != nil {
		t.Fatal(err)
	}
	got, err := Dir(dir).Tail(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Reason != "first" || got[1].Reason != "second" || got[0].Time.IsZero() {
		t.Fatalf("Tail = %+v, want first and second around the torn line", got)
	}
}

func TestWatchdogState(t *testing.T) {
	dir := t.TempDir()
	w, err := Dir(dir).LoadWatchdog()
	if err != nil || len(w.Tunnels) != 0 {
		t.Fatalf("LoadWatchdog on empty dir = %+v, %v", w, err)
	}
	w.Tunnel("Overdeck").Fail(t0, "timeout")
	if n := w.Tunnel("Overdeck").Fail(t0.Add(time.Minute), "refused"); n != 2 {
		t.Fatalf("streak = %d, want 2", n)
	}
	w.Tunnel("overdeck-vm").OK(t0)
	if err := Dir(dir).SaveWatchdog(w); err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, dir, WatchdogFile)
	got, err := Dir(dir).LoadWatchdog()
	if err != nil {
		t.Fatal(err)
	}
	od := got.Tunnels["Overdeck"]
	if od == nil || od.ConsecutiveFailures != 2 || od.LastError != "refused" {
		t.Fatalf("Overdeck = %+v", od)
	}
	od.Restarted(t0.Add(2 * time.Minute))
	if od.ConsecutiveFailures != 0 || od.Restarts != 1 {
		t.Fatalf("after restart %+v", od)
	}
	if vm := got.Tunnels["overdeck-vm"]; vm == nil || vm.ConsecutiveFailures != 0 || !vm.LastOK.Equal(t0) {
		t.Fatalf("overdeck-vm = %+v", vm)
	}
	if err := os.WriteFile(filepath.Join(dir, WatchdogFile), []byte("nonsense"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(dir).LoadWatchdog(); err == nil {
		t.Fatal("a corrupt watchdog state loaded without error")
	}
}
