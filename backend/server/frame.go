package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The intake and the SDK read every message from the same bytes, but with
// different decoders: encoding/json matches keys case-insensitively and lets
// the last of two equal keys win, the SDK's decoder matches exactly. A
// message whose keys the two could read differently ("name" and "Name",
// "METHOD", "id" twice) would let the intake authorise one call while the
// SDK runs another, so checkFrame refuses it before either decides anything.

// maxFrameDepth bounds nesting, as the SDK's decoder does.
const maxFrameDepth = 1000

// protocolKeys are the keys of the JSON-RPC object and of its params that
// the intake or the SDK read. A key equal to one of them but for case is
// refused: it means one thing to a case-insensitive decoder and nothing to
// an exact one.
var protocolKeys = map[int][]string{
	levelTop:    {"jsonrpc", "id", "method", "params", "result", "error"},
	levelParams: {"name", "arguments", "_meta", "requestId", "reason", "cursor", "protocolVersion", "capabilities", "clientInfo", "uri", "level", "progressToken", "task"},
}

const (
	levelTop = iota
	levelParams
	levelOther
)

// errFrame is a message refused for its keys; the text names the key.
type errFrame struct{ why string }

func (e *errFrame) Error() string { return e.why }

// checkFrame refuses a JSON-RPC body with a duplicate key in any object, or
// with a key of the message or its params that differs from a protocol key
// only in case. A body that is not valid JSON is left to the decoder, which
// names the syntax error; checkFrame reports nil for it.
func checkFrame(b []byte) error {
	s := frameScanner{b: b}
	s.space()
	err := s.value(levelTop, "the message", 0)
	var fe *errFrame
	if errors.As(err, &fe) {
		return fe
	}
	return nil // a syntax error: json.Unmarshal reports it
}

type frameScanner struct {
	b []byte
	i int
}

var errSyntax = errors.New("syntax")

func (s *frameScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *frameScanner) value(level int, where string, depth int) error {
	if depth > maxFrameDepth {
		return &errFrame{fmt.Sprintf("nested deeper than %d levels", maxFrameDepth)}
	}
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; c {
	case '{':
		return s.object(level, where, depth)
	case '[':
		s.i++
		s.space()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		for {
			s.space()
			if err := s.value(levelOther, where, depth+1); err != nil {
				return err
			}
			s.space()
			if s.i >= len(s.b) {
				return errSyntax
			}
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			if s.b[s.i] != ',' {
				return errSyntax
			}
			s.i++
		}
	case '"':
		_, _, err := s.str()
		return err
	default:
		// A number or literal: json.Unmarshal validates it.
		start := s.i
		for s.i < len(s.b) && !strings.ContainsRune(",}] \t\r\n", rune(s.b[s.i])) {
			s.i++
		}
		if s.i == start {
			return errSyntax
		}
		return nil
	}
}

// str scans a string and returns its raw bytes (without quotes) and whether
// it holds escapes.
func (s *frameScanner) str() (raw []byte, escaped bool, err error) {
	s.i++ // the opening quote
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
		case '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped, nil
		default:
			s.i++
		}
	}
	return nil, false, errSyntax
}

func (s *frameScanner) object(level int, where string, depth int) error {
	s.i++ // {
	var keys []string
	var seen map[string]struct{}
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errSyntax
		}
		raw, escaped, err := s.str()
		if err != nil {
			return err
		}
		key := string(raw)
		if escaped {
			if json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &key) != nil {
				return errSyntax
			}
		}
		if len(keys) < 16 {
			for _, k := range keys {
				if k == key {
					return &errFrame{fmt.Sprintf("duplicate key %q in %s", key, where)}
				}
			}
			keys = append(keys, key)
		} else {
			if seen == nil {
				seen = make(map[string]struct{}, 32)
				for _, k := range keys {
					seen[k] = struct{}{}
				}
			}
			if _, dup := seen[key]; dup {
				return &errFrame{fmt.Sprintf("duplicate key %q in %s", key, where)}
			}
			seen[key] = struct{}{}
		}
		for _, p := range protocolKeys[level] {
			if key != p && strings.EqualFold(key, p) {
				return &errFrame{fmt.Sprintf("key %q in %s differs from the protocol's %q only in case", key, where, p)}
			}
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errSyntax
		}
		s.i++
		s.space()
		next, nextWhere := levelOther, where
		if level == levelTop && key == "params" {
			next, nextWhere = levelParams, "params"
		} else if level == levelTop {
			nextWhere = fmt.Sprintf("%q", key)
		} else if level == levelParams {
			nextWhere = "params." + key
		}
		if err := s.value(next, nextWhere, depth+1); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return errSyntax
		}
		if s.b[s.i] == '}' {
			s.i++
			return nil
		}
		if s.b[s.i] != ',' {
			return errSyntax
		}
		s.i++
	}
}
