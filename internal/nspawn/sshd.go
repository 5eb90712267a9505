package nspawn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// SSHD is an sshd running inside a container, listening only on
// 127.0.0.1:Port (containers share the host's network namespace).
type SSHD struct {
	m    *Machine
	Port int
	// Dir holds its sshd_config, host key and authorized_keys; it must be
	// bound into the container at the same path.
	Dir string
	// Unit is the transient unit sshd runs as inside the container.
	Unit string
	// KnownHost is the known_hosts line of its host key:
	// "[127.0.0.1]:PORT ssh-ed25519 AAAA...".
	KnownHost string
}

// SSHUnavailable says why this machine cannot run sshd in a container
// (scripts/ensure-deps.sh installs what is missing), or "".
func SSHUnavailable() string {
	for _, p := range []string{"ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " not installed (Debian: openssh-client and openssh-server, installed by scripts/ensure-deps.sh without starting sshd here)"
		}
	}
	return ""
}

// SSHKey makes an ed25519 key pair at dir/name and returns the private
// key's path and the public key line.
func SSHKey(dir, name string) (private, public string, err error) {
	private = filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", private).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("ssh-keygen: %w\n%s", err, out)
	}
	b, err := os.ReadFile(private + ".pub")
	if err != nil {
		return "", "", err
	}
	return private, strings.TrimSpace(string(b)), nil
}

// StartSSHD runs sshd inside m on 127.0.0.1:port, with a host key made for
// it and authorizedKeys as root's authorized_keys. dir must be bound into
// m at the same path. A volatile container's minimal /etc has neither an
// sshd user (privilege separation needs one) nor an unlocked root shadow
// entry (sshd refuses key logins to a locked account): both are added
// there, inside the container only.
func StartSSHD(ctx context.Context, m *Machine, dir string, port int, authorizedKeys string) (*SSHD, error) {
	if reason := SSHUnavailable(); reason != "" {
		return nil, errors.New(reason)
	}
	s := &SSHD{m: m, Port: port, Dir: dir, Unit: "mcpt-sshd.service"}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	hostKey, pub, err := SSHKey(dir, "host_key")
	if err != nil {
		return nil, err
	}
	f := strings.Fields(pub)
	s.KnownHost = fmt.Sprintf("[127.0.0.1]:%d %s %s", port, f[0], f[1])
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKeys+"\n"), 0o600); err != nil {
		return nil, err
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
		return nil, err
	}
	setup := `grep -q '^sshd:' /etc/passwd || echo 'sshd:x:74:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin' >>/etc/passwd
sed -i 's/^root:[^:]*:/root:*:/' /etc/shadow
mkdir -p /run/sshd && chmod 755 /run/sshd`
	if _, err := m.Exec(ctx, "/bin/sh", "-c", setup); err != nil {
		return nil, fmt.Errorf("sshd setup inside %s: %w", m.Name, err)
	}
	return s, s.Start(ctx)
}

// Start starts sshd as a transient unit and waits until it listens.
func (s *SSHD) Start(ctx context.Context) error {
	if _, err := s.m.Exec(ctx, "systemd-run", "--unit="+s.Unit, "--collect", "--quiet", "--",
		"/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.Dir, "sshd_config")); err != nil {
		return fmt.Errorf("start sshd in %s: %w", s.m.Name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", s.Port)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if ctx.Err() != nil {
			out, _ := s.m.Exec(context.Background(), "journalctl", "--no-pager", "-u", s.Unit, "-n", "30")
			return fmt.Errorf("sshd in %s does not listen on %s: %w\n%s", s.m.Name, addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops sshd, and with it every session it serves (they live in its
// unit's cgroup).
func (s *SSHD) Stop(ctx context.Context) error {
	if err := s.m.Client.Stop(ctx, s.Unit); err != nil {
		return fmt.Errorf("stop sshd in %s: %w", s.m.Name, err)
	}
	return nil
}

// AddDropIn writes a drop-in name.conf for unit into the container's unit
// directory and reloads systemd; remove takes it out again (and reloads).
func (m *Machine) AddDropIn(ctx context.Context, unit, name, content string) (remove func(context.Context) error, err error) {
	dir := filepath.Join(m.UnitsDir, unit+".d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return nil, err
	}
	if err := m.Client.DaemonReload(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := os.Remove(p); err != nil {
			return err
		}
		_ = os.Remove(dir)
		return m.Client.DaemonReload(ctx)
	}, nil
}
