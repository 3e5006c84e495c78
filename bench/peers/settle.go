package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// behindGroups is how many records the consumer groups with members have
// not committed yet (a group without members — a deployable not running —
// is not waited on).
func behindGroups(ctx context.Context, adm *kadm.Client) (int64, error) {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return 0, err
	}
	if len(listed) == 0 {
		return 0, nil
	}
	lags, err := adm.Lag(ctx, listed.Groups()...)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range lags {
		if l.Error() != nil {
			return 0, fmt.Errorf("group %s: %w", l.Group, l.Error())
		}
		if len(l.Members) > 0 {
			n += l.Lag.Total()
		}
	}
	return n, nil
}

// settle waits until the running consumers (the server's notifier, the
// processor's groups) have read what the earlier steps produced, so a
// step's CPU is its own calls' and not a backlog's. It waits while the
// backlog shrinks and fails once it has not for a minute.
func settle(ctx context.Context, kafka string, say func(string, ...any)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	behind := func(ctx context.Context) (int64, error) { return behindGroups(ctx, adm) }
	return untilDrained(ctx, "the consumers' backlog", "the consumers to read", behind, say)
}

// untilDrained waits until behind counts no record left, saying once that
// it waits for whom ("the consumers to read"). It waits while the backlog
// (what) shrinks, and fails once it has not for a minute.
func untilDrained(ctx context.Context, what, whom string, behind func(context.Context) (int64, error), say func(string, ...any)) error {
	best, since := int64(-1), time.Now()
	for said := false; ; {
		n, err := behind(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if n == 0 {
			return nil
		}
		if !said {
			say("  waiting for %s the %s records the earlier steps left", whom, thousands(float64(n)))
			said = true
		}
		if best < 0 || n < best {
			best, since = n, time.Now()
		} else if time.Since(since) > time.Minute {
			return fmt.Errorf("%s stayed at %d records for a minute", what, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
