package main

import "strings"

// isUsage recognises urfave/cli's own argument errors, which it returns as
// plain errors.
func isUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"flag provided but not defined", "Required flag", "Required flags", "invalid value", "No help topic", "flag needs an argument"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}
