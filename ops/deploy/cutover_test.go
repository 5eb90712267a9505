package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// writeScript writes an executable shell script into dir.
func writeScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckCandidateVersionIsWhatTheBuildPrints(t *testing.T) {
	dir := t.TempDir()
	v3 := writeScript(t, dir, "v3", "echo mcp-backend v3\n")
	dev := writeScript(t, dir, "dev", "echo 'mcp-backend version ../x'\n")
	tests := []struct {
		name, build, flag string
		want              string
		wantNameErr       bool // ErrVersionName: exit 2, nothing changed
		wantErr           string
	}{
		{name: "no --version", build: v3, want: "v3"},
		{name: "--version equal to the build's", build: v3, flag: "v3", want: "v3"},
		{name: "--version naming another version", build: v3, flag: "v4", wantNameErr: true, wantErr: "the build prints version v3; --version v4 would name it wrongly"},
		{name: "a build whose version cannot name a release", build: dev, wantErr: "cannot name a release"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, digest, err := checkCandidate(context.Background(), tc.build, tc.flag, "")
			if errors.Is(err, ErrVersionName) != tc.wantNameErr {
				t.Fatalf("err = %v, want ErrVersionName %v", err, tc.wantNameErr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || !strings.HasPrefix(digest, "sha256:") {
				t.Fatalf("= %q, %q, %v; want %q and a digest", got, digest, err, tc.want)
			}
		})
	}
}

func TestStableSelf(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	self := writeScript(t, dir, "go-build-1234-mcpctl", "echo old\n")
	got, err := stableSelf(self, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(stateDir, SelfPath) {
		t.Fatalf("path %s, want under the state dir", got)
	}
	// The copy survives the temporary build.
	if err := os.Remove(self); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(got)
	if err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("kept mcpctl: %v, mode %v; want an executable copy", err, fi)
	}
	// A newer mcpctl replaces it; running the kept one is a no-op copy.
	self = writeScript(t, dir, "mcpctl", "echo new\n")
	if _, err := stableSelf(self, stateDir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got); !strings.Contains(string(b), "new") {
		t.Fatalf("kept mcpctl not replaced: %q", b)
	}
	if again, err := stableSelf(got, stateDir); err != nil || again != got {
		t.Fatalf("running the kept copy: %s, %v", again, err)
	}
	if _, err := stableSelf("mcpctl", stateDir); err == nil {
		t.Fatal("a relative mcpctl path was accepted for the timer")
	}
}

// firedSystemd is a systemd whose rollback timer already fired when the
// cutover disarms it; it records whether the lock was released before the
// wait for the fired run.
type firedSystemd struct {
	Systemd
	disarmErr        error
	unlocked         *bool
	unlockedWhenWait bool
	waited           bool
}

func (f *firedSystemd) DisarmTransient(context.Context, string, string) error { return f.disarmErr }
func (f *firedSystemd) Gone(context.Context, ...string) (bool, error)         { return true, nil }
func (f *firedSystemd) WaitGone(context.Context, ...string) error {
	f.waited, f.unlockedWhenWait = true, *f.unlocked
	return nil
}

func TestConfirm(t *testing.T) {
	tests := []struct {
		name       string
		disarmErr  error
		wantFired  bool
		wantUnlock bool
	}{
		{name: "disarmed in time", disarmErr: nil},
		{name: "verified right at the deadline: the timer fired", disarmErr: unitstate.ErrAlreadyFired, wantFired: true, wantUnlock: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctlconfig.Default()
			cfg.StateDir = t.TempDir()
			nonce, err := state.NewNonce()
			if err != nil {
				t.Fatal(err)
			}
			if err := state.Dir(cfg.StateDir).WritePending(&state.Pending{SnapshotID: "s1", Nonce: nonce, Deadline: time.Now()}); err != nil {
				t.Fatal(err)
			}
			unlocked := false
			sd := &firedSystemd{disarmErr: tc.disarmErr, unlocked: &unlocked}
			fired, _, err := confirm(context.Background(), &Env{Config: cfg, Systemd: sd}, nonce, func() { unlocked = true })
			if err != nil || fired != tc.wantFired || unlocked != tc.wantUnlock {
				t.Fatalf("fired %v unlocked %v err %v; want fired %v unlocked %v", fired, unlocked, err, tc.wantFired, tc.wantUnlock)
			}
			if tc.wantFired && (!sd.waited || !sd.unlockedWhenWait) {
				t.Fatal("waited for the fired run while still holding the lock it waits for")
			}
			p, err := state.Dir(cfg.StateDir).ReadPending()
			if err != nil || p != nil {
				t.Fatalf("pending marker %+v, %v; want it cleared", p, err)
			}
			// What the fired run then decides: nothing to do.
			if plan := PlanRollback(RollbackFacts{SnapshotID: "s1", Nonce: nonce, Pending: p}); plan.Act {
				t.Fatalf("the fired rollback would act: %+v", plan)
			}
		})
	}
}

func TestConfirmRefusesWhenDisarmFails(t *testing.T) {
	cfg := ctlconfig.Default()
	cfg.StateDir = t.TempDir()
	unlocked := false
	sd := &firedSystemd{disarmErr: errors.New("bus gone"), unlocked: &unlocked}
	if _, _, err := confirm(context.Background(), &Env{Config: cfg, Systemd: sd}, "0123456789abcdef", func() { unlocked = true }); err == nil || unlocked {
		t.Fatalf("err %v unlocked %v; want an error with the lock kept", err, unlocked)
	}
}
