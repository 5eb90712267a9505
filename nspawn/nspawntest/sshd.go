package nspawntest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SSHD is an sshd running inside a container, listening only on
// 127.0.0.1:Port (the containers share the host's network namespace).
type SSHD struct {
	m    *Machine
	Port int
	// Dir holds its sshd_config, host key and authorized_keys; it is bound
	// into the container at the same path.
	Dir string
	// Unit is the transient unit sshd runs as inside the container.
	Unit string
	// KnownHost is the known_hosts line of its host key:
	// "[127.0.0.1]:PORT ssh-ed25519 AAAA...".
	KnownHost string
}

// SSHKey makes an ed25519 key pair in dir and returns the private key's
// path and the public key line.
func SSHKey(t testing.TB, dir, name string) (private, public string) {
	t.Helper()
	private = filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", private).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(private + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return private, strings.TrimSpace(string(b))
}

// RequireSSH skips (fails under CI=true) without the OpenSSH client and
// server programs (scripts/ensure-deps.sh installs them).
func RequireSSH(t testing.TB) {
	t.Helper()
	for _, p := range []string{"ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(p); err != nil {
			SkipOrFail(t, "%s not installed (scripts/ensure-deps.sh installs openssh-client and openssh-server)", p)
		}
	}
}

// StartSSHD runs sshd inside m on 127.0.0.1:port, with a host key made for
// the test and authorizedKeys as root's authorized_keys. dir must be a
// directory bound into m at the same path. A volatile container's minimal
// /etc has neither an sshd user (privilege separation needs one) nor an
// unlocked root shadow entry (sshd refuses key logins to a locked account):
// both are added there, inside the container only.
func StartSSHD(t testing.TB, m *Machine, dir string, port int, authorizedKeys string) *SSHD {
	t.Helper()
	RequireSSH(t)
	s := &SSHD{m: m, Port: port, Dir: dir, Unit: "mcpt-sshd.service"}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey, pub := SSHKey(t, dir, "host_key")
	f := strings.Fields(pub)
	s.KnownHost = fmt.Sprintf("[127.0.0.1]:%d %s %s", port, f[0], f[1])
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKeys+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Join([]string{
		fmt.Sprintf("ListenAddress 127.0.0.1:%d", port),
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"PidFile none",
		"MaxStartups 30",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setup := `grep -q '^sshd:' /etc/passwd || echo 'sshd:x:74:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin' >>/etc/passwd
sed -i 's/^root:[^:]*:/root:*:/' /etc/shadow
mkdir -p /run/sshd && chmod 755 /run/sshd`
	if _, err := m.Exec(ctx, "/bin/sh", "-c", setup); err != nil {
		t.Fatalf("sshd setup inside %s: %v", m.Name, err)
	}
	s.Start(t)
	return s
}

// Start starts sshd as a transient unit and waits until it listens.
func (s *SSHD) Start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.m.Exec(ctx, "systemd-run", "--unit="+s.Unit, "--collect", "--quiet", "--",
		"/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.Dir, "sshd_config")); err != nil {
		t.Fatalf("start sshd in %s: %v", s.m.Name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", s.Port)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if ctx.Err() != nil {
			out, _ := s.m.Exec(context.Background(), "journalctl", "--no-pager", "-u", s.Unit, "-n", "30")
			t.Fatalf("sshd in %s does not listen on %s: %v\n%s", s.m.Name, addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops sshd (and with it every session it serves: they live in its
// unit's cgroup).
func (s *SSHD) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.m.Client.Stop(ctx, s.Unit); err != nil {
		t.Fatalf("stop sshd in %s: %v", s.m.Name, err)
	}
}
