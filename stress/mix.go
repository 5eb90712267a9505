package stress

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Mix weighs the tool classes of the offered traffic.
type Mix struct {
	Shell   int `json:"shell"`
	Normal  int `json:"normal"`
	Control int `json:"control"`
}

// DefaultMix is half shell, the rest normal and control tools.
var DefaultMix = Mix{Shell: 5, Normal: 3, Control: 2}

// Validate checks the weights.
func (m Mix) Validate() error {
	if m.Shell < 0 || m.Normal < 0 || m.Control < 0 {
		return fmt.Errorf("mix %d:%d:%d: weights must not be negative", m.Shell, m.Normal, m.Control)
	}
	if m.Shell+m.Normal+m.Control == 0 {
		return errors.New("mix 0:0:0: at least one weight must be positive")
	}
	return nil
}

// Share is the fraction of calls of class c.
func (m Mix) Share(c mcpwire.Class) float64 {
	total := float64(m.Shell + m.Normal + m.Control)
	if total == 0 {
		return 0
	}
	switch c {
	case mcpwire.ClassShell:
		return float64(m.Shell) / total
	case mcpwire.ClassNormal:
		return float64(m.Normal) / total
	}
	return float64(m.Control) / total
}

// pattern interleaves the classes by weight (smooth weighted round robin),
// so a short attack still sees the mix rather than runs of one class.
func (m Mix) pattern() []mcpwire.Class {
	w := []int{m.Shell, m.Normal, m.Control}
	total := m.Shell + m.Normal + m.Control
	cur := make([]int, 3)
	out := make([]mcpwire.Class, 0, total)
	for range total {
		best := 0
		for i := range w {
			cur[i] += w[i]
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		out = append(out, mcpwire.Classes()[best])
	}
	return out
}

// ShellSpanCommand is a command that prints its own start and end time (ns
// since the epoch) around a sleep, so the stress can measure how many ran at
// once without taking the server's word for it.
func ShellSpanCommand(sleep time.Duration) string {
	return fmt.Sprintf("echo S $(date +%%s%%N); sleep %.3f; echo E $(date +%%s%%N)", sleep.Seconds())
}

// Span is the interval a command reported it ran in, in ns since the epoch.
type Span struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// ParseSpan reads the S and E lines ShellSpanCommand prints.
func ParseSpan(stdout string) (Span, error) {
	var s Span
	var haveS, haveE bool
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "S":
			s.Start, haveS = n, true
		case "E":
			s.End, haveE = n, true
		}
	}
	switch {
	case !haveS || !haveE:
		return s, fmt.Errorf("stdout lacks the S/E time lines: %q", mcpclient.Snippet([]byte(stdout)))
	case s.End < s.Start:
		return s, fmt.Errorf("end %d before start %d", s.End, s.Start)
	}
	return s, nil
}

// Traffic builds the offered tools/call requests: the mix of classes, a
// unique JSON-RPC id per request, and a tag in the URL fragment (never sent
// on the wire) that names the tool and id, so each vegeta result can be
// matched to what was asked.
type Traffic struct {
	endpoint   string // http://host:port/mcp
	shellSleep time.Duration
	pattern    []mcpwire.Class
	header     http.Header

	mu   sync.Mutex
	next uint64 // next id
	turn map[mcpwire.Class]int
}

// NewTraffic returns the traffic for base (http://host:port). Shell calls
// sleep shellSleep; their ids start at firstID.
func NewTraffic(base string, mix Mix, shellSleep time.Duration, firstID uint64) (*Traffic, error) {
	if err := mix.Validate(); err != nil {
		return nil, err
	}
	return &Traffic{
		endpoint:   strings.TrimSuffix(base, "/") + "/mcp",
		shellSleep: shellSleep,
		pattern:    mix.pattern(),
		header:     mcpclient.Header(""),
		next:       firstID,
		turn:       map[mcpwire.Class]int{},
	}, nil
}

// toolsOf are the tools used per class; they alternate.
var toolsOf = map[mcpwire.Class][]string{
	mcpwire.ClassShell:   {mcpwire.ToolShellExec},
	mcpwire.ClassNormal:  {mcpwire.ToolFileList, mcpwire.ToolFileRead},
	mcpwire.ClassControl: {mcpwire.ToolSystemInfo, mcpwire.ToolProcessList},
}

// ArgsFor returns harmless arguments for the tools the traffic uses.
func ArgsFor(tool string, shellSleep time.Duration) map[string]any {
	switch tool {
	case mcpwire.ToolShellExec:
		return map[string]any{
			"command":   ShellSpanCommand(shellSleep),
			"timeoutMs": (shellSleep + 30*time.Second).Milliseconds(),
		}
	case mcpwire.ToolFileList:
		return map[string]any{"path": "/", "limit": 100}
	case mcpwire.ToolFileRead:
		// /bin/sh is on every host and in minimal containers alike.
		return map[string]any{"path": "/bin/sh", "length": 256}
	case mcpwire.ToolProcessList:
		return map[string]any{"limit": 50}
	}
	return map[string]any{}
}

// Next returns the next call: its id, tool and encoded body.
func (t *Traffic) Next() (uint64, string, []byte) {
	t.mu.Lock()
	id := t.next
	t.next++
	class := t.pattern[int(id%uint64(len(t.pattern)))]
	tools := toolsOf[class]
	tool := tools[t.turn[class]%len(tools)]
	t.turn[class]++
	t.mu.Unlock()
	return id, tool, callBody(id, tool, ArgsFor(tool, t.shellSleep))
}

// Targeter is the vegeta targeter of the traffic.
func (t *Traffic) Targeter() vegeta.Targeter {
	return func(tgt *vegeta.Target) error {
		if tgt == nil {
			return vegeta.ErrNilTarget
		}
		id, tool, body := t.Next()
		tgt.Method = http.MethodPost
		tgt.URL = Tag(t.endpoint, tool, id)
		tgt.Body = body
		tgt.Header = t.header.Clone()
		return nil
	}
}

// Tag returns endpoint with a fragment naming tool and id.
func Tag(endpoint, tool string, id uint64) string {
	return endpoint + "#" + tool + "/" + strconv.FormatUint(id, 10)
}

// ParseTag reads the tool and id back from a tagged URL.
func ParseTag(url string) (tool string, id uint64, err error) {
	_, frag, ok := strings.Cut(url, "#")
	if !ok {
		return "", 0, fmt.Errorf("url %q has no #tool/id tag", url)
	}
	tool, num, ok := strings.Cut(frag, "/")
	if !ok || tool == "" {
		return "", 0, fmt.Errorf("url %q: tag %q is not tool/id", url, frag)
	}
	id, err = strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("url %q: tag id %q is not a number", url, num)
	}
	return tool, id, nil
}

// ParseMix reads SHELL:NORMAL:CONTROL weights, e.g. 5:3:2.
func ParseMix(s string) (Mix, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Mix{}, fmt.Errorf("%q: want SHELL:NORMAL:CONTROL weights, e.g. 5:3:2", s)
	}
	var w [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return Mix{}, fmt.Errorf("%q: weight %q is not a whole number", s, p)
		}
		w[i] = n
	}
	m := Mix{Shell: w[0], Normal: w[1], Control: w[2]}
	return m, m.Validate()
}
