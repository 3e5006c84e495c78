package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// Defaults of APIConfig.
const (
	DefaultAccessTTL    = 30 * time.Minute
	DefaultRefreshTTL   = 7 * 24 * time.Hour
	DefaultPingInterval = 15 * time.Second
)

// APIConfig holds what the HTTP API needs. Store, Engine, Hub, Inbox and
// Secret are required.
type APIConfig struct {
	Store  *store.Store
	Engine *quota.Engine
	Hub    *notify.Hub
	Inbox  *notify.SQLInbox
	// Wake tells the outbox relay a policy change is waiting (store.Relay.Wake).
	// Default: nil, the relay polls on its own interval.
	Wake func()
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
	// PingInterval is how often an idle SSE stream sends a ping event.
	// Default: 15 s.
	PingInterval time.Duration
	// Metrics, when set, measures every operation (dpcs_api_request_seconds
	// by operation id and status). Default: none.
	Metrics *Metrics
	// Title and Version name the OpenAPI document. Default: "DPCS API", "1.0.0".
	Title, Version string
}

// API is DPCS's HTTP API (SPEC §10): huma v2 on a net/http ServeMux, OpenAPI
// 3.1 at /openapi.json and /openapi.yaml, docs at /docs.
//
// Authorization (SPEC §4): a MEMBER sees its own family (dashboard, its own
// usage and policies read-only, the inbox); an OWNER manages its family; an
// ADMIN (a member row with role ADMIN and no family) sees every family and the
// back office. A request about another family answers 404 exactly as a family
// that does not exist, so a caller never learns whether it exists; 403 is only
// answered inside the caller's own family (a MEMBER attempting an owner's
// action) and on /admin routes for non-admins.
type API struct {
	cfg  APIConfig
	mux  *http.ServeMux
	api  huma.API
	log  *slog.Logger
	now  func() time.Time
	wake func()
}

// NewAPI validates cfg and registers every route.
func NewAPI(cfg APIConfig) (*API, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("service: APIConfig.Store is required")
	case cfg.Engine == nil:
		return nil, errors.New("service: APIConfig.Engine is required")
	case cfg.Hub == nil:
		return nil, errors.New("service: APIConfig.Hub is required")
	case cfg.Inbox == nil:
		return nil, errors.New("service: APIConfig.Inbox is required")
	case len(cfg.Secret) < 32:
		return nil, errors.New("service: APIConfig.Secret must be at least 32 bytes")
	case cfg.AccessTTL < 0 || cfg.RefreshTTL < 0 || cfg.PingInterval < 0:
		return nil, errors.New("service: APIConfig durations must not be negative")
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
	if cfg.Title == "" {
		cfg.Title = "DPCS API"
	}
	if cfg.Version == "" {
		cfg.Version = "1.0.0"
	}
	cfg.Secret = append([]byte(nil), cfg.Secret...)
	a := &API{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger, now: cfg.Clock, wake: cfg.Wake}
	if a.wake == nil {
		a.wake = func() {}
	}

	hc := huma.DefaultConfig(cfg.Title, cfg.Version)
	hc.CreateHooks = nil // no $schema fields / Link headers in responses
	hc.Info.Description = "Data Pool Control System: family data pools, member policies, alerts and notifications. " +
		"Authenticate with POST /auth/token and send the access token as `Authorization: Bearer …`. " +
		"Requests about another family answer 404 as if it did not exist."
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		bearerScheme: {Type: "http", Scheme: "bearer", BearerFormat: "JWT",
			Description: "Access token from POST /auth/token or /auth/refresh (HS256, 30 min)."},
	}
	a.api = humago.New(a.mux, hc)
	if cfg.Metrics != nil {
		a.api.UseMiddleware(cfg.Metrics.apiMiddleware) // first: it sees authentication failures too
	}
	a.api.UseMiddleware(a.authenticate)

	a.registerAuth()
	a.registerFamily()
	a.registerStream()
	a.registerAdmin()
	return a, nil
}

// Handler returns the HTTP handler serving the API, its OpenAPI document and
// docs. SSE routes stream for as long as the client listens: serve it from an
// http.Server without WriteTimeout.
func (a *API) Handler() http.Handler { return a.mux }

// OpenAPI returns the API's OpenAPI document.
func (a *API) OpenAPI() *huma.OpenAPI { return a.api.OpenAPI() }

const bearerScheme = "bearer"

// secured is the Security of every operation needing an access token.
func secured() []map[string][]string { return []map[string][]string{{bearerScheme: {}}} }

// problem maps an error of the store, the engine, the inbox or the policy
// package to an RFC 9457 problem — the one place domain errors become HTTP
// statuses. loc names the request part (e.g. "body.set") validation errors of
// policy keys are reported under; errors that are already huma status errors
// pass through.
func (a *API) problem(ctx context.Context, err error, loc string) error {
	var se huma.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return err
	case errors.Is(err, store.ErrBadCredentials):
		return huma.Error401Unauthorized("bad credentials")
	case errors.Is(err, store.ErrTokenReused):
		return huma.Error401Unauthorized("refresh token reused: the session is revoked")
	case errors.Is(err, store.ErrTokenExpired):
		return huma.Error401Unauthorized("refresh token expired")
	case errors.Is(err, store.ErrNotFound), errors.Is(err, notify.ErrNotFound):
		return huma.Error404NotFound(notFoundText(err))
	case errors.Is(err, store.ErrStaleVersion):
		return huma.Error409Conflict(err.Error(), &huma.ErrorDetail{Location: "body.expectedVersion", Message: "not the current version"})
	case errors.Is(err, store.ErrConflict):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, store.ErrInvalid), errors.Is(err, policy.ErrInvalid),
		errors.Is(err, quota.ErrInvalid), errors.Is(err, notify.ErrInvalid):
		return huma.Error422UnprocessableEntity("validation failed", fieldDetails(err, loc)...)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return huma.NewError(http.StatusServiceUnavailable, "request cancelled or timed out")
	}
	a.log.ErrorContext(ctx, "api: internal error", "err", err)
	return huma.Error500InternalServerError("internal error")
}

// notFoundText keeps 404 texts uniform: the store's message may name a
// family or member id the caller asked about, never more.
func notFoundText(err error) string {
	if errors.Is(err, notify.ErrNotFound) {
		return "notification not found"
	}
	return "not found"
}

// fieldDetails lists every *policy.FieldError in err's tree as an error
// detail located at loc.<key>; without any, one detail with err's text at loc.
func fieldDetails(err error, loc string) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		var fe *policy.FieldError
		if errors.As(e, &fe) && e == error(fe) {
			l := loc
			if fe.Field != "" {
				l = loc + "." + fe.Field
			}
			out = append(out, &huma.ErrorDetail{Location: l, Message: fe.Error()})
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
	if len(out) == 0 {
		out = append(out, &huma.ErrorDetail{Location: loc, Message: err.Error()})
	}
	return out
}

// errNotFamily is what a caller gets for a family it may not see.
func errNotFamily(fid int64) error {
	return huma.Error404NotFound(fmt.Sprintf("family %d not found", fid))
}
