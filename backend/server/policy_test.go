package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// bypass is one attempt to run a denied command (touch) in a way a naive
// deny list misses. @M@ is the marker file the command creates if it runs.
type bypass struct {
	name, cmd string
	needs     string // a program the attempt needs to work at all (negative control)
}

// bypasses are the attempts: compound commands, substitutions, quoting,
// absolute paths, wrappers, variables, sh -c, newlines, globbing,
// here-docs, functions, interpreters and runners.
var bypasses = []bypass{
	{"plain", "touch @M@", ""},
	{"list", "true; touch @M@", ""},
	{"and", "true && touch @M@", ""},
	{"or", "false || touch @M@", ""},
	{"pipeline", "true | touch @M@", ""},
	{"background", "touch @M@ & wait", ""},
	{"negated", "! touch @M@", ""},
	{"subshell", "(touch @M@)", ""},
	{"group", "{ touch @M@; }", ""},
	{"command substitution", "echo $(touch @M@)", ""},
	{"backticks", "echo `touch @M@`", ""},
	{"substitution in quotes", `echo "$(touch @M@)"`, ""},
	{"substitution in assignment", "x=$(touch @M@)", ""},
	{"nested substitution", "echo $(echo $(touch @M@))", ""},
	{"absolute path", "/usr/bin/touch @M@", ""},
	{"other path", "/bin/touch @M@", ""},
	{"dot-dot path", "/usr/../usr/bin/touch @M@", ""},
	{"double quotes", `"touch" @M@`, ""},
	{"empty quotes", "t''ouch @M@", ""},
	{"split quotes", `t"ou"ch @M@`, ""},
	{"backslash", `\touch @M@`, ""},
	{"ansi-c quoting", `$'\x74ouch' @M@`, ""},
	{"leading assignment", "X=1 touch @M@", ""},
	{"env", "env touch @M@", ""},
	{"env with variables", "env -i FOO=1 touch @M@", ""},
	{"env PATH", "env PATH=/usr/bin touch @M@", ""},
	{"nice", "nice -n 5 touch @M@", ""},
	{"timeout", "timeout -s KILL 5 touch @M@", ""},
	{"nohup", "nohup touch @M@ >/dev/null 2>&1", ""},
	{"command", "command touch @M@", ""},
	{"exec", "exec touch @M@", ""},
	{"stacked wrappers", "nice timeout 5 env nohup /usr/bin/touch @M@", ""},
	{"sudo", "sudo -n touch @M@", "sudo"},
	{"variable name", "T=touch; $T @M@", ""},
	{"default expansion", "${T:-touch} @M@", ""},
	{"name from substitution", "$(echo touch) @M@", ""},
	{"array", `a=(touch @M@); "${a[@]}"`, ""},
	{"eval", "eval 'touch @M@'", ""},
	{"bash -c", "bash -c 'touch @M@'", ""},
	{"sh -c", `sh -c "touch @M@"`, ""},
	{"bash -c nested", `bash -c "sh -c 'touch @M@'"`, ""},
	{"bash -c variable", `C='touch @M@'; bash -c "$C"`, ""},
	{"newline", "true\ntouch @M@", ""},
	{"continued line", "tou\\\nch @M@", ""},
	{"glob name", "/usr/bin/tou?h @M@", ""},
	{"class glob name", "/usr/bin/tou[c]h @M@", ""},
	{"brace expansion", "{touch,@M@}", ""},
	{"here-doc to shell", "bash <<'EOF'\ntouch @M@\nEOF", ""},
	{"here-string to shell", "bash <<< 'touch @M@'", ""},
	{"pipe into shell", "echo 'touch @M@' | sh", ""},
	{"source stdin", "source /dev/stdin <<< 'touch @M@'", ""},
	{"dot process substitution", ". <(echo touch @M@)", ""},
	{"process substitution", "cat <(touch @M@)", ""},
	{"function", "f() { touch @M@; }; f", ""},
	{"function keyword", "function f { touch @M@; }; f", ""},
	{"if", "if true; then touch @M@; fi", ""},
	{"for", "for i in 1; do touch @M@; done", ""},
	{"while", "while true; do touch @M@; break; done", ""},
	{"case", "case x in x) touch @M@;; esac", ""},
	{"time", "time touch @M@", ""},
	{"coproc", "coproc touch @M@; wait", ""},
	{"trap", "trap 'touch @M@' EXIT", ""},
	{"python -c", `python3 -c 'open("@M@","w")'`, "python3"},
	{"perl -e", `perl -e 'open(F,">@M@")'`, "perl"},
	{"awk system", `awk 'BEGIN{system("touch @M@")}'`, ""},
	{"xargs", "echo @M@ | xargs touch", ""},
	{"find -exec", `find / -maxdepth 0 -exec touch @M@ \;`, ""},
	{"sed e", "echo | sed 'e touch @M@'", ""},
	{"arithmetic injection", `x='a[$(touch @M@)]'; echo $((x))`, ""},
	{"PATH in env", "PATH=/usr/bin:$PATH touch @M@", ""},
	{"redirection write", "echo > @M@", ""},
	{"exec redirection", "exec 3>@M@", ""},
	// Runners that run the command on their command line, and programs
	// whose options run one.
	{"ip netns exec", "ip netns exec mcp-no-such-ns touch @M@", ""},
	{"ip -n netns exec", "ip -n mcp-no-such-ns netns exec mcp-no-such-ns touch @M@", ""},
	{"ip -all netns exec", "ip -all netns exec touch @M@", ""},
	{"ip netns exec behind nice", "nice ip -all netns exec touch @M@", ""},
	{"ip netns exec behind timeout", "timeout 5 ip -4 -all netns exec touch @M@", ""},
	{"ip vrf exec", "ip vrf exec mcp-no-such-vrf touch @M@", ""},
	{"prlimit", "prlimit --nofile=1024 touch @M@", ""},
	{"setarch", "setarch x86_64 -R touch @M@", ""},
	{"linux32", "linux32 touch @M@", ""},
	{"linux64", "linux64 touch @M@", ""},
	{"dynamic loader", "/lib64/ld-linux-x86-64.so.2 /usr/bin/touch @M@", ""},
	{"systemd-cat", "systemd-cat -t mcp touch @M@", ""},
	{"systemd-inhibit", "systemd-inhibit --what=idle touch @M@", ""},
	{"busctl call", "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager StartUnit ss mcp-no-such.service replace", ""},
	{"dbus-send", "dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus.ListNames", ""},
	{"tar checkpoint-action", "tar -cf @M@.tar --checkpoint=1 --checkpoint-action=exec='touch @M@' /etc/hostname", ""},
	{"tar -I", "tar -I 'touch @M@' -cf @M@.tar /etc/hostname", ""},
	{"tar to-command", "tar -cf @M@.tar /etc/hostname && tar -xf @M@.tar --to-command='touch @M@'", ""},
	{"rsync -e", `rsync -e 'sh -c "touch @M@" sh' h:/x @M@.d`, "rsync"},
	{"tcpdump -z", "tcpdump -i lo -c 1 -w @M@.pcap -z /bin/true", ""},
	{"sort compress-program", "sort --compress-program=/bin/true -S 1K /etc/hostname", ""},
	{"sort -o", "sort -o @M@ /etc/hostname", ""},
	{"find -fprint", "find /etc/hostname -fprint @M@", ""},
	{"git -c alias", "git -c alias.x='!touch @M@' x", "git"},
	{"git -c pager", "git -c core.pager='touch @M@' -p log", ""},
	{"GIT_PAGER", "GIT_PAGER='touch @M@' git -p log", ""},
}

// noRun names the attempts that must never run on this machine (they make
// namespaces, ask another service to act, or capture traffic), and why:
// each is sent only once the policy, asked first, denies it, and has no
// negative control here (TestRunnersJudged decides them, and
// TestIPNetnsExecInSystemd runs ip netns exec in a container).
var noRun = map[string]string{
	"ip netns exec":                "ip netns exec makes a mount namespace",
	"ip -n netns exec":             "ip netns exec makes a mount namespace",
	"ip -all netns exec":           "ip netns exec makes a mount namespace",
	"ip netns exec behind nice":    "ip netns exec makes a mount namespace",
	"ip netns exec behind timeout": "ip netns exec makes a mount namespace",
	"ip vrf exec":                  "ip vrf exec binds a cgroup to a VRF",
	"systemd-cat":                  "systemd-cat writes to the journal",
	"systemd-inhibit":              "systemd-inhibit takes a lock from logind",
	"busctl call":                  "busctl call asks systemd to act",
	"dbus-send":                    "dbus-send asks a service to act",
	"tcpdump -z":                   "tcpdump captures traffic",
	"sort compress-program":        "it runs only a program without arguments",
	"git -c pager":                 "a pager runs only on a terminal",
	"GIT_PAGER":                    "a pager runs only on a terminal",
}

// bypassPolicy denies touch (and rm); what the parser cannot see through
// is denied too.
func bypassPolicy(c *config.Config) {
	c.Policy.Opaque = policy.Deny
	c.Policy.Rules = []policy.Rule{
		{ID: "no-touch", Action: policy.Deny, Reason: "no new files", Commands: []string{"touch", "rm"}},
	}
}

// TestPolicyBypassesRunNothing sends every bypass attempt through the
// real server over HTTP, as shell.exec and as job.start: each is refused
// PERMISSION_DENIED naming a rule, and no marker file appears. The same
// attempts on a server without the policy create their markers (the
// attempts are real).
func TestPolicyBypassesRunNothing(t *testing.T) {
	if len(bypasses) < 40 {
		t.Fatalf("only %d attempts", len(bypasses))
	}
	cfg := config.Default()
	bypassPolicy(&cfg)
	pol, err := policy.New(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, b *backend, dir string, tool string, wantRefused bool) {
		for _, c := range bypasses {
			marker := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+"-"+strings.ReplaceAll(tool, ".", "-"))
			cmd := strings.ReplaceAll(c.cmd, "@M@", marker)
			args := map[string]any{"command": cmd}
			if why := noRun[c.name]; why != "" {
				if !wantRefused {
					continue // never run here: the policy tests decide it
				}
				// Asked first, so that a policy that lets it through fails
				// the test without running it on this machine.
				if d := pol.Decide(policy.Call{PrincipalKind: "anonymous", Tool: tool, Args: argsJSON(t, args)}); d.Action != policy.Deny {
					t.Errorf("%s: the policy does not deny it (%s), so it was not sent (%s)", c.name, d.Describe(), why)
					continue
				}
			}
			if tool == mcpwire.ToolJobStart {
				args["waitMs"] = 30000
			}
			_, body, err := callRaw(context.Background(), b.url, tool, args)
			if err != nil {
				t.Fatal(err)
			}
			r := parseReply(t, body)
			if !wantRefused {
				if _, err := os.Stat(marker); err != nil && (c.needs == "" || has(c.needs)) {
					t.Errorf("%s: without the policy the attempt did not create its marker (%s): %.300s", c.name, cmd, body)
				}
				continue
			}
			if code := r.errorCode(); code != string(mcpwire.CodePermissionDenied) {
				t.Errorf("%s via %s: got %q, want PERMISSION_DENIED: %.300s", c.name, tool, code, body)
				continue
			}
			e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
			if !strings.Contains(e.Message, "rule no-touch") && !strings.Contains(e.Message, "rule "+policy.RuleOpaque) {
				t.Errorf("%s: the refusal names no rule: %s", c.name, e.Message)
			}
		}
	}
	dir := t.TempDir()
	b := startBackend(t, func(c *config.Config) { bypassPolicy(c); c.Jobs.Mode = config.JobsProcess })
	for _, tool := range []string{mcpwire.ToolShellExec, mcpwire.ToolJobStart} {
		t.Run(tool, func(t *testing.T) { run(t, b, dir, tool, true) })
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("a denied command ran: %s exists", e.Name())
	}
	var pm struct {
		Policy mcpwire.PolicyMetrics `json:"policy"`
	}
	getJSON(t, b.url+"/metrics", &pm)
	if want := int64(2 * len(bypasses)); pm.Policy.Deny != want || pm.Policy.Allow != 0 || !pm.Policy.Enabled {
		t.Errorf("/metrics policy = %+v, want %d denials", pm.Policy, want)
	}

	// Negative control: the same attempts without the policy run.
	open := startBackend(t, func(c *config.Config) { c.Jobs.Mode = config.JobsProcess })
	ctl := t.TempDir()
	t.Run("without policy", func(t *testing.T) { run(t, open, ctl, mcpwire.ToolShellExec, false) })
}

func argsJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func has(prog string) bool { _, err := exec.LookPath(prog); return err == nil }

// TestPolicyDecisionsAudited: an allowed call's start record carries the
// decision, a refusal has a policy.decision record of its own naming the
// rule.
func TestPolicyDecisionsAudited(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	b := startBackend(t, func(c *config.Config) {
		bypassPolicy(c)
		c.Audit.Sink, c.Audit.File = config.AuditFile, file
		c.Policy.Rules = append(c.Policy.Rules, policy.Rule{ID: "echo-ok", Action: policy.Allow, Commands: []string{"echo *"}})
	})
	for _, cmd := range []string{"echo hi", "rm -rf /nonexistent"} {
		if _, _, err := callRaw(context.Background(), b.url, mcpwire.ToolShellExec, map[string]any{"command": cmd}); err != nil {
			t.Fatal(err)
		}
	}
	b.srv.Close()
	var sawAllow, sawDeny bool
	for _, r := range auditRecords(t, file) {
		switch {
		case r["MCP_EVENT"] == "call.start" && r["MCP_POLICY_ACTION"] == "allow" && r["MCP_POLICY_RULE"] == "echo-ok":
			sawAllow = true
		case r["MCP_EVENT"] == "policy.decision" && r["MCP_POLICY_ACTION"] == "deny" && r["MCP_POLICY_RULE"] == "no-touch" &&
			r["MESSAGE_ID"] == "6b1e2d0c9a8f4f37a5e4c3d2b1a09f8e" && strings.Contains(r["MCP_COMMAND"], "rm -rf"):
			sawDeny = true
		}
	}
	if !sawAllow || !sawDeny {
		recs, _ := json.Marshal(auditRecords(t, file))
		t.Fatalf("allow recorded %v, deny recorded %v: %s", sawAllow, sawDeny, recs)
	}
}
