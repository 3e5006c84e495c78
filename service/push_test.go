package service

import (
	"bytes"
	"database/sql"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/store"
)

// The Web Push variables: both keys or neither, a matching pair, a
// mailto:/https: subject, kinds; a split deployable without keys has no
// channel and says so once at INFO.
func TestLoadConfigWebPush(t *testing.T) {
	k, err := notify.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	other, err := notify.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		bad  string // the variable the error names; "" for none
	}{
		{name: "none", vars: map[string]string{}},
		{name: "pair", vars: map[string]string{"DPCS_VAPID_PUBLIC_KEY": k.Public, "DPCS_VAPID_PRIVATE_KEY": k.Private, "DPCS_VAPID_SUBJECT": "https://dpcs.example/contact"}},
		{name: "public only", vars: map[string]string{"DPCS_VAPID_PUBLIC_KEY": k.Public}, bad: "DPCS_VAPID_PUBLIC_KEY"},
		{name: "mismatched", vars: map[string]string{"DPCS_VAPID_PUBLIC_KEY": other.Public, "DPCS_VAPID_PRIVATE_KEY": k.Private}, bad: "DPCS_VAPID_PRIVATE_KEY"},
		{name: "bad subject", vars: map[string]string{"DPCS_VAPID_SUBJECT": "ops@dpcs.example"}, bad: "DPCS_VAPID_SUBJECT"},
		{name: "bad kind", vars: map[string]string{"DPCS_PUSH_KINDS": "CUSTOMER_BLOCKED,quota"}, bad: "DPCS_PUSH_KINDS"},
		{name: "cap, timeout", vars: map[string]string{"DPCS_PUSH_MAX_SUBSCRIPTIONS": "3", "DPCS_PUSH_TIMEOUT": "5s"}},
		{name: "no timeout", vars: map[string]string{"DPCS_PUSH_TIMEOUT": "0s"}, bad: "DPCS_PUSH_TIMEOUT"},
		{name: "long timeout", vars: map[string]string{"DPCS_PUSH_TIMEOUT": "10m"}, bad: "DPCS_PUSH_TIMEOUT"},
		{name: "no subscriptions", vars: map[string]string{"DPCS_PUSH_MAX_SUBSCRIPTIONS": "0"}, bad: "DPCS_PUSH_MAX_SUBSCRIPTIONS"},
		{name: "too many subscriptions", vars: map[string]string{"DPCS_PUSH_MAX_SUBSCRIPTIONS": "1000"}, bad: "DPCS_PUSH_MAX_SUBSCRIPTIONS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(env(tc.vars))
			if (err != nil) != (tc.bad != "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
				t.Errorf("LoadConfig = %v, want an error naming %q", err, tc.bad)
			}
		})
	}

	c, err := LoadConfig(env(map[string]string{"DPCS_PUSH_KINDS": "CUSTOMER_BLOCKED,DATA_REQUESTED"}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]envelope.SubType{envelope.SubCustomerBlocked, notify.KindDataRequested}, c.pushKinds()); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if c, _ = LoadConfig(env(nil)); !cmp.Equal(notify.DefaultWebPushKinds(), c.pushKinds()) {
		t.Errorf("default kinds = %v", c.pushKinds())
	}
	if c.PushTimeout != notify.DefaultPushTimeout {
		t.Errorf("default push timeout = %s, want %s", c.PushTimeout, notify.DefaultPushTimeout)
	}
	if c.PushMaxSubscriptions != api.DefaultMaxPushSubscriptions {
		t.Errorf("default cap = %d, want %d", c.PushMaxSubscriptions, api.DefaultMaxPushSubscriptions)
	}

	// Split deployables: no keys, no channel, one INFO line; keys without a
	// subject refused; keys and subject: the channel.
	db := openTestSQLite(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if o, err := c.WebPushOptions(db, log); err != nil || len(o) != 0 || strings.Count(logs.String(), "web push off") != 1 {
		t.Errorf("without keys: %d options, %v, log %q", len(o), err, logs.String())
	}
	c.VAPIDPublicKey, c.VAPIDPrivateKey = k.Public, k.Private
	if _, err := c.WebPushOptions(db, log); err == nil || !strings.Contains(err.Error(), "DPCS_VAPID_SUBJECT") {
		t.Errorf("without a subject: %v", err)
	}
	c.VAPIDSubject = "mailto:ops@dpcs.example"
	if o, err := c.WebPushOptions(db, log); err != nil || len(o) != 1 {
		t.Errorf("with keys: %d options, %v", len(o), err)
	}
}

func openTestSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db := testenv.SQLite(t)
	if err := store.Migrate(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return db
}
