package loopport

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestReserveIsOutsideTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ip_local_port_range here: %v", err)
	}
	f := strings.Fields(string(b))
	lo, _ := strconv.Atoi(f[0])
	hi, _ := strconv.Atoi(f[1])
	dir := t.TempDir()
	for i := range 50 {
		p, release, err := Reserve(dir, int64(i*997))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		if p >= lo && p <= hi {
			t.Fatalf("port %d is inside the ephemeral range %d-%d", p, lo, hi)
		}
		if p < reservedFloor {
			t.Fatalf("port %d is below %d", p, reservedFloor)
		}
	}
}

// holdEnv makes the test binary a second process that reserves ports and
// holds them until its stdin closes.
const holdEnv = "LOOPPORT_HOLD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		holdPorts(spec)
		return
	}
	os.Exit(m.Run())
}

func holdPorts(spec string) {
	dir, rest, _ := strings.Cut(spec, ",")
	n, _ := strconv.Atoi(rest)
	for range n {
		p, _, err := Reserve(dir, 7)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(strconv.Itoa(p) + "\n")
	}
	os.Stdout.WriteString("held\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func TestReservationsHoldAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	const n = 20
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir+","+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	theirs := map[int]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
		p, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("holder said %q", sc.Text())
		}
		theirs[p] = true
	}
	if len(theirs) != n {
		t.Fatalf("holder reserved %d ports, want %d", len(theirs), n)
	}
	// The same seed makes both processes scan from the same port: without
	// the locks, every one of ours would be one of theirs.
	for range n {
		p, release, err := Reserve(dir, 7)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		if theirs[p] {
			t.Fatalf("port %d reserved by both processes", p)
		}
	}
}

func TestReleaseGivesThePortBack(t *testing.T) {
	dir := t.TempDir()
	p, release, err := Reserve(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	q, releaseQ, err := Reserve(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseQ()
	if q == p {
		t.Fatalf("port %d reserved twice while held", p)
	}
	release()
	r, releaseR, err := Reserve(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseR()
	if r != p {
		t.Fatalf("after release got port %d, want %d back", r, p)
	}
}

func TestNthPortWalksTheRanges(t *testing.T) {
	rs := [][2]int{{10000, 10002}, {61000, 61001}}
	var got []int
	for i := range 5 {
		got = append(got, nthPort(rs, i))
	}
	want := []int{10000, 10001, 10002, 61000, 61001}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("nthPort = %v, want %v", got, want)
		}
	}
}
