package server

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// secretFixture is a deployment's secrets and an ordinary file beside
// them, each reachable by every path trick a client could try.
type secretFixture struct {
	dir      string
	token    string // auth.bearerTokenFile (written by startOAuthEnv)
	config   string // the config file
	state    string // $STATE_DIRECTORY
	stateDB  string // a file in it
	userKey  string // a user's SSH private key (files.deny default)
	userPub  string // ... and its public half, which stays readable
	plain    string // an ordinary file
	plainDir string
	fds      []*os.File // held open for the /proc/self/fd paths
}

const (
	auditMarker  = "audit-record-marker-0123456789"
	configMarker = "config-secret-marker"
	stateMarker  = "state-secret-marker"
	keyMarker    = "PRIVATE-KEY-MARKER"
	plainText    = "ordinary-content"
)

func newSecretFixture(t *testing.T) *secretFixture {
	t.Helper()
	d := t.TempDir()
	f := &secretFixture{
		dir:      d,
		config:   filepath.Join(d, "etc", "config.json"),
		state:    filepath.Join(d, "state"),
		userKey:  filepath.Join(d, "home", "u", ".ssh", "id_ed25519"),
		plainDir: filepath.Join(d, "plain"),
	}
	f.stateDB = filepath.Join(f.state, "db")
	f.userPub = f.userKey + ".pub"
	f.plain = filepath.Join(f.plainDir, "ok.txt")
	for p, content := range map[string]string{
		f.config: `{"note":"` + configMarker + `"}`, f.stateDB: stateMarker,
		f.userKey: keyMarker, f.userPub: "ssh-ed25519 AAAA public", f.plain: plainText,
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(d, "links"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range f.fds {
			fd.Close()
		}
	})
	return f
}

// tricks are the paths that lead to the file (or directory) p: itself, `..`,
// a symlink, a symlinked parent, /proc/self/root, /proc/PID/root,
// /proc/self/fd/N and, for files, a hard link.
func (f *secretFixture) tricks(t *testing.T, name, p string, isDir bool) map[string]string {
	t.Helper()
	links := filepath.Join(f.dir, "links")
	out := map[string]string{
		"direct":          p,
		"dotdot":          filepath.Dir(p) + "/nowhere/../" + filepath.Base(p),
		"symlink":         filepath.Join(links, name+"-sym"),
		"symlink parent":  filepath.Join(links, name+"-dir", filepath.Base(p)),
		"/proc/self/root": "/proc/self/root" + p,
		"/proc/PID/root":  "/proc/" + strconv.Itoa(os.Getpid()) + "/root" + p,
	}
	for _, l := range []struct{ link, target string }{
		{filepath.Join(links, name+"-sym"), p},
		{filepath.Join(links, name+"-dir"), filepath.Dir(p)},
	} {
		if err := os.Symlink(l.target, l.link); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	// The test runs the server in its own process: its open files are the
	// server's /proc/self/fd.
	fd, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	f.fds = append(f.fds, fd)
	out["/proc/self/fd"] = "/proc/self/fd/" + strconv.Itoa(int(fd.Fd()))
	if !isDir {
		hard := filepath.Join(links, name+"-hard")
		if err := os.Link(p, hard); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		out["hard link"] = hard
	}
	return out
}

// principal is one way to call the backend and the file tools it may use.
type principal struct {
	name, base, token string
	tools             []string
}

func (p principal) call(t *testing.T, tool string, args map[string]any) toolReply {
	t.Helper()
	status, _, body := callTool(t, p.base, p.token, tool, args)
	if status != http.StatusOK {
		t.Fatalf("%s %s %v: HTTP %d %s", p.name, tool, args, status, body)
	}
	return parseReply(t, body)
}

// TestSecretsOutOfReachOfFileTools: the files the backend authenticates
// with and keeps its state in are refused to file.read, file.write and
// file.list under every principal (the operator's token, mcp:read,
// mcp:write, both), however the path reaches them; so are the host's
// credentials of files.deny and process memory. An mcp:read token used to
// read auth.bearerTokenFile and with it run shell.exec as root. The
// refusal is PERMISSION_DENIED naming the rule, never the secret's bytes;
// an ordinary file stays readable and writable by the same paths.
func TestSecretsOutOfReachOfFileTools(t *testing.T) {
	f := newSecretFixture(t)
	t.Setenv("STATE_DIRECTORY", f.state)
	auditFile := filepath.Join(f.dir, "audit.jsonl")
	if err := os.WriteFile(auditFile, []byte(auditMarker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := startOAuthEnv(t, func(c *config.Config) {
		f.token = c.Auth.BearerTokenFile
		c.Path = f.config
		c.Audit.Sink, c.Audit.File = config.AuditFile, auditFile
		// The default /**/.ssh/id_ed25519 matches the fixture's key by
		// path; a hard link is found by expanding ** two levels deep, and
		// the fixture lives deeper, so it is named as an operator would.
		c.Files.Deny = append(c.Files.Deny, filepath.Join(f.dir, "home", "*", ".ssh", "id_ed25519"))
	})
	tun, res := env.tunnels[0], env.resources[0]
	reader := env.clientToken(t, env.as.Issuer, res, "mcp:read")
	writer := env.clientToken(t, env.as.Issuer, res, "mcp:write")
	both := env.clientToken(t, env.as.Issuer, res, "mcp:read mcp:write")
	rw := []string{mcpwire.ToolFileRead, mcpwire.ToolFileList, mcpwire.ToolFileWrite}
	principals := []principal{
		{"operator", env.direct, env.operator, rw},
		{"mcp:read", tun, reader, []string{mcpwire.ToolFileRead, mcpwire.ToolFileList}},
		{"mcp:write", tun, writer, []string{mcpwire.ToolFileWrite}},
		{"mcp:read mcp:write", tun, both, rw},
	}
	secrets := []struct {
		name, path, rule string
		content          string
		isDir            bool
	}{
		{"token", f.token, "auth.bearerTokenFile", env.operator, false},
		{"config", f.config, "the config file", configMarker, false},
		{"state file", f.stateDB, "$STATE_DIRECTORY", stateMarker, false},
		{"state dir", f.state, "$STATE_DIRECTORY", stateMarker, true},
		{"user key", f.userKey, `files.deny[`, keyMarker, false},
		{"audit file", auditFile, "audit.file", auditMarker, false},
	}
	refused := func(t *testing.T, r toolReply, rule string, leak string) {
		t.Helper()
		if r.errorCode() != string(mcpwire.CodePermissionDenied) {
			t.Fatalf("answer %+v, want PERMISSION_DENIED", r.Result)
		}
		e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
		if !strings.Contains(e.Message, rule) {
			t.Fatalf("message %q does not name the rule %q", e.Message, rule)
		}
		if leak != "" && strings.Contains(fmt.Sprint(r.Result), leak) {
			t.Fatalf("the refusal carries the secret: %+v", r.Result)
		}
	}
	for _, s := range secrets {
		paths := f.tricks(t, strings.ReplaceAll(s.name, " ", "-"), s.path, s.isDir)
		for _, p := range principals {
			for _, tool := range p.tools {
				for trick, path := range paths {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", s.name, p.name, tool, trick), func(t *testing.T) {
						args := map[string]any{"path": path}
						if tool == mcpwire.ToolFileWrite {
							args = map[string]any{"path": path, "content": "overwritten", "createParents": true}
							if s.isDir {
								args["path"] = path + "/new/file"
							}
						}
						refused(t, p.call(t, tool, args), s.rule, s.content)
					})
				}
			}
		}
	}
	t.Run("what a secret directory holds cannot be probed", func(t *testing.T) {
		for _, tool := range []string{mcpwire.ToolFileRead, mcpwire.ToolFileList} {
			refused(t, principals[1].call(t, tool, map[string]any{"path": filepath.Join(f.state, "no-such-file")}), "$STATE_DIRECTORY", "")
		}
		// The pseudonyms' key: with it a dictionary of guessed subjects
		// would name who is busy in /metrics again.
		refused(t, principals[1].call(t, mcpwire.ToolFileRead, map[string]any{"path": filepath.Join(f.state, caller.KeyFile)}), "$STATE_DIRECTORY", "")
	})
	// Nothing the refused writes named came to exist or changed.
	for p, want := range map[string]string{f.token: env.operator + "\n", f.config: `{"note":"` + configMarker + `"}`, f.stateDB: stateMarker, f.userKey: keyMarker} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s is now %q (%v), want %q", p, b, err, want)
		}
	}
	// The pseudonym key is the one file the backend put there itself.
	if entries, err := os.ReadDir(f.state); err != nil || len(entries) != 2 || entries[1].Name() != caller.KeyFile {
		t.Errorf("state directory holds %v (%v), want only db and %s", entries, err, caller.KeyFile)
	}

	t.Run("host credentials and process memory", func(t *testing.T) {
		reads := principals[1]
		for path, rule := range map[string]string{
			"/etc/shadow":                `files.deny[0] "/etc/shadow"`,
			"/proc/self/root/etc/shadow": `files.deny[0] "/etc/shadow"`,
			"/proc/self/mem":             "process memory",
			"/proc/thread-self/mem":      "process memory",
			"/proc/self/environ":         "files.deny",
			"/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(os.Getpid()) + "/mem": "process memory",
		} {
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			refused(t, reads.call(t, mcpwire.ToolFileRead, map[string]any{"path": path}), rule, "")
		}
	})

	t.Run("negative control: an ordinary file by the same tricks", func(t *testing.T) {
		paths := f.tricks(t, "plain", f.plain, false)
		paths["public key"] = f.userPub
		for _, p := range principals {
			for trick, path := range paths {
				if !strings.Contains(strings.Join(p.tools, " "), mcpwire.ToolFileRead) {
					continue
				}
				r := p.call(t, mcpwire.ToolFileRead, map[string]any{"path": path})
				if r.errorCode() != "" {
					t.Fatalf("%s read %s (%s): %+v", p.name, path, trick, r.Result)
				}
				if want := plainText; trick != "public key" && !strings.Contains(string(r.Result.StructuredContent), want) {
					t.Fatalf("%s read %s: %s", p.name, path, r.Result.StructuredContent)
				}
			}
			if strings.Contains(strings.Join(p.tools, " "), mcpwire.ToolFileList) {
				if r := p.call(t, mcpwire.ToolFileList, map[string]any{"path": f.plainDir}); r.errorCode() != "" {
					t.Fatalf("%s list %s: %+v", p.name, f.plainDir, r.Result)
				}
			}
			if strings.Contains(strings.Join(p.tools, " "), mcpwire.ToolFileWrite) {
				target := filepath.Join(f.plainDir, "by-"+strings.ReplaceAll(p.name, " ", "-"), "new.txt")
				if r := p.call(t, mcpwire.ToolFileWrite, map[string]any{"path": target, "content": "x", "createParents": true}); r.errorCode() != "" {
					t.Fatalf("%s write %s: %+v", p.name, target, r.Result)
				}
			}
		}
	})

	t.Run("a read scope cannot write or run", func(t *testing.T) {
		for _, tool := range []string{mcpwire.ToolFileWrite, mcpwire.ToolShellExec, mcpwire.ToolProcessKill, mcpwire.ToolServiceControl} {
			if status, _, body := callTool(t, tun, reader, tool, map[string]any{}); status != http.StatusForbidden {
				t.Fatalf("mcp:read calling %s: %d %s", tool, status, body)
			}
		}
	})
}

// TestFilesRootsConfine: with files.roots set, the file tools use only
// those trees, judged on what was opened: a symlink inside a root that
// points outside is refused, the same file by its own path inside is not.
func TestFilesRootsConfine(t *testing.T) {
	d := t.TempDir()
	root := filepath.Join(d, "root")
	outside := filepath.Join(d, "outside")
	for _, p := range []string{root, outside} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), []byte("in "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, func(c *config.Config) { c.Files.Roots = []string{root} })
	tests := []struct {
		name, tool, path string
		want             mcpwire.Code // "" for success
	}{
		{"inside", mcpwire.ToolFileRead, filepath.Join(root, "f"), ""},
		{"list inside", mcpwire.ToolFileList, root, ""},
		{"write inside", mcpwire.ToolFileWrite, filepath.Join(root, "g"), ""},
		{"outside", mcpwire.ToolFileRead, filepath.Join(outside, "f"), mcpwire.CodePermissionDenied},
		{"through a symlink out", mcpwire.ToolFileRead, filepath.Join(root, "escape", "f"), mcpwire.CodePermissionDenied},
		{"dotdot out", mcpwire.ToolFileRead, root + "/escape/../../outside/f", mcpwire.CodePermissionDenied},
		{"list outside", mcpwire.ToolFileList, outside, mcpwire.CodePermissionDenied},
		{"write through a symlink out", mcpwire.ToolFileWrite, filepath.Join(root, "escape", "g"), mcpwire.CodePermissionDenied},
		{"write a new tree outside", mcpwire.ToolFileWrite, filepath.Join(outside, "new", "g"), mcpwire.CodePermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"path": tc.path}
			if tc.tool == mcpwire.ToolFileWrite {
				args["content"] = "x"
				args["createParents"] = true
			}
			_, body, err := callRaw(t.Context(), b.url, tc.tool, args)
			if err != nil {
				t.Fatal(err)
			}
			r := parseReply(t, body)
			if r.errorCode() != string(tc.want) {
				t.Fatalf("answer %s, want %q", body, tc.want)
			}
			if tc.want != "" && !strings.Contains(string(body), "files.roots") {
				t.Fatalf("refusal does not name files.roots: %s", body)
			}
		})
	}
	for _, p := range []string{filepath.Join(outside, "g"), filepath.Join(outside, "new")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused write (%v)", p, err)
		}
	}
}
