package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/notify/pushsub"
	"github.com/dabom/dpcs/policy"
)

// PushRules are what SavePushSubscription enforces beyond the
// subscription's own validity.
type PushRules struct {
	// Max is how many subscriptions one member may have (at least 1): a new
	// endpoint beyond it is refused.
	Max int
	// AllowLoopback accepts endpoints on a loopback host, http too (tests
	// with a local push service; see pushsub.Validate).
	AllowLoopback bool
}

// SavePushSubscription stores a browser's push subscription for member cid
// of family fid (a current member), checked with
// pushsub.Validate and stored in its one spelling (pushsub.Normalize: host
// case, a trailing dot and the default port make no other endpoint). An
// endpoint is bound to the member who
// stored it: the same member storing it again replaces its keys; another
// member's is ErrConflict, and nothing moves (a browser another member
// subscribed from unsubscribes first, which gives it a new endpoint). A new
// endpoint beyond rules.Max of cid's is ErrConflict too. Both are
// FieldErrors on "endpoint". Returns the stored subscription.
func (s *Store) SavePushSubscription(ctx context.Context, fid, cid int64, sub pushsub.Subscription, rules PushRules) (pushsub.Subscription, error) {
	if rules.Max < 1 {
		return pushsub.Subscription{}, invalid("max", "must be at least 1")
	}
	var bad *pushsub.Error
	if err := pushsub.Validate(sub, rules.AllowLoopback); errors.As(err, &bad) {
		return pushsub.Subscription{}, invalid(bad.Field, "%s", bad.Reason)
	} else if err != nil {
		return pushsub.Subscription{}, err
	}
	for _, r := range sub.Endpoint {
		if r > 0x7e || r < 0x21 {
			return pushsub.Subscription{}, invalid("endpoint", "must be an ASCII URL")
		}
	}
	// One endpoint, one spelling (Validate judged this one).
	norm, err := pushsub.Normalize(sub.Endpoint)
	if err != nil {
		return pushsub.Subscription{}, invalid("endpoint", "must be an absolute https URL")
	}
	sub.Endpoint = norm
	sub.MemberID = cid
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		// The member's row lock serialises its subscriptions (the count).
		if _, err := s.currentMember(ctx, tx, fid, cid, s.d.ForUpdate()); err != nil {
			return err
		}
		var owner int64
		err := tx.QueryRowContext(ctx, `SELECT member_id FROM push_subscriptions WHERE endpoint = ?`+s.d.ForUpdate(), sub.Endpoint).Scan(&owner)
		switch {
		case err == nil && owner != cid:
			return endpointTaken()
		case err == nil:
			if _, err := tx.ExecContext(ctx, `UPDATE push_subscriptions SET p256dh = ?, auth = ? WHERE endpoint = ?`,
				sub.P256dh, sub.Auth, sub.Endpoint); err != nil {
				return dbErr("save push subscription", err)
			}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return dbErr("save push subscription", err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM push_subscriptions WHERE member_id = ?`, cid).Scan(&n); err != nil {
			return dbErr("save push subscription", err)
		}
		if n >= rules.Max {
			return conflict("endpoint", fmt.Sprintf("you have %d push subscriptions, the most allowed: remove one you no longer use first", n), nil)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO push_subscriptions (member_id, endpoint, p256dh, auth, created_at) VALUES (?, ?, ?, ?, ?)`,
			cid, sub.Endpoint, sub.P256dh, sub.Auth, s.t(s.now())); err != nil {
			if sqldialect.IsDuplicate(err) { // another member stored it meanwhile
				return endpointTaken()
			}
			return dbErr("save push subscription", err)
		}
		return nil
	})
	if err != nil {
		return pushsub.Subscription{}, err
	}
	return sub, nil
}

// endpointTaken refuses an endpoint another member subscribed. It says no
// more than the caller, who sent the endpoint, knows.
func endpointTaken() error {
	return conflict("endpoint", "this push endpoint is subscribed by another member, and pushes there stay theirs: "+
		"turn pushes off and on again in this browser to get an endpoint of your own", nil)
}

// DeletePushSubscription deletes member cid's subscription with endpoint,
// in any of its spellings (pushsub.Normalize); ErrNotFound if cid has none
// with it (another member's is not touched).
func (s *Store) DeletePushSubscription(ctx context.Context, cid int64, endpoint string) error {
	spellings := []any{cid, endpoint, endpoint}
	if norm, err := pushsub.Normalize(endpoint); err == nil {
		spellings[2] = norm // as stored now; a row stored before, as it was sent
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE member_id = ? AND endpoint IN (?, ?)`, spellings...)
	if err != nil {
		return dbErr("delete push subscription", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return dbErr("delete push subscription", err)
	} else if n == 0 {
		return notFound("push subscription", "")
	}
	return nil
}

// PushSubscriptions returns member cid's subscriptions, oldest first.
func (s *Store) PushSubscriptions(ctx context.Context, cid int64) ([]pushsub.Subscription, error) {
	return s.pushSubs(ctx, `SELECT member_id, endpoint, p256dh, auth FROM push_subscriptions WHERE member_id = ? ORDER BY id`, cid)
}

// PushRecipients implements notify.SubscriptionStore: the subscriptions of
// the current members of family fid who see a notification about member cid
// (0: family-wide) — its owners and cid, or everyone for 0 — the rule of
// notify.Filter.Sees, the SSE stream's.
func (s *Store) PushRecipients(ctx context.Context, fid, cid int64) ([]pushsub.Subscription, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT p.member_id, p.endpoint, p.p256dh, p.auth, m.role FROM push_subscriptions p
		JOIN members m ON m.id = p.member_id
		WHERE m.family_id = ? AND m.deleted_at IS NULL AND (? = 0 OR m.role = ? OR m.id = ?)
		ORDER BY p.id`, fid, cid, string(policy.RoleOwner), cid)
	if err != nil {
		return nil, dbErr("push recipients", err)
	}
	defer rows.Close()
	var out []pushsub.Subscription
	for rows.Next() {
		var p pushsub.Subscription
		if err := rows.Scan(&p.MemberID, &p.Endpoint, &p.P256dh, &p.Auth, &p.Role); err != nil {
			return nil, dbErr("push recipients", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("push recipients", err)
	}
	return out, nil
}

func (s *Store) pushSubs(ctx context.Context, query string, args ...any) ([]pushsub.Subscription, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, dbErr("push subscriptions", err)
	}
	return collect(rows, "push subscriptions", func(sc scanner) (p pushsub.Subscription, err error) {
		err = sc.Scan(&p.MemberID, &p.Endpoint, &p.P256dh, &p.Auth)
		return p, err
	})
}

// RemovePushSubscription implements notify.SubscriptionStore: it deletes
// the subscription with endpoint, whoever's it is (the push service said it
// is gone); none is not an error.
func (s *Store) RemovePushSubscription(ctx context.Context, endpoint string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE endpoint = ?`, endpoint); err != nil {
		return dbErr("remove push subscription", err)
	}
	return nil
}

// VAPIDKeys is a Web Push application server's key pair as stored
// (notify.VAPIDKeys, to which it converts).
type VAPIDKeys struct {
	Public, Private string
}

// VAPIDKeys returns the VAPID key pair kept in the store; when there is
// none yet it stores generate's, once: concurrent callers (several
// processes on one database) all get the pair that was stored first.
func (s *Store) VAPIDKeys(ctx context.Context, generate func() (VAPIDKeys, error)) (VAPIDKeys, error) {
	var k VAPIDKeys
	err := s.db.QueryRowContext(ctx, `SELECT public_key, private_key FROM vapid_keys WHERE id = 1`).Scan(&k.Public, &k.Private)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return k, dbErr("vapid keys", err)
	}
	gen, err := generate()
	if err != nil {
		return k, fmt.Errorf("store: vapid keys: %w", err)
	}
	q := s.d.InsertIgnore("vapid_keys", []string{"id", "public_key", "private_key", "created_at"}, 1)
	if _, err := s.db.ExecContext(ctx, q, 1, gen.Public, gen.Private, s.t(s.now())); err != nil {
		return k, dbErr("vapid keys", err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT public_key, private_key FROM vapid_keys WHERE id = 1`).Scan(&k.Public, &k.Private); err != nil {
		return k, dbErr("vapid keys", err)
	}
	return k, nil
}
