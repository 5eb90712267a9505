package caller

import (
	"strings"
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
