// Package jsonsize bounds the size of a string once encoded as a JSON
// string, without encoding it. JSON escaping can multiply control bytes six
// times, so response budgets must be measured in encoded bytes; encoding
// megabytes just to measure them would cost more than the work itself.
package jsonsize

import "unicode/utf8"

// runeMax is an upper bound of the bytes encoding/json (or the MCP SDK's
// encoder) writes for one rune: escapes, HTML-safe escapes and the
// replacement of invalid UTF-8 all count as six.
func runeMax(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
		return 6
	}
	return size
}

// Max bounds the encoded length of s from above, quotes included.
func Max(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeMax(r, size)
		i += size
	}
	return n
}

// Min bounds the encoded length of s from below, quotes included: every
// escape takes at least two bytes, an invalid byte becomes a three-byte
// U+FFFD.
func Min(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 3
		case r < 0x20 || r == '"' || r == '\\':
			n += 2
		default:
			n += size
		}
		i += size
	}
	return n
}

// PrefixWithin returns the longest prefix of s, cut on a rune boundary,
// whose encoding (by Max) takes at most max bytes.
func PrefixWithin(s string, max int) string {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeMax(r, size)
		if n > max {
			return s[:i]
		}
		i += size
	}
	return s
}
