package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// AuditEntry is a row of audit_log.
type AuditEntry struct {
	ID       int64
	FamilyID int64 // 0 for back-office changes (templates)
	Actor    Actor
	// Action is e.g. policy.update, member.role, family.topup, template.create.
	Action string
	// Target names the changed row: member:<id>, family:<id>, template:<id>.
	Target string
	// Before and After are the JSON snapshots (nil when absent).
	Before, After json.RawMessage
	At            time.Time
}

// AuditFilter selects audit rows; zero fields do not filter.
type AuditFilter struct {
	FamilyID int64
	ActorID  int64
	Action   string
	Target   string
	Since    time.Time // inclusive
	Until    time.Time // exclusive
	// BeforeID pages backwards: rows with id < BeforeID.
	BeforeID int64
	// Limit is 1..1000; 0 means 100.
	Limit int
}

// AuditLog returns audit rows matching f, newest first.
func (s *Store) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > 1000 {
		return nil, invalid("limit", "must be 1..1000")
	}
	var conds []string
	var args []any
	add := func(cond string, arg any) { conds = append(conds, cond); args = append(args, arg) }
	if f.FamilyID != 0 {
		add("family_id = ?", f.FamilyID)
	}
	if f.ActorID != 0 {
		add("actor_id = ?", f.ActorID)
	}
	if f.Action != "" {
		add("action = ?", f.Action)
	}
	if f.Target != "" {
		add("target = ?", f.Target)
	}
	if !f.Since.IsZero() {
		add("created_at >= ?", s.t(f.Since))
	}
	if !f.Until.IsZero() {
		add("created_at < ?", s.t(f.Until))
	}
	if f.BeforeID > 0 {
		add("id < ?", f.BeforeID)
	}
	q := `SELECT id, family_id, actor_id, actor_role, action, target, before_json, after_json, created_at FROM audit_log`
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, f.Limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr("audit log", err)
	}
	return collect(rows, "audit log", func(sc scanner) (AuditEntry, error) {
		var e AuditEntry
		var fid sql.NullInt64
		var role string
		var before, after sql.NullString
		var at sqldialect.NullTime
		err := sc.Scan(&e.ID, &fid, &e.Actor.ID, &role, &e.Action, &e.Target, &before, &after, &at)
		e.FamilyID, e.Actor.Role, e.At = fid.Int64, policy.Role(role), at.Time
		if before.Valid {
			e.Before = json.RawMessage(before.String)
		}
		if after.Valid {
			e.After = json.RawMessage(after.String)
		}
		return e, err
	})
}
