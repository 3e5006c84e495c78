package charging

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Causes of ProblemDetails: the application errors of Nchf_ConvergedCharging
// and the SBI protocol errors DPCS answers with (doc/wire-format.md,
// "Charging (Nchf)", lists each with its status).
const (
	// CauseUserUnknown (404): no current member has the subscriber's
	// identity.
	CauseUserUnknown = "USER_UNKNOWN"

	CauseInvalidMsgFormat     = "INVALID_MSG_FORMAT"     // 400: not JSON, or not an object
	CauseMandatoryIEMissing   = "MANDATORY_IE_MISSING"   // 400
	CauseMandatoryIEIncorrect = "MANDATORY_IE_INCORRECT" // 400
	CauseOptionalIEIncorrect  = "OPTIONAL_IE_INCORRECT"  // 400
	// CauseResourceContextNotFound (404): no open session has this
	// ChargingDataRef.
	CauseResourceContextNotFound = "RESOURCE_CONTEXT_NOT_FOUND"
	// CauseResourceURIStructNotFound (404): no such path.
	CauseResourceURIStructNotFound = "RESOURCE_URI_STRUCTURE_NOT_FOUND"
	// CauseSystemFailure (500): nothing was answered; a retry with the
	// same invocationSequenceNumber takes no step twice.
	CauseSystemFailure = "SYSTEM_FAILURE"
	// CauseNFCongestion (503, with Retry-After): more steps at once than
	// the interface takes (HandlerConfig.MaxInFlight), TS 29.500's
	// overload control; the request was not taken, try it again.
	CauseNFCongestion = "NF_CONGESTION"
	// CauseNFCongestionRisk (429, with Retry-After): this consumer has
	// its fair share of the requests the interface takes at once while
	// others wait (HandlerConfig.MaxInFlight); TS 29.500's "excessive
	// traffic which, if continued over time, may lead to an overload".
	CauseNFCongestionRisk = "NF_CONGESTION_RISK"
)

const maxProblemReason = 300

// Problem is a refusal answered as ProblemDetails: its status, cause,
// detail and the attributes at fault (JSON pointers into the body).
type Problem struct {
	Status        int
	Cause         string
	Detail        string
	InvalidParams []InvalidParam
	// Err is the error behind it, for logs; never sent.
	Err error
}

func (p *Problem) Error() string {
	s := p.Cause + ": " + p.Detail
	if len(p.InvalidParams) > 0 {
		s += " (" + p.InvalidParams[0].Param + ")"
	}
	if p.Err != nil {
		s += ": " + p.Err.Error()
	}
	return s
}

func (p *Problem) Unwrap() error { return p.Err }

// Details is p as ProblemDetails.
func (p *Problem) Details() ProblemDetails {
	return ProblemDetails{Title: http.StatusText(p.Status), Status: p.Status, Detail: p.Detail,
		Cause: p.Cause, InvalidParams: p.InvalidParams}
}

// badParam is a 400 naming the attribute at pointer.
func badParam(cause, pointer, reason string) *Problem {
	if len(reason) > maxProblemReason {
		reason = reason[:maxProblemReason]
	}
	return &Problem{Status: http.StatusBadRequest, Cause: cause, Detail: pointer + ": " + reason,
		InvalidParams: []InvalidParam{{Param: pointer, Reason: reason}}}
}

func missing(pointer string) *Problem {
	return badParam(CauseMandatoryIEMissing, pointer, "required")
}

// asProblem is err as a *Problem: itself, or a 500 SYSTEM_FAILURE around it.
func asProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return &Problem{Status: http.StatusInternalServerError, Cause: CauseSystemFailure,
		Detail: "the request could not be completed: retry it with the same invocationSequenceNumber (a step already taken is not taken again)",
		Err:    err}
}

// writeProblem writes p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *Problem) {
	b, err := json.Marshal(p.Details())
	if err != nil { // a ProblemDetails always marshals
		b = []byte(`{"status":500}`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// pointerEscape escapes a JSON pointer reference token (RFC 6901).
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
