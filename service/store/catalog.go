package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/usertext"
	"github.com/dabom/dpcs/policy"
)

// CatalogApp is an app of the catalog: its id (as in BLOCK:APP:<appId>),
// category, the names people see and an icon.
type CatalogApp struct {
	ID       string
	Category policy.Category
	Name     string // Korean (or the operator's language), 1 … MaxAppName characters
	NameEn   string // English, 0 … MaxAppName characters ("": Name)
	Icon     string // an emoji, 0 … 8 characters
}

// Catalog limits.
const (
	MaxAppName = 50
	maxAppID   = policy.MaxAppIDLen // the one bound of app ids
	maxAppIcon = 8
)

// seedApps inserts policy.DefaultApps with their labels, skipping apps the
// table has (edited or removed ones included): run by every migration.
func seedApps(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
	apps, labels := policy.DefaultApps(), policy.DefaultAppLabels()
	args := make([]any, 0, 8*len(apps))
	now := d.Time(time.Unix(0, 0).UTC())
	for i, a := range apps {
		l := labels[a.ID]
		args = append(args, a.ID, string(a.Category), l.Name, l.NameEn, l.Icon, i, 0, now)
	}
	q := d.InsertIgnore("app_catalog", []string{"app_id", "category", "name", "name_en", "icon", "position", "deleted", "updated_at"}, len(apps))
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("store: seed app_catalog: %w", err)
	}
	return nil
}

// Apps returns the app catalog, in its order (the defaults first, in
// policy.DefaultApps' order, then added apps by when they were added).
func (s *Store) Apps(ctx context.Context) ([]CatalogApp, error) {
	return readApps(ctx, s.db)
}

func readApps(ctx context.Context, q querier) ([]CatalogApp, error) {
	rows, err := q.QueryContext(ctx, `SELECT app_id, category, name, name_en, icon, deleted FROM app_catalog ORDER BY position, app_id`)
	if err != nil {
		return nil, dbErr("app catalog", err)
	}
	out := []CatalogApp{}
	seeded := false
	err = scanRows(rows, "app catalog", func(sc scanner) error {
		var a CatalogApp
		var cat string
		var deleted int
		if err := sc.Scan(&a.ID, &cat, &a.Name, &a.NameEn, &a.Icon, &deleted); err != nil {
			return err
		}
		seeded = true
		if deleted == 0 {
			a.Category = policy.Category(cat)
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !seeded {
		return defaultApps(), nil
	}
	return out, nil
}

func defaultApps() []CatalogApp {
	labels := policy.DefaultAppLabels()
	var out []CatalogApp
	for _, a := range policy.DefaultApps() {
		l := labels[a.ID]
		out = append(out, CatalogApp{ID: a.ID, Category: a.Category, Name: l.Name, NameEn: l.NameEn, Icon: l.Icon})
	}
	return out
}

// AppLabels returns how people know the apps ids names — the catalog's
// names and icon, a removed app's too (its name still says what it was) —
// by id; ids the catalog never held are left out. A database without the
// table gives the default labels. It is notify.Apps for the notifier.
func (s *Store) AppLabels(ctx context.Context, ids []string) (map[string]policy.AppLabel, error) {
	out := make(map[string]policy.AppLabel, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if len(ids) > 1000 {
		return nil, invalid("ids", "at most 1000")
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.db.QueryContext(ctx, `SELECT app_id, name, name_en, icon FROM app_catalog WHERE app_id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)`, args...)
	if err != nil {
		if isNoTable(err) {
			defaults := policy.DefaultAppLabels()
			for _, id := range ids {
				if l, ok := defaults[id]; ok {
					out[id] = l
				}
			}
			return out, nil
		}
		return nil, dbErr("app labels", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var l policy.AppLabel
		if err := rows.Scan(&id, &l.Name, &l.NameEn, &l.Icon); err != nil {
			return nil, dbErr("app labels", err)
		}
		out[id] = l
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("app labels", err)
	}
	return out, nil
}

// SeenApp is an app in recent traffic: how often and how much it was used,
// by how many families, and when last.
type SeenApp struct {
	AppID    string
	Events   int64
	Bytes    int64
	Families int64
	LastSeen time.Time
}

// MaxRecentUsage bounds how many of the newest usage records RecentApps
// reads.
const MaxRecentUsage = 1_000_000

// RecentApps returns the apps of the newest n usage records (1 …
// MaxRecentUsage, read by the primary key: the cost is bounded whatever the
// table's size) that the catalog does not hold (removed apps count as not
// held), most used first: apps the back office has yet to name (#38).
func (s *Store) RecentApps(ctx context.Context, n int) ([]SeenApp, error) {
	if n < 1 || n > MaxRecentUsage {
		return nil, invalid("n", "must be 1..%d", MaxRecentUsage)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT app_id, COUNT(*), SUM(bytes_used), COUNT(DISTINCT family_id), MAX(event_time)
		FROM (SELECT app_id, bytes_used, family_id, event_time FROM usage_record ORDER BY id DESC LIMIT ?) recent
		WHERE app_id <> '' AND app_id NOT IN (SELECT app_id FROM app_catalog WHERE deleted = 0)
		GROUP BY app_id ORDER BY COUNT(*) DESC, app_id LIMIT 100`, n)
	if err != nil {
		return nil, dbErr("recent apps", err)
	}
	defer rows.Close()
	out := []SeenApp{}
	for rows.Next() {
		var a SeenApp
		var last sqldialect.NullTime
		if err := rows.Scan(&a.AppID, &a.Events, &a.Bytes, &a.Families, &last); err != nil {
			return nil, dbErr("recent apps", err)
		}
		a.LastSeen = last.Time
		out = append(out, a)
	}
	return out, rows.Err()
}

// AppCatalog is the catalog the engine judges category blocks with (app id
// → category): the judges' catalog source. A database without the table
// (a processor's, before the server migrated) gives the defaults.
func AppCatalog(ctx context.Context, db *sql.DB) (policy.Catalog, error) {
	apps, err := readApps(ctx, db)
	if err != nil {
		if isNoTable(err) {
			return policy.NewCatalog(policy.DefaultApps()), nil
		}
		return nil, err
	}
	c := make(policy.Catalog, len(apps))
	for _, a := range apps {
		c[a.ID] = a.Category
	}
	return c, nil
}

// isNoTable reports whether err says a table does not exist.
func isNoTable(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "doesn't exist")
}

// cleanApp validates a and puts its texts in their stored form.
func cleanApp(a *CatalogApp) error {
	if _, err := policy.ParseConstraints(map[string]string{policy.KeyBlockAppPrefix + a.ID: "1"}); err != nil || len(a.ID) > maxAppID {
		return invalid("appId", "must be 1 to %d printable ASCII characters without spaces or '|', as in BLOCK:APP:<appId>", maxAppID)
	}
	if !a.Category.Valid() {
		return invalid("category", "must be one of VIDEO, GAME, SOCIAL, MESSAGING, WEB, MUSIC")
	}
	for _, f := range []struct {
		field string
		s     *string
		min   int
		max   int
	}{{"name", &a.Name, 1, MaxAppName}, {"nameEn", &a.NameEn, 0, MaxAppName}, {"icon", &a.Icon, 0, maxAppIcon}} {
		*f.s = strings.TrimSpace(*f.s)
		n := utf8.RuneCountInString(*f.s)
		if !utf8.ValidString(*f.s) || n < f.min || n > f.max {
			return invalid(f.field, "must be %d to %d characters", f.min, f.max)
		}
		if *f.s != "" {
			if err := cleanText(f.field, f.s, usertext.Line); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutApp adds an app to the catalog or changes one (a removed app comes
// back), audited as catalog.app.put with the app before and after.
func (s *Store) PutApp(ctx context.Context, a CatalogApp, by Actor) (CatalogApp, error) {
	if err := cleanApp(&a); err != nil {
		return CatalogApp{}, err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var before *CatalogApp
		var cur CatalogApp
		var cat string
		var deleted int
		err := tx.QueryRowContext(ctx, `SELECT app_id, category, name, name_en, icon, deleted FROM app_catalog WHERE app_id = ?`+s.d.ForUpdate(), a.ID).
			Scan(&cur.ID, &cat, &cur.Name, &cur.NameEn, &cur.Icon, &deleted)
		now := s.t(s.now())
		switch {
		case errors.Is(err, sql.ErrNoRows):
			var pos int
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(position), -1) + 1 FROM app_catalog`).Scan(&pos); err != nil {
				return dbErr("app catalog", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO app_catalog (app_id, category, name, name_en, icon, position, deleted, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, 0, ?)`, a.ID, string(a.Category), a.Name, a.NameEn, a.Icon, pos, now); err != nil {
				return dbErr("app catalog", err)
			}
		case err != nil:
			return dbErr("app catalog", err)
		default:
			if deleted == 0 {
				cur.Category = policy.Category(cat)
				before = &cur
			}
			if _, err := tx.ExecContext(ctx, `UPDATE app_catalog SET category = ?, name = ?, name_en = ?, icon = ?, deleted = 0, updated_at = ?
				WHERE app_id = ?`, string(a.Category), a.Name, a.NameEn, a.Icon, now, a.ID); err != nil {
				return dbErr("app catalog", err)
			}
		}
		var b any
		if before != nil {
			b = before
		}
		return s.audit(ctx, tx, 0, by, "catalog.app.put", "app:"+a.ID, b, a)
	})
	if err != nil {
		return CatalogApp{}, err
	}
	return a, nil
}

// DeleteApp removes an app from the catalog (its row stays, marked):
// people see it by its id again and its category no longer names its
// events'. Audited as catalog.app.delete; an app not in the catalog is
// ErrNotFound.
func (s *Store) DeleteApp(ctx context.Context, id string, by Actor) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var cur CatalogApp
		var cat string
		err := tx.QueryRowContext(ctx, `SELECT app_id, category, name, name_en, icon FROM app_catalog WHERE app_id = ? AND deleted = 0`+s.d.ForUpdate(), id).
			Scan(&cur.ID, &cat, &cur.Name, &cur.NameEn, &cur.Icon)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("app", id)
		}
		if err != nil {
			return dbErr("app catalog", err)
		}
		cur.Category = policy.Category(cat)
		if _, err := tx.ExecContext(ctx, `UPDATE app_catalog SET deleted = 1, updated_at = ? WHERE app_id = ?`, s.t(s.now()), id); err != nil {
			return dbErr("app catalog", err)
		}
		return s.audit(ctx, tx, 0, by, "catalog.app.delete", "app:"+id, cur, nil)
	})
}
