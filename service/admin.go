package service

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/dabom/dpcs/service/judge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// NotReadyError is a readiness check's answer: What is said to anyone who
// asks (/readyz is anonymous), Err (addresses, driver messages) only logged.
type NotReadyError struct {
	What string
	Err  error
}

func (e *NotReadyError) Error() string {
	if e.Err == nil {
		return e.What
	}
	return e.What + ": " + e.Err.Error()
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// Ready returns the readiness check of a deployable: Redis and SQL answer
// and, when proc is not nil, the processor is not paused on an untrusted
// Redis state. It answers *NotReadyError; the raw error is logged to log (if
// not nil), never answered.
func Ready(rdb redis.UniversalClient, db *sql.DB, proc *judge.Processor, log *slog.Logger) func(context.Context) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	notReady := func(ctx context.Context, what string, err error) error {
		if err != nil {
			log.WarnContext(ctx, "readyz: not ready", "what", what, "err", err)
		}
		return &NotReadyError{What: what, Err: err}
	}
	return func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return notReady(ctx, "redis unreachable", err)
		}
		if err := db.PingContext(ctx); err != nil {
			return notReady(ctx, "sql unreachable", err)
		}
		if proc != nil && proc.Stale() {
			return notReady(ctx, "redis state being rebuilt from sql; judging paused", nil)
		}
		return nil
	}
}

// AdminHandler serves a deployable's admin endpoints: GET /healthz ("ok"
// while the process runs), GET /readyz ("ready", or 503 with ready's error)
// and GET /metrics (what g gathers). ready may be nil (always ready); it is
// called with a 2 s deadline.
func AdminHandler(g prometheus.Gatherer, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				text := "not ready"
				if nr := (*NotReadyError)(nil); errors.As(err, &nr) {
					text += ": " + nr.What
				}
				http.Error(w, text, http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", MetricsHandler(g))
	return mux
}

// WithPprof returns h, with Go's profiles (net/http/pprof) at /debug/pprof/
// besides when on (DPCS_ADMIN_PPROF): for the admin address only, never
// an API's.
func WithPprof(h http.Handler, on bool) http.Handler {
	if !on {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// AdminServer serves AdminHandler on its own address (DPCS_ADMIN_ADDR), apart
// from any API, so probes and scrapes reach every deployable the same way.
type AdminServer struct {
	// Addr is the address it listens on (the port resolved when :0 was asked).
	Addr string
	srv  *http.Server
	done chan struct{}
}

// StartAdmin listens on addr and serves h until Close. Errors of the listener
// after the start are logged on log (nil: discarded).
func StartAdmin(addr string, h http.Handler, log *slog.Logger) (*AdminServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// No streaming on the admin routes: every timeout can be short.
	a := &AdminServer{Addr: ln.Addr().String(), done: make(chan struct{}), srv: &http.Server{Handler: h,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server", "addr", a.Addr, "err", err)
		}
	}()
	return a, nil
}

// Close stops the server, letting requests in progress finish within ctx.
func (a *AdminServer) Close(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	<-a.done
	return err
}
