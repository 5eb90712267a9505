package caller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestResolve(t *testing.T) {
	long := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		name       string
		in         Claims
		kind       Kind
		id         string
		convFrom   string
		sameConvAs *Claims
	}{
		{"operator ignores asserted subject", Claims{Operator: true, Authenticated: true, MetaSubject: "u1"}, Operator, "operator", FromDefault, nil},
		{"oauth subject", Claims{Issuer: "https://as", Subject: "alice", ClientID: "c1", Authenticated: true}, OAuth, "https://as alice", FromDefault, nil},
		{"oauth client credentials", Claims{Issuer: "https://as", ClientID: "svc", Authenticated: true}, OAuth, "https://as svc", FromDefault, nil},
		{"oauth ignores asserted subject", Claims{Issuer: "i", Subject: "bob", Authenticated: true, MetaSubject: "alice"}, OAuth, "i bob", FromDefault, nil},
		{"no auth: asserted subject", Claims{MetaSubject: "user-7"}, Asserted, "user-7", FromDefault, nil},
		{"auth on: asserted subject is not a principal", Claims{Authenticated: true, MetaSubject: "user-7"}, Anonymous, "", FromDefault, nil},
		{"anonymous", Claims{}, Anonymous, "", FromDefault, nil},
		{"meta session wins over session header", Claims{MetaSession: "conv", SessionID: "s"}, Anonymous, "", FromMetaSession, &Claims{MetaSession: "conv", SessionID: "other"}},
		{"session header", Claims{SessionID: "s"}, Anonymous, "", FromSessionID, nil},
		{"long asserted subject is hashed", Claims{MetaSubject: long}, Asserted, "", FromDefault, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Resolve(tc.in)
			if c.Principal.Kind != tc.kind {
				t.Fatalf("kind = %q, want %q", c.Principal.Kind, tc.kind)
			}
			if tc.id != "" && c.Principal.ID != tc.id {
				t.Fatalf("id = %q, want %q", c.Principal.ID, tc.id)
			}
			if len(c.Principal.ID) > MaxIDBytes || len(c.ClientID) > MaxIDBytes {
				t.Fatalf("ids not bounded: %d, %d bytes", len(c.Principal.ID), len(c.ClientID))
			}
			if c.ConversationFrom != tc.convFrom {
				t.Fatalf("conversation from %q, want %q", c.ConversationFrom, tc.convFrom)
			}
			for _, raw := range []string{tc.in.MetaSession, tc.in.SessionID} {
				if raw != "" && strings.Contains(c.Conversation, raw) {
					t.Fatalf("conversation %q holds the raw id %q", c.Conversation, raw)
				}
			}
			if tc.sameConvAs != nil && Resolve(*tc.sameConvAs).Conversation != c.Conversation {
				t.Fatal("same openai/session gave another conversation")
			}
		})
	}
	if Resolve(Claims{SessionID: "a"}).Conversation == Resolve(Claims{SessionID: "b"}).Conversation {
		t.Fatal("two sessions, one conversation")
	}
	if Resolve(Claims{SessionID: "a"}).Conversation == Resolve(Claims{MetaSession: "a"}).Conversation {
		t.Fatal("a session id and an openai/session with the same text must not collide")
	}
}

// The pseudonym key is created once, owner-only, and read back by every
// later process: the same caller, the same pseudonyms; another host's key,
// other pseudonyms.
func TestLoadKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFile)
	first, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != KeyBytes {
		t.Fatalf("key file mode %v, %d bytes; want 0600, %d", fi.Mode().Perm(), fi.Size(), KeyBytes)
	}
	again, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	claims := Claims{MetaSubject: "alice", MetaSession: "conv-1"}
	a, b := first.Resolve(claims), again.Resolve(claims)
	if a.PrincipalHash != b.PrincipalHash || a.Conversation != b.Conversation {
		t.Fatalf("pseudonyms changed across loads: %+v, %+v", a, b)
	}
	other := EphemeralKeys().Resolve(claims)
	if other.PrincipalHash == a.PrincipalHash || other.Conversation == a.Conversation {
		t.Fatal("another key gave the same pseudonyms")
	}
	// The unkeyed SHA-256 a dictionary attack would try is not it.
	sum := sha256.Sum256([]byte("principal\x00asserted:alice"))
	if a.PrincipalHash == hex.EncodeToString(sum[:8]) {
		t.Fatal("principal pseudonym is the unkeyed hash")
	}
	if len(a.PrincipalHash) != 16 {
		t.Fatalf("pseudonym %q, want 16 hex digits", a.PrincipalHash)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(path); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a key readable by others: err = %v, want a refusal naming 0600", err)
	}
}

// Many processes starting at once on a fresh state directory agree on one
// key.
func TestLoadKeysConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFile)
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := LoadKeys(path)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = k.Principal(Principal{Kind: Operator, ID: "operator"})
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatalf("processes disagree on the key: %v", got)
		}
	}
}

// refHash is a pseudonym computed the plain way: what Keys must keep
// giving, whatever it reuses, or pseudonyms change across an upgrade.
func refHash(tb testing.TB, key []byte, domain, id string) string {
	tb.Helper()
	h := hmac.New(sha256.New, key)
	h.Write([]byte(domain + "\x00" + id))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// TestPseudonymsAreHMAC: reused hashes and the pseudonyms of fixed
// principals give what a fresh HMAC gives, from many goroutines at once.
func TestPseudonymsAreHMAC(t *testing.T) {
	key := []byte(strings.Repeat("k", KeyBytes))
	k, err := NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("s", 4*MaxIDBytes+1)
	cases := []struct {
		name            string
		in              Claims
		principal, conv string // the hashed inputs
		convDomain      string
	}{
		{"anonymous", Claims{}, "anonymous:", "", ""},
		{"operator", Claims{Operator: true, SessionID: "s1"}, "operator:operator", "s1", FromSessionID},
		{"oauth", Claims{Issuer: "https://as", Subject: "alice", MetaSession: "c"}, "oauth:https://as alice", "c", FromMetaSession},
		{"asserted", Claims{MetaSubject: "bob", MetaSession: "c2"}, "asserted:bob", "c2", FromMetaSession},
		{"long session id", Claims{SessionID: long}, "anonymous:", long, FromSessionID},
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				for _, tc := range cases {
					got := k.Resolve(tc.in)
					if want := refHash(t, key, "principal", tc.principal); got.PrincipalHash != want {
						t.Errorf("%s: principal %q, want %q", tc.name, got.PrincipalHash, want)
						return
					}
					if tc.conv != "" {
						if want := refHash(t, key, tc.convDomain, tc.conv); got.Conversation != want {
							t.Errorf("%s: conversation %q, want %q", tc.name, got.Conversation, want)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkResolve: what resolving a call costs (every call is resolved
// twice); allocs/op is the figure to watch.
func BenchmarkResolve(b *testing.B) {
	for _, tc := range []struct {
		name string
		in   Claims
	}{
		{"anonymous-session", Claims{SessionID: "session-00000000000000000000000000000042"}},
		{"asserted-session", Claims{MetaSubject: "user-42", MetaSession: "conversation-42"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Resolve(tc.in)
			}
		})
	}
}

// TestSeenPseudonymsBounded: the remembered pseudonyms stay within their
// bound however many callers pass, and one forgotten and hashed again is
// the same pseudonym.
func TestSeenPseudonymsBounded(t *testing.T) {
	key := []byte(strings.Repeat("k", KeyBytes))
	k, err := NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	first := k.Principal(Principal{Kind: Asserted, ID: "u0"})
	for i := range 3 * seenEntries {
		id := fmt.Sprintf("u%d", i)
		if got, want := k.Principal(Principal{Kind: Asserted, ID: id}), refHash(t, key, "principal", "asserted:"+id); got != want {
			t.Fatalf("%s: %q, want %q", id, got, want)
		}
		k.seenMu.RLock()
		n := len(k.seen)
		k.seenMu.RUnlock()
		if n > seenEntries {
			t.Fatalf("%d pseudonyms remembered, bound %d", n, seenEntries)
		}
	}
	if again := k.Principal(Principal{Kind: Asserted, ID: "u0"}); again != first {
		t.Fatalf("u0 hashed again: %q, want %q", again, first)
	}
}
