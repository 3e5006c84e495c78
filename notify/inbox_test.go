package notify

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

func TestSQLInboxSQLite(t *testing.T) {
	inboxSuite(t, newInbox(t, openSQLite(t)))
}

// inboxSuite is what every inbox must pass (SQLite here, MariaDB in the
// integration tests). in is freshly migrated and empty.
func inboxSuite(t *testing.T, in *SQLInbox) {
	ctx := context.Background()
	ev := func(id string, at time.Time, p envelope.Notification) Notification {
		t.Helper()
		n, err := FromEvent(envelope.New(id, at, p), Korean, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	blocked := func(id string, member int64, at time.Time) Notification {
		return ev(id, at, envelope.CustomerBlocked{FamilyID: 100, CustomerID: member, BlockReason: "LIMIT:DATA:DAILY", BlockedAt: at})
	}
	alert := func(id string, pct int, at time.Time) Notification {
		return ev(id, at, envelope.ThresholdAlert{FamilyID: 100, ThresholdPercent: pct, Message: "m"})
	}
	add := func(n Notification, wantNew bool) Notification {
		t.Helper()
		got, inserted, err := in.Add(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if inserted != wantNew {
			t.Fatalf("Add(%s): inserted = %v, want %v", n.EventID, inserted, wantNew)
		}
		return got
	}
	at := t0.Add(123 * time.Millisecond)
	a := add(alert("ntf_a50", 50, at), true)
	if a.ID == 0 || a.DedupeKey != "threshold:100:50:2026-02" || a.MemberID != 0 || a.DeliveredAt != nil {
		t.Fatalf("stored %+v", a)
	}
	again := add(alert("ntf_a50", 50, at), false)
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("replay returned another row (-first +again):\n%s", diff)
	}
	// The same threshold and period under another id: the first row.
	if other := add(alert("ntf_other", 50, at.Add(time.Hour)), false); other.EventID != "ntf_a50" {
		t.Errorf("threshold re-sent: got %s", other.EventID)
	}
	if err := in.MarkDelivered(ctx, a.ID, at); err != nil {
		t.Fatal(err)
	}
	if got := add(alert("ntf_a50", 50, at), false); got.DeliveredAt == nil || !got.DeliveredAt.Equal(at) {
		t.Errorf("DeliveredAt = %v", got.DeliveredAt)
	}
	b3 := add(blocked("ntf_b3", 3, at.Add(time.Minute)), true)
	b4 := add(blocked("ntf_b4", 4, at.Add(2*time.Minute)), true)
	a30 := add(alert("ntf_a30", 30, at.Add(3*time.Minute)), true)
	if !(a.ID < b3.ID && b3.ID < b4.ID && b4.ID < a30.ID) {
		t.Errorf("ids not increasing: %d %d %d %d", a.ID, b3.ID, b4.ID, a30.ID)
	}
	if _, _, err := in.Add(ctx, Notification{EventID: "x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid Add: %v", err)
	}

	list := func(q Query) []string {
		t.Helper()
		got, err := in.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range got {
			out = append(out, n.EventID)
		}
		return out
	}
	owner := Filter{MemberID: 1, Role: RoleOwner}
	child := Filter{MemberID: 3, Role: RoleMember}
	for name, c := range map[string]struct {
		q    Query
		want []string
	}{
		"owner":        {Query{FamilyID: 100, Viewer: owner}, []string{"ntf_a30", "ntf_b4", "ntf_b3", "ntf_a50"}},
		"member":       {Query{FamilyID: 100, Viewer: child}, []string{"ntf_a30", "ntf_b3", "ntf_a50"}},
		"page":         {Query{FamilyID: 100, Viewer: owner, Limit: 2}, []string{"ntf_a30", "ntf_b4"}},
		"before":       {Query{FamilyID: 100, Viewer: owner, Before: b4.ID, Limit: 2}, []string{"ntf_b3", "ntf_a50"}},
		"after":        {Query{FamilyID: 100, Viewer: child, After: a.ID}, []string{"ntf_b3", "ntf_a30"}},
		"other family": {Query{FamilyID: 200, Viewer: owner}, nil},
	} {
		if diff := cmp.Diff(c.want, list(c.q)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}

	// Read marks are per viewer: the child reading a family-wide alert
	// leaves it unread for the owner.
	readAt := at.Add(time.Hour)
	if err := in.MarkRead(ctx, 100, child, a.ID, readAt); err != nil {
		t.Fatal(err)
	}
	if err := in.MarkRead(ctx, 100, child, a.ID, readAt.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ntf_a30", "ntf_b3"}, list(Query{FamilyID: 100, Viewer: child, Unread: true})); diff != "" {
		t.Errorf("child unread (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ntf_a30", "ntf_b4", "ntf_b3", "ntf_a50"}, list(Query{FamilyID: 100, Viewer: owner, Unread: true})); diff != "" {
		t.Errorf("owner unread (-want +got):\n%s", diff)
	}
	got, err := in.List(ctx, Query{FamilyID: 100, Viewer: child, Before: b3.ID, Limit: 1})
	if err != nil || len(got) != 1 || got[0].ReadAt == nil || !got[0].ReadAt.Equal(readAt) {
		t.Errorf("child's read mark: %+v, %v", got, err)
	}
	if err := in.MarkRead(ctx, 100, child, b4.ID, readAt); !errors.Is(err, ErrNotFound) {
		t.Errorf("child marking another member's row: %v", err)
	}
	if err := in.MarkRead(ctx, 200, owner, a.ID, readAt); !errors.Is(err, ErrNotFound) {
		t.Errorf("another family's row: %v", err)
	}
	if err := in.MarkRead(ctx, 100, Filter{Role: RoleAdmin}, a.ID, readAt); !errors.Is(err, ErrInvalid) {
		t.Errorf("no viewer id: %v", err)
	}
	if err := in.MarkRead(ctx, 100, Filter{Role: "X"}, a.ID, readAt); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad role: %v", err)
	}
	if err := in.MarkRead(ctx, 100, owner, b4.ID, readAt); err != nil {
		t.Errorf("owner marking a member's row: %v", err)
	}

	// The row round-trips.
	got, err = in.List(ctx, Query{FamilyID: 100, Viewer: owner, After: b3.ID, Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("List: %v %v", got, err)
	}
	want := b4
	want.ReadAt = &readAt
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if l, err := got[0].Localized(English); err != nil || l.Body != "Blocked: the daily data limit was reached." {
		t.Errorf("Localized: %q, %v", l.Body, err)
	}

	for _, q := range []Query{{}, {FamilyID: 1, Viewer: Filter{Role: RoleMember}}, {FamilyID: 1, Viewer: owner, Limit: 1001}, {FamilyID: 1, Viewer: owner, Before: -1}} {
		if _, err := in.List(ctx, q); !errors.Is(err, ErrInvalid) {
			t.Errorf("List(%+v): %v", q, err)
		}
	}
}

func TestSQLInboxOptions(t *testing.T) {
	if _, err := NewSQLInbox(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	db := openSQLite(t)
	if _, err := NewSQLInbox(db, WithInboxDialect("pg")); !errors.Is(err, ErrInvalid) {
		t.Errorf("pg: %v", err)
	}
	in, err := NewSQLInbox(db, WithInboxDialect("mysql"))
	if err != nil || in.Schema() != mysqlSchema {
		t.Errorf("mysql dialect: %v", err)
	}
	// Not migrated: errors, not panics.
	in = newInboxNoMigrate(t, db)
	if _, _, err := in.Add(context.Background(), Notification{EventID: "e", DedupeKey: "e", FamilyID: 1}); err == nil {
		t.Error("Add without table")
	}
	if _, err := in.List(context.Background(), Query{FamilyID: 1, Viewer: Filter{Role: RoleOwner}}); err == nil {
		t.Error("List without table")
	}
	if err := in.MarkDelivered(context.Background(), 1, t0); err == nil {
		t.Error("MarkDelivered without table")
	}
	if err := in.MarkRead(context.Background(), 1, Filter{MemberID: 1, Role: RoleOwner}, 1, t0); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("MarkRead without table: %v", err)
	}
	db.Close()
	if err := in.Migrate(context.Background()); err == nil {
		t.Error("Migrate on a closed db")
	}
}

func newInboxNoMigrate(t *testing.T, db *sql.DB) *SQLInbox {
	in, err := NewSQLInbox(db)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestDBTime(t *testing.T) {
	for _, v := range []any{t0, []byte("2026-02-06 14:30:00.000"), "2026-02-06 14:30:00"} {
		if got, err := dbTime(v); err != nil || !got.Equal(t0) {
			t.Errorf("dbTime(%v) = %v, %v", v, got, err)
		}
	}
	for _, v := range []any{42, "yesterday"} {
		if _, err := dbTime(v); err == nil {
			t.Errorf("dbTime(%v) accepted", v)
		}
	}
}
