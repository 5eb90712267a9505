package policy

import (
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestRunnersJudged: programs that run another command are judged as the
// command they run (a deny rule on it holds, an allow rule on the runner
// does not allow it) or are opaque; their ordinary uses stay ordinary.
func TestRunnersJudged(t *testing.T) {
	p := mustNew(t, cfgOf(Ask,
		Rule{ID: "inspect", Action: Allow, Commands: []string{"ip *", "prlimit *", "setarch *", "linux64 *", "systemd-cat *", "systemd-inhibit *",
			"busctl *", "gdbus *", "dbus-send *", "tar *", "rsync *", "tcpdump *", "sort *", "git *", "find *", "ls *", "ld.so *", "true"}},
		Rule{ID: "no-touch", Action: Deny, Commands: []string{"touch", "rm"}},
	))
	const denied, opaque, allowed, asked = "no-touch", RuleOpaque, "inspect", RuleDefault
	for _, tc := range []struct {
		name, cmd string
		rule      string // the rule that decides
	}{
		// ip: netns exec and vrf exec run their command.
		{"ip netns exec", "ip netns exec ns1 touch /tmp/x", denied},
		{"ip -n netns exec", "ip -n ns1 netns exec ns1 touch /tmp/x", denied},
		{"ip -netns", "ip -netns ns1 netns exec ns1 rm -rf /", denied},
		{"ip --netns", "ip --netns ns1 netns exec ns1 rm -rf /", denied},
		{"ip -all netns exec", "ip -all netns exec rm -rf /", denied},
		{"ip -a abbreviated", "ip -a net e touch /tmp/x", denied},
		{"ip options first", "ip -4 -o -br -c=never netns exec ns1 touch /tmp/x", denied},
		{"ip behind nice", "nice -n 5 ip netns exec ns1 touch /tmp/x", denied},
		{"ip behind timeout", "timeout 5 /usr/sbin/ip -all netns exec touch /tmp/x", denied},
		{"ip vrf exec", "ip vrf exec blue touch /tmp/x", denied},
		{"ip netns exec unknown command asks", "ip netns exec ns1 make", asked},
		{"ip netns exec nested", "ip netns exec a ip -all netns exec touch /x", denied},
		{"ip netns exec bash -c", "ip netns exec a bash -c 'touch /x'", denied},
		{"ip -batch", "ip -batch /tmp/cmds", opaque},
		{"ip -b", "ip -b /tmp/cmds", opaque},
		{"ip -force", "ip -force -b - ", opaque},
		{"ip unknown option", "ip -zz netns exec a touch /x", opaque},
		{"ip option with =", "ip -netns=a netns exec a touch /x", opaque},
		{"ip computed object", "ip $OBJ exec a touch /x", opaque},
		{"ip addr allowed", "ip -br addr show", allowed},
		{"ip flags allowed", "ip -stats -s -d -h -c -j -p -o -t -N -4 link", allowed},
		{"ip -s netns exec", "ip -stats -d netns exec a rm /x", denied},
		{"linux64 computed", "linux64 $X touch /x", opaque},
		{"ip netns list allowed", "ip netns list", allowed},
		{"ip neigh allowed", "ip -n ns1 neigh", allowed},
		{"ip vrf show allowed", "ip vrf show", allowed},
		// util-linux and systemd runners.
		{"prlimit", "prlimit --nofile=1024 touch /tmp/x", denied},
		{"prlimit short", "prlimit -n1024 -c touch /tmp/x", denied},
		{"prlimit abbreviated", "prlimit --nof=10 rm /x", denied},
		{"prlimit pid allowed", "prlimit --pid 1", allowed},
		{"prlimit unknown option", "prlimit --zzz touch /x", opaque},
		{"setarch", "setarch x86_64 -R touch /tmp/x", denied},
		{"setarch long", "setarch x86_64 --addr-no-randomize rm /x", denied},
		{"linux32", "linux32 touch /tmp/x", denied},
		{"linux64", "linux64 --3gb rm /x", denied},
		{"setarch shell", "setarch x86_64", opaque},
		{"linux64 shell", "linux64 -R", opaque},
		{"setarch list allowed", "setarch --list", allowed},
		{"systemd-cat", "systemd-cat -t x touch /tmp/x", denied},
		{"systemd-cat long", "systemd-cat --identifier=x --priority warning rm /x", denied},
		{"systemd-cat reading stdin allowed", "systemd-cat -t x", allowed},
		{"systemd-inhibit", "systemd-inhibit --what=idle --why x touch /tmp/x", denied},
		{"systemd-inhibit list allowed", "systemd-inhibit --list", allowed},
		{"loader", "/lib64/ld-linux-x86-64.so.2 /usr/bin/touch /tmp/x", denied},
		{"loader other name", "/lib/ld-linux.so.2 /bin/rm /x", denied},
		{"ld.so", "ld.so --inhibit-cache /usr/bin/touch /tmp/x", denied},
		{"loader argv0", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --argv0 ls /usr/bin/touch /x", denied},
		{"loader preload", "ld.so --preload /tmp/evil.so /bin/true", opaque},
		{"loader library path", "ld.so --library-path /tmp /bin/true", opaque},
		{"loader relative program is not the allowed one", "ld.so ls", asked},
		{"loader list allowed", "ld.so --list /bin/true", allowed},
		// D-Bus calls ask other services to act.
		{"busctl call", "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager StartUnit ss x.service replace", opaque},
		{"busctl set-property", "busctl set-property org.freedesktop.timedate1 /org/freedesktop/timedate1 org.freedesktop.timedate1 NTP b false", opaque},
		{"busctl unixexec", "busctl --address=unixexec:path=/bin/sh list", opaque},
		{"busctl host", "busctl -H root@h list", opaque},
		{"busctl list allowed", "busctl list", allowed},
		{"busctl introspect allowed", "busctl introspect org.freedesktop.systemd1 /org/freedesktop/systemd1", allowed},
		{"dbus-send", "dbus-send --system --print-reply --dest=org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager.StartTransientUnit", opaque},
		{"gdbus call", "gdbus call --system --dest org.freedesktop.systemd1 --object-path /org/freedesktop/systemd1 --method org.freedesktop.systemd1.Manager.Reboot", opaque},
		{"gdbus introspect allowed", "gdbus introspect --system --dest org.freedesktop.systemd1 --object-path /", allowed},
		// Options that run a program.
		{"tar checkpoint-action", "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch /x' /etc/hostname", opaque},
		{"tar to-command", "tar -xf a.tar --to-command='touch /x'", opaque},
		{"tar to-command abbreviated", "tar -xf a.tar --to-com=sh", opaque},
		{"tar -I", "tar -I 'touch /x' -cf a.tar /etc/hostname", opaque},
		{"tar bundled I", "tar -cIf sh a.tar /etc", opaque},
		{"tar old style I", "tar cIf sh a.tar /etc", opaque},
		{"tar use-compress-program", "tar --use-compress-program=sh -xf a.tar", opaque},
		{"tar rsh-command", "tar --rsh-command=/bin/sh -cf h:/x /etc", opaque},
		{"tar remote archive", "tar -cf host:/tmp/a.tar /etc", opaque},
		{"tar info-script", "tar -F /tmp/s -cf a.tar /etc", opaque},
		{"tar plain allowed", "tar -czf /tmp/a.tgz -C /etc hostname", allowed},
		{"tar list allowed", "tar tzf a.tgz", allowed},
		{"rsync -e", "rsync -e 'sh -c \"touch /x\"' h:/a /tmp/b", opaque},
		{"rsync bundled e", "rsync -avze sh h:/a /tmp/b", opaque},
		{"rsync --rsh", "rsync --rsh=sh h:/a /tmp/b", opaque},
		{"rsync --rsync-path", "rsync --rsync-path='touch /x' h:/a b", opaque},
		{"rsync local allowed", "rsync -a /etc/hostname /tmp/b", allowed},
		{"tcpdump -z", "tcpdump -i lo -w /tmp/c -C 1 -z /tmp/s", opaque},
		{"tcpdump bundled z", "tcpdump -nz/tmp/s", opaque},
		{"tcpdump -w", "tcpdump -i lo -w /tmp/c", opaque},
		{"tcpdump allowed", "tcpdump -nni lo -c 1 -w -", allowed},
		{"sort compress-program", "sort --compress-program=sh -S 1 /etc/hostname", opaque},
		{"sort compress abbreviated", "sort --compress=sh /etc/hostname", opaque},
		{"sort -o", "sort -o /etc/x /etc/hostname", opaque},
		{"sort allowed", "sort -t: -k3 -n /etc/passwd", allowed},
		{"find -fprint", "find / -fprint /etc/x", opaque},
		{"find computed argument", "find / $X touch /x ';'", opaque},
		// git: config, pagers, aliases and the options that run a program.
		{"git -c", "git -c core.pager='touch /x' log", opaque},
		{"git -c alias", "git -c alias.x='!touch /x' x", opaque},
		{"git -c bundled", "git -ccore.fsmonitor=sh status", opaque},
		{"git --config-env", "git --config-env=core.pager=P log", opaque},
		{"git --exec-path", "git --exec-path=/tmp status", opaque},
		{"git -p", "git -p log", opaque},
		{"git --paginate", "git --paginate log", opaque},
		{"git alias", "git x", opaque},
		{"git external command", "git lfs pull", opaque},
		{"git bisect run", "git bisect run touch /x", opaque},
		{"git submodule foreach", "git submodule foreach touch /x", opaque},
		{"git difftool", "git difftool -x 'touch /x'", opaque},
		{"git rebase --exec", "git rebase --exec 'touch /x' HEAD~1", opaque},
		{"git rebase -x", "git rebase -x 'touch /x' HEAD~1", opaque},
		{"git grep -O", "git grep -O'touch /x' foo", opaque},
		{"git fetch upload-pack", "git fetch --upload-pack='touch /x' origin", opaque},
		{"git clone -u", "git clone -u 'touch /x' h:r", opaque},
		{"git clone ext", "git clone 'ext::sh -c touch% /x' r", opaque},
		{"git push receive-pack", "git push --receive-pack='touch /x' origin", opaque},
		{"git log --output", "git log --output=/etc/x", opaque},
		{"git config set", "git config core.fsmonitor 'touch /x'", opaque},
		{"git config set new syntax", "git config set core.pager x", opaque},
		{"git config --add", "git config --add alias.x '!touch /x'", opaque},
		{"git config edit", "git config -e", opaque},
		{"git config then status", "git config core.fsmonitor 'touch /x'; git status", opaque},
		{"git computed argument", "git log $X", opaque},
		{"git unknown global option", "git --zzz status", opaque},
		{"git status allowed", "git -C /srv/app --no-pager status", allowed},
		{"git log allowed", "git --git-dir=/srv/app/.git log --oneline -5", allowed},
		{"git config get allowed", "git config --get user.name", allowed},
		{"git config name allowed", "git config user.name", allowed},
		{"git config list allowed", "git config -l", allowed},
		{"git version allowed", "git --version", allowed},
		// A program named by a relative path is not the one an allow rule names.
		{"relative path", "./ls -la", asked},
		{"plain", "ls -la", allowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(Call{PrincipalKind: "oauth", PrincipalID: "x", Tool: mcpwire.ToolShellExec, Args: args(t, map[string]string{"command": tc.cmd})})
			if d.Rule != tc.rule {
				t.Errorf("%q: %s, want rule %s", tc.cmd, d.Describe(), tc.rule)
			}
		})
	}
}
