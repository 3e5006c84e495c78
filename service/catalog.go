package service

import (
	"context"
	"database/sql"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// CatalogWatcher keeps a judge.Apps equal to the SQL app catalog the back
// office edits (store.AppCatalog): read once when it starts, then every
// interval, so every process's judges name events' categories from the
// operator's catalog within an interval of an edit (the API's own process
// at once, through api.Config.OnCatalogChange). A read that fails keeps
// the catalog held and is logged.
type CatalogWatcher struct {
	apps  *judge.Apps
	every time.Duration
	// told is the catalog the last edit here told the charging service
	// about (Edited; the first one read before any): the next edit is
	// told what changed since, also when a periodic read took the edit
	// in before the API's hook did.
	told policy.Catalog
	// mu orders a read of SQL with the Set that follows it against the
	// API's Set after an edit: a read begun before the edit never replaces
	// the edit's catalog.
	mu     sync.Mutex
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// WatchCatalog loads db's app catalog into a new judge.Apps and reads it
// again every interval (≤ 0: never) until Close.
func WatchCatalog(ctx context.Context, db *sql.DB, every time.Duration, log *slog.Logger) *CatalogWatcher {
	w := &CatalogWatcher{apps: judge.NewApps(nil), every: every}
	load := func(ctx context.Context) {
		w.mu.Lock()
		defer w.mu.Unlock()
		c, err := store.AppCatalog(ctx, db)
		if err != nil {
			log.WarnContext(ctx, "app catalog: read from SQL failed, keeping the one held", "err", err)
			return
		}
		w.apps.Set(c)
	}
	w.apps.Set(defaultCatalog())
	load(ctx)
	w.told = w.apps.Catalog()
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if every > 0 {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					load(runCtx)
				}
			}
		}()
	}
	return w
}

// Apps is the catalog the watcher keeps: give it to the judges
// (judge.WithApps).
func (w *CatalogWatcher) Apps() *judge.Apps { return w.apps }

// Set replaces the catalog with c, read after an edit committed: the API's
// OnCatalogChange. A periodic read in flight finishes first.
func (w *CatalogWatcher) Set(c policy.Catalog) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apps.Set(c)
}

// Edited is the API's OnCatalogChange (api.Config) in a process whose
// judges read the catalog through w: it sets the edit's catalog at once
// and, with a charging service (chf, nil for none), asks the live grants
// of the apps moved to another category since the last edit here to
// report again (charging.Service.CatalogChanged): at once, and once more
// when every other process has read the edit (w's interval and a second).
// An edit made elsewhere (another server's API, SQL) is told here with the
// next edit made here, or not at all: its own server tells it.
func (w *CatalogWatcher) Edited(chf *Charging) func(policy.Catalog) {
	return func(c policy.Catalog) {
		w.mu.Lock()
		before := w.told
		w.apps.Set(c)
		w.told = maps.Clone(c)
		w.mu.Unlock()
		if chf != nil {
			again := time.Duration(0)
			if w.every > 0 {
				again = w.every + time.Second
			}
			chf.Service.CatalogChanged(before, c, again)
		}
	}
}

// Close stops the watcher and waits for its goroutine.
func (w *CatalogWatcher) Close() {
	w.cancel()
	w.done.Wait()
}

// defaultCatalog is the engine's catalog before SQL answered.
func defaultCatalog() policy.Catalog { return policy.NewCatalog(policy.DefaultApps()) }
