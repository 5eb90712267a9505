// Package randid makes and checks the random ids that name files (jobs,
// approvals): a one-letter prefix and 16 lowercase hex digits, so that an id
// a client sends back can become a path and name nothing else.
package randid

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// New returns prefix followed by 16 random lowercase hex digits.
func New(prefix byte) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return string(prefix) + hex.EncodeToString(b[:])
}

// Valid reports whether id has New(prefix)'s shape.
func Valid(prefix byte, id string) bool {
	if len(id) != 17 || id[0] != prefix {
		return false
	}
	_, err := hex.DecodeString(id[1:])
	return err == nil && strings.ToLower(id) == id
}
