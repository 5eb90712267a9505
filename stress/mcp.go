// Package stress drives mcp-backend with vegeta at rates above its capacity
// and judges what it saw: bounded concurrency (measured by the commands
// themselves, not only taken from /metrics), clean structured OVERLOADED
// failures, responsive control calls and liveness, a stable unit, and a
// return to idle with balanced counters. Decisions are pure (Assess turns
// Facts into PASS/FAIL checks); the effects (attack, samplers, faults) are
// thin and bounded in count and time, and only ever aim at loopback. A
// systemd unit is sampled through the caller's client (Units; no D-Bus
// here), and RecordVerdict records a run's verdict in mcpctl's state
// directory for the build the unit runs.
package stress

import (
	"fmt"
	"strings"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Outcome is what one tools/call came to under load: mcpclient's kinds,
// with OVERLOADED and CANCELLED tool errors as outcomes of their own since
// they are the clean answers of an overloaded backend.
type Outcome string

// The outcomes. Only OK, Overloaded and Cancelled are acceptable under load.
const (
	OutcomeOK         Outcome = "ok"
	OutcomeOverloaded Outcome = "overloaded"
	OutcomeCancelled  Outcome = "cancelled"
	OutcomeToolError  Outcome = "tool_error"      // isError with another code, or without an envelope
	OutcomeRPCError   Outcome = "rpc_error"       // a JSON-RPC error object
	OutcomeHTTPError  Outcome = "http_error"      // any status but 200
	OutcomeTransport  Outcome = "transport_error" // no HTTP response at all
	OutcomeBadReply   Outcome = "bad_response"    // 200 but not a matching JSON-RPC response
)

// Outcomes lists the outcomes in report order.
var Outcomes = []Outcome{OutcomeOK, OutcomeOverloaded, OutcomeCancelled, OutcomeToolError, OutcomeRPCError, OutcomeHTTPError, OutcomeTransport, OutcomeBadReply}

// OutcomeLabel labels a vegeta result (a plot point, a progress count) by
// the classified outcome the stress wrote into its Error ("overloaded:
// ...") or, for vegeta's own errors, by whether any HTTP status came back.
func OutcomeLabel(r *vegeta.Result) string {
	if r.Error == "" {
		return "ok"
	}
	if o, _, ok := strings.Cut(r.Error, ":"); ok {
		for _, known := range Outcomes {
			if o == string(known) {
				return o
			}
		}
	}
	if r.Code == 0 {
		return string(OutcomeTransport)
	}
	return string(OutcomeHTTPError)
}

// Acceptable reports whether an outcome is allowed under load.
func (o Outcome) Acceptable() bool {
	return o == OutcomeOK || o == OutcomeOverloaded || o == OutcomeCancelled
}

// Reply is an answer as mcpclient classified it, with its outcome.
type Reply struct {
	mcpclient.Result
	Outcome Outcome
}

// Classify classifies the answer to the tools/call with JSON-RPC id wantID
// (see mcpclient.Classify) and names its outcome.
func Classify(wantID uint64, status int, transportErr string, contentType string, body []byte) Reply {
	r := mcpclient.Classify(wantID, status, transportErr, contentType, body)
	return Reply{Result: r, Outcome: outcomeOf(r)}
}

func outcomeOf(r mcpclient.Result) Outcome {
	switch r.Kind {
	case mcpclient.KindOK:
		return OutcomeOK
	case mcpclient.KindToolError:
		switch mcpwire.Code(r.Code) {
		case mcpwire.CodeOverloaded:
			return OutcomeOverloaded
		case mcpwire.CodeCancelled:
			return OutcomeCancelled
		}
		return OutcomeToolError
	case mcpclient.KindRPCError:
		return OutcomeRPCError
	case mcpclient.KindHTTPError:
		return OutcomeHTTPError
	case mcpclient.KindTransport:
		return OutcomeTransport
	}
	return OutcomeBadReply
}

// Conversations is how many conversations the stress's calls are spread
// over (call id modulo it), as real traffic comes from many conversations:
// with fair share, one conversation alone would not be given every slot.
const Conversations = 16

// ConversationOf names the conversation of call id.
func ConversationOf(id uint64) string { return fmt.Sprintf("stress-%d", id%Conversations) }

// callBody encodes a tools/call of the stress's own arguments (maps of
// strings and numbers, which always encode), in call id's conversation.
func callBody(id uint64, tool string, args any) []byte {
	b, err := mcpclient.CallBodyIn(id, tool, args, ConversationOf(id))
	if err != nil {
		panic(fmt.Sprintf("stress: %v", err))
	}
	return b
}
