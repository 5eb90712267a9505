package strictjson

import (
	"strings"
	"testing"
)

type inner struct {
	MaxShell int `json:"maxShell"`
}

type outer struct {
	Listen  string           `json:"listen"`
	Conc    inner            `json:"concurrency"`
	Tunnels []inner          `json:"tunnels"`
	Env     map[string]inner `json:"env"`
	Ptr     *inner           `json:"ptr,omitempty"`
	Skip    string           `json:"-"`
	Plain   int
	Labels  map[string]string `json:"labels"`
}

func TestCheckKeys(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"exact", `{"listen":"x","concurrency":{"maxShell":1},"tunnels":[{"maxShell":2}],"env":{"a":{"maxShell":3}},"ptr":{"maxShell":4},"Plain":1,"labels":{"Any":"x"}}`, ""},
		{"top-level case", `{"Listen":"x"}`, `unknown key "Listen" (at the top level`},
		{"nested case", `{"concurrency":{"MAXSHELL":1}}`, `unknown key "MAXSHELL" (in concurrency`},
		{"in a slice", `{"tunnels":[{},{"maxshell":1}]}`, `in tunnels[1]`},
		{"in a map value", `{"env":{"a":{"x":1}}}`, `in env.a`},
		{"through a pointer", `{"ptr":{"MaxShell":1}}`, `in ptr`},
		{"ignored field", `{"Skip":"x"}`, `unknown key "Skip"`},
		{"not JSON is left to the decoder", `{`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKeys([]byte(tc.in), outer{})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"ok over defaults", `{"listen":"y"}`, ""},
		{"empty", ``, "empty file"},
		{"trailing", `{} {}`, "trailing data"},
		{"unknown", `{"nope":1}`, `unknown key "nope"`},
		{"case", `{"LISTEN":"y"}`, `unknown key "LISTEN"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := outer{Listen: "x", Plain: 7}
			err := Decode([]byte(tc.in), &v)
			if tc.want == "" {
				if err != nil || v.Listen != "y" || v.Plain != 7 {
					t.Fatalf("err %v, v %+v", err, v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
