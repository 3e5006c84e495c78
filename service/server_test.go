package service

import (
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
)

// /readyz tells an anonymous caller what is not ready, never the raw error
// (addresses, driver messages); the log has the error.
func TestReadyHidesErrorDetail(t *testing.T) {
	_, up := testenv.Redis(t)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { down.Close() })
	closed, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, c := range []struct {
		name      string
		rdb       redis.UniversalClient
		want, log string
	}{
		{"redis down", down, "not ready: redis unreachable\n", "127.0.0.1:1"},
		{"sql down", up, "not ready: sql unreachable\n", "database is closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			h := AdminHandler(NewRegistry(), Ready(c.rdb, closed, nil, slog.New(slog.NewTextHandler(&logs, nil))))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if w.Code != http.StatusServiceUnavailable || w.Body.String() != c.want {
				t.Errorf("readyz: %d %q, want 503 %q", w.Code, w.Body.String(), c.want)
			}
			if !strings.Contains(logs.String(), c.log) {
				t.Errorf("log %q does not have the error (%q)", logs.String(), c.log)
			}
		})
	}
}
