package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

const (
	// Scheme is the OpenAPI security scheme of the gateway credential.
	Scheme = "gateway"
	// Tag is the decision operation's tag.
	Tag = "decisions"
	// Operation is the one operation a gateway credential opens.
	Operation = "decide"
	// maxDecisionEvents bounds one request's events.
	maxDecisionEvents = 1000
)

// Decider judges usage events in order: the door's *judge.Decisions.
type Decider interface {
	Decide(ctx context.Context, envs []envelope.Envelope[envelope.UsagePayload]) ([]quota.Result, error)
}

// Config is what the decision route needs.
type Config struct {
	// Decisions judges the events. Nil: the route answers 503.
	Decisions Decider
	// Tokens are the gateway credentials (blank ones are ignored). None:
	// every call is refused (401).
	Tokens []string
	// Problem maps the judges' errors to RFC 9457 problems, loc naming the
	// request part at fault: the API's one error mapping. Required.
	Problem func(ctx context.Context, err error, loc string) error
}

// Route is POST /decisions on a huma API.
type Route struct {
	api  huma.API
	cfg  Config
	keys gatewayKeys
	// slow sends every request through huma's own body path (tests compare
	// the two); fast counts requests the fast path answered.
	slow bool
	fast atomic.Int64
}

// SecurityScheme is the gateway credential's scheme, for the document's
// components (under the name Scheme).
func SecurityScheme() *huma.SecurityScheme {
	return &huma.SecurityScheme{Type: "http", Scheme: "bearer",
		Description: "A gateway credential (one of DPCS_GATEWAY_TOKENS), for POST /decisions only; member access tokens are refused there and it opens no other route."}
}

// APITag declares Tag with its description.
func APITag() *huma.Tag {
	return &huma.Tag{Name: Tag, Description: "Synchronous decisions for gateways that must ask before granting: usage events in, decision, remaining bytes and rule out. Gateway credential only."}
}

// gatewaySecured is the Security of the gateway route.
func gatewaySecured() []map[string][]string { return []map[string][]string{{Scheme: {}}} }

// gatewayKeys are the SHA-256 digests of the gateway credentials: compared
// in constant time, digest against digest, so neither a token's length nor
// its prefix shows in the time of a refusal.
type gatewayKeys [][sha256.Size]byte

func newGatewayKeys(tokens []string) gatewayKeys {
	var keys gatewayKeys
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			keys = append(keys, sha256.Sum256([]byte(t)))
		}
	}
	return keys
}

// match reports whether tok is one of the credentials; it compares with
// every one whatever the outcome.
func (k gatewayKeys) match(tok string) bool {
	d := sha256.Sum256([]byte(tok))
	ok := 0
	for _, key := range k {
		ok |= subtle.ConstantTimeCompare(d[:], key[:])
	}
	return ok == 1 && len(k) > 0
}

// Authenticate checks the gateway credential of the decision route: the
// API's authentication middleware hands it every operation secured by
// Scheme. A family or admin access token is not one (401), and a gateway
// credential opens nothing else: every other secured route verifies a
// signed access token.
func (r *Route) Authenticate(ctx huma.Context, next func(huma.Context)) {
	scheme, tok, ok := strings.Cut(ctx.Header("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !r.keys.match(strings.TrimSpace(tok)) {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="dpcs-gateway", error="invalid_token"`)
		huma.WriteErr(r.api, ctx, http.StatusUnauthorized, "a gateway credential is required (DPCS_GATEWAY_TOKENS)")
		return
	}
	next(ctx)
}

// UsageEvent is one usage event a gateway asks about: the DATA_USAGE
// envelope's id and timestamp with its payload's fields.
type UsageEvent struct {
	EventID    string         `json:"eventId" minLength:"1" maxLength:"200" doc:"The event's unique id: a retry with the same id gets the same answer (duplicate: true) and is charged once" example:"evt_3f6c1f0e-8a53-4c47-9f0e-2b1d7c1e9a10"`
	Timestamp  time.Time      `json:"timestamp" doc:"When the usage happened: windows, days and months are judged at it; at most 23 h old and 5 min ahead"`
	FamilyID   int64          `json:"familyId" minimum:"1"`
	CustomerID int64          `json:"customerId" minimum:"1"`
	AppID      string         `json:"appId" minLength:"1" maxLength:"189" doc:"The app id, at most 189 bytes" example:"com.youtube.app"`
	BytesUsed  int64          `json:"bytesUsed" minimum:"0" maximum:"70368744177664"`
	Metadata   map[string]any `json:"metadata,omitempty" doc:"Optional, e.g. deviceId, networkType"`
}

// DecisionAsk is the body of POST /decisions: one event or a batch.
type DecisionAsk struct {
	Events []UsageEvent `json:"events" minItems:"1" maxItems:"1000" doc:"One event, or a batch judged in order"`
}

// EventDecision is the engine's answer about one event.
type EventDecision struct {
	EventID  string          `json:"eventId"`
	Decision policy.Decision `json:"decision" enum:"ALLOWED,BLOCKED_NOT_MEMBER,BLOCKED_ACCESS,BLOCKED_APP,BLOCKED_TIME,BLOCKED_LIMIT_DAILY,BLOCKED_LIMIT_MONTHLY,BLOCKED_FAMILY_QUOTA,BLOCKED_APP_LIMIT"`
	Rule     string          `json:"rule,omitempty" doc:"What decided a block; empty when allowed"`
	// Duplicate marks a retry: the original answer, nothing charged again.
	Duplicate        bool  `json:"duplicate" doc:"The event id was judged before: this is the original answer and nothing was charged again"`
	RemainingBytes   int64 `json:"remainingBytes" doc:"The family pool's remaining bytes after the event"`
	TotalBytes       int64 `json:"totalBytes" doc:"The month's pool: plan plus top-ups"`
	DailyUsedBytes   int64 `json:"dailyUsedBytes"`
	MonthlyUsedBytes int64 `json:"monthlyUsedBytes"`
	ThrottleKbps     int64 `json:"throttleKbps,omitempty" doc:"The member's speed limit, with ALLOWED only"`
}

// DecisionList answers POST /decisions: one decision per event, in order.
type DecisionList struct {
	Decisions []EventDecision `json:"decisions"`
}

type decideInput struct {
	Body DecisionAsk
}

type decideOutput struct {
	Body DecisionList
}

// Register registers POST /decisions on api. Every operation secured by
// Scheme must be authenticated by the returned Route's Authenticate.
func Register(api huma.API, cfg Config) *Route {
	r := &Route{api: api, cfg: cfg, keys: newGatewayKeys(cfg.Tokens)}
	huma.Register(api, huma.Operation{OperationID: Operation, Method: http.MethodPost, Path: "/decisions",
		Tags: []string{Tag}, Security: gatewaySecured(),
		Summary: "Decide usage events synchronously",
		Description: "For gateways that must ask before granting (as online charging does): judges one usage event or a " +
			"batch, in order, and answers each with its decision, the pool's remaining bytes and the deciding rule. " +
			"Concurrent requests are judged together in one pipeline. Idempotent by eventId: a retry gets the original " +
			"answer with duplicate: true. Answered only once the decisions' records (usage history, notifications) are " +
			"stored: in Kafka or, while Kafka is down, in the SQL outbox. A 503 leaves no charge: when Redis cannot be " +
			"trusted, or while an earlier batch's records can be stored nowhere (that batch's callers wait for it), " +
			"nothing is judged — retry with the same event ids (an event judged before is answered as a duplicate, " +
			"charged once); only a server stopping during such a wait answers 503 \"judged and counted\". " +
			"Authorised by a gateway credential (DPCS_GATEWAY_TOKENS), not a member's access token.",
		MaxBodyBytes: decideMaxBody, BodyReadTimeout: decideReadTimeout,
		Middlewares: huma.Middlewares{r.decideFast},
		Errors:      []int{http.StatusUnauthorized, http.StatusUnprocessableEntity, http.StatusServiceUnavailable}},
		func(ctx context.Context, in *decideInput) (*decideOutput, error) {
			if r.cfg.Decisions == nil {
				return nil, huma.Error503ServiceUnavailable("synchronous decisions are not enabled on this instance")
			}
			if len(in.Body.Events) == 0 {
				return nil, huma.Error422UnprocessableEntity("validation failed",
					&huma.ErrorDetail{Location: "body.events", Message: "at least one event"})
			}
			envs := make([]envelope.Envelope[envelope.UsagePayload], len(in.Body.Events))
			for i, e := range in.Body.Events {
				envs[i] = envelope.New(e.EventID, e.Timestamp, envelope.UsagePayload{FamilyID: e.FamilyID,
					CustomerID: e.CustomerID, AppID: e.AppID, BytesUsed: e.BytesUsed, Metadata: e.Metadata})
			}
			results, err := r.cfg.Decisions.Decide(ctx, envs)
			if err != nil {
				return nil, r.cfg.Problem(ctx, err, "body")
			}
			out := &decideOutput{Body: DecisionList{Decisions: make([]EventDecision, len(results))}}
			for i, res := range results {
				out.Body.Decisions[i] = EventDecision{EventID: envs[i].EventID, Decision: res.Decision, Rule: res.Rule,
					Duplicate: res.Duplicate, RemainingBytes: res.Remaining, TotalBytes: res.Total, DailyUsedBytes: res.DailyUsed,
					MonthlyUsedBytes: res.MonthlyUsed, ThrottleKbps: res.ThrottleKbps}
			}
			return out, nil
		})
	return r
}
