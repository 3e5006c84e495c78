package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api/backoffice"
	"github.com/dabom/dpcs/service/api/gateway"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/web"
)

// Defaults of Config.
const (
	DefaultAccessTTL    = 30 * time.Minute
	DefaultRefreshTTL   = 7 * 24 * time.Hour
	DefaultPingInterval = 15 * time.Second
	// DefaultOwnerTopUpMax and DefaultOwnerTopUpMonthly bound owners'
	// top-ups: 10 GiB per top-up, 50 GiB a month per family.
	DefaultOwnerTopUpMax     = int64(10) << 30
	DefaultOwnerTopUpMonthly = int64(50) << 30
)

// QuotaReader is what the API reads of the quota state: the door's reads
// (*judge.State). The API changes the state only through Family.
type QuotaReader interface {
	Family(ctx context.Context, fid int64) (quota.FamilyStatus, error)
	Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error)
	Location() *time.Location
}

var _ QuotaReader = (*judge.State)(nil)

// Config holds what the HTTP API needs. Store, State, Family, Hub, Inbox
// and Secret are required.
type Config struct {
	// Store is read for what the API shows; every change goes through
	// Family.
	Store *store.Store
	// State is read for the quota state's snapshots and standings.
	State QuotaReader
	// Family makes every change to a family (the application layer).
	Family *family.Service
	Hub    *notify.Hub
	Inbox  *notify.SQLInbox
	// Secret signs access tokens (HS256, the only algorithm accepted); at
	// least 32 bytes.
	Secret []byte
	// Clock stamps and checks access tokens. Default: time.Now.
	Clock func() time.Time
	// Logger reports internal errors behind 500 answers. Default: discard.
	Logger *slog.Logger
	// AccessTTL is the access token's lifetime. Default: 30 min.
	AccessTTL time.Duration
	// RefreshTTL is the refresh token's lifetime. Default: 7 days.
	RefreshTTL time.Duration
	// PingInterval is how often an idle SSE stream sends a ping event and
	// checks its access against the store again (member removed, role
	// changed, session ended: the stream ends). Default: 15 s.
	PingInterval time.Duration
	// AccessEvents carries member removals, role changes and ended sessions
	// to every API instance, each of which ends the SSE streams they
	// concern at once. Several instances must share one (a
	// access.Redis); its owner closes it after the API's server.
	// Default: access.NewLocal(), this instance only.
	AccessEvents access.Events
	// Streams bound the live SSE streams this instance holds; zero fields
	// take StreamLimits' defaults.
	Streams StreamLimits
	// OnRequest, when set, is told of every operation answered (the
	// service's metrics measure dpcs_api_request_seconds with it). It runs
	// first, so it sees authentication failures too. Default: none.
	OnRequest func(RequestInfo)
	// Title and Version name the OpenAPI document. Default: "DPCS API", "1.0.0".
	Title, Version string
	// ServerURL is the OpenAPI document's server: the URL clients prefix to
	// every path. Default: "/", the host (and scheme) the document was read
	// from; set the public base URL when a proxy serves the API under a path.
	ServerURL string
	// OwnerTopUpMax is the most an OWNER may add to the family's pool in one
	// top-up, and OwnerTopUpMonthly the most the family's own members may
	// add in a month, all together (admins are bounded only by the pool's
	// maximum, policy.MaxBytes). Defaults: 10 GiB and 50 GiB. Negative (in
	// either): owners may not top up at all (403).
	OwnerTopUpMax, OwnerTopUpMonthly int64
	// OnCatalogChange, when set, is told the engine's app catalog (app id →
	// category) after the back office changed it: the service gives it to
	// this process's judges (judge.Apps.Set). Default: none.
	OnCatalogChange func(policy.Catalog)
	// VATRate is the VAT in the offers' prices, in percent (receipts show
	// it). Default: DefaultVATRate; negative: no VAT.
	VATRate int
	// GiftRate is how many gift requests one member may send (429 beyond).
	// Default: DefaultGiftRate.
	GiftRate limit.Rate
	// TopUpOffers are the top-ups the family app offers, with their prices
	// (GET /catalog): what a carrier sells. Default: DefaultTopUpOffers().
	TopUpOffers []TopUpOffer
	// Build is what GET /version answers. Default: this binary's
	// (BuildVersion).
	Build VersionInfo
	// Limiter keeps the brute-force counters of /auth/token and
	// /auth/refresh. Default: a MemoryLimiter on Clock, which is this
	// process's alone: give every instance of a scaled-out API one
	// RedisLimiter on their shared Redis.
	Limiter limit.Limiter
	// Limits are the brute-force limits; zero fields take AuthLimits'
	// defaults.
	Limits AuthLimits
	// TrustedProxies are the proxies whose X-Forwarded-For is believed when
	// telling the client address of a request. Default: none, the client
	// address is the peer's (r.RemoteAddr) and X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// DeadLetters is the dead-letter browser's Kafka side (a
	// kafkaops.BackOffice). Default: none; /admin/dead-letters answers 503.
	DeadLetters backoffice.DeadLetters
	// KafkaStats gives the operations view (GET /admin/operations) the
	// consumer groups' lags and the DLTs' record counts (a
	// kafkaops.BackOffice). Default: none; the view shows only the metrics.
	KafkaStats backoffice.KafkaStats
	// OperationsMetrics are where the operations view reads DPCS's
	// metrics: this process's registry (all-in-one) and/or a
	// backoffice.MetricsScraper per processor's admin /metrics. Default: none.
	OperationsMetrics []prometheus.Gatherer
	// NoWeb leaves out the embedded web front-ends (package web: the family
	// app under /app/, the back office under /console/). Default: served.
	NoWeb bool
	// VAPIDPublicKey is the Web Push application server key (base64url)
	// GET /push/vapid-public-key answers; the notifier's web push channel
	// must sign with its private key. Default: "" (that route answers 404;
	// browsers can still store subscriptions).
	VAPIDPublicKey string
	// AllowLoopbackPush accepts push subscriptions whose endpoint is on a
	// loopback host, http too (tests with a local push service). Default:
	// https to public hosts only.
	AllowLoopbackPush bool
	// MaxPushSubscriptions is how many push subscriptions one member may
	// have; a new endpoint beyond it is refused (409). Default:
	// DefaultMaxPushSubscriptions.
	MaxPushSubscriptions int
	// Decisions answers POST /decisions (synchronous decisions for
	// gateways). Default: nil, the route answers 503.
	Decisions *judge.Decisions
	// GatewayTokens are the credentials gateways send as `Authorization:
	// Bearer …` to POST /decisions, and only there. Default: none, every
	// call of the route is refused (401).
	GatewayTokens []string
}

// Server is DPCS's HTTP API (doc/deploy.md, "The binaries"): huma v2 on a net/http ServeMux, OpenAPI
// 3.1 at /openapi.json and /openapi.yaml, docs at /docs.
//
// Authorization (doc/security.md, "Who can do what"): a MEMBER sees its own family (dashboard, its own
// usage and policies read-only, the inbox); an OWNER manages its family; an
// ADMIN (a member row with role ADMIN and no family) sees every family and the
// back office. A request about another family answers 404 exactly as a family
// that does not exist, so a caller never learns whether it exists; 403 is only
// answered inside the caller's own family (a MEMBER attempting an owner's
// action) and on /admin routes for non-admins.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	api     huma.API
	log     *slog.Logger
	now     func() time.Time
	streams *liveStreams
	// guard limits /auth/token and /auth/refresh.
	guard authGuard
	// gateway is POST /decisions.
	gateway *gateway.Route
}

// NewAPI validates cfg and registers every route.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("api: Config.Store is required")
	case cfg.State == nil:
		return nil, errors.New("api: Config.State is required")
	case cfg.Family == nil:
		return nil, errors.New("api: Config.Family is required")
	case cfg.Hub == nil:
		return nil, errors.New("api: Config.Hub is required")
	case cfg.Inbox == nil:
		return nil, errors.New("api: Config.Inbox is required")
	case len(cfg.Secret) < 32:
		return nil, errors.New("api: Config.Secret must be at least 32 bytes")
	case cfg.AccessTTL < 0 || cfg.RefreshTTL < 0 || cfg.PingInterval < 0:
		return nil, errors.New("api: Config durations must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AccessTTL == 0 {
		cfg.AccessTTL = DefaultAccessTTL
	}
	if cfg.RefreshTTL == 0 {
		cfg.RefreshTTL = DefaultRefreshTTL
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.OwnerTopUpMax == 0 {
		cfg.OwnerTopUpMax = DefaultOwnerTopUpMax
	}
	if cfg.OwnerTopUpMonthly == 0 {
		cfg.OwnerTopUpMonthly = DefaultOwnerTopUpMonthly
	}
	if cfg.TopUpOffers == nil {
		cfg.TopUpOffers = DefaultTopUpOffers()
	}
	switch {
	case cfg.VATRate == 0:
		cfg.VATRate = DefaultVATRate
	case cfg.VATRate > 100:
		return nil, errors.New("api: Config.VATRate must be at most 100 (percent)")
	}
	if cfg.GiftRate == (limit.Rate{}) {
		cfg.GiftRate = DefaultGiftRate
	}
	if err := cfg.GiftRate.Check(); err != nil {
		return nil, fmt.Errorf("api: Config.GiftRate: %w", err)
	}
	if cfg.Title == "" {
		cfg.Title = "DPCS API"
	}
	if cfg.Version == "" {
		cfg.Version = "1.0.0"
	}
	if cfg.ServerURL == "" {
		cfg.ServerURL = "/"
	}
	if cfg.AccessEvents == nil {
		cfg.AccessEvents = access.NewLocal()
	}
	cfg.Secret = append([]byte(nil), cfg.Secret...)
	guard, err := newAuthGuard(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Streams, err = cfg.Streams.withDefaults(); err != nil {
		return nil, err
	}
	a := &Server{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger, now: cfg.Clock, guard: guard, streams: newLiveStreams(cfg.Streams)}
	// The API lives as long as the process that made it: the subscription
	// ends when that process closes cfg.AccessEvents.
	cfg.AccessEvents.Subscribe(a.streams.kick)

	hc := huma.DefaultConfig(cfg.Title, cfg.Version)
	hc.CreateHooks = nil // no $schema fields / Link headers in responses
	// Problems never echo what was sent nor Go's texts (problems.go).
	hc.Formats = map[string]huma.Format{"application/json": jsonFormat(), "json": jsonFormat()}
	hc.Transformers = append(hc.Transformers, cleanProblem)
	hc.Info.Description = "Data Pool Control System: family data pools, member policies, alerts and notifications. " +
		"Authenticate with POST /auth/token and send the access token as `Authorization: Bearer …`. " +
		"Requests about another family answer 404 as if it did not exist."
	hc.Info.License = &huma.License{Name: "Apache-2.0", Identifier: "Apache-2.0"}
	hc.Servers = []*huma.Server{{URL: cfg.ServerURL, Description: "This API"}}
	hc.Tags = apiTags()
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		bearerScheme: {Type: "http", Scheme: "bearer", BearerFormat: "JWT",
			Description: "Access token from POST /auth/token or /auth/refresh (HS256, 30 min)."},
		gateway.Scheme: gateway.SecurityScheme(),
	}
	a.api = humago.New(a.mux, hc)
	if cfg.OnRequest != nil {
		a.api.UseMiddleware(a.measure) // first: it sees authentication failures too
	}
	a.api.UseMiddleware(a.authenticate, a.limitAddress)

	a.registerAuth()
	a.registerPasswords()
	a.registerFamily()
	a.registerTopUps()
	a.registerRequests()
	a.registerStream()
	a.registerPush()
	if err := backoffice.Register(a.api, backoffice.Config{Store: cfg.Store, Family: cfg.Family, DeadLetters: cfg.DeadLetters,
		KafkaStats: cfg.KafkaStats, OperationsMetrics: cfg.OperationsMetrics, Clock: cfg.Clock, Logger: cfg.Logger,
		Admin: func(ctx context.Context) (store.Actor, error) {
			p, err := a.admin(ctx)
			return p.actor(), err
		},
		Problem: a.problem, PolicyView: a.policyResult, Period: a.period}); err != nil {
		return nil, err
	}
	a.registerSubscribers()
	a.registerVersion()
	gw := gateway.Config{Tokens: cfg.GatewayTokens, Problem: a.problem}
	if cfg.Decisions != nil {
		gw.Decisions = cfg.Decisions
	}
	a.gateway = gateway.Register(a.api, gw)
	a.registerCatalog()
	a.registerLogins()
	a.registerGifts()
	a.registerNotes()
	if !cfg.NoWeb {
		ui := web.Handler()
		for _, p := range web.Prefixes() {
			a.mux.Handle(p, ui)
			a.mux.Handle(strings.TrimSuffix(p, "/"), ui)
		}
	}
	return a, nil
}

// Handler returns the HTTP handler serving the API, its OpenAPI document and
// docs. SSE routes stream for as long as the access that opened them lasts:
// serve it with NewHTTPServer, whose timeouts spare the stream (StreamRequest).
func (a *Server) Handler() http.Handler { return a.mux }

// OpenAPI returns the API's OpenAPI document.
func (a *Server) OpenAPI() *huma.OpenAPI { return a.api.OpenAPI() }

const bearerScheme = view.BearerScheme

// secured is the Security of every operation needing an access token.
func secured() []map[string][]string { return view.Secured() }

// Text and MultilineText are the field types of text people write
// (view.Text, view.MultilineText).
type (
	Text          = view.Text
	MultilineText = view.MultilineText
)

// public is the Security of an operation anyone may call: an empty, non-nil
// list, which the document shows as `security: []` (no requirement) so
// clients and linters know no token is wanted.
func public() []map[string][]string { return []map[string][]string{} }

// Operation tags, each declared with its description in the document.
const (
	authTag          = "auth"
	familiesTag      = "families"
	notificationsTag = "notifications"
	adminTag         = backoffice.Tag
	systemTag        = "system"
)

func apiTags() []*huma.Tag {
	return []*huma.Tag{
		{Name: authTag, Description: "Sessions and passwords: log in with a member id or phone and a password, rotate the refresh token, log out (public: no access token is needed), and change one's own password."},
		{Name: familiesTag, Description: "A family's dashboard, members, usage, policies, alert thresholds and top-ups. Members read; owners (and admins) change."},
		{Name: notificationsTag, Description: "The caller's inbox of alerts and policy changes, and the same notifications live over server-sent events."},
		{Name: adminTag, Description: "The back office, for ADMIN accounts only: policy templates and their drift, family search and provisioning, plans, usage reports, the audit log, the dead-letter browser and the operations view."},
		gateway.APITag(),
		{Name: systemTag, Description: "What is serving: the build behind the API. Public."},
	}
}

// problem maps an error of the store, the engine, the inbox or the policy
// package to an RFC 9457 problem — the one place domain errors become HTTP
// statuses. loc names the request part (e.g. "body.set") validation errors
// are reported under; errors that are already huma status errors pass
// through.
//
// Error policy: an answer's texts are written for the caller and say what it
// can fix. They come from this package's fixed strings or from errors built
// to be shown — *policy.FieldError (the caller's own constraint keys and
// values), *store.FieldError (Field and Msg; never database text, never
// another family's rows), *store.PoolLimitError — and never from an error's
// own Error() text, which carries package prefixes ("store: …") and driver
// or database messages. Anything else is answered with a generic text and
// logged.
func (a *Server) problem(ctx context.Context, err error, loc string) error {
	var se huma.StatusError
	var fe *store.FieldError
	var ie *judge.InvalidEventError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return err
	case errors.As(err, &ie): // before ErrInvalid, which it wraps
		return huma.Error422UnprocessableEntity("validation failed",
			&huma.ErrorDetail{Location: "body.events[" + strconv.Itoa(ie.Index) + "]." + strings.TrimPrefix(ie.Field, "payload."),
				Message: ie.Reason})
	// Before ErrStale, which its cause may be.
	case errors.Is(err, judge.ErrPartlyJudged):
		a.log.WarnContext(ctx, "api: decisions partly judged", "err", err)
		return huma.Error503ServiceUnavailable("some of these events were judged and counted, the others could not be " +
			"judged now: retry with the same event ids for every answer")
	// A family change SQL committed whose door step failed: in effect
	// before the family's next judgement (judge.ErrUnsettled).
	case errors.Is(err, judge.ErrUnsettled):
		a.log.WarnContext(ctx, "api: family change recorded, not yet applied to the quota state", "err", err)
		return huma.Error503ServiceUnavailable("the change is recorded and takes effect before the family's next " +
			"decision: read it back before repeating it")
	// The decisions fail closed: 503, nothing granted.
	case errors.Is(err, quota.ErrStale):
		a.log.WarnContext(ctx, "api: the Redis state cannot be trusted", "err", err)
		return huma.Error503ServiceUnavailable("the quota state is being rebuilt: nothing granted, retry shortly")
	case errors.Is(err, quota.ErrNotReplicated) && !errors.Is(err, judge.ErrUnavailable):
		// A family write (DPCS_REDIS_REPLICA_ACK): SQL recorded it and the
		// primary applied it; a failover now could lose it until a rebuild.
		a.log.WarnContext(ctx, "api: family write not acknowledged by Redis replicas", "err", err)
		return huma.Error503ServiceUnavailable("the change is recorded and in effect, but not yet copied to the quota " +
			"state's replicas: read it back before repeating it")
	case errors.Is(err, family.ErrNotApplied):
		return huma.Error503ServiceUnavailable("the change is recorded, but the quota state did not take it yet: it " +
			"takes effect once it does; read it back before repeating it")
	case errors.Is(err, judge.ErrNotMarked):
		a.log.ErrorContext(ctx, "api: family write applied but its mark not recorded", "err", err)
		return huma.Error503ServiceUnavailable("the change is recorded and in effect, but its protection against a " +
			"loss of the quota state could not be recorded: read it back before repeating it")
	case errors.Is(err, judge.ErrNotRecorded):
		a.log.ErrorContext(ctx, "api: decisions judged but not recorded", "err", err)
		return huma.Error503ServiceUnavailable("judged and counted, but the decisions' records are not stored yet: " +
			"retry with the same event ids for the answers")
	case errors.Is(err, judge.ErrKafkaUnavailable):
		return huma.Error503ServiceUnavailable("the decisions' records cannot be stored now: nothing granted, retry with the same event ids")
	case errors.Is(err, judge.ErrUnavailable), errors.Is(err, judge.ErrDecisionsClosed):
		a.log.ErrorContext(ctx, "api: cannot decide", "err", err)
		return huma.Error503ServiceUnavailable("cannot decide now: nothing granted, retry with the same event ids")
	case errors.Is(err, store.ErrBadCredentials):
		return huma.Error401Unauthorized("bad credentials")
	case errors.Is(err, store.ErrTokenReused):
		return huma.Error401Unauthorized("refresh token reused: the session is revoked")
	case errors.Is(err, store.ErrTokenExpired):
		return huma.Error401Unauthorized("refresh token expired")
	case errors.Is(err, store.ErrNotFound), errors.Is(err, notify.ErrNotFound):
		return huma.Error404NotFound(notFoundText(err))
	case errors.Is(err, store.ErrStaleVersion):
		msg := "not the current version: read the policy again and retry"
		if errors.As(err, &fe) {
			msg = fe.Msg
		}
		return huma.Error409Conflict("the policy was changed since it was read",
			&huma.ErrorDetail{Location: "body.expectedVersion", Message: msg})
	case errors.Is(err, store.ErrConflict):
		if errors.As(err, &fe) && fe.Kind == store.ErrConflict {
			return huma.Error409Conflict(fe.Msg, &huma.ErrorDetail{Location: at(loc, fe.Field), Message: fe.Msg})
		}
		a.log.WarnContext(ctx, "api: conflict without a text for the caller", "err", err)
		return huma.Error409Conflict("the change conflicts with the current data: read it again and retry")
	case errors.Is(err, store.ErrInvalid), errors.Is(err, policy.ErrInvalid),
		errors.Is(err, quota.ErrInvalid), errors.Is(err, notify.ErrInvalid):
		details := fieldDetails(err, loc)
		if len(details) == 0 {
			a.log.WarnContext(ctx, "api: refusal without a text for the caller", "err", err)
			details = append(details, &huma.ErrorDetail{Location: loc, Message: "value not accepted"})
		}
		return huma.Error422UnprocessableEntity("validation failed", details...)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return huma.NewError(http.StatusServiceUnavailable, "request cancelled or timed out")
	}
	a.log.ErrorContext(ctx, "api: internal error", "err", err)
	return huma.Error500InternalServerError("internal error")
}

// notFoundText keeps 404 texts uniform: never more than what was asked about.
func notFoundText(err error) string {
	if errors.Is(err, notify.ErrNotFound) {
		return "notification not found"
	}
	return "not found"
}

// at is the location of field under loc: loc itself when it already names
// the field ("body.bytes", "bytes"), else loc.field.
func at(loc, field string) string {
	switch {
	case field == "" || loc == field || strings.HasSuffix(loc, "."+field):
		return loc
	case loc == "":
		return field
	}
	return loc + "." + field
}

// fieldDetails lists the refusals in err's tree written for the caller —
// *policy.FieldError, *store.FieldError, *store.PoolLimitError — each as an
// error detail located at loc.<field>; none when err holds none of them.
func fieldDetails(err error, loc string) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case *policy.FieldError:
			out = append(out, &huma.ErrorDetail{Location: at(loc, x.Field), Message: x.Error()})
			return
		case *store.FieldError:
			out = append(out, &huma.ErrorDetail{Location: at(loc, x.Field), Message: x.Msg})
			return
		case *store.PoolLimitError:
			out = append(out, &huma.ErrorDetail{Location: at(loc, x.Field), Message: x.Error()})
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// errNotFamily is what a caller gets for a family it may not see.
func errNotFamily(fid int64) error {
	return huma.Error404NotFound(fmt.Sprintf("family %d not found", fid))
}

// RequestInfo describes an answered operation, for Config.OnRequest.
type RequestInfo struct {
	// Operation is the OpenAPI operation id (never the raw path, so ids in
	// paths do not multiply metric series).
	Operation string
	Status    int
	Duration  time.Duration
}

// measure tells OnRequest of every operation answered.
func (a *Server) measure(ctx huma.Context, next func(huma.Context)) {
	start := time.Now()
	next(ctx)
	status := ctx.Status()
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	a.cfg.OnRequest(RequestInfo{Operation: ctx.Operation().OperationID, Status: status, Duration: time.Since(start)})
}
