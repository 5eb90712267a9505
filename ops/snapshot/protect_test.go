package snapshot

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// info is a listed snapshot of version v; v "" is one whose manifest could
// not be read.
func info(id, v string) Info {
	if v == "" {
		return Info{ID: id, Err: errors.New("manifest unreadable")}
	}
	return Info{ID: id, Manifest: &Manifest{ID: id, Version: v}}
}

func TestProtect(t *testing.T) {
	// Newest first, as List returns them.
	list := []Info{info("s5", "v3"), info("s4", "v2"), info("s3", "v2"), info("s2", ""), info("s1", "v1")}
	tests := []struct {
		name             string
		list             []Info
		pending, current string
		want             map[string]string // id -> a word of its reason
	}{
		{"no snapshots, nothing pending", nil, "", "v1", map[string]string{}},
		{"the newest alone", list, "", "", map[string]string{"s5": "rollback --last"}},
		{"the newest is the current release's", list, "", "v3", map[string]string{"s5": "current release v3"}},
		{"the current release's newest, not its older", list, "", "v2", map[string]string{"s5": "rollback --last", "s4": "current release v2"}},
		{"a current release without a snapshot", list, "", "v9", map[string]string{"s5": "rollback --last"}},
		{"an unreadable manifest is no release's", list, "", "v0", map[string]string{"s5": "rollback --last"}},
		{"pending, current and newest", list, "s1", "v2", map[string]string{"s1": "pending cutover", "s4": "current release v2", "s5": "rollback --last"}},
		{"pending names the newest: pending is the reason", list, "s5", "v3", map[string]string{"s5": "pending cutover"}},
		{"pending names a snapshot not listed", list, "s0", "", map[string]string{"s0": "pending cutover", "s5": "rollback --last"}},
		{"pending with no snapshots", nil, "s0", "", map[string]string{"s0": "pending cutover"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Protect(tc.list, tc.pending, tc.current)
			if !slices.IsSortedFunc(got, func(a, b Protected) int { return strings.Compare(a.ID, b.ID) }) {
				t.Errorf("not sorted by id: %+v", got)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Protect = %+v, want %v", got, tc.want)
			}
			for _, p := range got {
				if w, ok := tc.want[p.ID]; !ok || !strings.Contains(p.Why, w) {
					t.Errorf("%s protected because %q; want %q", p.ID, p.Why, tc.want[p.ID])
				}
			}
			if ids := ProtectedIDs(got); len(ids) != len(got) {
				t.Errorf("ProtectedIDs = %v", ids)
			}
		})
	}
}

// snapshots creates n snapshots of h, oldest first.
func snapshots(t testing.TB, h *host, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		m, err := Create(context.Background(), h.spec("n"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func TestReadProtected(t *testing.T) {
	h := newHost(t)
	ids := snapshots(t, h, 3)
	got, err := ReadProtected(h.stateDir, h.store, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ids[0], ids[2]}; !slices.Equal(ProtectedIDs(got), want) {
		t.Fatalf("protected %v, want %v", ProtectedIDs(got), want)
	}
	// A current link that names no release: the fact is unknown.
	link := h.store.CurrentPath()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("elsewhere", link); err != nil {
		t.Fatal(err)
	}
	_, err = ReadProtected(h.stateDir, h.store, "")
	var cu *CurrentUnknownError
	if !errors.As(err, &cu) || !strings.HasPrefix(err.Error(), "current release unknown: current -> ") {
		t.Fatalf("with a bad current link: %v", err)
	}
}
