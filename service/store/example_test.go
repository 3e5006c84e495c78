package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// The store on an in-memory SQLite database: a family, a member, a policy
// change (committed with its audit row and policy-updated outbox event), and
// the policy read back. A change that changes nothing keeps the version.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection: each would have its own in-memory database
	if err := store.Migrate(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)
	s, err := store.New(db, store.WithClock(func() time.Time { return now }))
	if err != nil {
		fmt.Println(err)
		return
	}

	fam, err := s.CreateFamily(ctx, store.NewFamily{ID: 100, Name: "Kim family", PlanBytes: 10 << 30}, store.System)
	if err != nil {
		fmt.Println(err)
		return
	}
	owner := store.Actor{ID: 1001, Role: policy.RoleOwner}
	if _, err := s.AddMember(ctx, store.NewMember{ID: 1002, FamilyID: fam.ID, Name: "Jimin", Role: policy.RoleMember}, store.System); err != nil {
		fmt.Println(err)
		return
	}
	up, err := s.UpdatePolicy(ctx, store.PolicyChange{FamilyID: 100, CustomerID: 1002, By: owner,
		Set: map[string]string{"LIMIT:DATA:MONTHLY": "524288000", "BLOCK:CATEGORY:GAME": "1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", up.Policy.Version, "event queued:", up.OutboxID > 0)

	p, err := s.GetPolicy(ctx, 100, 1002)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("rules", p.Rules, "version", p.Version, "by", p.UpdatedBy, "at", p.UpdatedAt.Format(time.RFC3339))

	again, err := s.UpdatePolicy(ctx, store.PolicyChange{FamilyID: 100, CustomerID: 1002, By: owner,
		Set: map[string]string{"LIMIT:DATA:MONTHLY": "524288000"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("same change again: unchanged", again.Unchanged, "version", again.Policy.Version)
	// Output:
	// version 1 event queued: true
	// rules map[BLOCK:CATEGORY:GAME:1 LIMIT:DATA:MONTHLY:524288000] version 1 by 1001 at 2026-02-06T14:30:00Z
	// same change again: unchanged true version 1
}
