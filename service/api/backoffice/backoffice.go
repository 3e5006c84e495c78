package backoffice

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// Tag is the back-office operations' tag.
const Tag = "admin"

// Config is what the back-office routes need: what they read and change,
// and four functions of the API they are registered on.
type Config struct {
	// Store is read for what the routes show. Required.
	Store *store.Store
	// Family makes the family changes (create, plan, template apply and
	// re-apply). Required.
	Family *family.Service
	// DeadLetters is the dead-letter browser's Kafka side. Nil: the
	// dead-letter routes answer 503.
	DeadLetters DeadLetters
	// KafkaStats gives the operations view the consumer groups' lags and
	// the DLTs' record counts. Nil: the view shows only the metrics.
	KafkaStats KafkaStats
	// OperationsMetrics are where the operations view reads DPCS's metrics
	// (a registry, a MetricsScraper per remote process).
	OperationsMetrics []prometheus.Gatherer
	// Clock stamps the operations view's samples. Default: time.Now.
	Clock func() time.Time
	// Logger reports what a route answers without failing. Default: discard.
	Logger *slog.Logger

	// Admin authorizes a back-office request — ADMIN, or AGENT for reading
	// — and returns the actor it is audited as, or the 401/403 to answer.
	// Required.
	Admin func(ctx context.Context) (store.Actor, error)
	// Problem maps an error to the API's RFC 9457 problem, loc naming the
	// request part at fault. Required.
	Problem func(ctx context.Context, err error, loc string) error
	// PolicyView is the API's view of a policy change's result. Required.
	PolicyView func(family.PolicyResult) view.PolicyView
	// Period resolves a usage report's period (period, or from and to), or
	// returns the 422 to answer. Required.
	Period func(period string, from, to time.Time) (time.Time, time.Time, error)
}

// routes are the registered back-office routes.
type routes struct {
	api huma.API
	cfg Config
	log *slog.Logger
	// ops keeps the operations view's samples.
	ops opsSampler
}

// Register validates cfg and registers the back-office routes on api, each
// secured by the access token (view.BearerScheme) and tagged Tag.
func Register(api huma.API, cfg Config) error {
	if cfg.Store == nil || cfg.Family == nil || cfg.Admin == nil || cfg.Problem == nil || cfg.PolicyView == nil || cfg.Period == nil {
		return errors.New("backoffice: Config.Store, Family, Admin, Problem, PolicyView and Period are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &routes{api: api, cfg: cfg, log: cfg.Logger}
	a.registerAdmin()
	a.registerDrift()
	a.registerOps()
	return nil
}

func (a *routes) admin(ctx context.Context) (store.Actor, error) { return a.cfg.Admin(ctx) }

func (a *routes) problem(ctx context.Context, err error, loc string) error {
	return a.cfg.Problem(ctx, err, loc)
}

func (a *routes) policyResult(r family.PolicyResult) view.PolicyView { return a.cfg.PolicyView(r) }

func (a *routes) period(period string, from, to time.Time) (time.Time, time.Time, error) {
	return a.cfg.Period(period, from, to)
}

// FamilyPath is the path of a family's back-office route.
type FamilyPath struct {
	FamilyID int64 `path:"familyId" minimum:"1" doc:"Family id"`
}

type policyOutput struct{ Body view.PolicyView }
