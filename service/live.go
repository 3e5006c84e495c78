package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/family"
)

// liveTimeout bounds the publish of one family change: the hook runs in
// the goroutine of the request that made the change.
const liveTimeout = 2 * time.Second

// LivePublisher is what LiveChanges publishes through: a notify.RedisBridge
// (this process's hub and every other API process's).
type LivePublisher interface {
	Publish(ctx context.Context, n notify.Notification) (int, error)
}

var _ LivePublisher = (*notify.RedisBridge)(nil)

// LiveChanges is the family service's hook (family.WithOnChange) that makes
// every committed change live on the family's other screens: it publishes a
// notify.KindFamilyChanged notification (what changed, for whom) through
// pub, and the family app reads again what it shows (doc/frontends.md,
// "Live"). A care agent's note and an IMSI provisioned are the back
// office's own and are not told to the family. A publish that fails is logged: screens still catch up on
// their next read.
func LiveChanges(pub LivePublisher, log *slog.Logger, now func() time.Time) func(context.Context, family.Change) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return func(ctx context.Context, c family.Change) {
		if c.Kind == family.KindNote || c.Kind == family.KindIMSI || c.FamilyID <= 0 {
			return
		}
		n, err := notify.FamilyChanged(c.FamilyID, notify.FamilyChange{Change: string(c.Kind), Members: c.Members, By: c.By.ID}, now(), notify.Korean)
		if err != nil {
			log.WarnContext(ctx, "live: family change", "family", c.FamilyID, "kind", c.Kind, "err", err)
			return
		}
		// The request's context may end as soon as it is answered.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveTimeout)
		defer cancel()
		if _, err := pub.Publish(pctx, n); err != nil {
			log.WarnContext(ctx, "live: family change not sent to the other API processes", "family", c.FamilyID, "kind", c.Kind, "err", err)
		}
	}
}
