package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/state"
)

func TestEntries(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 15, 0, 0, time.UTC)
	full := Info{ID: "s2", Manifest: &Manifest{ID: "s2", Created: at, Reason: "r", Version: "v2", Digest: "sha256:ab",
		Files: []File{{Size: 3}, {Size: 4}, {Exists: false}}}}
	broken := Info{ID: "20261202T141400Z-bad", Err: errors.New("manifest unreadable")}
	tests := []struct {
		name    string
		list    []Info
		pending string
		want    []ListEntry
	}{
		{"none", nil, "", []ListEntry{}},
		{"a manifest: its facts, the bytes summed", []Info{full}, "",
			[]ListEntry{{ID: "s2", Created: at, Reason: "r", Version: "v2", Digest: "sha256:ab", Files: 3, Bytes: 7}}},
		{"the pending one marked", []Info{full}, "s2",
			[]ListEntry{{ID: "s2", Created: at, Reason: "r", Version: "v2", Digest: "sha256:ab", Files: 3, Bytes: 7, Pending: true}}},
		{"broken: its error, the time from its id", []Info{broken}, "",
			[]ListEntry{{ID: broken.ID, Created: time.Date(2026, 12, 2, 14, 14, 0, 0, time.UTC), Error: "manifest unreadable"}}},
		{"pending names one not listed", []Info{full, broken}, "s0",
			[]ListEntry{{ID: "s2", Created: at, Reason: "r", Version: "v2", Digest: "sha256:ab", Files: 3, Bytes: 7},
				{ID: broken.ID, Created: time.Date(2026, 12, 2, 14, 14, 0, 0, time.UTC), Error: "manifest unreadable"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Entries(tc.list, tc.pending)
			if !slices.EqualFunc(got, tc.want, func(a, b ListEntry) bool { return a == b }) {
				t.Fatalf("Entries = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

// markPending writes a pending-cutover marker naming id.
func markPending(t testing.TB, h *host, id string) {
	t.Helper()
	nonce, err := state.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	p := &state.Pending{SnapshotID: id, Nonce: nonce, Deadline: time.Now().Add(time.Minute)}
	if err := state.Dir(h.stateDir).WritePending(p); err != nil {
		t.Fatal(err)
	}
}

func TestReadListing(t *testing.T) {
	h := newHost(t)
	ids := snapshots(t, h, 2)
	markPending(t, h, ids[0])
	ls, err := ReadListing(h.stateDir)
	if err != nil || ls.PendingError != nil {
		t.Fatalf("ReadListing = %+v, %v", ls, err)
	}
	if len(ls.Entries) != 2 || ls.Entries[0].ID != ids[1] || ls.Entries[0].Pending || !ls.Entries[1].Pending {
		t.Fatalf("entries = %+v, want %s then pending %s", ls.Entries, ids[1], ids[0])
	}
	// An unreadable marker is a warning beside the list, not a failure.
	write(t, filepath.Join(h.stateDir, state.PendingFile), "{", 0o644)
	ls, err = ReadListing(h.stateDir)
	if err != nil || len(ls.Entries) != 2 || ls.PendingError == nil ||
		!strings.HasPrefix(ls.PendingError.Error(), "pending-cutover marker unreadable: ") {
		t.Fatalf("with a corrupt marker: %+v, %v", ls, err)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(testing.TB, *Manifest)
		id      string // "" for the snapshot made
		wantErr error  // Check's
		wantOK  bool
	}{
		{"intact", nil, "", nil, true},
		{"a file changed", func(t testing.TB, m *Manifest) {
			write(t, filepath.Join(m.Dir, m.Files[0].Stored), "changed", 0o755)
		}, "", nil, false},
		{"not there", nil, "20200101T000000Z-aaaaaa", ErrNotFound, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			m, err := Create(context.Background(), h.spec("x"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.damage != nil {
				tc.damage(t, m)
			}
			id := tc.id
			if id == "" {
				id = m.ID
			}
			res, err := Check(h.stateDir, id)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || res != nil {
					t.Fatalf("Check = %+v, %v; want %v", res, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != tc.wantOK || res.Verified != tc.wantOK || (res.Err == nil) != tc.wantOK || (res.VerifyError == "") != tc.wantOK {
				t.Fatalf("Check = %+v, want ok %v", res, tc.wantOK)
			}
		})
	}
}

func TestPruneKeeping(t *testing.T) {
	tests := []struct {
		name    string
		keep    int
		dryRun  bool
		pending int                     // index into creation order, -1 for none
		damage  func(testing.TB, *host) // before the prune
		removed []int                   // indexes, newest first
		kept    []int                   // protected, by index
		wantErr string                  // a prefix; nil result then
	}{
		{"keep two, newest protected", 2, false, -1, nil, []int{1, 0}, []int{3}, ""},
		{"dry run removes nothing", 2, true, -1, nil, []int{1, 0}, []int{3}, ""},
		{"keep none: the protected stay", 0, false, 1, nil, []int{2, 0}, []int{1, 3}, ""},
		{"a corrupt marker refuses", 0, false, -1, func(t testing.TB, h *host) {
			write(t, filepath.Join(h.stateDir, state.PendingFile), "{", 0o644)
		}, nil, nil, "snapshot prune: refusing, since the snapshot a rollback may need is unknown: pending-cutover marker unreadable: "},
		{"an unknown current release refuses", 0, false, -1, func(t testing.TB, h *host) {
			if err := os.Remove(h.store.CurrentPath()); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("elsewhere", h.store.CurrentPath()); err != nil {
				t.Fatal(err)
			}
		}, nil, nil, "snapshot prune: refusing, since the current release is unknown: current -> "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			ids := snapshots(t, h, 4)
			if tc.pending >= 0 {
				markPending(t, h, ids[tc.pending])
			}
			if tc.damage != nil {
				tc.damage(t, h)
			}
			res, err := PruneKeeping(h.stateDir, h.store, tc.keep, tc.dryRun)
			if tc.wantErr != "" {
				if res != nil || err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("PruneKeeping = %+v, %v; want the refusal %q", res, err, tc.wantErr)
				}
				if left, _ := List(h.stateDir); len(left) != 4 {
					t.Fatalf("%d snapshots left after a refusal, want 4", len(left))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pick := func(idx []int) []string {
				out := []string{}
				for _, i := range idx {
					out = append(out, ids[i])
				}
				return out
			}
			kept := pick(tc.kept)
			slices.Sort(kept)
			if res.DryRun != tc.dryRun || res.Keep != tc.keep || !slices.Equal(res.Removed, pick(tc.removed)) || !slices.Equal(res.Protected, kept) {
				t.Fatalf("PruneKeeping = %+v; want removed %v, protected %v", res, pick(tc.removed), kept)
			}
			for _, id := range res.Protected {
				if res.Why[id] == "" {
					t.Errorf("protected %s without a reason: %v", id, res.Why)
				}
			}
			left, _ := List(h.stateDir)
			if want := 4 - len(tc.removed); tc.dryRun && len(left) != 4 || !tc.dryRun && len(left) != want {
				t.Fatalf("%d snapshots left (dry run %v)", len(left), tc.dryRun)
			}
		})
	}
}
