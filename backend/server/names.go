package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/overdeck/mcp-backend/audit"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
)

// Everything a client names (its Host, a tool) reaches a log line, an audit
// record or an answer only bounded, and whoever it is, only as a keyed
// pseudonym: a flood of distinct or huge names must neither grow the logs
// nor rotate the audit trail's real records away.

// maxHostBytes bounds a Host header (a DNS name is at most 253 bytes).
const maxHostBytes = 255

// checkHost returns why a Host header is malformed ("" when it is not): at
// most maxHostBytes, and a port, when there is one, of 1..65535 in
// decimal. A malformed Host is answered 400 before anything records it.
func checkHost(hostport string) string {
	if len(hostport) > maxHostBytes {
		return fmt.Sprintf("Host longer than %d bytes", maxHostBytes)
	}
	port, hasPort := "", false
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "Host has an unclosed ["
		}
		if rest := hostport[end+1:]; rest != "" {
			if rest[0] != ':' {
				return "Host has junk after ]"
			}
			port, hasPort = rest[1:], true
		}
	} else if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		if strings.Count(hostport, ":") > 1 {
			return "Host has more than one colon (an IPv6 address goes in [])"
		}
		port, hasPort = hostport[i+1:], true
	}
	if !hasPort {
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return "Host port must be a number 1..65535"
	}
	return ""
}

// hostName returns what hostport names: "loopback", or the allowedHosts
// entry it matches (as configured), and false when neither.
func (s *Server) hostName(hostport string) (string, bool) {
	host := hostport
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		host = hostport[:i]
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if isLoopbackHost(host) {
		return "loopback", true
	}
	for _, a := range s.cfg.AllowedHosts {
		if strings.EqualFold(a, host) {
			return a, true
		}
	}
	return "", false
}

// hostLabel is the Host as refusal records and lines name it: what it
// matched ("loopback", the allowedHosts entry) or "other". A bounded set,
// so distinct ports or loopback addresses cannot multiply the records.
func (s *Server) hostLabel(hostport string) string {
	if n, ok := s.hostName(hostport); ok {
		return n
	}
	return "other"
}

// maxNameQuote bounds a client's name quoted back in an answer or a log.
const maxNameQuote = 64

// quoteName quotes name, cut at maxNameQuote bytes with its full length.
func quoteName(name string) string {
	if len(name) <= maxNameQuote {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%q… (%d bytes)", audit.Bound(name, maxNameQuote), len(name))
}

// knownTool reports whether tool is one this server serves (every tool is
// registered; a mode that cannot run one answers it with an error).
func knownTool(tool string) bool { _, ok := tooldesc.Lookup(tool); return ok }

// unknownTool is the JSON-RPC error of a call naming no tool of ours: the
// SDK's, with the name bounded (the SDK quotes it whole).
func unknownTool(tool string) string { return "unknown tool " + quoteName(tool) }

// openKeys returns the pseudonym keys: the host's, kept in the unit's
// state directory (created on the first start, 0600, the same for every
// later process, so audit queries by conversation keep working), or, with
// no state directory (process mode, the canary), a key of this process
// only: its pseudonyms link nothing beyond its lifetime.
func openKeys(getenv func(string) string, log *slog.Logger) (*caller.Keys, error) {
	dir := strings.Split(getenv("STATE_DIRECTORY"), ":")[0]
	if !filepath.IsAbs(dir) {
		log.Info("pseudonyms keyed for this process only", "reason", "no state directory")
		return caller.EphemeralKeys(), nil
	}
	k, err := caller.LoadKeys(filepath.Join(dir, caller.KeyFile))
	if err != nil {
		return nil, err
	}
	return k, nil
}

// How an unknown tool is counted among refusals: one key for every name,
// so distinct names cannot multiply the lines and records.
const (
	unknownToolLabel   = "(unknown)"
	unknownToolOutcome = "unknown-tool"
)

// refuseUnknownTool answers a tools/call naming no tool of ours as the SDK
// would (a JSON-RPC invalid-params error, HTTP 200), with the name
// bounded, and counts it among the refusals.
func (s *Server) refuseUnknownTool(w http.ResponseWriter, r *http.Request, msg rpcMessage, who caller.Caller) {
	s.refusals.add(who, unknownToolLabel, unknownToolOutcome)
	if l := s.audit.log; l != nil {
		l.Refused(audit.Refusal{Status: http.StatusOK, Outcome: unknownToolOutcome, Scope: "tool", Reason: "unknown tool", Tool: unknownToolLabel,
			PrincipalKind: string(who.Principal.Kind), Principal: who.Principal.ID, PrincipalHash: who.PrincipalHash,
			Conversation: who.Conversation, Host: s.hostLabel(r.Host)})
	}
	if msg.ID == nil {
		w.WriteHeader(http.StatusAccepted) // a notification gets no answer
		return
	}
	writeRPCErrorID(w, http.StatusOK, msg.ID, jsonrpc.CodeInvalidParams, unknownTool(msg.Params.Name))
}

// boundError keeps a JSON-RPC error the SDK returns, message and data,
// within toolerr.MaxMessage: some quote what the client sent, whole (an
// unknown resource's uri in data).
func boundError(err error) error {
	if err == nil {
		return nil
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		if len(we.Message) <= toolerr.MaxMessage && len(we.Data) <= toolerr.MaxMessage {
			return err
		}
		return &jsonrpc.Error{Code: we.Code, Message: audit.Bound(we.Message, toolerr.MaxMessage), Data: boundData(we.Data)}
	}
	if len(err.Error()) <= toolerr.MaxMessage {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: audit.Bound(err.Error(), toolerr.MaxMessage)}
}

// boundData drops an error's data when it is large.
func boundData(d json.RawMessage) json.RawMessage {
	if len(d) > toolerr.MaxMessage {
		return nil
	}
	return d
}
