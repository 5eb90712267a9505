package nspawntest

import (
	"context"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn"
)

// SSHD is an sshd inside a container (see nspawn.StartSSHD), with its
// start and stop failing the test.
type SSHD struct {
	*nspawn.SSHD
}

// RequireSSH skips (fails under CI=true) without the OpenSSH client and
// server programs.
func RequireSSH(t testing.TB) {
	t.Helper()
	Require(t)
	if reason := nspawn.SSHUnavailable(); reason != "" {
		SkipOrFail(t, "%s", reason)
	}
}

// SSHKey makes an ed25519 key pair in dir and returns the private key's
// path and the public key line.
func SSHKey(t testing.TB, dir, name string) (private, public string) {
	t.Helper()
	private, public, err := nspawn.SSHKey(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return private, public
}

// StartSSHD runs sshd inside m on 127.0.0.1:port with a host key made for
// the test and authorizedKeys; dir must be bound into m at the same path.
func StartSSHD(t testing.TB, m *Machine, dir string, port int, authorizedKeys string) *SSHD {
	t.Helper()
	RequireSSH(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := nspawn.StartSSHD(ctx, m.Machine, dir, port, authorizedKeys)
	if err != nil {
		t.Fatal(err)
	}
	return &SSHD{SSHD: s}
}

// Start starts sshd again after Stop.
func (s *SSHD) Start(t testing.TB) {
	t.Helper()
	if err := s.SSHD.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Stop stops sshd and every session it serves.
func (s *SSHD) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.SSHD.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
