// Package jsoncheck holds checks tests make of the JSON documents the
// programs print, so their conventions hold for fields added later too:
// every duration is a number of milliseconds named ...Ms.
package jsoncheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// durationWord marks a key that names a duration.
var durationWord = regexp.MustCompile(`(?i)(duration|took|latency|timeout|wait|left|sleep|elapsed|p50|p95|p99|max$|ttl|deadline)`)

// Durations returns the paths of keys in doc that name a duration but are
// not ...Ms numbers (a Go duration string "500ms", nanoseconds under
// "duration"), and of ...Ms keys whose value is not a number. Keys whose
// value is an object or array are containers, not durations; time stamps
// (RFC 3339 strings) under deadline-like keys are allowed.
func Durations(doc []byte) ([]string, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	var bad []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				p := path + "." + k
				switch val.(type) {
				case map[string]any, []any:
					walk(p, val)
					continue
				}
				ms := strings.HasSuffix(k, "Ms")
				_, isNum := val.(float64)
				s, isStr := val.(string)
				switch {
				case ms && !isNum && val != nil:
					bad = append(bad, fmt.Sprintf("%s = %v: a ...Ms key must be a number", p, val))
				case !ms && durationWord.MatchString(k) && isNum:
					bad = append(bad, fmt.Sprintf("%s = %v: a duration must be milliseconds named %sMs", p, val, k))
				case !ms && durationWord.MatchString(k) && isStr && looksLikeGoDuration(s):
					bad = append(bad, fmt.Sprintf("%s = %q: a duration must be milliseconds named %sMs", p, s, k))
				}
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
	sort.Strings(bad)
	return bad, nil
}

var goDuration = regexp.MustCompile(`^-?([0-9.]+(ns|us|µs|ms|s|m|h))+$`)

func looksLikeGoDuration(s string) bool { return goDuration.MatchString(s) }
