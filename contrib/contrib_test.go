package contrib

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/server"
)

// exported are the metric names the real backend's /metrics text has.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	srv, err := server.New(config.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	names := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		names[strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\bmcp_[a-z0-9_]+`)

// checkNames fails for every mcp_ metric text uses that /metrics lacks:
// rules and panels over a renamed metric would stay silent forever.
func checkNames(t *testing.T, file, text string, names map[string]bool) {
	t.Helper()
	used := metricName.FindAllString(text, -1)
	if len(used) == 0 {
		t.Fatalf("%s uses no mcp_ metric", file)
	}
	for _, n := range used {
		if !names[n] {
			t.Errorf("%s uses %s, which /metrics does not export", file, n)
		}
	}
}

// promtool is the path of promtool; without it the test skips, and fails
// under CI=true (scripts/ensure-deps.sh installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (scripts/ensure-deps.sh installs the prometheus package)")
		}
		t.Skip("promtool not found; scripts/ensure-deps.sh installs it")
	}
	return p
}

// TestAlertRules: the rules are valid (promtool check rules), fire on what
// they are for and not at rest (promtool test rules), and name only metrics
// the backend exports.
func TestAlertRules(t *testing.T) {
	rules := filepath.Join("prometheus", "mcp-backend.rules.yml")
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, rules, string(b), exported(t))
	p := promtool(t)
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", filepath.Join("prometheus", "mcp-backend.rules.test.yml")}} {
		if out, err := exec.Command(p, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The negative control: promtool refuses a broken rule.
	bad := filepath.Join(t.TempDir(), "bad.yml")
	os.WriteFile(bad, []byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: rate(mcp_admission_waiting[5m]\n"), 0o644)
	if exec.Command(p, "check", "rules", bad).Run() == nil {
		t.Fatal("promtool accepted a rule with a syntax error")
	}
}

// TestDashboard: the Grafana dashboard is JSON with panels whose queries
// name only metrics the backend exports.
func TestDashboard(t *testing.T) {
	file := filepath.Join("grafana", "mcp-backend.json")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.Title == "" || len(d.Panels) < 5 {
		t.Fatalf("%s: %v, %d panels", file, err, len(d.Panels))
	}
	names := exported(t)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkNames(t, file+": "+p.Title, tg.Expr, names)
		}
	}
}
